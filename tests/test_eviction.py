"""Natural eviction: the raw text of derived events goes, what was learned from it stays.

What a user relies on: the memories and their quotes survive and recall finds them; the
event reads as ``evicted`` with no text; events not derived yet are never touched; a dry
run writes nothing; replaying the event brings nothing back; the scope's text bytes drop;
the words leave the file and its WAL as an erasure's do; a killed eviction leaves each
event wholly evicted or wholly intact."""

from __future__ import annotations

import json
import random
import signal
import sqlite3
from contextlib import closing
from pathlib import Path

import anyio
import pytest
from children import common  # tests/children/common.py (pytest puts tests/ on sys.path)
from helpers import cli_ok, dump, file_bytes, memory_draft

import amem
from amem.store import erasure
from amem.testing import database

# what the markers mean: tests/conftest.py
pytestmark = [pytest.mark.both_databases, pytest.mark.anyio, pytest.mark.one_backend]

SECRET = "Zanzibar7731 我住在青龙偃月街"
JAN = "2026-01-10T09:00:00+00:00"
MAR = "2026-03-10T09:00:00+00:00"


async def derived(
    scope: amem.Scope, event_id: str, text: str, quote: str, *, at: str = JAN
) -> amem.MemoryRecord:
    """A user event ``text`` and one fact quoting ``quote`` from it."""
    await scope.submit_event(text, role="user", event_id=event_id, session="s", occurred_at=at)
    [memory] = await scope.add_memories(event_id, [memory_draft(f"User: {quote}", quote)])
    return memory


async def set_status(mem: amem.Memory, event_id: str, status: str) -> None:
    await database(mem).write(
        lambda c: c.execute("update events set status = ? where id = ?", (status, event_id))
    )


async def test_evicting_a_derived_event_keeps_its_memories_and_drops_its_text(
    mem: amem.Memory,
) -> None:
    scope = mem.scope()
    text = f"I live in Oslo and my gate code is {SECRET}"
    oslo = await derived(scope, "e-1", text, "I live in Oslo")
    done = await scope.evict(["e-1"])
    assert (done.evicted, done.events, done.skipped, done.dry_run) == (1, ["e-1"], [], False)
    assert (done.chars, done.text_bytes) == (len(text), len(text.encode()))
    assert (done.search_rows, done.batches) == (1, 1)

    page = await scope.read("e-1")
    assert (page.event.status, page.text, page.total_chars, page.event.chars) == (
        "evicted",
        "",
        0,
        0,
    )
    assert page.event.evicted_at is not None
    assert [m.id for m in page.memories] == [oslo.id]
    via_memory = await scope.read(oslo.id, offset=5)  # a memory's evidence: the quote stays
    assert via_memory.memory is not None
    assert via_memory.memory.quote == "I live in Oslo"
    assert via_memory.text == ""

    found = await scope.recall("Oslo")
    assert [(item.id, item.quote, item.raw_fallback) for item in found.items] == [
        (oslo.id, "I live in Oslo", False)
    ]
    assert (await scope.recall("Zanzibar7731 gate code")).items == []  # the words are gone
    listed = await scope.list("events")
    assert [(e.id, e.status, e.text) for e in listed.items] == [("e-1", "evicted", "")]
    assert (await scope.status()).events["evicted"] == 1
    assert (await mem.doctor()).ok
    assert (await mem.doctor(rebuild_index=True)).ok  # a rebuild does not index it again
    assert (await scope.recall("Zanzibar7731 gate code")).items == []


async def test_events_not_derived_are_never_evicted(mem: amem.Memory) -> None:
    scope = mem.scope()
    await derived(scope, "done", "I like tea", "I like tea")
    for event_id, status in (("stored", None), ("pending", "pending"), ("failed", "failed")):
        await scope.submit_event(f"a {event_id} event", role="user", event_id=event_id)
        if status is not None:
            await set_status(mem, event_id, status)
    await mem.scope("other", "scope").submit_event("elsewhere", role="user", event_id="far")
    await scope.evict(["done"])

    asked = ["stored", "pending", "failed", "done", "nope", "far"]
    done = await scope.evict(asked)
    assert done.evicted == 0
    assert done.events == []
    assert [(s.event_id, s.reason) for s in done.skipped] == [
        ("stored", "not_derived"),
        ("pending", "not_derived"),
        ("failed", "not_derived"),
        ("done", "already_evicted"),
        ("nope", "not_found"),
        ("far", "not_found"),
    ]
    for event_id in ("stored", "pending", "failed"):
        page = await scope.read(event_id)
        assert page.text == f"a {event_id} event"
        assert page.event.status != "evicted"


