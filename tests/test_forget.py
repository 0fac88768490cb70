"""Forgetting exactly what the user asks, and keeping it forgotten (issue 16).

- Retracting one memory: it leaves recall and packs, its siblings stay findable, its
  message's raw text never comes back; the row is kept for audit.
- Erasing with a preview: a dry run writes nothing and lists exactly what the deed removes.
- Bulk erase by session, time range, subject and fact key, the whole scope; in batches,
  re-runnable after an interruption.
- Erased stays erased: tombstones refuse the ID (Python, host capture, MCP), travel in
  archives, are applied on import and to an older backup.
- No bytes left: the erased text (checkpoints included) is gone from the file, its WAL
  and the FTS shadow tables; retracted text stays, by design.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import amem_cli, cli_ok, derive, dump, file_bytes, memory_draft, remember, rows
from mcp_client import MARKER, connect, ok, other, refused

import amem
from amem.cli.show import LINE_CHARS
from amem.store import erasure, tombstones
from amem.testing import database

# what the markers mean: tests/conftest.py
pytestmark = [pytest.mark.both_databases, pytest.mark.anyio, pytest.mark.one_backend]

CAT_AND_PEANUTS = "I have a cat named Mochi. 另外，我对花生过敏。"
SECRET = "Zanzibar7731 我的秘密暗号是青龙偃月刀"


async def cat_and_peanuts(scope: amem.Scope) -> tuple[amem.MemoryRecord, amem.MemoryRecord]:
    """The issue's message: one event, two memories (a cat, a peanut allergy)."""
    await scope.submit_event(CAT_AND_PEANUTS, role="user", event_id="m-1", session="chat")
    cat, allergy = await scope.add_memories(
        "m-1",
        [
            memory_draft("User has a cat named Mochi", "I have a cat named Mochi"),
            memory_draft("用户对花生过敏", "我对花生过敏", subject="user", fact_key="allergy"),
        ],
    )
    return cat, allergy


def ids(db_path: Path, table: str) -> set[str]:
    return {row[0] for row in rows(db_path, f"select id from {table}")}


def counts(db_path: Path) -> dict[str, int]:
    tables = ("relations", "vectors", "search_docs", "erased_events")
    found = {t: rows(db_path, f"select count(*) from {t}")[0][0] for t in tables}
    found["valid_checkpoints"] = rows(
        db_path, "select count(*) from checkpoints where invalidated_at is null"
    )[0][0]
    return found


async def add_vector(mem: amem.Memory, scope: amem.Scope, kind: str, ref: str) -> None:
    await database(mem).write(
        lambda c: c.execute(
            "insert into vectors (persona, project, doc_kind, ref, chunk, fingerprint, dim,"
            " vector, text_hash, created_at) values (?, ?, ?, ?, 0, 'fp', 1, ?, 'h',"
            " '2026-01-01T00:00:00.000000Z')",
            (scope.persona, scope.project, kind, ref, b"\x00"),
        )
    )


def fts_bytes(db_path: Path) -> bytes:
    """Every byte the FTS5 index keeps: its segments, its term index and its content."""
    queries = (
        "select block from search_fts_data",
        "select term from search_fts_idx",
        "select tokens from search_docs",
    )
    parts: list[bytes] = []
    for query in queries:
        for (value,) in rows(db_path, query):
            parts.append(value if isinstance(value, bytes) else str(value).encode())
    return b"".join(parts)


# --- retracting one memory ------------------------------------------------------------------


async def test_retracting_the_cat_keeps_the_peanut_allergy(
    db_path: Path, scope: amem.Scope
) -> None:
    cat, allergy = await cat_and_peanuts(scope)
    await scope.save_checkpoint("chat", goal="plan a visit", pending=["bring Mochi a toy"])

    done = await scope.retract(cat.id, reason="the user asked to forget the cat")
    assert (done.memory_id, done.event_id, done.already_revoked, done.event_amended) == (
        cat.id,
        "m-1",
        False,
        True,
    )
    assert done.sibling_ids == [allergy.id]
    assert (done.search_rows, done.checkpoints_invalidated) == (1, 1)

    # the sibling stays recallable by its own words
    hits = await scope.recall("花生")
    assert [item.id for item in hits.items] == [allergy.id]
    assert not any(item.raw_fallback for item in hits.items)
    # the cat is gone from recall, and its message's words are no key to anything
    for query in ("Mochi", "cat named Mochi", CAT_AND_PEANUTS):
        found = await scope.recall(query, include_history=True)
        assert all(item.id != cat.id and not item.raw_fallback for item in found.items), query
        assert all("Mochi" not in item.text for item in found.items), query
    with pytest.raises(amem.NotFound):
        await scope.read(cat.id)
    page = await scope.read("m-1")  # the message stays, for audit
    assert page.event.status == "amended"
    assert [m.id for m in page.memories] == [allergy.id]
    pack = await scope.resume("chat", query="Mochi cat 花生", budget=20_000)
    assert "Mochi" not in pack.context
    assert await scope.checkpoint("chat") is None  # invalidated, like a correction does

    # kept for audit, with its reason; not in the search index
    assert rows(db_path, "select revoke_reason from memories where id = ?", cat.id) == [
        ("the user asked to forget the cat",)
    ]
    assert rows(db_path, "select count(*) from search_docs where ref = ?", cat.id) == [(0,)]


