"""Import memory bench: the peak RSS of ``amem import`` as the archive grows.

For each size, writes a synthetic archive (short mixed Chinese/English conversation
events, the text style of ``bench/ingest.py``, one memory quoting every tenth user event,
one checkpoint per session), then imports it into a new file in a child process
(``Memory.import_archive``, as ``amem import`` does), which reports its own peak RSS as
it ends: ``VmHWM`` of ``/proc/self/status`` (Linux), the high-water mark of the memory
it has had since it started. Not ``getrusage(RUSAGE_CHILDREN)`` or ``os.wait4``: Linux
carries the parent's high-water mark across fork and exec into the child's
``ru_maxrss``, so those report the parent's size whenever the parent is the larger (a
test process with jieba loaded is). A bounded-memory import keeps the peak near flat as
the archive grows; an import that holds the archive in memory grows with it. The child
loads jieba's whole dictionary before it opens the file, so every size starts from the
same baseline (a long import loads it by itself, a short one may not).

``--src DIR`` runs the child on another amem source tree (e.g. main's, unpacked with
``git archive main | tar -x -C DIR``) to compare against a baseline.

Prints one table, then one JSON line.

Run:  uv run python bench/import_rss.py [--sizes 100000,1000000] [--dir DIR] [--src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ingest import make_text
from reporting import add_results_argument, recorded

from amem.db.schema import SCHEMA_VERSION
from amem.db.times import db_time
from amem.ops.archive import header, line

PERSONA, PROJECT = "bench", "import"
SESSIONS = 1000

CHILD = """
import sys, time, anyio, amem
try:  # the same at every size (a long import loads it by itself); older trees did at open
    from amem.search.text import load_whole_dictionary
except ImportError:
    pass
else:
    load_whole_dictionary()
async def main():
    async with amem.open(sys.argv[1], settings=amem.Settings()) as mem:
        start = time.perf_counter()
        result = await mem.import_archive(sys.argv[2])
        print(sum(result.counts.values()), time.perf_counter() - start, amem.__file__)
anyio.run(main)
with open("/proc/self/status") as status:
    print(next(line.split()[1] for line in status if line.startswith("VmHWM:")))  # kB
"""


def write_archive(path: Path, events: int, seed: int = 7) -> int:
    """A valid archive of ``events`` events; returns its row count."""
    rng = random.Random(seed)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    rows = 0
    with path.open("w", encoding="utf-8") as out:
        out.write(line(header(SCHEMA_VERSION, db_time(start))))
        memories: list[dict[str, Any]] = []
        for seq in range(1, events + 1):
            text, at = make_text(rng), db_time(start + timedelta(seconds=seq))
            role = "user" if seq % 2 else "assistant"
            out.write(
                line(
                    {
                        "table": "events",
                        "row": {
                            "seq": seq,
                            "id": f"evt_{seq:08d}",
                            "persona": PERSONA,
                            "project": PROJECT,
                            "session": f"s{seq % SESSIONS}",
                            "role": role,
                            "category": "conversation",
                            "source": None,
                            "text": text,
                            "occurred_at": at,
                            "ingested_at": at,
                            "status": "stored",
                            "error": None,
                            "attempts": 0,
                        },
                    }
                )
            )
            if seq % 20 == 1:
                memories.append(
                    {
                        "num": len(memories) + 1,
                        "id": f"mem_{seq:08d}",
                        "persona": PERSONA,
                        "project": PROJECT,
                        "event_id": f"evt_{seq:08d}",
                        "text": f"said: {text}",
                        "quote": text[:4],
                        "quote_start": 0,
                        "quote_end": len(text[:4]),
                        "kind": "observation",
                        "basis": "user_statement",
                        "confidence": 0.9,
                        "subject": "user",
                        "fact_key": None,
                        "valid_at": at,
                        "invalid_at": None,
                        "chain_order": None,
                        "revoked_at": None,
                        "emotion": None,
                        "valence": None,
                        "arousal": None,
                        "created_at": at,
                        "gist": None,
                        "cue_key": None,
                    }
                )
        rows = events
        for memory in memories:
            out.write(line({"table": "memories", "row": memory}))
        rows += len(memories)
        for n in range(1, min(SESSIONS, events) + 1):
            out.write(
                line(
                    {
                        "table": "checkpoints",
                        "row": {
                            "num": n,
                            "persona": PERSONA,
                            "project": PROJECT,
                            "session": f"s{n % SESSIONS}",
                            "goal": "keep going",
                            "completed": ["a"],
                            "pending": ["b"],
                            "constraints": [],
                            "next_action": None,
                            "covered_seq": n,
                            "created_at": db_time(start),
                            "invalidated_at": None,
                        },
                    }
                )
            )
        rows += min(SESSIONS, events)
        out.write(line({"end": True, "rows": rows}))
    return rows


def measure(archive: Path, db: Path, src: Path | None) -> dict[str, Any]:
    """Import ``archive`` into ``db`` in a child process; its peak RSS and time."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMEM_")}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    started = time.perf_counter()
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(db), str(archive)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=True,
        cwd=db.parent,  # not here: '' is first on sys.path
    )
    rows, seconds, module, peak_kb = child.stdout.split()
    return {
        "rows": int(rows),
        "import_s": round(float(seconds), 1),
        "wall_s": round(time.perf_counter() - started, 1),
        "peak_rss_mb": round(int(peak_kb) / 1024),
        "amem": str(Path(module).parent.parent),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000", help="event counts, comma-separated")
    parser.add_argument("--dir", type=Path, help="where archives and databases go (default: tmp)")
    parser.add_argument("--src", type=Path, help="run the import on this amem source tree")
    add_results_argument(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        results = []
        for events in map(int, args.sizes.split(",")):
            archive = Path(directory) / f"{events}.jsonl"
            write_archive(archive, events)
            size_mb = round(archive.stat().st_size / 2**20)
            result = measure(archive, Path(directory) / f"{events}.db", args.src)
            results.append({"events": events, "archive_mb": size_mb, **result})
            archive.unlink()
    with recorded("import_rss", args.results):
        print(f"{'events':>9} {'rows':>9} {'archive MB':>10} {'import s':>9} {'peak RSS MB':>11}")
        for r in results:
            print(
                f"{r['events']:>9} {r['rows']:>9} {r['archive_mb']:>10} {r['import_s']:>9} "
                f"{r['peak_rss_mb']:>11}"
            )
        print(
            json.dumps(
                {
                    "bench": "import_rss",
                    "amem": results[0]["amem"],
                    "results": [{k: v for k, v in r.items() if k != "amem"} for r in results],
                }
            )
        )


if __name__ == "__main__":
    main()