async def test_a_dry_run_says_the_same_and_writes_nothing(db_path: Path, mem: amem.Memory) -> None:
    scope = mem.scope()
    for n in range(5):
        await derived(scope, f"e-{n}", f"I visited city{n} in spring", f"city{n}")
    await scope.submit_event("never derived", role="user", event_id="raw")
    before = dump(db_path)
    preview = await scope.evict(["e-0", "e-1", "raw"], dry_run=True)
    preview_all = await scope.evict(before=MAR, dry_run=True)
    assert dump(db_path) == before
    assert (preview.dry_run, preview.batches, preview.events) == (True, 0, ["e-0", "e-1"])
    assert preview_all.events == [f"e-{n}" for n in range(5)]

    done = await scope.evict(["e-0", "e-1", "raw"])
    assert done.model_dump(exclude={"dry_run", "batches"}) == preview.model_dump(
        exclude={"dry_run", "batches"}
    )


async def test_replaying_an_evicted_event_is_a_duplicate_that_brings_nothing_back(
    mem: amem.Memory,
) -> None:
    scope = mem.scope()
    text = "My sister lives in Bergen"
    memory = await derived(scope, "e-1", text, "Bergen")
    await scope.evict(["e-1"])
    again = await scope.submit_event(
        text, role="user", event_id="e-1", session="s", occurred_at=JAN
    )
    assert (again.duplicate, again.status, again.memory_ids) == (True, "evicted", [memory.id])
    page = await scope.read("e-1")
    assert (page.text, page.event.status) == ("", "evicted")
    with pytest.raises(amem.Conflict) as caught:  # another payload is still another event
        await scope.submit_event(text, role="assistant", event_id="e-1", session="s")
    assert caught.value.code == "duplicate_conflict"
    with pytest.raises(amem.InvalidInput) as refused:  # nothing new can quote it
        await scope.add_memories("e-1", [memory_draft("User: Bergen", "Bergen")])
    assert refused.value.code == "quote_mismatch"


async def test_eviction_lowers_the_scopes_text_and_index_bytes(mem: amem.Memory) -> None:
    scope = mem.scope()
    long_text = "We talked about the garden for a long while. " * 40
    await derived(scope, "e-1", long_text, "the garden")
    await derived(scope, "e-2", "I keep bees", "bees")
    full = (await scope.status()).capacity
    done = await scope.evict(["e-1"])
    after = (await scope.status()).capacity
    assert full.text_bytes - after.text_bytes == done.text_bytes == len(long_text.encode())
    assert after.index_bytes < full.index_bytes
    assert (after.events, after.memories) == (full.events, full.memories)  # rows stay


async def test_an_evicted_event_is_never_shown_as_raw_text(mem: amem.Memory) -> None:
    """A corrected event comes back as itself in a recall with history, and a session's
    last events enter a context pack as themselves: an evicted one has nothing to show."""
    scope = mem.scope()
    wrong = await derived(scope, "e-1", "I moved to Lisbon last week", "I moved to Lisbon")
    await scope.correct(wrong.id, "User moved to Lisbon in May")
    await derived(scope, "e-2", "My cat is called Miso", "Miso")
    history = await scope.recall("Lisbon", include_history=True)
    assert "e-1" in [item.id for item in history.items if item.raw_fallback]  # before
    pack = json.loads((await scope.resume("s", query="cat Miso")).context)
    assert [e["id"] for e in pack["recent_events"]] == ["e-2"]  # e-1 is amended
    await scope.evict(["e-1", "e-2"])
    history = await scope.recall("Lisbon moved", include_history=True)
    assert [item for item in history.items if item.raw_fallback] == []
    pack = json.loads((await scope.resume("s", query="cat Miso")).context)
    assert pack.get("recent_events", []) == []
    assert [m["source_event_id"] for m in pack["memories"]] == ["e-2"]