async def test_a_lone_retracted_memory_does_not_come_back_as_raw_fallback(
    scope: amem.Scope,
) -> None:
    only = await remember(scope, "m-2", "My old phone number is 555-0199", "555-0199")
    await scope.submit_event("my phone number changed", role="user", event_id="m-3")
    await scope.retract(only.id)
    found = await scope.recall("phone number 555-0199")
    assert [item.id for item in found.items] == ["m-3"]  # an unrelated message, as raw fallback
    assert found.items[0].raw_fallback


async def test_retracting_again_changes_nothing(db_path: Path, scope: amem.Scope) -> None:
    cat, _ = await cat_and_peanuts(scope)
    first = await scope.retract(cat.id, reason="first")
    before = dump(db_path)
    again = await scope.retract(cat.id, reason="second")
    assert dump(db_path) == before
    assert (again.already_revoked, again.reason, again.revoked_at) == (
        True,
        "first",
        first.revoked_at,
    )
    assert (again.search_rows, again.vectors, again.checkpoints_invalidated) == (0, 0, 0)
    corrected = await remember(scope, "m-9", "I live in Suzhou", "Suzhou")
    fixed = await scope.correct(corrected.id, "User lives in Hangzhou")
    assert (await scope.retract(fixed.revoked_id)).already_revoked  # corrected is revoked too


async def test_retract_refuses_what_it_cannot_do_without_echoing(
    db_path: Path, mem: amem.Memory
) -> None:
    scope = mem.scope("a", "x")
    cat, _ = await cat_and_peanuts(scope)
    before = dump(db_path)
    for call, code in (
        (lambda: mem.scope("a", "y").retract(cat.id), "not_found"),
        (lambda: scope.retract(MARKER), "not_found"),
        (lambda: scope.retract(MARKER + "\n"), "invalid_input"),
        (lambda: scope.retract(cat.id, reason=MARKER * 200), "invalid_input"),
        (lambda: scope.retract(cat.id, reason=""), "invalid_input"),
    ):
        with pytest.raises(amem.AmemError) as caught:
            await call()
        assert caught.value.code == code
        assert MARKER not in str(caught.value)
    assert dump(db_path) == before


async def test_retracting_drops_the_memorys_vectors(mem: amem.Memory) -> None:
    scope = mem.scope()
    cat, allergy = await cat_and_peanuts(scope)
    await add_vector(mem, scope, "memory", cat.id)
    await add_vector(mem, scope, "memory", allergy.id)
    assert (await scope.retract(cat.id)).vectors == 1
    kept = await database(mem).read(lambda c: c.execute("select ref from vectors").fetchall())
    assert kept == [(allergy.id,)]


# --- erasing one message, with a preview ----------------------------------------------------


async def lineage_world(mem: amem.Memory, scope: amem.Scope) -> dict[str, Any]:
    """A message with two memories, one corrected, related to a bystander that survives;
    vectors and a checkpoint that covers the message."""
    cat, allergy = await cat_and_peanuts(scope)
    fixed = await scope.correct(cat.id, "User has a cat named Mocha", reason="misheard")
    bystander = await remember(scope, "m-2", "I like jazz", "jazz")
    await scope.relate(allergy.id, bystander.id)
    for kind, ref in (
        ("memory", allergy.id),
        ("memory", fixed.memory.id),
        ("event", "m-1"),
        ("memory", bystander.id),
    ):
        await add_vector(mem, scope, kind, ref)
    seq = (await scope.read("m-1")).event.seq
    await scope.save_checkpoint("chat", goal="feed Mocha", covered_seq=seq)
    return {"cat": cat, "allergy": allergy, "fixed": fixed, "bystander": bystander}


async def test_a_dry_run_writes_nothing_and_lists_what_the_deletion_removes(
    db_path: Path, mem: amem.Memory
) -> None:
    scope = mem.scope("assistant", "support")
    world = await lineage_world(mem, scope)
    before_dump, before_counts = dump(db_path), counts(db_path)
    events_before, memories_before = ids(db_path, "events"), ids(db_path, "memories")

    preview = await scope.delete(memory_id=world["allergy"].id, dry_run=True)
    assert dump(db_path) == before_dump  # every row of every table, the FTS ones included
    assert preview.dry_run
    assert preview.event_ids == ["m-1", world["fixed"].correction_event_id]
    assert set(preview.memory_ids) == {
        world["cat"].id,
        world["allergy"].id,
        world["fixed"].memory.id,
    }
    assert (preview.relations, preview.vectors, preview.checkpoints_invalidated) == (2, 3, 1)

    done = await scope.delete(memory_id=world["allergy"].id)
    assert done == preview.model_copy(update={"dry_run": False})
    after = counts(db_path)
    assert events_before - ids(db_path, "events") == set(done.event_ids)
    assert memories_before - ids(db_path, "memories") == set(done.memory_ids)
    assert before_counts["relations"] - after["relations"] == done.relations
    assert before_counts["vectors"] - after["vectors"] == done.vectors
    assert before_counts["search_docs"] - after["search_docs"] == done.search_rows
    assert before_counts["valid_checkpoints"] - after["valid_checkpoints"] == 1
    assert after["erased_events"] == len(done.event_ids)
    assert [i.id for i in (await scope.recall("jazz")).items] == [world["bystander"].id]


