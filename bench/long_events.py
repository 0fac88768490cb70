"""Recall over long events: 300 events of 99,000 characters each (issue 27).

Each event is real conversation, LoCoMo turns (``--lang en``) or MemoryBank lines
(``--lang zh``), drawn with a seeded random and joined to 99,000 characters, submitted
through the public API into one scope (no memories: the events are their own raw
fallback). Then each query is recalled ``--repeat`` times through ``Scope.recall``
(``fast``) after a warm-up; the median and the slowest are printed, with the baseline of
the same run: the median of the same query over a scope of as many short events, one turn
each (``short``), and the ratio of the two.

The database is built once into ``--dir`` (default ``/tmp/amem-long-events``) and kept:
Chinese text takes minutes to segment.

    uv run python bench/long_events.py [--lang en|zh] [--events 300] [--repeat 5] [--results]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import anyio
from events import locomo_texts
from reporting import add_results_argument, write_results

import amem

DATA = Path("/work/shared/data")
CHARS = 99_000
QUERIES = {
    "en": [
        "what did Caroline say about the adoption agency",
        "support group",
        "painting sunrise lake",
    ],
    "zh": ["我喜欢绘画和弹钢琴", "公园 樱花", "推荐一本书"],
}


def turns(lang: str) -> list[str]:
    if lang == "en":
        return locomo_texts(DATA / "locomo10.json")
    users = json.loads((DATA / "memorybank" / "memory_bank_cn.json").read_text())
    return [
        pair[side]
        for user in users.values()
        for day in user["history"].values()
        for pair in day
        for side in ("query", "response")
    ]


async def build(path: Path, lang: str, events: int) -> None:
    said, rng = turns(lang), random.Random(27)
    async with amem.open(path, settings=amem.Settings()) as memory:
        scope = memory.scope()
        for n in range(events):
            parts: list[str] = []
            while sum(map(len, parts)) + len(parts) < CHARS:
                parts.append(rng.choice(said))
            await scope.submit_event(" ".join(parts)[:CHARS], role="user", event_id=f"long-{n}")
        short = memory.scope(project="short")
        for n, text in enumerate(said[:events]):
            await short.submit_event(text, role="user", event_id=f"short-{n}")


async def measure(path: Path, lang: str, repeat: int) -> list[str]:
    """Prints the table and one JSON line per query; returns the table's lines."""
    async with amem.open(path, settings=amem.Settings()) as memory:
        long, short = memory.scope(), memory.scope(project="short")
        table = [f"{'query':<50} {'p50 s':>8} {'max s':>8} {'short p50 s':>12} {'ratio':>7}"]
        print(table[-1])
        results = []
        for query in QUERIES[lang]:
            times = {}
            for scope in (long, short):
                await scope.recall(query)  # warm-up
                runs = []
                for _ in range(repeat):
                    started = time.perf_counter()
                    await scope.recall(query)
                    runs.append(time.perf_counter() - started)
                times[scope.project] = statistics.median(runs), max(runs)
            (p50, slowest), (baseline, _) = times["default"], times["short"]
            table.append(
                f"{query:<50} {p50:8.3f} {slowest:8.3f} {baseline:12.4f} {p50 / baseline:7.1f}"
            )
            print(table[-1])
            results.append(
                {
                    "lang": lang,
                    "query": query,
                    "p50_s": round(p50, 4),
                    "max_s": round(slowest, 4),
                    "short_p50_s": round(baseline, 5),
                    "ratio": round(p50 / baseline, 1),
                }
            )
        for result in results:
            print(json.dumps(result, ensure_ascii=False))
        return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lang", choices=sorted(QUERIES), default="en")
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/amem-long-events"))
    add_results_argument(parser)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    path = args.dir / f"long-{args.lang}-{args.events}.db"
    if not path.exists():
        started = time.perf_counter()
        building = path.with_suffix(".building")  # a build cut short is never taken as done
        for stale in args.dir.glob(f"{building.name}*"):
            stale.unlink()
        anyio.run(build, building, args.lang, args.events)
        building.rename(path)
        print(f"built {path} in {time.perf_counter() - started:.0f} s")
    table = anyio.run(measure, path, args.lang, args.repeat)
    if args.results:
        write_results(f"long_events-{args.lang}", "\n".join(table))


if __name__ == "__main__":
    main()
