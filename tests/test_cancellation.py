"""Cancelling a caller never splits a write: the store ends either before or after it.

A caller cancelled while its request waits in the writer's inbox withdraws it; once the
writer has taken it, it commits with its batch even though the caller stopped waiting. Either
way the event is wholly there or wholly absent, resubmitting it is safe (idempotent by ID),
and the writer keeps serving everyone else.
"""

from __future__ import annotations

import random
import sqlite3
import threading
from collections import Counter
from contextlib import closing
from functools import partial
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from children import common  # tests/children/common.py (pytest puts tests/ on sys.path)
from helpers import cancel_ticks, cancelled_after, inspect_file

import amem
from amem.db.schema import SCHEMA_VERSION

pytestmark = pytest.mark.anyio


MAX_READ = 100_000


async def submit(scope: amem.Scope, event_id: str) -> amem.EventReceipt:
    """Submit the event ``event_id`` stands for (its text and role derive from the ID)."""
    return await scope.submit_event(
        common.payload(event_id),
        role=common.role(event_id),
        event_id=event_id,
        session=common.session(event_id),
    )


async def stored_seq(scope: amem.Scope, event_id: str) -> int | None:
    """The seq of ``event_id`` if it is stored, None if absent; a stored one must be whole."""
    try:
        page = await scope.read(event_id, limit=MAX_READ)
    except amem.NotFound:
        return None
    assert page.text == common.payload(event_id), f"{event_id} is stored, but not as submitted"
    assert page.total_chars == len(common.payload(event_id))
    assert page.event.role == common.role(event_id)
    assert page.event.session == common.session(event_id)
    return page.event.seq


async def settle(scope: amem.Scope, name: str) -> None:
    """Write something and wait for it: a batch the writer already took (for a caller that
    was cancelled since) commits before any later write, so after this its outcome is final."""
    receipt = await scope.submit_event("barrier", role="system", event_id=f"barrier-{name}")
    assert not receipt.duplicate


@pytest.mark.both_backends
@pytest.mark.both_databases
async def test_cancel_at_every_tick_leaves_before_or_after(scope: amem.Scope) -> None:
    """Cancel a submit after 0, 1, 2, ... scheduler ticks, until one completes first."""
    outcomes: Counter[str] = Counter()
    for ticks in cancel_ticks():
        event_id = f"tick-{ticks}"
        receipts = await cancelled_after(ticks, partial(submit, scope, event_id))

        seen_at_once = await stored_seq(scope, event_id)  # absent or whole, never partial
        await settle(scope, event_id)
        seq = await stored_seq(scope, event_id)
        if seen_at_once is not None:
            assert seq == seen_at_once
        if receipts:
            assert seq == receipts[0].seq, "an acknowledged event must be stored"

        again = await submit(scope, event_id)  # the writer still serves, idempotently
        assert again.duplicate is (seq is not None)
        if seq is not None:
            assert again.seq == seq
        assert await stored_seq(scope, event_id) == again.seq

        if receipts:
            outcomes["completed"] += 1
            break
        outcomes["committed although cancelled" if seq is not None else "withdrawn"] += 1
    else:
        pytest.fail(f"no submit completed before the last tick: {outcomes}")
    assert outcomes["withdrawn"] + outcomes["committed although cancelled"] >= 1, outcomes


async def submit_until(
    scope: amem.Scope, event_id: str, patience: float | None, acked: dict[str, int | None]
) -> None:
    """Submit under ``move_on_after(patience)``; record the seq, or None when cancelled."""
    acked[event_id] = None
    with anyio.move_on_after(patience if patience is not None else float("inf")):
        acked[event_id] = (await submit(scope, event_id)).seq


@pytest.mark.both_backends
@pytest.mark.both_databases
async def test_random_cancellations_among_concurrent_writers(
    scope: amem.Scope, anyio_backend: str
) -> None:
    rng = random.Random(f"cancel-many/{anyio_backend}")
    acked: dict[str, int | None] = {}
    for wave in range(6):
        async with anyio.create_task_group() as tg:
            for n in range(80):
                patience = rng.choice(
                    [None, None, 0.0, rng.uniform(0, 0.002), rng.uniform(0, 0.02)]
                )
                tg.start_soon(submit_until, scope, f"w{wave}-t{n % 4}-{n}", patience, acked)
    await settle(scope, "waves")

    outcomes: Counter[str] = Counter()
    for event_id, acked_seq in acked.items():
        seq = await stored_seq(scope, event_id)
        if acked_seq is not None:
            assert seq == acked_seq, f"{event_id} was acknowledged but is not stored"
            outcomes["completed"] += 1
        else:
            outcomes["committed although cancelled" if seq is not None else "withdrawn"] += 1
        again = await submit(scope, event_id)
        assert again.duplicate is (seq is not None)
        if seq is not None:
            assert again.seq == seq
    assert outcomes["completed"] > 0, outcomes
    assert outcomes["withdrawn"] + outcomes["committed although cancelled"] > 0, outcomes

    final = await submit(scope, "final-0")
    assert not final.duplicate
    assert await stored_seq(scope, "final-0") == final.seq