async def test_a_dry_run_of_a_missing_id_is_not_found(db_path: Path, scope: amem.Scope) -> None:
    await cat_and_peanuts(scope)
    with pytest.raises(amem.NotFound):
        await scope.delete(event_id="nope", dry_run=True)
    with pytest.raises(amem.InvalidInput):
        await scope.delete(event_id="m-1", dry_run="yes")  # type: ignore[arg-type]
    assert (await scope.read("m-1")).event.status == "extracted"


async def test_deletion_blanks_checkpoint_text_and_keeps_its_metadata(
    db_path: Path, scope: amem.Scope
) -> None:
    await scope.submit_event(f"the code is {SECRET}", role="user", event_id="s-1", session="t")
    covered = await scope.submit_event("later", role="user", event_id="s-2", session="t")
    await scope.save_checkpoint(
        "t",
        goal=f"use {SECRET}",
        completed=[SECRET],
        pending=[SECRET],
        constraints=[SECRET],
        next_action=SECRET,
        covered_seq=covered.seq,
    )
    await scope.save_checkpoint("other", goal="unrelated task")
    done = await scope.delete(event_id="s-1")
    assert (done.checkpoints_invalidated, done.checkpoints_cleared) == (2, 2)
    kept = rows(
        db_path,
        "select session, goal, completed, pending, constraints, next_action,"
        " covered_seq, created_at is not null, invalidated_at is not null"
        " from checkpoints order by num",
    )
    assert kept == [
        ("t", "", "[]", "[]", "[]", None, covered.seq, 1, 1),
        ("other", "", "[]", "[]", "[]", None, None, 1, 1),
    ]
    again = await scope.delete(event_id="s-2", dry_run=True)  # nothing left to blank
    assert (again.checkpoints_invalidated, again.checkpoints_cleared) == (0, 0)


# --- bulk erase ------------------------------------------------------------------------------


async def bulk_world(scope: amem.Scope, prefix: str = "") -> None:
    """Three sessions over three months; facts about the user's residence and pets. Event
    IDs start with ``prefix`` (IDs are unique across the database)."""
    plan = [
        ("j-1", "jan", "2026-01-10T09:00:00Z", "I live in Oslo", "Oslo", "residence"),
        ("j-2", "jan", "2026-01-20T09:00:00Z", "I have a dog", "dog", "pet"),
        ("f-1", "feb", "2026-02-10T09:00:00Z", "I moved to Bergen", "Bergen", "residence"),
        ("f-2", "feb", "2026-02-20T09:00:00Z", "my tea is oolong", "oolong", None),
        ("m-1", "mar", "2026-03-10T09:00:00Z", "I got a cat", "cat", "pet"),
    ]
    for event_id, session, at, text, quote, key in plan:
        await scope.submit_event(
            text, role="user", event_id=prefix + event_id, session=session, occurred_at=at
        )
        subject = "user" if key else None
        draft = memory_draft(f"User: {text}", quote, subject=subject, fact_key=key)
        await scope.add_memories(prefix + event_id, [draft])
    await scope.submit_event(
        "no memory here",
        role="user",
        event_id=prefix + "x-1",
        session="feb",
        occurred_at="2026-02-15T09:00:00Z",
    )


SELECTORS: dict[str, tuple[dict[str, Any], set[str]]] = {
    "session": ({"session": "feb"}, {"f-1", "f-2", "x-1"}),
    "since": ({"since": "2026-02-15T09:00:00Z"}, {"f-2", "m-1", "x-1"}),
    "until": ({"until": "2026-02-10T09:00:00Z"}, {"j-1", "j-2"}),
    "time range": (
        {"since": "2026-01-15T00:00:00Z", "until": "2026-02-16T00:00:00+00:00"},
        {"j-2", "f-1", "x-1"},
    ),
    "subject and fact key": ({"subject": "user", "fact_key": "residence"}, {"j-1", "f-1"}),
    "subject": ({"subject": "user"}, {"j-1", "j-2", "f-1", "m-1"}),
    "session and time": ({"session": "feb", "until": "2026-02-16T00:00:00Z"}, {"f-1", "x-1"}),
    "everything": ({"everything": True}, {"j-1", "j-2", "f-1", "f-2", "m-1", "x-1"}),
}


