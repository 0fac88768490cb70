"""Tiers, pins, TTL and promotion (``consolidate``), working-note compaction: the store side
of an agent loop's memory, through the Python API, MCP and the command line."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import amem_cli, cli_ok, file_bytes, memory_draft, rows, undo_v8
from mcp_client import MARKER, connect, ok, other, refused

import amem
from amem.db.schema import SCHEMA_VERSION
from amem.models import DEFAULT_TIERS

# what the markers mean: tests/conftest.py
pytestmark = [pytest.mark.both_databases, pytest.mark.anyio, pytest.mark.one_backend]

SESSION = "task-1"
AT = "2026-03-01T09:00:00+00:00"


async def note(
    scope: amem.Scope,
    text: str,
    *,
    event_id: str | None = None,
    session: str = SESSION,
    role: str = "user",
    **draft: Any,
) -> amem.MemoryRecord:
    """One event saying ``text`` and one memory quoting it whole (a working note unless
    the draft says otherwise)."""
    receipt = await scope.submit_event(text, role=role, event_id=event_id, session=session)
    basis = {"user": "user_statement", "assistant": "assistant_expression"}.get(role, "inference")
    fields = {
        "text": text,
        "quote": text,
        "kind": "observation",
        "basis": basis,
        "tier": "working",
        **draft,
    }
    [memory] = await scope.add_memories(receipt.event_id, [fields])
    return memory


def later(memory: amem.MemoryRecord, hours: float) -> datetime:
    return memory.created_at + timedelta(hours=hours)


# --- tiers and pins ------------------------------------------------------------------------


async def test_every_kind_has_a_default_tier_and_a_draft_may_name_one(
    scope: amem.Scope,
) -> None:
    text = "I moved to Hangzhou and I felt happy about the tea there"
    await scope.submit_event(text, role="user", event_id="e1")
    drafts: list[dict[str, Any]] = [
        memory_draft(f"User moved to Hangzhou ({kind})", "I moved to Hangzhou", kind)
        for kind in ("fact", "preference", "agreement", "growth", "episode", "observation")
    ]
    drafts.append(memory_draft("check the tea shop list", "the tea there", tier="working"))
    records = await scope.add_memories("e1", drafts)
    tiers = {(r.kind, r.tier) for r in records[:-1]}
    assert tiers == {
        ("fact", "profile"),
        ("preference", "profile"),
        ("agreement", "profile"),
        ("growth", "profile"),
        ("episode", "episodic"),
        ("observation", "episodic"),
    }
    assert DEFAULT_TIERS["emotion"] == "episodic"
    working = records[-1]
    assert working.tier == "working"
    assert working.expires_at == working.created_at + timedelta(hours=24)
    assert all(r.expires_at is None and not r.pinned for r in records[:-1])
    hits = await scope.recall("Hangzhou tea", limit=20)  # words every memory says
    assert {(item.id, item.tier) for item in hits.items} == {(r.id, r.tier) for r in records}
    found = await scope.recall("shop list")
    assert [(i.id, i.tier, i.pinned) for i in found.items] == [(working.id, "working", False)]


async def test_a_working_notes_ttl_is_a_setting(db_path: Path) -> None:
    settings = amem.Settings(working_ttl_hours=2)
    async with amem.open(db_path, settings=settings) as mem:
        memory = await note(mem.scope(), "try the staging server first")
    assert memory.expires_at == later(memory, 2)


async def test_a_raw_event_has_no_tier(scope: amem.Scope) -> None:
    await scope.submit_event("the zebra crossing is closed", role="user")
    [item] = (await scope.recall("zebra")).items
    assert item.raw_fallback
    assert (item.tier, item.pinned) == (None, False)


async def test_pin_and_unpin_are_idempotent_and_recall_shows_the_pin(scope: amem.Scope) -> None:
    memory = await note(scope, "the deploy key lives in the vault", tier="profile")
    pinned = await scope.pin(memory.id)
    assert pinned.pinned
    assert (await scope.pin(memory.id)).pinned
    [item] = (await scope.recall("deploy key")).items
    assert item.pinned
    assert (await scope.read(memory.id)).memory.pinned  # type: ignore[union-attr]
    unpinned = await scope.pin(memory.id, pinned=False)
    assert not unpinned.pinned
    assert not (await scope.recall("deploy key")).items[0].pinned
    assert unpinned.model_dump(exclude={"pinned"}) == pinned.model_dump(exclude={"pinned"})


async def test_pinning_an_unknown_revoked_or_foreign_memory_is_not_found(
    mem: amem.Memory, scope: amem.Scope
) -> None:
    memory = await note(scope, "rotate the tokens on friday")
    other = await note(mem.scope("someone", "else"), "not yours")
    await scope.retract(memory.id)
    for memory_id in (memory.id, other.id, "mem_nope"):
        with pytest.raises(amem.NotFound) as caught:
            await scope.pin(memory_id)
        assert caught.value.code == "not_found"
    with pytest.raises(amem.InvalidInput):
        await scope.pin(other.id, pinned="yes")  # type: ignore[arg-type]


async def test_a_correction_keeps_the_tier_pin_and_ttl(scope: amem.Scope) -> None:
    memory = await note(scope, "the build uses node 18")
    await scope.pin(memory.id)
    fixed = (await scope.correct(memory.id, "the build uses node 20")).memory
    assert (fixed.tier, fixed.pinned, fixed.expires_at) == ("working", True, memory.expires_at)
    assert (await scope.read(fixed.id)).memory == fixed


async def test_pinned_memories_enter_a_pack_first_whatever_the_query(scope: amem.Scope) -> None:
    pinned = await note(scope, "User never deploys on Fridays", tier=None, kind="preference")
    others = [
        await note(scope, f"the log of run {n} shows a timeout in step {n}") for n in range(30)
    ]
    await scope.pin(pinned.id)
    await scope.pin(others[0].id)
    for query in ("timeout in step 7", None):
        pack = await scope.resume(SESSION, query=query, budget=1000)
        memories = json.loads(pack.context)["memories"]
        # pins first (newest first), then recall's ranking, each once
        assert [m["id"] for m in memories[:2]] == [others[0].id, pinned.id]
        assert all(m.get("pinned") for m in memories[:2])
        assert len({m["id"] for m in memories}) == len(memories)
        assert f"[{pinned.id}]" in pack.render()
    await scope.pin(pinned.id, pinned=False)
    pack = await scope.resume(SESSION, budget=400)
    assert [m["id"] for m in json.loads(pack.context)["memories"]] == [others[0].id]
    await scope.retract(others[0].id)
    assert "memories" not in json.loads((await scope.resume(SESSION, budget=400)).context)


async def test_list_filters_by_tier(scope: amem.Scope) -> None:
    working = await note(scope, "scratch: compare the two logs")
    profile = await note(scope, "User prefers short answers", tier=None, kind="preference")
    page = await scope.list(tier="working")
    assert [(m.id, m.tier, m.pinned) for m in page.items] == [(working.id, "working", False)]
    assert page.total == 1
    assert [m.id for m in (await scope.list(tier="profile")).items] == [profile.id]
    with pytest.raises(amem.InvalidInput):
        await scope.list(tier="forever")
    with pytest.raises(amem.InvalidInput):
        await scope.list("events", tier="working")
    first = await scope.list(tier="working", limit=1)
    with pytest.raises(amem.InvalidInput):  # a cursor belongs to its filters
        await scope.list(tier="profile", cursor=first.next_cursor or "MS5hYmM")


async def test_a_v7_file_migrates_with_each_kind_in_its_default_tier(db_path: Path) -> None:
    async with amem.open(db_path) as mem:
        scope = mem.scope("p", "q")
        fact = await note(scope, "I live in Suzhou", tier=None, kind="fact")
        episode = await note(scope, "we hiked on sunday", tier=None, kind="episode")
    with closing(sqlite3.connect(db_path)) as conn:
        undo_v8(conn)
        conn.execute("pragma user_version = 7")
        conn.commit()
    async with amem.open(db_path) as mem:
        scope = mem.scope("p", "q")
        migrated = {r.id: r for r in (await scope.read(fact.event_id)).memories}
        migrated |= {r.id: r for r in (await scope.read(episode.event_id)).memories}
        working = await note(scope, "scratch after the upgrade")
        listed = await scope.list(tier="working")
    assert rows(db_path, "pragma user_version") == [(SCHEMA_VERSION,)] == [(12,)]
    assert migrated[fact.id].tier == "profile"
    assert migrated[episode.id].tier == "episodic"
    assert all(not r.pinned and r.expires_at is None for r in migrated.values())
    assert [m.id for m in listed.items] == [working.id]


# --- consolidation: TTL and promotion --------------------------------------------------------

SCRATCH = "scratch: grep quokka9931 in the worker logs"


async def test_consolidate_deletes_expired_working_notes_completely(db_path: Path) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope()
        receipt = await scope.submit_event(
            "look at the worker logs", role="user", event_id="e1", session=SESSION
        )
        [gone] = await scope.add_memories(
            "e1",
            [memory_draft(SCRATCH, "the worker logs", "observation", tier="working")],
        )
        fresh = await note(scope, "a note stored later")
        lasting = await note(scope, "User likes wombats", tier=None, kind="preference")
        await scope.relate(gone.id, lasting.id)
        assert SCRATCH.encode() in file_bytes(db_path)
        assert b"quokka9931" in file_bytes(db_path)
        early = await scope.consolidate(as_of=later(gone, 23))
        assert (early.deleted, early.promotions) == ([], [])
        done = await scope.consolidate(as_of=later(gone, 24))
        assert done.deleted == [gone.id]
        assert done.promotions == []
        assert not done.dry_run
        assert done.as_of == later(gone, 24)
        assert (await scope.recall("quokka9931")).items == []
        with pytest.raises(amem.NotFound):
            await scope.read(gone.id)
        page = await scope.read("e1")
        assert page.text == "look at the worker logs"
        assert page.memories == []
        assert (await scope.read(fresh.id)).memory == fresh
        assert (await scope.recall("wombats")).items[0].id == lasting.id
        assert (await scope.consolidate(as_of=later(gone, 24))).deleted == []  # idempotent
        await scope.submit_event("after the consolidation", role="user")
    assert receipt.event_id == "e1"
    assert rows(db_path, "select count(*) from relations") == [(0,)]
    assert rows(db_path, "select count(*) from memories where id = ?", gone.id) == [(0,)]
    data = file_bytes(db_path)
    for needle in (SCRATCH, "quokka9931"):
        assert needle.encode() not in data, needle
    assert b"look at the worker logs" in data  # the original event stays


async def test_a_pinned_working_note_graduates_instead_of_dying(scope: amem.Scope) -> None:
    kept = await note(scope, "the customer is on the enterprise plan")
    dropped = await note(scope, "maybe restart the pod")
    await scope.pin(kept.id)
    done = await scope.consolidate(as_of=later(kept, 25))
    assert done.deleted == [dropped.id]
    assert done.promotions == [amem.Promotion(id=kept.id, from_tier="working", to_tier="episodic")]
    memory = (await scope.read(kept.id)).memory
    assert memory is not None
    assert (memory.tier, memory.pinned, memory.expires_at) == ("episodic", True, None)
    again = await scope.consolidate(as_of=later(kept, 1000))
    assert (again.deleted, again.promotions) == ([], [])


async def test_restated_memories_move_up_a_tier(db_path: Path) -> None:
    async with amem.open(db_path, settings=amem.Settings(promote_after=3)) as mem:
        scope = mem.scope()
        twice = [await note(scope, "prefers  tabs", event_id=f"t{n}") for n in range(2)]
        thrice = [
            await note(scope, text, event_id=f"x{n}", kind="preference")
            for n, text in enumerate(
                ["User prefers dark mode", "User prefers dark  mode", "User prefers dark mode"]
            )
        ]
        stated = [
            await note(scope, "I am vegetarian", event_id=f"v{n}", kind="fact", tier="episodic")
            for n in range(3)
        ]
        said = [
            await note(scope, "we met in Berlin", event_id=f"b{n}", kind="episode")
            for n in range(3)
        ]
        inferred = [
            await note(
                scope,
                "User seems tired",
                event_id=f"i{n}",
                kind="fact",
                tier="episodic",
                role="system",
            )
            for n in range(3)
        ]
        preview = await scope.consolidate(dry_run=True)
        done = await scope.consolidate()
        after = {m.id: m.tier for m in (await scope.list(limit=100)).items}
        again = await scope.consolidate()
    assert preview.dry_run
    assert preview.promotions == done.promotions
    moved = {(p.id, p.from_tier, p.to_tier) for p in done.promotions}
    assert moved == (
        {(m.id, "working", "profile") for m in thrice}  # user preference: on to profile
        | {(m.id, "working", "episodic") for m in said}  # an episode stays episodic
        | {(m.id, "episodic", "profile") for m in stated}
    )
    assert all(after[m.id] == "working" for m in twice)
    assert all(after[m.id] == "episodic" for m in inferred)  # not the user's own words
    assert (again.deleted, again.promotions) == ([], [])


async def test_promote_after_zero_never_promotes_by_restatement(db_path: Path) -> None:
    async with amem.open(db_path, settings=amem.Settings(promote_after=0)) as mem:
        scope = mem.scope()
        notes = [await note(scope, "same words", event_id=f"s{n}") for n in range(5)]
        done = await scope.consolidate()
    assert done.promotions == []
    assert done.deleted == []
    assert len(notes) == 5


async def test_a_dry_run_changes_nothing(db_path: Path) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope()
        gone = await note(scope, "throwaway note")
        kept = await note(scope, "pinned note")
        await scope.pin(kept.id)
        before = rows(db_path, "select * from memories order by num")
        preview = await scope.consolidate(as_of=later(gone, 48), dry_run=True)
        assert rows(db_path, "select * from memories order by num") == before
        done = await scope.consolidate(as_of=later(gone, 48))
    assert preview.model_dump(exclude={"dry_run"}) == done.model_dump(exclude={"dry_run"})
    assert preview.deleted == [gone.id]
    assert [p.id for p in preview.promotions] == [kept.id]


async def test_consolidate_only_touches_its_scope(mem: amem.Memory) -> None:
    mine, theirs = mem.scope("a", "x"), mem.scope("b", "x")
    gone = await note(mine, "mine")
    stays = await note(theirs, "theirs")
    done = await mine.consolidate(as_of=later(gone, 100))
    assert done.deleted == [gone.id]
    assert (await theirs.read(stays.id)).memory == stays


async def test_an_expired_correction_takes_its_whole_lineage_with_it(db_path: Path) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope()
        first = await note(scope, "the build uses node 18", event_id="e1")
        second = await scope.correct(first.id, "the build uses node wombat2024")
        third = await scope.correct(second.memory.id, "the build uses node numbat2025")
        bystander = await note(scope, "the deploy runs on fridays")
        await scope.save_checkpoint(
            SESSION,
            goal="upgrade node",
            covered_seq=(await scope.read(third.correction_event_id)).event.seq,
        )
        preview = await scope.consolidate(as_of=later(first, 12), dry_run=True)
        assert preview.deleted == []  # not expired yet: the lineage stays whole
        done = await scope.consolidate(as_of=later(first, 25))
        assert done.deleted == [third.memory.id, second.memory.id, first.id, bystander.id]
        for event_id in (second.correction_event_id, third.correction_event_id):
            with pytest.raises(amem.NotFound):
                await scope.read(event_id)
        original = await scope.read("e1")
        assert (original.text, original.event.status, original.memories) == (
            "the build uses node 18",
            "amended",
            [],
        )
        assert (await scope.recall("numbat2025")).items == []
        checkpoint = await scope.checkpoint(SESSION)
        assert checkpoint is not None
        assert checkpoint.covered_seq is None  # the event it covered is gone
        report = await mem.doctor()
        assert report.ok, [c for c in report.checks if not c.ok]
    assert rows(db_path, "select count(*) from memories") == [(0,)]
    assert rows(db_path, "select count(*) from relations") == [(0,)]
    assert rows(db_path, "select id from events where category = 'correction'") == []
    data = file_bytes(db_path)
    for marker in (b"wombat2024", b"numbat2025"):
        assert marker not in data, marker


async def test_a_pinned_correction_graduates_with_its_lineage(scope: amem.Scope) -> None:
    first = await note(scope, "the build uses node 18")
    fixed = await scope.correct(first.id, "the build uses node 20")
    await scope.pin(fixed.memory.id)
    done = await scope.consolidate(as_of=later(first, 25))
    assert (done.deleted, [p.id for p in done.promotions]) == ([], [fixed.memory.id])
    page = await scope.read(fixed.correction_event_id)
    assert [m.id for m in page.memories] == [fixed.memory.id]
    listed = await scope.list(include_revoked=True)
    assert {m.id for m in listed.items} == {first.id, fixed.memory.id}


def orphaned(db_path: Path, memory_id: str) -> None:
    """Make, around amem, what consolidate used to leave when a corrected note expired: the
    correction's memory and its link gone, its event and the revoked original left."""
    with closing(sqlite3.connect(db_path)) as conn, conn:
        conn.execute("delete from relations where from_id = ?", (memory_id,))
        conn.execute("delete from search_docs where ref = ?", (memory_id,))
        conn.execute("delete from memories where id = ?", (memory_id,))