async def write_forever(
    scope: amem.Scope,
    prefix: str,
    acked: dict[str, int],
    refused: list[str],
    stop_after: int | None,
    outer: anyio.CancelScope,
) -> None:
    """Submit events until cancelled; cancel ``outer`` once ``stop_after`` are acknowledged.

    A submit refused with ``Closed`` (the Memory is shutting down) ends the loop; its event
    must then be absent (see ``test_cancelling_the_open_block_raises_nothing``)."""
    n = 0
    while True:
        event_id = f"{prefix}-{n}"
        try:
            receipt = await submit(scope, event_id)
        except amem.Closed:
            refused.append(event_id)
            return
        acked[event_id] = receipt.seq
        if stop_after is not None and len(acked) >= stop_after:
            outer.cancel()
        n += 1


@pytest.mark.both_backends
@pytest.mark.both_databases
async def test_cancelling_the_open_block_keeps_acknowledged_writes(
    target: str, anyio_backend: str
) -> None:
    """Cancel the whole ``async with amem.open(...)`` from outside while writes are in
    flight; every reopen works, nothing acknowledged is lost, and nothing is left running."""
    rng = random.Random(f"cancel-open/{anyio_backend}")
    acked: dict[str, int] = {}
    refused: list[str] = []
    for number in range(16):
        round_acked: dict[str, int] = {}
        stop_after: int | None = None
        with anyio.CancelScope() as outer:
            async with amem.open(target, settings=amem.Settings()) as mem:
                if number % 2 == 0:  # cancel right after the n-th acknowledgement
                    stop_after = rng.choice([1, 2, 5, 20, 100])
                else:  # cancel at a random moment
                    outer.deadline = anyio.current_time() + rng.uniform(0, 0.03)
                scope = mem.scope(persona=common.PERSONA, project=common.PROJECT)
                async with anyio.create_task_group() as tg:
                    for task in range(6):
                        prefix = f"o{number:02d}-t{task}"
                        tg.start_soon(
                            write_forever, scope, prefix, round_acked, refused, stop_after, outer
                        )
        assert outer.cancel_called
        if stop_after is not None:
            assert len(round_acked) >= stop_after
        acked.update(round_acked)
        assert await stray_threads() == []
        assert await open_connections(target) == 0

    async with amem.open(target, settings=amem.Settings()) as mem:
        scope = mem.scope(persona=common.PERSONA, project=common.PROJECT)
        for event_id, seq in acked.items():
            assert await stored_seq(scope, event_id) == seq, event_id
        for event_id in refused:
            assert await stored_seq(scope, event_id) is None, f"{event_id} was refused"
        final = await submit(scope, "final-0")
        assert not final.duplicate

    user_version, integrity, torn = await anyio.to_thread.run_sync(checked_file, target)
    assert integrity == [("ok",)]
    assert user_version == SCHEMA_VERSION
    assert torn == []


async def write_and_cancel(scope: amem.Scope, prefix: str, outer: anyio.CancelScope) -> None:
    n = 0
    while True:
        await submit(scope, f"{prefix}-{n}")
        outer.cancel()  # the first acknowledged write cancels the whole block
        n += 1


async def test_cancelling_the_open_block_raises_nothing(db_path: Path) -> None:
    """A cancel scope around ``amem.open`` just cancels: writers inside it see the
    cancellation, not ``Closed``, and nothing escapes the scope."""
    for number in range(50):
        with anyio.CancelScope() as outer:
            async with amem.open(db_path, settings=amem.Settings()) as mem:
                scope = mem.scope(persona=common.PERSONA, project=common.PROJECT)
                async with anyio.create_task_group() as tg:
                    for task in range(4):
                        tg.start_soon(write_and_cancel, scope, f"x{number:02d}-t{task}", outer)
        assert outer.cancelled_caught


async def test_cancelled_open_leaves_a_usable_file_and_nothing_running(
    tmp_path: Path, anyio_backend: str
) -> None:
    """Cancelling ``amem.open`` while it creates, migrates or opens a file does no harm."""
    rng = random.Random(f"cancel-create/{anyio_backend}")
    for number in range(40):
        db_path = tmp_path / f"new-{number % 4}.db"
        with anyio.move_on_after(rng.uniform(0, 0.02)):
            async with amem.open(db_path, settings=amem.Settings()):
                await anyio.sleep_forever()
        assert await stray_threads() == []
        async with amem.open(db_path, settings=amem.Settings()) as mem:
            scope = mem.scope(persona=common.PERSONA, project=common.PROJECT)
            receipt = await submit(scope, f"first-{number}")
            assert not receipt.duplicate
            assert await stored_seq(scope, f"first-{number}") == receipt.seq
        user_version, integrity, torn = await anyio.to_thread.run_sync(checked_file, db_path)
        assert integrity == [("ok",)]
        assert user_version == SCHEMA_VERSION
        assert torn == []