@pytest.mark.parametrize("selector", list(SELECTORS))
async def test_each_bulk_selector_erases_exactly_its_events(
    db_path: Path, mem: amem.Memory, selector: str
) -> None:
    scope = mem.scope("assistant", "support")
    await bulk_world(scope)
    elsewhere = mem.scope("assistant", "elsewhere")
    await bulk_world(elsewhere, "e/")
    arguments, expected = SELECTORS[selector]
    before_dump, before_ids = dump(db_path), ids(db_path, "events")

    preview = await scope.erase(**arguments, dry_run=True)
    assert dump(db_path) == before_dump
    assert (preview.dry_run, preview.batches) == (True, 0)
    assert set(preview.event_ids) == expected

    done = await scope.erase(**arguments)
    assert done == preview.model_copy(update={"dry_run": False, "batches": 1})
    assert before_ids - ids(db_path, "events") == expected
    assert (await elsewhere.erase(everything=True, dry_run=True)).events == 6  # untouched
    again = await scope.erase(**arguments)  # nothing left to erase
    assert (again.events, again.batches) == (0, 0)


async def test_bulk_erase_goes_in_batches_and_an_interrupted_one_can_run_again(
    db_path: Path, mem: amem.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(erasure, "BATCH_EVENTS", 3)
    scope = mem.scope()
    for n in range(10):
        await scope.submit_event(f"note {n}", role="user", event_id=f"n-{n}", session="s")
        draft = memory_draft(f"User noted {n}", f"note {n}")
        await scope.add_memories(f"n-{n}", [draft])
    await scope.submit_event("keep me", role="user", event_id="keep", session="other")
    preview = await scope.erase(session="s", dry_run=True)

    class Interrupted(Exception):
        pass

    def stop(done: int, total: int) -> None:
        raise Interrupted

    with pytest.raises(Interrupted):
        await scope.erase(session="s", progress=stop)  # stops after its first batch
    left = ids(db_path, "events")
    assert left == {f"n-{n}" for n in range(3, 10)} | {"keep"}
    assert len(ids(db_path, "memories")) == 7  # whole events went, with their memories
    assert (await mem.doctor()).ok

    seen: list[tuple[int, int]] = []
    rest = await scope.erase(session="s", progress=lambda d, t: seen.append((d, t)))
    assert (rest.events, rest.memories, rest.batches) == (7, 7, 3)
    assert seen == [(3, 7), (6, 7), (7, 7)]
    assert ids(db_path, "events") == {"keep"}
    assert preview.events == 10
    assert len(rows(db_path, "select * from erased_events")) == 10


async def test_a_huge_erasure_lists_capped_ids(
    mem: amem.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(erasure, "MAX_RECEIPT_IDS", 4)
    scope = mem.scope()
    for n in range(6):
        await scope.submit_event(f"note {n}", role="user", event_id=f"n-{n}")
    preview = await scope.erase(everything=True, dry_run=True)
    assert (preview.events, preview.event_ids, preview.ids_truncated) == (
        6,
        ["n-0", "n-1", "n-2", "n-3"],
        True,
    )


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({}, "invalid_input"),
        ({"dry_run": True}, "invalid_input"),
        ({"everything": True, "session": MARKER}, "invalid_input"),
        ({"fact_key": MARKER}, "invalid_input"),
        ({"session": MARKER + "\n"}, "invalid_input"),
        ({"subject": MARKER * 20}, "invalid_input"),
        ({"since": "2026-03-01T00:00:00Z", "until": "2026-02-01T00:00:00Z"}, "invalid_input"),
        ({"since": "2026-03-01T00:00:00"}, "invalid_time"),
        ({"until": MARKER}, "invalid_time"),
        ({"everything": "yes"}, "invalid_input"),
        ({"everything": True, "dry_run": "no"}, "invalid_input"),
    ],
)
async def test_bulk_erase_refuses_unclear_requests_without_echoing(
    db_path: Path, mem: amem.Memory, arguments: dict[str, Any], code: str
) -> None:
    scope = mem.scope()
    await bulk_world(scope)
    before = dump(db_path)
    with pytest.raises(amem.AmemError) as caught:
        await scope.erase(**arguments)
    assert caught.value.code == code
    assert MARKER not in str(caught.value)
    assert dump(db_path) == before


# --- erased stays erased ------------------------------------------------------------------


async def test_an_erased_event_id_is_refused_and_nothing_is_written(db_path: Path) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        await cat_and_peanuts(mem.scope("assistant", "support"))
        await mem.scope("assistant", "support").delete(event_id="m-1")
    before = dump(db_path)  # after the purge the deletion left for an idle moment
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope("assistant", "support")
        for text in (CAT_AND_PEANUTS, "something else entirely"):
            with pytest.raises(amem.Conflict) as caught:
                await scope.submit_event(text, role="user", event_id="m-1", session="chat")
            assert caught.value.code == "erased"
            assert "m-1" not in caught.value.message
            assert "Mochi" not in caught.value.message
        assert dump(db_path) == before
        assert (await scope.recall("Mochi")).items == []
        # the tombstone is per scope: the same ID elsewhere is a different event
        await mem.scope("assistant", "elsewhere").submit_event("hi", role="user", event_id="m-1")
    digest = tombstones.digest("assistant", "support", "m-1")
    assert rows(db_path, "select digest from erased_events") == [(digest,)]