async def test_before_selects_derived_events_that_occurred_earlier(mem: amem.Memory) -> None:
    scope = mem.scope()
    await derived(scope, "jan", "January: I started piano", "piano", at=JAN)
    await derived(scope, "mar", "March: I started violin", "violin", at=MAR)
    await scope.submit_event("January, never derived", role="user", event_id="raw", occurred_at=JAN)
    with pytest.raises(amem.InvalidInput):
        await scope.evict()
    with pytest.raises(amem.InvalidInput):
        await scope.evict(before="not a time")
    both = await scope.evict(["jan", "mar"], before="2026-02-01", dry_run=True)
    assert both.events == ["jan"]
    assert [(s.event_id, s.reason) for s in both.skipped] == [("mar", "not_before")]
    done = await scope.evict(before="2026-02-01")
    assert (done.events, done.skipped) == (["jan"], [])
    assert (await scope.read("mar")).text == "March: I started violin"
    assert (await scope.read("raw")).text == "January, never derived"


async def test_an_archive_carries_evicted_events(mem: amem.Memory, tmp_path: Path) -> None:
    scope = mem.scope()
    memory = await derived(scope, "e-1", "I was born in Tromsø", "Tromsø")
    await derived(scope, "e-2", "I work as a nurse", "a nurse")
    await scope.evict(["e-1"])
    archive = tmp_path / "a.jsonl"
    await mem.export(archive)
    rows = [json.loads(line) for line in archive.read_text().splitlines()]
    [row] = [r["row"] for r in rows if r.get("table") == "events" and r["row"]["id"] == "e-1"]
    assert row["text"] == ""
    assert row["evicted_at"] is not None
    async with amem.open(tmp_path / "copy.db") as copy:
        await copy.import_archive(archive)
        there = copy.scope()
        page = await there.read("e-1")
        assert (page.event.status, page.text, [m.id for m in page.memories]) == (
            "evicted",
            "",
            [memory.id],
        )
        assert [item.id for item in (await there.recall("Tromsø")).items] == [memory.id]
        assert (await there.read("e-2")).text == "I work as a nurse"
        assert (await copy.doctor()).ok


@pytest.mark.both_backends
async def test_evicted_text_leaves_the_database_file_and_its_wal(db_path: Path) -> None:
    async with amem.open(db_path) as mem:
        scope = mem.scope()
        await derived(scope, "secret", f"Remember this: {SECRET} near the harbour", "the harbour")
        for n in range(50):  # neighbours on the same pages, which must survive
            await scope.submit_event(f"ordinary note {n}", role="user")
        assert SECRET.encode() in file_bytes(db_path)  # the scan can see stored text
        assert b"zanzibar7731" in file_bytes(db_path)  # and the index term
        await scope.evict(["secret"])
        with anyio.fail_after(30):  # the scrub runs within seconds of an idle writer
            while b"zanzibar7731" in file_bytes(db_path) or SECRET.encode() in file_bytes(db_path):
                await anyio.sleep(0.2)
        assert (await scope.read("secret")).event.status == "evicted"
    data = file_bytes(db_path)
    for needle in (SECRET, "Zanzibar7731", "zanzibar7731", "青龙偃月街"):
        assert needle.encode() not in data, needle
    assert b"the harbour" in data  # the memory's quote stays
    assert b"ordinary note 49" in data


@pytest.mark.both_backends
async def test_a_large_eviction_runs_in_batches(mem: amem.Memory) -> None:
    scope = mem.scope()
    count = erasure.BATCH_EVENTS * 2 + 10
    items = [
        {"text": f"I planted tree{n} today", "role": "user", "event_id": f"e-{n}"}
        for n in range(count)
    ]
    for start in range(0, count, 100):
        await scope.host_ingest("test", items[start : start + 100], start=start)
    for n in range(count):
        await scope.add_memories(f"e-{n}", [memory_draft(f"User planted tree{n}", f"tree{n}")])
    done = await scope.evict(before="2999-01-01")
    assert (done.evicted, done.batches) == (count, 3)
    assert (await scope.status()).events["evicted"] == count