async def test_doctor_reports_orphans_and_the_command_exits_1(db_path: Path) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope()
        first = await note(scope, "the build uses node 18")
        fixed = await scope.correct(first.id, "the build uses node 20")
        assert (await mem.doctor()).ok
    orphaned(db_path, fixed.memory.id)
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        report = await mem.doctor(rebuild_index=True)  # the index is not what is wrong
    [check] = [c for c in report.checks if c.name == "orphans"]
    assert not report.ok
    assert (check.ok, check.severity) == (False, "error")
    assert f"1 correction events without their memory (first: {fixed.correction_event_id})" in (
        check.detail
    )
    assert f"1 memories revoked by a correction without the link to it (first: {first.id})" in (
        check.detail
    )
    assert check.fix is not None
    assert "amem delete" in check.fix
    done = await anyio.to_thread.run_sync(amem_cli, "doctor", "--db", db_path)
    assert done.returncode == 1, done.stderr
    assert "FAIL  orphans: 1 correction events without their memory" in done.stdout


async def test_doctor_reports_links_and_memories_pointing_at_nothing(db_path: Path) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope()
        kept = await note(scope, "the deploy runs on fridays", event_id="e1")
        lost = await note(scope, "the cache is cold", event_id="e2")
        await scope.relate(kept.id, lost.id)
    with closing(sqlite3.connect(db_path)) as conn, conn:  # foreign keys off: around amem
        conn.execute("delete from search_docs where ref in ('e2', ?)", (lost.id,))
        conn.execute("delete from events where id = 'e2'")
        conn.execute("delete from memories where id = ?", (kept.id,))
        conn.execute("delete from search_docs where ref = ?", (kept.id,))
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        report = await mem.doctor(rebuild_index=True)
    [check] = [c for c in report.checks if c.name == "orphans"]
    assert not check.ok
    assert f"1 links pointing at no memory (first: {kept.id})" in check.detail
    assert f"1 memories whose source event is gone (first: {lost.id})" in check.detail