@pytest.mark.parametrize(
    ("persona", "project", "event_id"),
    [("assistant", "support", "m-1"), ("用户", 'p"q', "line\nbreak\\\u2028"), ("\x00", "", "😀")],
)
def test_a_tombstone_is_the_sha256_of_its_scope_and_id_as_compact_json(
    persona: str, project: str, event_id: str
) -> None:
    """The form every file and archive already holds: a new way of computing it must
    give the same bytes, or erased IDs could be stored again."""
    key = json.dumps([persona, project, event_id], ensure_ascii=False, separators=(",", ":"))
    expected = hashlib.sha256(key.encode("utf-8")).hexdigest()
    assert tombstones.digest(persona, project, event_id) == expected


async def test_host_replay_skips_and_reports_erased_entries(
    db_path: Path, scope: amem.Scope
) -> None:
    entries = [
        {"event_id": f"h-{n}", "text": f"turn {n}", "role": "user", "session": "s"}
        for n in range(4)
    ]
    await scope.host_ingest("laptop", entries[:2])
    await scope.erase(session="s")
    # a host that lost its cursor (a fresh instance) replays its outbox: erased stays erased
    replay = await scope.host_ingest("desktop", entries)
    assert (replay.erased, replay.stored, replay.cursor) == (["h-0", "h-1"], ["h-2", "h-3"], 4)
    whole = await scope.capture_transcript("phone", entries)
    assert (whole.erased, whole.duplicates) == (["h-0", "h-1"], ["h-2", "h-3"])
    assert ids(db_path, "events") == {"h-2", "h-3"}


@pytest.mark.both_backends
async def test_an_erased_event_is_refused_over_mcp(anyio_backend: str, tmp_path: Path) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        await ok(s, "event_submit", text=CAT_AND_PEANUTS, role="user", event_id="m-1")
        added = await ok(
            s,
            "memory_add",
            event_id="m-1",
            memories=[
                memory_draft("User has a cat named Mochi", "I have a cat named Mochi"),
                memory_draft("用户对花生过敏", "我对花生过敏"),
            ],
        )
        cat, allergy = added["memory_ids"]
        retracted = await ok(s, "memory_retract", memory_id=cat, reason="forget the cat")
        assert (retracted["sibling_ids"], retracted["already_revoked"]) == ([allergy], False)
        assert (await ok(s, "memory_retract", memory_id=cat))["already_revoked"] is True
        hits = await ok(s, "memory_recall", query="花生")
        assert [item["id"] for item in hits["items"]] == [allergy]

        preview = await ok(s, "memory_delete", event_id="m-1", dry_run=True)
        assert (preview["dry_run"], preview["memory_ids"]) == (True, [cat, allergy])
        assert (await ok(s, "memory_read", id="m-1"))["event"]["id"] == "m-1"  # still there
        gone = await ok(s, "memory_delete", event_id="m-1")
        assert gone == {**preview, "dry_run": False}
        assert (
            await refused(
                s, "event_submit", {"text": CAT_AND_PEANUTS, "role": "user", "event_id": "m-1"}
            )
            == "erased"
        )
        assert await refused(s, "memory_retract", {"memory_id": MARKER}) == "not_found"
        assert await refused(s, "memory_retract", {"reason": "x"}) == "invalid_input"
        too_long = {"memory_id": allergy, "reason": MARKER * 100}
        assert await refused(s, "memory_retract", too_long) == "invalid_input"
        assert await refused(s, "memory_delete", {"event_id": "m-1", "dry_run": MARKER}) == (
            "invalid_input"
        )


# --- tombstones in archives and backups ----------------------------------------------------


async def test_tombstones_travel_in_archives_and_backups(tmp_path: Path) -> None:
    async with amem.open(tmp_path / "a.db", settings=amem.Settings()) as mem:
        scope = mem.scope("assistant", "support")
        await cat_and_peanuts(scope)
        await scope.submit_event("keep me", role="user", event_id="k-1")
        await scope.delete(event_id="m-1")
        exported = await mem.export(tmp_path / "a.jsonl")
        await mem.backup(tmp_path / "a.backup")
    assert exported.counts["erased_events"] == 1
    first_row = json.loads((tmp_path / "a.jsonl").read_text().splitlines()[1])
    assert first_row["table"] == "erased_events"
    assert set(first_row["row"]) == {"digest", "erased_at"}  # no content
    for name, load, source in (
        ("b.db", "import_archive", "a.jsonl"),
        ("c.db", "restore", "a.backup"),
    ):
        async with amem.open(tmp_path / name, settings=amem.Settings()) as mem:
            result = await getattr(mem, load)(tmp_path / source)
            assert result.counts["erased_events"] == 1
            with pytest.raises(amem.Conflict) as caught:
                await mem.scope("assistant", "support").submit_event(
                    CAT_AND_PEANUTS, role="user", event_id="m-1"
                )
            assert caught.value.code == "erased"
            assert (await mem.doctor()).ok