def test_the_cli_previews_then_evicts(db_path: Path) -> None:
    async def fill() -> None:
        async with amem.open(db_path) as mem:
            await derived(mem.scope(), "e-1", "I speak Norwegian", "Norwegian")
            await mem.scope().submit_event("not derived", role="user", event_id="e-2")

    anyio.run(fill)
    preview = cli_ok("evict", "e-1", "e-2", "--db", db_path)
    assert "would evict the raw text of 1 events" in preview
    assert "skipped e-2: not_derived" in preview
    assert "add --yes to evict" in preview
    assert "I speak Norwegian" in cli_ok("read", "e-1", "--db", db_path)
    done = json.loads(cli_ok("evict", "--before", "2030-01-01", "--yes", "--json", "--db", db_path))
    assert (done["events"], done["dry_run"]) == (["e-1"], False)
    assert "evicted" in cli_ok("read", "e-1", "--db", db_path)
    assert "I speak Norwegian" not in cli_ok("read", "e-1", "--db", db_path)


# --- kill -9 ----------------------------------------------------------------------------

KILL_ROUNDS = 3
KILL_EVENTS = 600
"""Events each round's child derives, then evicts (six calls of 100)."""


@pytest.mark.both_backends
async def test_an_eviction_killed_midway_leaves_each_event_whole(
    anyio_backend: str, tmp_path: Path
) -> None:
    """A child evicts many events and is killed with SIGKILL at a random moment: each
    event is then wholly evicted (no text, ``evicted_at`` set, no search row) or wholly
    intact (its text, no ``evicted_at``, its search row), and the file is healthy."""
    rng = random.Random(f"evict/{anyio_backend}")
    db_path = tmp_path / "memory.db"
    intact, midway = 0, 0
    async with common.spawner(anyio_backend, tmp_path) as spawn:
        for number in range(KILL_ROUNDS):
            child = await spawn.start("evicting.py", db_path, f"k{number}", KILL_EVENTS)
            await child.go()
            assert await child.marked("evicted") is not None, child.describe()
            await anyio.sleep(rng.uniform(0, 0.02))  # the first of six slices is evicted
            child.kill()
            assert await child.finish() == -signal.SIGKILL, child.describe()
            assert not child.errors, child.describe()
            assert not child.unexpected, child.describe()
            states = await anyio.to_thread.run_sync(event_states, db_path)
            assert set(states.values()) <= {"evicted", "intact"}, [
                (event_id, s) for event_id, s in states.items() if s not in ("evicted", "intact")
            ][:5]
            left = list(states.values()).count("intact")
            midway += 0 < left < intact + KILL_EVENTS  # killed between two batches
            intact = left
    assert midway, "no kill landed between two batches of an eviction"
    async with amem.open(db_path) as mem:
        assert (await mem.doctor()).ok
        scope = mem.scope(persona=common.PERSONA, project=common.PROJECT)
        again = await scope.evict(before="2999-01-01")  # running it again evicts the rest
        assert again.skipped == []
    states = await anyio.to_thread.run_sync(event_states, db_path)
    assert set(states.values()) == {"evicted"}
    assert len(states) == KILL_ROUNDS * KILL_EVENTS


def event_states(db_path: Path) -> dict[str, str]:
    """Each event of the file, as plain sqlite3 sees it: ``evicted``, ``intact`` or what
    is wrong with it."""
    with closing(sqlite3.connect(db_path)) as conn:
        assert conn.execute("pragma integrity_check").fetchone() == ("ok",)
        rows = conn.execute(
            "select id, text, evicted_at, status,"
            " (select count(*) from search_docs d where d.doc_kind = 'event' and d.ref = e.id),"
            " (select count(*) from memories m where m.event_id = e.id)"
            " from events e"
        ).fetchall()
    states = {}
    for event_id, text, evicted_at, status, docs, memories in rows:
        if memories != 1 or status != "extracted":
            states[event_id] = f"underived ({status}, {memories} memories)"
        elif evicted_at is not None and text == "" and docs == 0:
            states[event_id] = "evicted"
        elif evicted_at is None and text == common.brief(event_id) and docs == 1:
            states[event_id] = "intact"
        else:
            states[event_id] = f"torn ({len(text)} chars, evicted_at {evicted_at}, {docs} docs)"
    return states