# --- compacting a session's working notes -----------------------------------------------------


async def test_compact_working_keeps_pinned_and_newest_and_folds_the_rest(
    scope: amem.Scope,
) -> None:
    notes = [await note(scope, f"step {n}: checked shard {n}") for n in range(6)]
    elsewhere = await note(scope, "a note of another session", session="task-2")
    lasting = await note(scope, "User wants a weekly report", tier=None, kind="preference")
    await scope.pin(notes[1].id)
    preview = await scope.compact_working(SESSION, keep=2, dry_run=True)
    done = await scope.compact_working(SESSION, keep=2)
    folded = [notes[0].id, notes[2].id, notes[3].id]
    assert preview.dry_run
    assert preview.memory is None
    assert preview.event_id is None
    assert preview.folded == done.folded == folded
    assert sorted(done.kept) == sorted([notes[1].id, notes[4].id, notes[5].id])
    memory = done.memory
    assert memory is not None
    assert done.event_id == memory.event_id
    assert (memory.tier, memory.kind, memory.basis) == ("episodic", "episode", "inference")
    # the memory quotes its event exactly, and the event holds every folded note's words
    page = await scope.read(memory.id, limit=100_000)
    assert page.text == memory.quote
    assert memory.quote_start == 0
    assert page.event.role == "system"
    assert page.event.session == SESSION
    assert page.event.source == "amem:compaction"
    for n in (0, 2, 3):
        assert f"- {notes[n].id}: {notes[n].text}" in page.text.splitlines()
    for n in (1, 4, 5):
        assert notes[n].id not in page.text
    assert memory.valid_at == notes[0].valid_at
    # linked to each folded note, which is revoked (kept for audit) and out of recall
    listed = await scope.list(include_revoked=True, limit=100)
    revoked = {m.id for m in listed.items if m.revoked}
    assert revoked == set(folded)
    working = await scope.list(tier="working")
    assert {m.id for m in working.items} == {*done.kept, elsewhere.id}
    hits = await scope.recall("shard 2")
    assert hits.items[0].id == memory.id
    assert not {item.id for item in hits.items} & set(folded)
    assert (await scope.read(lasting.id)).memory == lasting
    # a second compaction has nothing to fold
    again = await scope.compact_working(SESSION, keep=2)
    assert (again.folded, again.memory, again.event_id) == ([], None, None)
    assert sorted(again.kept) == sorted(done.kept)