async def test_an_archive_holding_an_event_and_its_tombstone_leaves_the_event_out(
    tmp_path: Path,
) -> None:
    """An older export spliced with a newer one's tombstones: the event, its memories and
    their relations stay out; everything else comes in."""
    async with amem.open(tmp_path / "a.db", settings=amem.Settings()) as mem:
        scope = mem.scope("assistant", "support")
        _, allergy = await cat_and_peanuts(scope)
        jazz = await remember(scope, "k-1", "I like jazz", "jazz")
        await scope.relate(allergy.id, jazz.id)
        await mem.export(tmp_path / "old.jsonl")
        await scope.delete(event_id="m-1")
        await mem.export(tmp_path / "new.jsonl")
    old = (tmp_path / "old.jsonl").read_text().splitlines()
    buried = [
        line
        for line in (tmp_path / "new.jsonl").read_text().splitlines()
        if '"table":"erased_events"' in line
    ]
    end = json.loads(old[-1])
    spliced = [old[0], *buried, *old[1:-1], json.dumps({"end": True, "rows": end["rows"] + 1})]
    (tmp_path / "spliced.jsonl").write_text("\n".join(spliced) + "\n")
    async with amem.open(tmp_path / "b.db", settings=amem.Settings()) as mem:
        result = await mem.import_archive(tmp_path / "spliced.jsonl")
        assert result.skipped == {"events": 1, "memories": 2, "relations": 1}
        scope = mem.scope("assistant", "support")
        with pytest.raises(amem.NotFound):
            await scope.read("m-1")
        assert [i.id for i in (await scope.recall("jazz")).items] == [jazz.id]
        assert (await scope.recall("花生 Mochi")).items == []
        assert (await mem.doctor()).ok
    assert CAT_AND_PEANUTS.encode() not in file_bytes(tmp_path / "b.db")


async def test_tombstones_from_a_newer_export_erase_what_an_older_backup_brought_back(
    tmp_path: Path,
) -> None:
    async with amem.open(tmp_path / "live.db", settings=amem.Settings()) as mem:
        scope = mem.scope("assistant", "support")
        await cat_and_peanuts(scope)
        await scope.submit_event("keep me", role="user", event_id="k-1")
        await mem.scope("other", "place").submit_event("gone too", role="user", event_id="o-1")
        await mem.backup(tmp_path / "old.backup")  # before the user asked to forget
        await scope.delete(event_id="m-1")
        await mem.scope("other", "place").delete(event_id="o-1")
        await mem.export(tmp_path / "newer.jsonl")

    restored = tmp_path / "restored.db"
    async with amem.open(restored, settings=amem.Settings()) as mem:
        await mem.restore(tmp_path / "old.backup")
        assert (await mem.scope("assistant", "support").read("m-1")).text == CAT_AND_PEANUTS
        before = dump(restored)
        preview = await mem.import_tombstones(tmp_path / "newer.jsonl", dry_run=True)
        assert dump(restored) == before
        assert (preview.tombstones, preview.new, preview.dry_run) == (2, 2, True)
        assert [(e.persona, e.project, e.event_ids, e.dry_run) for e in preview.erasures] == [
            ("assistant", "support", ["m-1"], True),
            ("other", "place", ["o-1"], True),
        ]
        applied = await mem.import_tombstones(tmp_path / "newer.jsonl")
        assert [e.model_copy(update={"dry_run": True, "batches": 0}) for e in applied.erasures] == (
            preview.erasures
        )
        assert applied.new == 2
        again = await mem.import_tombstones(tmp_path / "newer.jsonl")
        assert (again.new, again.erasures) == (0, [])
        scope = mem.scope("assistant", "support")
        with pytest.raises(amem.Conflict):
            await scope.submit_event(CAT_AND_PEANUTS, role="user", event_id="m-1")
        assert (await scope.read("k-1")).text == "keep me"
        with pytest.raises(amem.AmemError) as caught:
            await mem.import_tombstones(tmp_path / "missing.jsonl")
        assert caught.value.code == "invalid_input"
        (tmp_path / "cut.jsonl").write_text(
            "\n".join((tmp_path / "newer.jsonl").read_text().splitlines()[:-1]) + "\n"
        )
        with pytest.raises(amem.StorageError) as caught:
            await mem.import_tombstones(tmp_path / "cut.jsonl")
        assert caught.value.code == "archive_invalid"
    assert CAT_AND_PEANUTS.encode() not in file_bytes(restored)


