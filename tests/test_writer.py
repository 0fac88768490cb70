"""The writer actor: group commit, failures that stay alone, readers that never wait.

These tests reach one level below the public API (``amem.testing.database``) to hold the writer busy
or hand it a request that fails half-way, which no public call does on purpose.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import rows

import amem
from amem.db.database import Database
from amem.db.drivers import open_sqlite
from amem.search import index
from amem.search.text import person_token
from amem.testing import database

pytestmark = pytest.mark.anyio


async def hold_writer(db: Database, release: threading.Event, started: anyio.Event) -> None:
    """Occupy the writer thread inside a transaction until ``release`` is set."""

    def block(conn: sqlite3.Connection) -> None:
        started_flag.set()
        release.wait(timeout=30)

    started_flag = threading.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(db.write, block)
        while not started_flag.is_set():
            await anyio.sleep(0.001)
        started.set()


async def test_one_bad_request_in_a_busy_batch_fails_alone(mem: amem.Memory) -> None:
    scope = mem.scope()
    await scope.submit_event("original", role="user", event_id="taken")
    db, release, started = database(mem), threading.Event(), anyio.Event()
    outcomes: dict[str, BaseException | amem.EventReceipt] = {}

    async def submit(event_id: str, text: str) -> None:
        try:
            outcomes[event_id] = await scope.submit_event(text, role="user", event_id=event_id)
        except amem.AmemError as exc:
            outcomes[event_id] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold_writer, db, release, started)
        await started.wait()
        commits_before = db.writer.commits
        for n in range(100):
            tg.start_soon(submit, f"ok-{n}", f"neighbour {n}")
        tg.start_soon(submit, "taken", "a different payload")
        for n in range(100, 200):
            tg.start_soon(submit, f"ok-{n}", f"neighbour {n}")
        await anyio.sleep(0.05)  # let every submitter queue behind the held transaction
        release.set()

    bad = outcomes.pop("taken")
    assert isinstance(bad, amem.Conflict)
    assert bad.code == "duplicate_conflict"
    assert all(isinstance(r, amem.EventReceipt) for r in outcomes.values())
    assert len(outcomes) == 200
    # the held request plus one batch for the 201 queued requests
    assert db.writer.commits - commits_before == 2
    for n in (0, 99, 100, 199):
        assert (await scope.read(f"ok-{n}")).text == f"neighbour {n}"
    assert (await scope.read("taken")).text == "original"


async def test_a_request_that_fails_half_way_leaves_nothing_behind(mem: amem.Memory) -> None:
    scope = mem.scope()
    db = database(mem)

    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute(
            "insert into personas (persona, version, text, created_at)"
            " values ('ghost', 1, 'half written', '2026-01-01T00:00:00.000000Z')"
        )
        raise RuntimeError("boom")

    async def expect_failure() -> None:
        with pytest.raises(RuntimeError, match="boom"):
            await db.write(half_then_fail)

    async with anyio.create_task_group() as tg:
        tg.start_soon(partial(scope.submit_event, "before", role="user"))
        tg.start_soon(expect_failure)
        tg.start_soon(partial(scope.submit_event, "after", role="user"))

    assert await mem.persona_history("ghost") == []
    assert db.writer.commits >= 1
    receipt = await scope.submit_event("the actor still serves", role="user")
    assert receipt.seq == 3


async def test_storage_errors_roll_back_and_the_actor_recovers(mem: amem.Memory) -> None:
    scope = mem.scope()
    db = database(mem)
    acked = await scope.submit_event("small", role="user", event_id="acked")
    pages = await db.write(lambda c: c.execute("pragma page_count").fetchone()[0])
    await db.write(lambda c: c.execute(f"pragma max_page_count = {pages}"))

    with pytest.raises(amem.StorageError) as caught:
        await scope.submit_event("大" * 90_000, role="user", event_id="too-big")
    assert caught.value.code == "storage_full"
    with pytest.raises(amem.NotFound):
        await scope.read("too-big")
    assert (await scope.read("acked")).event.seq == acked.seq

    await db.write(lambda c: c.execute("pragma max_page_count = 1073741823"))
    await scope.submit_event("大" * 90_000, role="user", event_id="too-big")
    assert (await scope.read("too-big")).total_chars == 90_000


async def test_reads_do_not_wait_behind_the_writer(mem: amem.Memory) -> None:
    scope = mem.scope()
    await scope.submit_event("committed before", role="user", event_id="m-1")
    db, release, started = database(mem), threading.Event(), anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(hold_writer, db, release, started)
        await started.wait()
        with anyio.fail_after(5):
            page = await scope.read("m-1")
        writer_was_still_busy = not release.is_set()
        release.set()
    assert page.text == "committed before"
    assert writer_was_still_busy


async def test_readers_see_only_committed_state(mem: amem.Memory) -> None:
    scope = mem.scope()
    db, release = database(mem), threading.Event()
    inside = threading.Event()

    def insert_and_wait(conn: sqlite3.Connection) -> None:
        conn.execute(
            "insert into personas (persona, version, text, created_at)"
            " values ('draft', 1, 'uncommitted', '2026-01-01T00:00:00.000000Z')"
        )
        inside.set()
        release.wait(timeout=30)

    async with anyio.create_task_group() as tg:
        tg.start_soon(db.write, insert_and_wait)
        while not inside.is_set():
            await anyio.sleep(0.001)
        assert await mem.persona_history("draft") == []
        release.set()
    assert len(await mem.persona_history("draft")) == 1
    assert scope.persona == "default"


async def test_many_readers_at_once_share_the_pool(mem: amem.Memory) -> None:
    scope = mem.scope()
    await scope.submit_event("shared", role="user", event_id="m-1")
    texts: list[str] = []

    async def read() -> None:
        texts.append((await scope.read("m-1")).text)

    async with anyio.create_task_group() as tg:
        for _ in range(50):
            tg.start_soon(read)
    assert texts == ["shared"] * 50


async def test_leaving_the_block_commits_queued_writes(db_path: Path) -> None:
    acked: list[str] = []
    release, started = threading.Event(), anyio.Event()

    async def submit(scope: amem.Scope, n: int) -> None:
        acked.append((await scope.submit_event(f"event {n}", role="user")).event_id)

    async def release_soon() -> None:
        await anyio.sleep(0.05)
        release.set()

    async with anyio.create_task_group() as outside:
        async with amem.open(db_path) as mem:
            scope = mem.scope()
            outside.start_soon(hold_writer, database(mem), release, started)
            await started.wait()
            for n in range(300):
                outside.start_soon(submit, scope, n)
            while len(database(mem).writer._inbox) < 300:
                await anyio.sleep(0.001)
            outside.start_soon(release_soon)
        # the block ended while 300 writes were queued behind a held transaction
        with pytest.raises(amem.Closed):
            await scope.submit_event("too late", role="user")
    conn = sqlite3.connect(db_path)
    stored = {row[0] for row in conn.execute("select id from events")}
    conn.close()
    assert len(acked) == 300
    assert stored == set(acked)


async def test_an_exception_in_the_block_propagates_unwrapped(db_path: Path) -> None:
    with pytest.raises(KeyError):
        async with amem.open(db_path) as mem:
            await mem.scope().submit_event("kept", role="user", event_id="m-1")
            raise KeyError("user error")
    async with amem.open(db_path) as mem:
        assert (await mem.scope().read("m-1")).text == "kept"


async def test_the_wal_is_truncated_while_readers_never_pause(db_path: Path) -> None:
    """Recalls back to back keep SQLite from ever restarting the WAL on its own, so every
    commit would make it longer; past ``wal_limit_mb`` the writer truncates it anyway."""
    wal = Path(f"{db_path}-wal")
    sizes = [0]
    async with amem.open(db_path, settings=amem.Settings(wal_limit_mb=1)) as mem:
        scope = mem.scope()
        stop = anyio.Event()

        async def recall_until_stopped() -> None:
            while not stop.is_set():
                await scope.recall("记忆 memory", limit=5)

        async def submit(n: int) -> None:
            await scope.submit_event(f"第{n}条 记忆 memory " + "内容 content " * 100, role="user")

        async with anyio.create_task_group() as tg:
            for _ in range(4):  # more than the two readers: one is always reading
                tg.start_soon(recall_until_stopped)
            with anyio.fail_after(120):  # a bound, not a timing assertion
                for batch in range(10_000):
                    async with anyio.create_task_group() as writers:
                        for n in range(10):
                            writers.start_soon(submit, batch * 10 + n)
                    sizes.append(wal.stat().st_size if wal.exists() else 0)
                    if sizes[-1] < sizes[-2]:  # the WAL was truncated under the load
                        break
            stop.set()
        assert sizes[-1] < sizes[-2]
        # it grew toward its limit first (looked at after every batch, it is cut as soon
        # as it passes 1 MiB, so the samples between batches of ten may not see it pass)
        assert max(sizes) > 1 << 19
        assert (await scope.status()).events["stored"] == len(sizes[1:]) * 10


async def test_the_wal_stays_bounded_while_another_reader_holds_a_snapshot(
    db_path: Path,
) -> None:
    """A reader that never lets go (another process in a long transaction) keeps SQLite
    from ever truncating the WAL: every write made it longer, to 1 GB for 5,000 long
    events. Past ``wal_limit_mb`` writes now wait for that reader and then fail with
    nothing written; once it leaves, the WAL is truncated without another write."""
    wal = Path(f"{db_path}-wal")
    async with amem.open(db_path, settings=amem.Settings(wal_limit_mb=1)) as mem:
        scope = mem.scope()
        await scope.submit_event("before the reader", role="user")
        with closing(open_sqlite(str(db_path), readonly=True)) as reader:
            reader.execute("begin")
            reader.execute("select count(*) from events").fetchall()  # holds its snapshot
            largest, stored = 0, 0
            with anyio.fail_after(120), pytest.raises(amem.StorageError) as refused:
                for n in range(10_000):
                    await scope.submit_event(
                        f"long event {n} " + "内容 content " * 1000, role="user"
                    )
                    stored += 1
                    largest = max(largest, wal.stat().st_size)
            assert refused.value.code == "database_busy"
            assert "nothing was written" in str(refused.value)
            assert 1 << 20 < largest < 2 << 20  # past the limit by one write at most
            reader.execute("rollback")
        with anyio.fail_after(10):  # no write comes: the writer retries on its own
            while wal.stat().st_size > 1 << 20:  # (idle index upkeep may add pages after)
                await anyio.sleep(0.1)
        await scope.submit_event("after the reader", role="user")
        assert (await scope.status()).events["stored"] == stored + 2


async def test_the_search_index_is_kept_merged_when_the_writer_is_idle(db_path: Path) -> None:
    """Each write transaction adds an FTS5 segment and every term lookup reads each one;
    FTS5 alone leaves 17 after 300 single writes. Idle upkeep merges them, in steps
    between requests, and the index stays whole."""
    async with amem.open(db_path) as mem:
        scope = mem.scope()
        for n in range(300):
            await scope.submit_event(f"message {n} about tea in 杭州", role="user")
        with anyio.fail_after(10):
            while (segments := index_state(db_path)[0]) > 3:
                await anyio.sleep(0.05)
        found = await scope.recall("message 299 about tea", limit=1, mode="fast")
    assert segments <= 3
    assert index_state(db_path)[1] == "ok"
    assert [item.text for item in found.items] == ["message 299 about tea in 杭州"]


def index_state(path: Path) -> tuple[int, str]:
    """The search index's segments, and FTS5's own integrity check."""
    with closing(sqlite3.connect(path)) as conn:
        segments = index.index_segments(conn)
        conn.execute("insert into search_fts (search_fts, rank) values ('integrity-check', 1)")
        return segments, "ok"


async def queue_behind_held_writer(
    mem: amem.Memory, submits: list[tuple[str, dict[str, Any]]]
) -> dict[str, BaseException | amem.EventReceipt]:
    """Submit every ``(text, keywords)`` while the writer is held, so that all of them are
    one batch; each outcome by event ID."""
    scope = mem.scope()
    db, release, started = database(mem), threading.Event(), anyio.Event()
    outcomes: dict[str, BaseException | amem.EventReceipt] = {}

    async def submit(text: str, options: dict[str, Any]) -> None:
        try:
            outcomes[options["event_id"]] = await scope.submit_event(text, **options)
        except amem.AmemError as exc:
            outcomes[options["event_id"]] = exc

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold_writer, db, release, started)
        await started.wait()
        commits_before = db.writer.commits
        for text, options in submits:
            tg.start_soon(submit, text, options)
        await anyio.sleep(0.05)  # let every submitter queue behind the held transaction
        release.set()
    assert db.writer.commits - commits_before == 2  # the held request, then one batch
    return outcomes


def mixed_submits(person: str) -> list[tuple[str, dict[str, Any]]]:
    submits = []
    for n in range(120):
        options: dict[str, Any] = {"event_id": f"e-{n}", "role": ("user", "assistant")[n % 2]}
        if n % 3 == 0:
            options["session"] = f"chat-{n % 7}"
        if n % 5 == 0:
            options["person"] = person
        if n % 11 == 0:
            options["category"] = "reference"  # stored, never indexed
        options["occurred_at"] = f"2026-03-{1 + n % 28:02d}T08:{n % 60:02d}:00+08:00"
        text = f"第{n}次 我们聊了杭州的天气 and the weather in Lisbon, note {n}"
        submits.append((text if n % 2 else f"plain English note number {n}", options))
    return submits


STORED = """
select id, persona, project, session, role, category, source, text, occurred_at, status, person
from events order by id
"""
INDEXED = "select doc_kind, ref, tokens from search_docs order by ref"
SEQS = "select id, seq from events"
MATCHED = """
select d.ref from search_fts f join search_docs d on d.num = f.rowid
where search_fts match ? order by d.ref
"""


async def test_submits_in_one_batch_are_stored_and_indexed_as_one_at_a_time(
    tmp_path: Path,
) -> None:
    """A batch of new events goes in with a few statements for all of them: the file ends
    up holding what submitting them one at a time leaves, receipts and index included."""
    files = {way: tmp_path / f"{way}.db" for way in ("batch", "one-by-one")}
    receipts: dict[str, dict[str, Any]] = {}
    for way, path in files.items():
        async with amem.open(path) as mem:
            scope = mem.scope()
            person = (await scope.upsert_person("p-ana", display_name="Ana")).id
            submits = mixed_submits(person)
            if way == "batch":
                outcomes = await queue_behind_held_writer(mem, submits)
            else:
                outcomes = {
                    options["event_id"]: await scope.submit_event(text, **options)
                    for text, options in submits
                }
            if way == "batch":
                seqs = {
                    event_id: outcome.seq
                    for event_id, outcome in outcomes.items()
                    if isinstance(outcome, amem.EventReceipt)
                }
            receipts[way] = {
                event_id: outcome.model_dump(exclude={"ingested_at", "seq"})
                for event_id, outcome in outcomes.items()
                if isinstance(outcome, amem.EventReceipt)
            }
            found = await scope.recall("杭州", limit=50, mode="fast")
            chinese = {f"e-{n}" for n in range(1, 120, 2) if n % 11}
            assert len(found.items) == 50
            assert {item.source_event_id for item in found.items} <= chinese
            mine = await scope.recall("Lisbon", limit=50, mode="fast", person=person)
            assert {item.source_event_id for item in mine.items} == {
                f"e-{n}" for n in range(1, 120, 2) if n % 5 == 0 and n % 11
            }
    assert len(receipts["batch"]) == 120
    assert receipts["batch"] == receipts["one-by-one"]
    assert dict(rows(files["batch"], SEQS)) == seqs  # each caller heard its own row's
    for sql in (STORED, INDEXED, "select * from scope_usage"):
        assert rows(files["batch"], sql) == rows(files["one-by-one"], sql), sql
    for term in ("杭州", "lisbon", "plain", person_token("assistant", "default", "p-ana")):
        assert rows(files["batch"], MATCHED, term) == rows(files["one-by-one"], MATCHED, term)


async def test_a_batch_refuses_only_an_erased_id(mem: amem.Memory) -> None:
    scope = mem.scope()
    await scope.submit_event("said, then erased", role="user", event_id="gone")
    await scope.delete(event_id="gone")
    submits = [(f"note {n}", {"event_id": f"n-{n}", "role": "user"}) for n in range(20)]
    submits.insert(7, ("said again", {"event_id": "gone", "role": "user"}))
    outcomes = await queue_behind_held_writer(mem, submits)

    erased = outcomes.pop("gone")
    assert isinstance(erased, amem.Conflict)
    assert erased.code == "erased"
    assert all(isinstance(outcome, amem.EventReceipt) for outcome in outcomes.values())
    assert (await scope.recall("note", limit=50, mode="fast")).items[0].text.startswith("note")
    assert sum((await scope.status()).events.values()) == 20


async def test_one_event_sent_twice_in_a_batch_is_stored_once(mem: amem.Memory) -> None:
    """A client that retries before its first try was answered."""
    scope = mem.scope()
    submits = [(f"note {n}", {"event_id": f"n-{n}", "role": "user"}) for n in range(10)]
    outcomes: list[amem.EventReceipt] = []

    async def resend() -> None:
        outcomes.append(await scope.submit_event("note 3", role="user", event_id="n-3"))

    db, release, started = database(mem), threading.Event(), anyio.Event()
    async with anyio.create_task_group() as tg:
        tg.start_soon(hold_writer, db, release, started)
        await started.wait()
        for text, options in submits:
            tg.start_soon(partial(scope.submit_event, text, **options))
        tg.start_soon(resend)
        await anyio.sleep(0.05)
        release.set()
    listed = await scope.list(what="events", limit=100)
    assert sorted(item.id for item in listed.items) == sorted(f"n-{n}" for n in range(10))
    [again] = outcomes
    assert again.seq == next(item.seq for item in listed.items if item.id == "n-3")


async def test_a_batch_that_passes_a_limit_refuses_only_the_writes_past_it(
    mem: amem.Memory,
) -> None:
    scope = mem.scope()
    await scope.set_limits(max_events=30)
    submits = [(f"note {n}", {"event_id": f"n-{n}", "role": "user"}) for n in range(40)]
    outcomes = await queue_behind_held_writer(mem, submits)

    stored = [key for key, outcome in outcomes.items() if isinstance(outcome, amem.EventReceipt)]
    refused = [outcomes[key] for key in outcomes.keys() - set(stored)]
    assert (len(stored), len(refused)) == (30, 10)  # which ones: the order they queued in
    for error in refused:
        assert isinstance(error, amem.StorageError)
        assert error.code == "capacity_exceeded"
    assert sum((await scope.status()).events.values()) == 30
    listed = await scope.list(what="events", limit=100)
    assert sorted(item.id for item in listed.items) == sorted(stored)