async def stray_threads() -> list[str]:
    """SQLite connection threads (aiosqlite's on asyncio, amem's own on trio) still running
    once every ``Memory`` is closed: leaked connections, and on asyncio a process that can
    never exit. (A closed connection's thread may take a moment to end.)"""
    stray = [
        thread
        for thread in threading.enumerate()
        if "_connection_worker_thread" in thread.name or thread.name == "amem-sqlite"
    ]
    for thread in stray:
        await anyio.to_thread.run_sync(thread.join, 10)
    return [thread.name for thread in stray if thread.is_alive()]


async def open_connections(target: str) -> int:
    """Connections to a PostgreSQL ``target`` still open once every ``Memory`` on it is
    closed (none for a SQLite file): leaked ones. The server ends a closed one's backend a
    moment later, so it is asked again for a few seconds."""
    if not target.startswith("postgresql://"):
        return 0
    import psycopg

    others = "select count(*) from pg_stat_activity where datname = current_database()"
    with anyio.move_on_after(10), psycopg.connect(target, autocommit=True) as conn:
        while count := conn.execute(f"{others} and pid != pg_backend_pid()").fetchone()[0]:
            await anyio.sleep(0.05)
    return int(count)


def checked_file(db_path: Path | str) -> tuple[int, list[tuple[str]], list[str]]:
    """Schema version, integrity check, and events whose row is not what was submitted."""
    report = inspect_file(db_path)
    torn = [
        event_id
        for event_id, row in report.events.items()
        if not event_id.startswith("barrier-") and row.text != common.payload(event_id)
    ]
    return report.user_version, report.integrity, torn


# --- reads that nobody waits for stop ----------------------------------------------------------

ENDLESS = "with recursive n(x) as (select 1 union all select x + 1 from n) select max(x) from n"
"""A read SQLite never finishes by itself: only an interrupt ends it."""
LIVENESS = 30
"""Generous: how long a stopped read may take to give its reader back (a bound, not a
timing assertion; without the interrupt it never does)."""


class EndlessRead:
    """A real read of the scope's snapshot that runs until SQLite interrupts it."""

    def __init__(self) -> None:
        self.running = threading.Event()

    def __call__(self, conn: sqlite3.Connection, persona: str, project: str) -> int:
        conn.execute("select count(*) from events where persona = ?", (persona,)).fetchone()
        self.running.set()
        return int(conn.execute(ENDLESS).fetchone()[0])

    async def started(self) -> None:
        with anyio.fail_after(LIVENESS):
            while not self.running.is_set():
                await anyio.sleep(0.01)


async def test_a_cancelled_read_gives_its_reader_back(db_path: Path) -> None:
    async with amem.open(db_path, settings=amem.Settings(readers=1)) as mem:
        scope = mem.scope()
        await scope.submit_event("the only reader is free again", role="user")
        endless = EndlessRead()
        async with anyio.create_task_group() as tg:
            tg.start_soon(scope._read, endless)
            await endless.started()
            tg.cancel_scope.cancel()  # nobody waits for it any more
        with anyio.fail_after(LIVENESS):  # the one reader is free: the read was interrupted
            hits = await scope.recall("reader")
    assert [item.text for item in hits.items] == ["the only reader is free again"]


async def test_stopped_reads_raise_closed_and_writes_go_on(db_path: Path) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope()
        endless = EndlessRead()
        errors: list[amem.AmemError] = []

        async def read() -> None:
            with pytest.raises(amem.Closed) as raised:
                await scope._read(endless)
            errors.append(raised.value)

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            await endless.started()
            mem.stop_reads()
            with anyio.fail_after(LIVENESS):
                while not errors:
                    await anyio.sleep(0.01)
        [error] = errors
        assert error.code == "closed"
        assert "stopped" in error.message
        with pytest.raises(amem.Closed):
            await scope.recall("anything")  # later reads are refused
        receipt = await scope.submit_event("written after the reads stopped", role="user")
    assert receipt.seq == 1
    with closing(sqlite3.connect(db_path)) as conn:
        assert conn.execute("select text from events").fetchall() == [
            ("written after the reads stopped",)
        ]
        assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]


async def test_closing_does_not_wait_for_a_running_read(db_path: Path) -> None:
    endless = EndlessRead()
    outcome: list[str] = []

    async def read(scope: amem.Scope) -> None:
        try:
            await scope._read(endless)
        except amem.Closed as exc:
            outcome.append(exc.code)

    with anyio.fail_after(LIVENESS):
        async with (
            anyio.create_task_group() as tg,
            amem.open(db_path, settings=amem.Settings()) as mem,
        ):
            tg.start_soon(read, mem.scope())
            await endless.started()
    assert outcome == ["closed"]