# --- no bytes left ------------------------------------------------------------------------


async def secret_world(scope: amem.Scope) -> None:
    await scope.submit_event(
        f"Remember this: {SECRET}", role="user", event_id="secret", session="vault"
    )
    await scope.add_memories(
        "secret",
        [memory_draft(f"User's password hint is {SECRET}", SECRET)],
    )
    await scope.save_checkpoint("vault", goal=f"never say {SECRET}", pending=[SECRET])
    for n in range(50):  # neighbours on the same pages, which must survive
        await scope.submit_event(f"ordinary note {n}", role="user", session="daily")


@pytest.mark.parametrize("how", ["delete", "erase by session", "erase everything"])
async def test_erased_text_is_gone_from_the_file_its_wal_and_the_index(
    db_path: Path, how: str
) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope()
        await secret_world(scope)
        assert SECRET.encode() in file_bytes(db_path)  # the scans can see stored text
        assert b"zanzibar7731" in fts_bytes(db_path)
        if how == "delete":
            await scope.delete(event_id="secret")
        elif how == "erase by session":
            await scope.erase(session="vault")
        else:
            await scope.erase(everything=True)
        await scope.submit_event("after the erasure", role="user")
    data, index_data = file_bytes(db_path), fts_bytes(db_path)
    for needle in (SECRET, "Zanzibar7731", "zanzibar7731", "青龙偃月刀", "password hint", "偃月"):
        assert needle.encode() not in data, needle
        assert needle.encode() not in index_data, needle
    assert (b"ordinary note 49" in data) == (how != "erase everything")
    assert b"after the erasure" in data


async def test_retracted_text_stays_for_audit(db_path: Path) -> None:
    """Retraction is not erasure: the memory's row (and its message) stay, by design."""
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope()
        await secret_world(scope)
        [memory] = (await scope.read("secret")).memories
        await scope.retract(memory.id)
        assert (await scope.recall("Zanzibar7731")).items == []
    assert f"User's password hint is {SECRET}".encode() in file_bytes(db_path)
    assert rows(db_path, "select count(*) from search_docs where ref = ?", memory.id) == [(0,)]


# --- the command line ----------------------------------------------------------------------


def cli_world(db: Path) -> dict[str, str]:
    async def build() -> dict[str, str]:
        async with amem.open(db, settings=amem.Settings()) as mem:
            scope = mem.scope()
            cat, allergy = await cat_and_peanuts(scope)
            wrong = await remember(scope, "r-1", "I live in Suzhou", "Suzhou")
            for n in range(3):
                await scope.submit_event(f"old note {n}", role="user", session="old")
            return {"cat": cat.id, "allergy": allergy.id, "wrong": wrong.id}

    return anyio.run(build)