async def test_compaction_links_and_reasons_name_the_new_memory(
    scope: amem.Scope, db_path: Path
) -> None:
    notes = [await note(scope, f"try option {n}") for n in range(3)]
    done = await scope.compact_working(SESSION, keep=0)
    assert done.memory is not None
    assert done.folded == [n.id for n in notes]
    links = rows(db_path, "select from_id, to_id, kind from relations order by to_id")
    assert sorted(links) == sorted((done.memory.id, n.id, "related") for n in notes)
    reasons = rows(
        db_path, "select distinct revoke_reason from memories where revoked_at is not null"
    )
    assert reasons == [(f"compacted into {done.memory.id}",)]
    assert done.memory.confidence == min(n.confidence for n in notes)


async def test_compacting_nothing_writes_nothing(scope: amem.Scope, db_path: Path) -> None:
    kept = [await note(scope, f"note {n}") for n in range(3)]
    before = (
        rows(db_path, "select count(*) from events"),
        rows(db_path, "select * from memories"),
    )
    done = await scope.compact_working(SESSION, keep=3)
    empty = await scope.compact_working("no-such-session")
    assert (done.folded, done.memory) == ([], None)
    assert sorted(done.kept) == sorted(m.id for m in kept)
    assert (empty.kept, empty.folded) == ([], [])
    after = (
        rows(db_path, "select count(*) from events"),
        rows(db_path, "select * from memories"),
    )
    assert after == before
    with pytest.raises(amem.InvalidInput):
        await scope.compact_working(SESSION, keep=-1)


