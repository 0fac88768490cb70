"""Stress bench: 1,000 simulated sessions on one database, in one process, in four, and
over four ``amem serve`` processes driven by MCP clients; on a SQLite file and, with
``--db postgresql://...``, on PostgreSQL in the same run.

Every session (``--sessions``, default 1,000) runs the same mixed script: ``--events``
events submitted in order (short Chinese, English and mixed texts, alternating user and
assistant), a recall after every ``RECALL_EVERY``-th event (Chinese, English or mixed
query words), and a ``session_resume`` with a query at the end. All sessions of a run
run at once, one task each. Each run is on a fresh database:

- **in-process**: one ``amem.Memory`` (``amem.open``), every session a task on one event
  loop, calling ``Scope.submit_event`` / ``Scope.recall`` / ``Scope.resume``. It is the
  baseline the other runs are compared with (``x in-proc``).
- **N processes** (``--procs``, default 4; ``4,16`` runs both): the same sessions dealt
  round-robin to N OS processes, each with its own ``amem.open`` on the same database
  (SQLite: WAL, ``BEGIN IMMEDIATE``, busy timeout, bounded retry; PostgreSQL: the write
  lock every amem process takes).
- **N MCP servers**: N client processes, each driving its own ``amem serve`` subprocess
  (``python -m amem serve --db DB``) over stdio with the official MCP client
  (``stdio_client`` + ``ClientSession``): ``event_submit``, ``memory_recall``,
  ``session_resume``. The N servers share the database.

With ``--db``, every run is repeated on PostgreSQL (rows named ``pg ...``), each on a new
database of that server, created and dropped by the bench (the URL's role needs CREATEDB).

In the multi-process runs every worker opens its database (or starts its server) first and
the clock starts when all are ready. Reported per run: operations/s and events/s over the
wall time of the load, ack latency (``submit_event`` call to return, i.e. after COMMIT)
p50/p99, recall and resume p50/p99, errors and lock errors ("database is locked", busy,
``database_busy``), recalls that found something, and afterwards, reading the database back
with plain ``sqlite3`` (psycopg): every acknowledged event present with exactly the text
sent (``missing`` / ``changed``), and the WAL size when the load ends (all connections still
open) and after every process closed (SQLite only).

Prints one table, then one JSON line per run. Targets (errors 0, lock errors 0, missing 0)
are printed, not asserted.

Run:  uv run python bench/stress.py [--sessions 1000] [--events 8] [--procs 4[,16]]
          [--db postgresql://USER@HOST/DB] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import events
from reporting import add_results_argument, percentile_ms, print_header, recorded

PERSONA, PROJECT = "bench", "stress"
RECALL_EVERY = 4
RESUME_BUDGET = 2000

EN_WORDS = (*events.EN_WORDS, "hangzhou", "novel", "piano", "marathon")
ZH_WORDS = (*events.ZH_WORDS, "杭州", "小说", "钢琴")
EN_QUERY = ("green tea", "database backup", "shanghai travel", "deadline friday", "piano")
ZH_QUERY = ("绿茶", "数据库备份", "上海出差", "截止日期", "钢琴小说")


@dataclass(frozen=True, slots=True)
class Op:
    kind: str  # "submit" | "recall" | "resume"
    text: str = ""  # event text or query
    role: str = "user"
    event_id: str = ""


@dataclass(frozen=True, slots=True)
class Session:
    name: str
    ops: tuple[Op, ...]


@dataclass
class Stats:
    """What one process measured (merged across processes)."""

    acks: list[float] = field(default_factory=list)
    recalls: list[float] = field(default_factory=list)
    resumes: list[float] = field(default_factory=list)
    acked: dict[str, str] = field(default_factory=dict)  # event_id -> text sent
    errors: int = 0
    lock_errors: int = 0
    recall_found: int = 0
    samples: list[str] = field(default_factory=list)

    def merge(self, other: Stats) -> None:
        self.acks += other.acks
        self.recalls += other.recalls
        self.resumes += other.resumes
        self.acked.update(other.acked)
        self.errors += other.errors
        self.lock_errors += other.lock_errors
        self.recall_found += other.recall_found
        self.samples += other.samples[: 5 - len(self.samples)]

    def to_json(self) -> dict[str, Any]:
        return {
            "acks": self.acks,
            "recalls": self.recalls,
            "resumes": self.resumes,
            "acked": self.acked,
            "errors": self.errors,
            "lock_errors": self.lock_errors,
            "recall_found": self.recall_found,
            "samples": self.samples,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Stats:
        return cls(**data)


@dataclass
class Result:
    name: str
    elapsed: float
    stats: Stats
    ops: int
    missing: int = 0
    changed: int = 0
    stored: int = 0
    wal_loaded: int = 0
    wal_closed: int = 0
    db_bytes: int = 0
    procs: int = 1


def make_text(rng: random.Random) -> str:
    return events.mixed_text(rng, 4, 14, EN_WORDS, ZH_WORDS)


def make_sessions(sessions: int, events: int, seed: int, run: str) -> list[Session]:
    """Deterministic per-session scripts; event IDs carry the run name (one file per run)."""
    rng = random.Random(seed)
    out = []
    for s in range(sessions):
        ops: list[Op] = []
        for k in range(events):
            role = "user" if k % 2 == 0 else "assistant"
            ops.append(Op("submit", make_text(rng), role, f"{run}-s{s:05d}-e{k:03d}"))
            if k % RECALL_EVERY == RECALL_EVERY - 1:
                ops.append(Op("recall", rng.choice(EN_QUERY + ZH_QUERY)))
        ops.append(Op("resume", rng.choice(EN_QUERY + ZH_QUERY)))
        out.append(Session(f"{run}-sess-{s:05d}", tuple(ops)))
    return out


def is_lock_text(text: str) -> bool:
    text = text.lower()
    return "locked" in text or "busy" in text


# --- drivers: one per way of reaching amem -------------------------------------------------

Call = Callable[[Op, str], Awaitable[bool]]
"""Run one op of a session; True when a recall found something (else False)."""


async def run_sessions(sessions: list[Session], call: Call, stats: Stats) -> None:
    """Every session is one task running its ops in order; all sessions at once."""

    async def one(session: Session) -> None:
        for op in session.ops:
            t0 = time.perf_counter()
            try:
                found = await call(op, session.name)
            except Exception as exc:  # counted, never fatal: the bench reports them
                stats.errors += 1
                stats.lock_errors += is_lock_text(f"{exc} {getattr(exc, 'code', '')}")
                if len(stats.samples) < 5:
                    stats.samples.append(f"{op.kind}: {type(exc).__name__}: {exc}"[:300])
                continue
            dt = time.perf_counter() - t0
            if op.kind == "submit":
                stats.acks.append(dt)
                stats.acked[op.event_id] = op.text
            elif op.kind == "recall":
                stats.recalls.append(dt)
                stats.recall_found += found
            else:
                stats.resumes.append(dt)

    async with anyio.create_task_group() as tg:
        for session in sessions:
            tg.start_soon(one, session)


def api_call(scope: Any) -> Call:
    async def call(op: Op, session: str) -> bool:
        if op.kind == "submit":
            await scope.submit_event(op.text, role=op.role, event_id=op.event_id, session=session)
            return False
        if op.kind == "recall":
            return bool((await scope.recall(op.text, limit=10)).items)
        await scope.resume(session, query=op.text, budget=RESUME_BUDGET)
        return False

    return call


class ToolError(Exception):
    pass


def mcp_call(client: Any) -> Call:
    async def tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
        result = await client.call_tool(name, args)
        text = result.content[0].text if result.content else ""
        if result.isError:
            raise ToolError(text)
        data: dict[str, Any] = json.loads(text)
        return data

    async def call(op: Op, session: str) -> bool:
        if op.kind == "submit":
            args = {"text": op.text, "role": op.role, "event_id": op.event_id, "session": session}
            await tool("event_submit", args)
            return False
        if op.kind == "recall":
            return bool((await tool("memory_recall", {"query": op.text, "limit": 10}))["items"])
        args2 = {"session": session, "query": op.text, "budget_tokens": RESUME_BUDGET}
        await tool("session_resume", args2)
        return False

    return call


def settings() -> Any:
    import amem

    return amem.Settings(extract_base_url=None, extract_model=None)


def in_process(db: Path | str, sessions: list[Session]) -> tuple[Stats, float, int]:
    """The baseline run: one Memory, every session a task."""
    import amem

    stats = Stats()
    elapsed, wal = 0.0, 0

    async def main() -> None:
        nonlocal elapsed, wal
        async with amem.open(db, settings=settings()) as mem:
            scope = mem.scope(persona=PERSONA, project=PROJECT)
            await scope.recall("绿茶 warm up", limit=1)  # jieba loaded before the clock starts
            t0 = time.perf_counter()
            await run_sessions(sessions, api_call(scope), stats)
            elapsed = time.perf_counter() - t0
            wal = wal_size(db)

    anyio.run(main)
    return stats, elapsed, wal


# --- worker processes ----------------------------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    """One process of a multi-process run: open, say ready, wait for go, run, report,
    wait for exit, close. Lines on stdout are the protocol; the log goes to stderr."""
    sessions = make_sessions(args.sessions, args.events, args.seed, args.run)
    [procs] = args.procs  # a worker is told its run's count alone
    mine = [s for i, s in enumerate(sessions) if i % procs == args.part]
    stats = Stats()

    async def wait_line(expected: str) -> None:
        line = await anyio.to_thread.run_sync(sys.stdin.readline)
        if line.strip() != expected:
            raise SystemExit(f"worker: expected {expected!r}, got {line!r}")

    def say(text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    async def drive(call: Call) -> None:
        say("ready")
        await wait_line("go")
        t0 = time.perf_counter()
        await run_sessions(mine, call, stats)
        say(json.dumps({"elapsed": time.perf_counter() - t0, "stats": stats.to_json()}))
        await wait_line("exit")

    async def main_api() -> None:
        import amem

        async with amem.open(args.worker_db, settings=settings()) as mem:
            scope = mem.scope(persona=PERSONA, project=PROJECT)
            await scope.recall("绿茶 warm up", limit=1)
            await drive(api_call(scope))

    async def main_mcp() -> None:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import get_default_environment, stdio_client

        params = StdioServerParameters(
            command=sys.executable,
            args=[
                "-m",
                "amem",
                "serve",
                "--db",
                args.worker_db,
                "--persona",
                PERSONA,
                "--project",
                PROJECT,
            ],
            env=get_default_environment(),  # no AMEM_* extraction settings leak in
        )
        with open(os.devnull, "w") as errlog:  # noqa: ASYNC230 (before any load)
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as client,
            ):
                await client.initialize()
                await client.call_tool("memory_recall", {"query": "绿茶 warm up", "limit": 1})
                await drive(mcp_call(client))

    anyio.run(main_api if args.worker == "api" else main_mcp)


def multi_process(
    db: Path | str, mode: str, args: argparse.Namespace, run: str, procs: int
) -> Result:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        mode,
        "--worker-db",
        str(db),
        "--run",
        run,
        "--sessions",
        str(args.sessions),
        "--events",
        str(args.events),
        "--seed",
        str(args.seed),
        "--procs",
        str(procs),
    ]
    workers = [
        subprocess.Popen(
            [*cmd, "--part", str(i)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for i in range(procs)
    ]
    stats = Stats()
    try:
        for p in workers:
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                raise SystemExit(f"{mode} worker failed to start")
        t0 = time.perf_counter()
        for p in workers:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in workers:
            assert p.stdout is not None
            stats.merge(Stats.from_json(json.loads(p.stdout.readline())["stats"]))
        elapsed = time.perf_counter() - t0
        wal_loaded = wal_size(db)
        for p in workers:
            assert p.stdin is not None
            p.stdin.write("exit\n")
            p.stdin.flush()
            p.stdin.close()
        for p in workers:
            if p.wait(timeout=120) != 0:
                stats.errors += 1
                stats.samples.append(f"{mode} worker exited with {p.returncode}")
    finally:
        for p in workers:
            if p.poll() is None:
                p.kill()
    return Result(
        "", elapsed, stats, ops=0, wal_loaded=wal_loaded
    )  # name, ops and checks filled in by the caller


# --- checks --------------------------------------------------------------------------------


def wal_size(db: Path | str) -> int:
    wal = Path(f"{db}-wal")
    return wal.stat().st_size if isinstance(db, Path) and wal.exists() else 0


def verify(db: Path | str, result: Result) -> None:
    """Read every stored event back with plain sqlite3 (psycopg) and compare with what was
    acked."""
    if isinstance(db, str):
        import psycopg

        with psycopg.connect(db) as pg:
            stored = dict(pg.execute("select id, text from events").fetchall())
            [(result.db_bytes,)] = pg.execute("select pg_database_size(current_database())")
    else:
        conn = sqlite3.connect(db)
        try:
            stored = dict(conn.execute("select id, text from events"))
        finally:
            conn.close()
        result.db_bytes = db.stat().st_size
    result.stored = len(stored)
    result.missing = sum(1 for id in result.stats.acked if id not in stored)
    result.changed = sum(
        1 for id, text in result.stats.acked.items() if id in stored and stored[id] != text
    )
    result.wal_closed = wal_size(db)


@contextmanager
def fresh_postgres(server: str, name: str) -> Iterator[str]:
    """A new database ``name`` on the server of the URL ``server``; its URL. Dropped after."""
    import psycopg

    parts = urlsplit(server)
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'drop database if exists "{name}"')
        admin.execute(f'create database "{name}"')
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'drop database if exists "{name}" with (force)')


def run_all(args: argparse.Namespace, tmp: Path) -> list[Result]:
    results = []
    runs = [("in-process", "api1", 1)]
    for procs in args.procs:
        runs += [(f"{procs} processes", "api", procs), (f"{procs} MCP", "mcp", procs)]
    databases = ["sqlite"] + (["postgresql"] * bool(args.db))
    for database in databases:
        for name, mode, procs in runs:
            with ExitStack() as stack:
                if database == "postgresql":
                    name = f"pg {name}"
                    db: Path | str = stack.enter_context(
                        fresh_postgres(args.db, f"amem_stress_{mode}_{procs}_{os.getpid()}")
                    )
                else:
                    db = tmp / f"stress-{mode}-{procs}.db"
                results.append(one_run(db, name, mode, procs, args))
    return results


def one_run(db: Path | str, name: str, mode: str, procs: int, args: argparse.Namespace) -> Result:
    sessions = make_sessions(args.sessions, args.events, args.seed, mode)
    ops = sum(len(s.ops) for s in sessions)
    print(f"running {name}: {len(sessions)} sessions, {ops} ops ...", file=sys.stderr)
    if mode == "api1":
        stats, elapsed, wal = in_process(db, sessions)
        result = Result(name, elapsed, stats, ops, wal_loaded=wal)
    else:
        result = multi_process(db, mode, args, mode, procs)
        result.name, result.ops, result.procs = name, ops, procs
    verify(db, result)
    return result


def fmt(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


def report(results: list[Result], args: argparse.Namespace) -> None:
    base = results[0]
    base_ops = base.ops / base.elapsed
    print()
    print(
        f"stress: {args.sessions} sessions x ({args.events} events, a recall every "
        f"{RECALL_EVERY}, one resume), seed {args.seed}, {os.cpu_count()} cores"
    )
    header = (
        f"{'run':<13} {'ops/s':>7} {'events/s':>9} {'x in-proc':>9} {'ack p50':>8} "
        f"{'ack p99':>8} {'recall p50':>10} {'recall p99':>10} {'resume p50':>10} "
        f"{'resume p99':>10} {'errors':>6} {'lock err':>8} {'acked':>6} {'missing':>7} "
        f"{'changed':>7} {'found%':>6} {'WAL end KiB':>11} {'WAL closed':>10}"
    )
    print_header(header)
    for r in results:
        s = r.stats
        ops_s = (len(s.acks) + len(s.recalls) + len(s.resumes)) / r.elapsed
        found = 100 * s.recall_found / len(s.recalls) if s.recalls else math.nan
        print(
            f"{r.name:<13} {ops_s:>7,.0f} {len(s.acks) / r.elapsed:>9,.0f} "
            f"{ops_s / base_ops:>9.2f} {fmt(percentile_ms(s.acks, 0.5)):>8} "
            f"{fmt(percentile_ms(s.acks, 0.99)):>8} {fmt(percentile_ms(s.recalls, 0.5)):>10} "
            f"{fmt(percentile_ms(s.recalls, 0.99)):>10} {fmt(percentile_ms(s.resumes, 0.5)):>10} "
            f"{fmt(percentile_ms(s.resumes, 0.99)):>10} {s.errors:>6} {s.lock_errors:>8} "
            f"{len(s.acked):>6} {r.missing:>7} {r.changed:>7} {fmt(found):>6} "
            f"{r.wal_loaded / 1024:>11,.0f} {r.wal_closed / 1024:>10,.0f}"
        )
    print("(latencies in ms; WAL end: when the load finished, connections open)")
    print()
    for r in results:
        s = r.stats
        ok = s.errors == 0 and s.lock_errors == 0 and r.missing == 0 and r.changed == 0
        expected = args.sessions * args.events
        print(
            f"{r.name} targets: errors {s.errors}, lock errors {s.lock_errors}, "
            f"acked {len(s.acked)}/{expected}, missing {r.missing}, changed {r.changed}: "
            f"{'ok' if ok and len(s.acked) == expected else 'MISS'}"
        )
        for sample in s.samples:
            print(f"  error sample: {sample}")
    print()
    for r in results:
        s = r.stats
        ops_s = (len(s.acks) + len(s.recalls) + len(s.resumes)) / r.elapsed
        line = {
            "bench": "stress",
            "run": r.name,
            "sessions": args.sessions,
            "events_per_session": args.events,
            "procs": r.procs,
            "elapsed_s": round(r.elapsed, 3),
            "ops_per_s": round(ops_s, 1),
            "events_per_s": round(len(s.acks) / r.elapsed, 1),
            "ratio_in_process": round(ops_s / base_ops, 3),
            "ack_p50_ms": round(percentile_ms(s.acks, 0.5), 3),
            "ack_p99_ms": round(percentile_ms(s.acks, 0.99), 3),
            "recall_p50_ms": round(percentile_ms(s.recalls, 0.5), 3),
            "recall_p99_ms": round(percentile_ms(s.recalls, 0.99), 3),
            "resume_p50_ms": round(percentile_ms(s.resumes, 0.5), 3),
            "resume_p99_ms": round(percentile_ms(s.resumes, 0.99), 3),
            "errors": s.errors,
            "lock_errors": s.lock_errors,
            "acked": len(s.acked),
            "stored": r.stored,
            "missing": r.missing,
            "changed": r.changed,
            "recalls": len(s.recalls),
            "recall_found": s.recall_found,
            "wal_bytes_end_of_load": r.wal_loaded,
            "wal_bytes_closed": r.wal_closed,
            "db_bytes": r.db_bytes,
        }
        print(json.dumps(line))


def counts(text: str) -> list[int]:
    """``4,16``: the process counts to run."""
    return [int(part) for part in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1_000, help="simulated sessions")
    parser.add_argument("--events", type=int, default=8, help="events per session")
    parser.add_argument(
        "--procs",
        type=counts,
        default=[4],
        help="processes / MCP servers of the multi-process runs, e.g. 4,16 (default 4)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed for the generated texts")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the temp files")
    add_results_argument(parser)
    parser.add_argument("--worker", choices=("api", "mcp"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--db",
        metavar="URL",
        help="also run every run on PostgreSQL: a fresh database per run on the server of "
        "this postgresql:// URL (created and dropped; the URL's role needs CREATEDB)",
    )
    parser.add_argument("--worker-db", help=argparse.SUPPRESS)
    parser.add_argument("--run", default="", help=argparse.SUPPRESS)
    parser.add_argument("--part", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sessions < 1 or args.events < 1 or min(args.procs) < 1:
        parser.error("--sessions, --events and --procs must be positive")
    if args.db and not args.db.startswith("postgresql://"):
        parser.error("--db takes a postgresql:// URL (the SQLite runs always run)")
    if args.worker:
        worker(args)
        return
    with tempfile.TemporaryDirectory(prefix="amem-stress-", dir=args.dir) as tmp:
        results = run_all(args, Path(tmp))
    with recorded("stress", args.results):
        report(results, args)


if __name__ == "__main__":
    main()