def test_cli_delete_retract_correct(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    made = cli_world(db)
    base = ["--db", str(db)]

    result = amem_cli("retract", made["cat"], "--reason", "forget the cat", *base)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{made['cat']} retracted; event m-1 is amended")
    again = amem_cli("retract", made["cat"], *base, "--json")
    assert json.loads(again.stdout)["already_revoked"] is True

    result = amem_cli(
        "correct",
        made["wrong"],
        "User lives in Hangzhou",
        "--reason",
        "misheard",
        "--valid-at",
        "2026-01-01T00:00:00Z",
        *base,
        "--json",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["revoked_id"] == made["wrong"]

    before = dump(db)
    for preview in (["--dry-run"], []):  # a preview unless --yes
        result = amem_cli("delete", "--memory", made["allergy"], *preview, *base)
        assert result.returncode == 0, result.stderr
        head, counts, event, *memories, note = result.stdout.splitlines()
        assert head.startswith(
            f"memory {made['allergy']} came from event m-1: deleting it erases that whole "
            "message, with every memory derived from it"
        )
        assert counts.startswith("would erase 1 events, 2 memories")
        assert event == f"  event  m-1  user: {CAT_AND_PEANUTS}"
        assert sorted(memories) == sorted(
            [
                f"  memory {made['cat']}  (revoked)",  # retracted above: it goes too
                f"  memory {made['allergy']}  fact: 用户对花生过敏 (user/allergy)",
            ]
        )
        assert note == "(dry run: nothing was changed; add --yes to delete)"
        assert dump(db) == before
    result = amem_cli("delete", "--event", "m-1", "--json", *base)
    assert json.loads(result.stdout)["dry_run"] is True
    assert amem_cli("delete", "--event", "m-1", "--yes", "--dry-run", *base).returncode == 2
    assert dump(db) == before
    result = amem_cli("delete", "--event", "m-1", "--yes", *base, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["event_ids"] == ["m-1"]
    assert "m-1" not in ids(db, "events")

    for args, code in (
        (["delete", "--event", "m-1", "--yes"], "erased"),  # tombstones.missing_event
        (["delete", "--event", "m-1"], "erased"),
        (["delete", "--event", "m-2"], "not_found"),
        (["retract", MARKER], "not_found"),
        (["correct", made["cat"], "x"], "not_found"),
    ):
        result = amem_cli(*args, *base)
        assert result.returncode == 1
        assert f"amem: error: {code}" in result.stderr
        assert MARKER not in result.stderr
    result = amem_cli("delete", *base)  # --event or --memory is required
    assert result.returncode == 2


def test_cli_erase_is_a_dry_run_unless_yes(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    cli_world(db)
    base = ["--db", str(db)]
    before = dump(db)
    result = amem_cli("erase", "--session", "old", *base)
    assert result.returncode == 0, result.stderr
    counts, *events, note = result.stdout.splitlines()
    assert counts == (
        "default/default: would erase 3 events, 0 memories, 0 relations, 0 vectors, "
        "3 search rows; 0 checkpoints invalidated, 0 cleared"
    )
    for n, line in enumerate(events):  # what would go, listed
        assert re.fullmatch(rf"  event  evt_\w+  user: old note {n}", line), line
    assert len(events) == 3
    assert note == "(dry run: nothing was changed; add --yes to erase)"
    assert dump(db) == before
    result = amem_cli("erase", "--session", "old", "--yes", *base, "--json")
    assert result.returncode == 0, result.stderr
    receipt = json.loads(result.stdout)
    assert (receipt["dry_run"], receipt["events"], receipt["batches"]) == (False, 3, 1)
    assert "erase: 3/3" in result.stderr  # progress

    result = amem_cli("erase", *base)  # no selector: refused, nothing erased
    assert result.returncode == 1
    assert "amem: error: invalid_input" in result.stderr
    result = amem_cli("erase", "--since", MARKER, *base)
    assert "invalid_time" in result.stderr
    assert MARKER not in result.stderr


def test_cli_erase_applies_an_archives_tombstones(tmp_path: Path) -> None:
    live, restored = tmp_path / "live.db", tmp_path / "restored.db"
    cli_world(live)
    assert amem_cli("backup", "--db", str(live), str(tmp_path / "old.backup")).returncode == 0
    assert amem_cli("delete", "--event", "m-1", "--yes", "--db", str(live)).returncode == 0
    assert amem_cli("export", "--db", str(live), str(tmp_path / "new.jsonl")).returncode == 0
    assert amem_cli("restore", "--db", str(restored), str(tmp_path / "old.backup")).returncode == 0

    archive = str(tmp_path / "new.jsonl")
    result = amem_cli("erase", "--tombstones-from", archive, "--db", str(restored))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "1 tombstones in the archive, 1 new here"
    assert "would erase 1 events, 2 memories" in result.stdout
    assert f"  event  m-1  user: {CAT_AND_PEANUTS}" in result.stdout.splitlines()
    assert "m-1" in ids(restored, "events")
    result = amem_cli("erase", "--tombstones-from", archive, "--yes", "--db", str(restored))
    assert result.returncode == 0, result.stderr
    assert "m-1" not in ids(restored, "events")
    result = amem_cli(
        "erase", "--tombstones-from", archive, "--session", "x", "--db", str(restored)
    )
    assert result.returncode == 1
    assert "invalid_input" in result.stderr


def test_cli_erase_preview_lists_what_it_would_erase(tmp_path: Path) -> None:
    """The preview names each event and memory it would erase, with the start of its text
    and a memory's subject/fact_key (the values --subject and --fact-key select by), the
    first 20 of each, then how many more."""
    db = tmp_path / "m.db"
    long = "I moved to Hangzhou, " + "near the West Lake " * 20

    async def build() -> tuple[amem.MemoryRecord, amem.MemoryRecord]:
        async with amem.open(db, settings=amem.Settings()) as mem:
            scope = mem.scope()
            home = await derive(
                scope,
                long,
                "User lives in Hangzhou",
                "I moved to Hangzhou",
                event_id="h-1",
                subject="user",
                fact_key="residence",
            )
            tea = await derive(scope, "I like tea", "User likes tea", kind="preference")
            for n in range(25):
                await scope.submit_event(f"old note {n}", role="user", session="old")
            return home, tea

    home, tea = anyio.run(build)
    base = ["--db", str(db)]
    before = dump(db)
    out = cli_ok("erase", "--subject", "user", "--fact-key", "residence", *base).splitlines()
    event, memory, note = out[1:]
    assert event.startswith("  event  h-1  user: I moved to Hangzhou, near the West Lake")
    assert len(event.removeprefix("  event  h-1  user: ")) == LINE_CHARS  # cut, as listed
    assert event.endswith("…")
    assert memory == f"  memory {home.id}  fact: User lives in Hangzhou (user/residence)"
    assert note == "(dry run: nothing was changed; add --yes to erase)"
    assert tea.id not in "\n".join(out)

    out = cli_ok("erase", "--session", "old", *base).splitlines()
    assert len(out) == 1 + 20 + 1 + 1
    assert out[-2] == "  and 5 more events"
    assert dump(db) == before