async def test_a_compacted_memory_survives_consolidation(scope: amem.Scope) -> None:
    notes = [await note(scope, f"trace {n}") for n in range(3)]
    done = await scope.compact_working(SESSION, keep=1)
    assert done.memory is not None
    consolidated = await scope.consolidate(as_of=later(notes[-1], 100))
    assert consolidated.deleted == [notes[-1].id]  # the kept note expired; folded ones are revoked
    assert (await scope.read(done.memory.id)).memory == done.memory


# --- MCP and the command line -------------------------------------------------------------


@pytest.mark.both_backends
async def test_mcp_tools_pin_consolidate_and_compact(anyio_backend: str, tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    async with connect(db, other(anyio_backend), tmp_path / "server.log") as s:
        ids = []
        for n in range(4):
            text = f"scratch {n}: 检查第{n}个分片"
            await ok(s, "event_submit", text=text, role="user", event_id=f"w{n}", session=SESSION)
            draft = memory_draft(text, text, "observation", tier="working")
            added = await ok(s, "memory_add", event_id=f"w{n}", memories=[draft])
            assert added["memories"][0]["tier"] == "working"
            ids += added["memory_ids"]
        pinned = await ok(s, "memory_pin", memory_id=ids[0])
        assert pinned["pinned"] is True
        assert (await ok(s, "memory_pin", memory_id=ids[0]))["pinned"] is True
        [hit] = (await ok(s, "memory_recall", query="scratch 0"))["items"][:1]
        assert (hit["id"], hit["tier"], hit["pinned"]) == (ids[0], "working", True)
        listed = await ok(s, "memory_list", tier="working")
        assert {item["id"] for item in listed["items"]} == set(ids)
        preview = await ok(s, "memory_compact_working", session=SESSION, keep=1, dry_run=True)
        assert preview["folded"] == ids[1:3]
        assert preview["memory"] is None
        done = await ok(s, "memory_compact_working", session=SESSION, keep=1)
        assert done["folded"] == ids[1:3]
        assert done["memory"]["tier"] == "episodic"
        again = await ok(s, "memory_compact_working", session=SESSION, keep=1)
        assert again["folded"] == []
        consolidated = await ok(s, "memory_consolidate", dry_run=True)
        assert consolidated == {**consolidated, "dry_run": True, "deleted": [], "promotions": []}
        assert await refused(s, "memory_pin", {"memory_id": "mem_" + MARKER}) == "not_found"
        assert await refused(s, "memory_compact_working", {"session": SESSION, "keep": -1}) == (
            "invalid_input"
        )
        unpinned = await ok(s, "memory_pin", memory_id=ids[0], pinned=False)
        assert unpinned["pinned"] is False


def test_cli_pin_consolidate_and_compact_working(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "m.db")]
    stored = []
    for n in range(3):
        stored.append(
            json.loads(cli_ok("submit", f"note {n}", "--session", SESSION, *db, "--json"))
        )

    async def add_notes() -> list[str]:
        async with amem.open(tmp_path / "m.db", settings=amem.Settings()) as mem:
            scope = mem.scope()
            ids = []
            for receipt in stored:
                text = f"note {receipt['seq'] - 1}"
                draft = memory_draft(text, text, "observation", tier="working")
                [memory] = await scope.add_memories(receipt["event_id"], [draft])
                ids.append(memory.id)
            return ids

    ids = anyio.run(add_notes)
    assert cli_ok("pin", ids[0], *db).startswith(f"{ids[0]} is pinned (working)")
    listed = cli_ok("list", "--tier", "working", *db)
    assert "[working] [pinned]" in listed
    assert json.loads(cli_ok("pin", ids[0], "--unpin", *db, "--json"))["pinned"] is False
    preview = cli_ok("compact-working", SESSION, "--keep", "1", "--dry-run", *db)
    assert preview.splitlines() == [
        "would fold 2 working notes; 1 stay",
        "(dry run: nothing was changed)",
    ]
    folded = json.loads(cli_ok("compact-working", SESSION, "--keep", "1", *db, "--json"))
    assert folded["folded"] == ids[:2]
    again = cli_ok("compact-working", SESSION, "--keep", "1", *db)
    assert again.strip() == f"nothing to fold: 1 working notes of {SESSION} stay"
    consolidated = cli_ok("consolidate", "--dry-run", *db)
    assert (
        consolidated.splitlines()[0]
        == "would delete 0 expired working notes, would promote 0 memories"
    )
    previewed = json.loads(cli_ok("consolidate", *db, "--json"))  # a preview unless --yes
    assert previewed["dry_run"] is True
    done = json.loads(cli_ok("consolidate", "--yes", *db, "--json"))
    assert (done["dry_run"], done["deleted"], done["promotions"]) == (False, [], [])
    bad = amem_cli("pin", "mem_nope", *db)
    assert bad.returncode == 1
    assert bad.stderr.startswith("amem: error: not_found")


