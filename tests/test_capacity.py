"""Capacity accounting: what a scope stores, counted exactly as it is written and removed;
limits that refuse a write whole (``capacity_exceeded``) and never let concurrent writers
past them; ``doctor`` near a limit; ``amem status`` and ``amem limits``."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import amem_cli, memory_draft, undo_v7, value
from mcp_client import MARKER, connect, ok, other

import amem
from amem.db.schema import SCHEMA_VERSION
from amem.store.capacity import INDEX_OVERHEAD
from amem.testing import FakeOpenAI, database

# what the markers mean: tests/conftest.py
pytestmark = [pytest.mark.both_databases, pytest.mark.anyio, pytest.mark.one_backend]

HOME = "我搬到杭州了，离西湖很近。"
TEA = "I love Longjing tea."


def utf8(*texts: str) -> int:
    return sum(len(text.encode()) for text in texts)


def counts(db: Path) -> tuple[int, int, int]:
    return (
        value(db, "select count(*) from events"),
        value(db, "select count(*) from memories"),
        value(db, "select count(*) from search_docs"),
    )


async def wal_settled(db_path: Path) -> None:
    """Wait until the WAL stops growing for half a second (the upkeep starts 0.2 s after
    the last write, then takes its steps one after another)."""
    wal = Path(f"{db_path}-wal")
    with anyio.fail_after(5):
        while True:
            size = wal.stat().st_size
            await anyio.sleep(0.5)
            if wal.stat().st_size == size:
                return


async def add_fact(scope: amem.Scope, event_id: str, text: str, quote: str) -> amem.MemoryRecord:
    draft = {"text": text, "quote": quote, "kind": "fact", "basis": "user_statement"}
    [memory] = await scope.add_memories(event_id, [draft])
    return memory


# --- accounting ----------------------------------------------------------------------------


async def test_capacity_counts_what_was_written_exactly(mem: amem.Memory, db_path: Path) -> None:
    s = mem.scope("assistant", "support")
    await s.submit_event(HOME, role="user", event_id="e1")
    await s.submit_event(TEA, role="user", event_id="e2", category="reference")
    home = await add_fact(s, "e1", "User lives in 杭州", "我搬到杭州了")
    await mem.scope("other", "x").submit_event("elsewhere", role="user")
    await wal_settled(db_path)  # the writer's idle upkeep merges the search index after writes

    status = await s.status()
    capacity = status.capacity
    assert (capacity.persona, capacity.project) == ("assistant", "support")
    assert (capacity.events, capacity.memories) == (2, 1)
    assert capacity.text_bytes == utf8(HOME, TEA, "User lives in 杭州")
    tokens = value(
        db_path,
        "select sum(length(cast(tokens as blob))) from search_docs where persona = 'assistant'",
    )
    assert capacity.index_bytes == round(tokens * INDEX_OVERHEAD)
    assert capacity.vector_bytes == 0
    assert (capacity.max_events, capacity.max_text_bytes) == (None, None)
    assert capacity.file_bytes == db_path.stat().st_size
    wal = Path(f"{db_path}-wal")
    assert capacity.wal_bytes == (wal.stat().st_size if wal.exists() else 0)
    free, page = value(db_path, "pragma freelist_count"), value(db_path, "pragma page_size")
    assert capacity.free_bytes == free * page
    assert status.memory_kinds["fact"] == 1
    assert sum(status.memory_kinds.values()) == status.memories == 1

    fixed = await s.correct(home.id, "User lives in 苏州")
    after = (await s.status()).capacity
    assert (after.events, after.memories) == (3, 2)  # the correction event; the revoked stays
    assert after.text_bytes == utf8(HOME, TEA, "User lives in 杭州") + 2 * utf8(
        "User lives in 苏州"
    )

    await s.delete(event_id=fixed.correction_event_id)
    gone = (await s.status()).capacity
    assert (gone.events, gone.memories, gone.text_bytes) == (1, 0, utf8(TEA))
    assert gone.index_bytes == 0  # a reference event is not indexed


async def test_vector_bytes_are_the_scope_s_stored_vectors(mem: amem.Memory) -> None:
    s = mem.scope("assistant", "support")
    await s.submit_event(HOME, role="user", event_id="e1")

    def store(conn: sqlite3.Connection) -> None:
        insert = (
            "insert into vectors (persona, project, doc_kind, ref, chunk, fingerprint, dim, "
            "vector, text_hash, created_at) values (?, ?, 'event', ?, ?, ?, ?, ?, 'h', 'now')"
        )
        for chunk in range(3):
            conn.execute(insert, ("assistant", "support", "e1", chunk, "model-a", 8, bytes(32)))
        conn.execute(insert, ("assistant", "support", "e1", 0, "model-b", 4, bytes(16)))
        conn.execute(insert, ("other", "x", "e9", 0, "model-a", 8, bytes(32)))

    await database(mem).write(store)
    capacity = (await s.status()).capacity
    assert capacity.vector_bytes == 3 * 32 + 16


async def test_a_file_from_schema_6_is_counted_when_it_migrates(db_path: Path) -> None:
    async with amem.open(db_path) as mem:
        s = mem.scope("p", "q")
        await s.submit_event(HOME, role="user", event_id="e1")
        await add_fact(s, "e1", "User moved", "我搬到杭州了")
        expected = (await s.status()).capacity
    with closing(sqlite3.connect(db_path)) as conn:
        names = "select name from sqlite_master where type = 'trigger' and name like '%_usage_%'"
        assert len(conn.execute(names).fetchall()) == 9
        undo_v7(conn)
        conn.execute("pragma user_version = 6")
        conn.commit()
    async with amem.open(db_path) as mem:
        migrated = (await mem.scope("p", "q").status()).capacity
    assert value(db_path, "pragma user_version") == SCHEMA_VERSION == 12
    counted = {"events", "memories", "text_bytes", "index_bytes"}
    assert migrated.model_dump(include=counted) == expected.model_dump(include=counted)


# --- limits --------------------------------------------------------------------------------


async def test_an_event_past_the_limit_is_refused_and_nothing_is_written(
    mem: amem.Memory, db_path: Path
) -> None:
    s = mem.scope("assistant", "support")
    capacity = await s.set_limits(max_events=2)
    assert (capacity.max_events, capacity.max_text_bytes) == (2, None)
    await s.submit_event("one", role="user", event_id="e1")
    await s.submit_event("two", role="user", event_id="e2")
    before = counts(db_path)

    with pytest.raises(amem.StorageError) as caught:
        await s.submit_event(f"three {MARKER}", role="user", event_id="e3")
    assert caught.value.code == "capacity_exceeded"
    assert "2 events" in caught.value.message
    assert MARKER not in str(caught.value)
    assert counts(db_path) == before

    again = await s.submit_event("two", role="user", event_id="e2")  # a duplicate: not refused
    assert again.duplicate
    await mem.scope("assistant", "other").submit_event("another scope", role="user")
    with pytest.raises(amem.StorageError, match="capacity_exceeded"):
        await s.submit_event("four", role="user")


async def test_text_bytes_limit_covers_events_and_memories(mem: amem.Memory, db_path: Path) -> None:
    s = mem.scope("assistant", "support")
    await s.set_limits(max_text_bytes=utf8(HOME) + utf8("User moved"))
    await s.submit_event(HOME, role="user", event_id="e1")
    memory = await add_fact(s, "e1", "User moved", "我搬到杭州了")  # exactly at the limit
    assert (await s.status()).capacity.text_bytes == utf8(HOME, "User moved")
    same = await add_fact(s, "e1", "User moved", "我搬到杭州了")  # an identical draft
    assert same.id == memory.id
    before = counts(db_path)

    with pytest.raises(amem.StorageError) as caught:  # two drafts: the batch goes, or none
        await s.add_memories(
            "e1",
            [
                {"text": "U", "quote": "杭州", "kind": "fact", "basis": "user_statement"},
                memory_draft("Near the lake", "西湖"),
            ],
        )
    assert caught.value.code == "capacity_exceeded"
    assert "bytes of text" in caught.value.message
    with pytest.raises(amem.StorageError, match="capacity_exceeded"):
        await s.submit_event("x", role="user")
    with pytest.raises(amem.StorageError, match="capacity_exceeded"):
        await s.correct(memory.id, "User moved to Hangzhou")
    assert counts(db_path) == before
    assert [m.id for m in (await s.read("e1")).memories] == [memory.id]  # not revoked


async def test_host_ingest_past_the_limit_is_refused_whole(mem: amem.Memory, db_path: Path) -> None:
    s = mem.scope("assistant", "support")
    await s.set_limits(max_events=3)
    entries = [{"event_id": f"h{n}", "text": f"line {n}", "role": "user"} for n in range(5)]
    with pytest.raises(amem.StorageError, match="capacity_exceeded"):
        await s.host_ingest("host", entries, checkpoint={"session": "s", "goal": "g"})
    assert counts(db_path) == (0, 0, 0)
    assert await s.capture_cursor("host") == 0
    assert await s.checkpoint("s") is None

    done = await s.host_ingest("host", entries[:3])
    assert (done.cursor, len(done.stored)) == (3, 3)
    replay = await s.host_ingest("host", entries[:3], start=0)  # a replay adds nothing
    assert replay.cursor == 3


async def test_a_limit_below_what_is_stored_removes_nothing(mem: amem.Memory) -> None:
    s = mem.scope("assistant", "support")
    for n in range(3):
        await s.submit_event(f"event {n}", role="user", event_id=f"e{n}")
    capacity = await s.set_limits(max_events=2, max_text_bytes=10_000)
    assert (capacity.events, capacity.max_events, capacity.max_text_bytes) == (3, 2, 10_000)
    with pytest.raises(amem.StorageError, match="capacity_exceeded"):
        await s.submit_event("more", role="user")
    await s.delete(event_id="e0")  # deleting always goes through
    with pytest.raises(amem.StorageError, match="capacity_exceeded"):
        await s.submit_event("more", role="user")  # at the limit: still no room
    await s.delete(event_id="e1")
    await s.submit_event("fits again", role="user", event_id="e3")  # ... once under it
    assert (await s.status()).capacity.events == 2

    cleared = await s.set_limits()
    assert (cleared.max_events, cleared.max_text_bytes) == (None, None)
    await s.submit_event("no limit now", role="user")


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "10", 2**63])
async def test_bad_limits_are_refused(scope: amem.Scope, value: Any) -> None:
    for field in ("max_events", "max_text_bytes"):
        with pytest.raises(amem.InvalidInput) as caught:
            await scope.set_limits(**{field: value})
        assert field in caught.value.message
    assert (await scope.status()).capacity.max_events is None


@pytest.mark.both_backends
async def test_concurrent_writers_near_a_limit_never_pass_it(db_path: Path) -> None:
    """Two tasks on each of two ``Memory`` objects (two writer connections, as two
    processes have) race for the last places: exactly the limit is stored."""
    limit = 25
    refused: list[str] = []
    async with amem.open(db_path) as first, amem.open(db_path) as second:
        await first.scope("p", "q").set_limits(max_events=limit)

        async def writer(memory: amem.Memory, name: str) -> None:
            scope = memory.scope("p", "q")
            for n in range(20):
                try:
                    await scope.submit_event(f"{name} {n}", role="user", event_id=f"{name}-{n}")
                except amem.StorageError as exc:
                    refused.append(exc.code)

        async with anyio.create_task_group() as tg:
            for memory, name in ((first, "a"), (first, "b"), (second, "c"), (second, "d")):
                tg.start_soon(writer, memory, name)
        status = await second.scope("p", "q").status()
    assert value(db_path, "select count(*) from events") == limit
    assert status.capacity.events == limit
    assert refused == ["capacity_exceeded"] * (4 * 20 - limit)


async def test_an_extraction_past_the_limit_fails_the_event_and_retry_resumes(
    db_path: Path,
) -> None:
    async with amem.open(db_path) as mem:
        await mem.scope("p", "q").submit_event(HOME, role="user", event_id="e1")

    def answer(event: dict[str, Any]) -> list[dict[str, Any]]:
        return [memory_draft("User moved to Hangzhou", "我搬到杭州了")]

    with FakeOpenAI(answer=answer) as api:
        settings = amem.Settings(extract_base_url=api.base_url, extract_model="fake")
        async with amem.open(db_path, settings=settings) as mem:
            s = mem.scope("p", "q")
            await s.set_limits(max_text_bytes=utf8(HOME) + 5)
            result = await s.retry("e1")
            assert result.failed == ["e1"]
            page = await s.read("e1")
            assert page.event.status == "failed"
            assert (page.event.error or "").startswith("capacity_exceeded: ")
            assert page.memories == []
            await s.set_limits()
            assert (await s.retry("e1")).extracted == ["e1"]


# --- doctor --------------------------------------------------------------------------------


async def test_doctor_warns_at_ninety_percent_of_a_limit(mem: amem.Memory) -> None:
    s = mem.scope("assistant", "support")
    for n in range(9):
        await s.submit_event(f"event {n}", role="user")
    await s.set_limits(max_events=11)
    report = await mem.doctor()
    [check] = [c for c in report.checks if c.name == "capacity limits"]
    assert check.ok, check
    assert "1 scope(s) with limits" in check.detail

    await s.set_limits(max_events=10)
    report = await mem.doctor()
    [check] = [c for c in report.checks if c.name == "capacity limits"]
    assert (check.ok, check.severity) == (False, "warning")  # it never fails the report
    assert "assistant/support holds 9 of 10 events (90%)" in check.detail
    assert check.fix is not None
    assert "amem limits" in check.fix


async def test_doctor_finds_miscounted_usage_and_rebuild_counts_it_again(
    mem: amem.Memory,
) -> None:
    s = mem.scope("assistant", "support")
    await s.submit_event(HOME, role="user", event_id="e1")
    assert all(c.ok for c in (await mem.doctor()).checks if c.name == "capacity accounting")

    def around_amem(conn: sqlite3.Connection) -> None:
        conn.execute("update scope_usage set events = 40, text_bytes = 1")

    await database(mem).write(around_amem)
    report = await mem.doctor()
    [check] = [c for c in report.checks if c.name == "capacity accounting"]
    assert (check.ok, check.severity, report.ok) == (False, "error", False)
    assert "assistant/support" in check.detail
    assert check.fix is not None
    assert "--rebuild-index" in check.fix
    repaired = await mem.doctor(rebuild_index=True)
    assert all(c.ok for c in repaired.checks if c.name == "capacity accounting")
    capacity = (await s.status()).capacity
    assert (capacity.events, capacity.text_bytes) == (1, utf8(HOME))


# --- MCP and the CLI -----------------------------------------------------------------------


@pytest.mark.both_backends
async def test_memory_status_shows_capacity(anyio_backend: str, tmp_path: Path) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "log") as s:
        await ok(s, "event_submit", text=HOME, role="user", event_id="e1")
        status = await ok(s, "memory_status")
    assert status["memory_kinds"]["fact"] == 0
    capacity = status["capacity"]
    assert (capacity["events"], capacity["text_bytes"]) == (1, utf8(HOME))
    assert capacity["max_events"] is None
    assert capacity["file_bytes"] > 0


def test_cli_status_and_limits(tmp_path: Path) -> None:
    db = str(tmp_path / "m.db")
    assert amem_cli("submit", HOME, "--db", db, "--event-id", "e1").returncode == 0

    result = amem_cli("status", "--db", db)
    assert result.returncode == 0, result.stderr
    assert "events: 1 (stored 1," in result.stdout
    assert f"text:    {utf8(HOME)} bytes (no limit)" in result.stdout
    status = json.loads(amem_cli("status", "--db", db, "--json").stdout)
    assert status["capacity"]["text_bytes"] == utf8(HOME)

    result = amem_cli("limits", "--db", db, "--max-events", "2")
    assert result.returncode == 0, result.stderr
    assert "events:  1 of 2 events (50% of the limit)" in result.stdout
    result = amem_cli("limits", "--db", db, "--max-text-bytes", "1000", "--json")
    limits = json.loads(result.stdout)
    assert (limits["max_events"], limits["max_text_bytes"]) == (2, 1000)  # the other is kept

    assert amem_cli("submit", "two", "--db", db).returncode == 0
    result = amem_cli("submit", f"three {MARKER}", "--db", db)
    assert result.returncode == 1
    assert result.stderr.startswith("amem: error: capacity_exceeded: ")
    assert MARKER not in result.stderr
    assert value(Path(db), "select count(*) from events") == 2

    for bad in (["--max-events", MARKER], ["--max-events", "0"], ["--clear", "--max-events", "3"]):
        result = amem_cli("limits", "--db", db, *bad)
        assert result.returncode == 1, bad
        assert result.stderr.startswith("amem: error: invalid_input: ")
        assert MARKER not in result.stderr
    limits = json.loads(amem_cli("limits", "--db", db, "--json").stdout)
    assert (limits["max_events"], limits["max_text_bytes"]) == (2, 1000)  # unchanged

    result = amem_cli("limits", "--db", db, "--max-events", "none", "--json")
    assert json.loads(result.stdout)["max_events"] is None
    result = amem_cli("limits", "--db", db, "--clear", "--json")
    assert json.loads(result.stdout)["max_text_bytes"] is None