async def test_an_archive_carries_tiers_pins_and_ttls(tmp_path: Path) -> None:
    async with amem.open(tmp_path / "a.db", settings=amem.Settings()) as mem:
        scope = mem.scope()
        working = await note(scope, "scratch to carry")
        await scope.pin(working.id)
        profile = await note(scope, "User speaks Dutch", tier=None, kind="fact")
        await mem.export(tmp_path / "out.jsonl")
    async with amem.open(tmp_path / "b.db", settings=amem.Settings()) as mem:
        await mem.import_archive(tmp_path / "out.jsonl")
        scope = mem.scope()
        copied = [(await scope.read(m.id)).memory for m in (working, profile)]
    assert copied == [working.model_copy(update={"pinned": True}), profile]


async def test_a_refused_compaction_writes_nothing(scope: amem.Scope, db_path: Path) -> None:
    notes = [await note(scope, f"probe {n}") for n in range(3)]
    await scope.set_limits(max_events=3)  # the compaction event would be the fourth
    before = rows(db_path, "select * from memories"), rows(db_path, "select * from events")
    with pytest.raises(amem.StorageError) as caught:
        await scope.compact_working(SESSION, keep=0)
    assert caught.value.code == "capacity_exceeded"
    after = rows(db_path, "select * from memories"), rows(db_path, "select * from events")
    assert after == before
    assert {m.id for m in (await scope.list(tier="working")).items} == {n.id for n in notes}


async def test_notes_too_long_for_one_event_are_folded_over_several_calls(
    scope: amem.Scope,
) -> None:
    notes = [await note(scope, f"{n:02d} " + "长" * 1_990) for n in range(55)]
    first = await scope.compact_working(SESSION, keep=0)
    assert first.memory is not None
    assert 40 < len(first.folded) < 55
    assert first.folded == [n.id for n in notes[: len(first.folded)]]
    event = await scope.read(first.event_id or "", limit=100_000)
    assert event.total_chars <= 100_000
    assert first.memory.quote == event.text
    second = await scope.compact_working(SESSION, keep=0)
    assert first.folded + second.folded == [n.id for n in notes]
    third = await scope.compact_working(SESSION, keep=0)
    assert (third.folded, third.kept) == ([], [])
