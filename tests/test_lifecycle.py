"""Correction, permanent deletion, relations and checkpoints."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import amem

pytestmark = pytest.mark.anyio

JAN, JUN, SEP = "2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z", "2026-09-01T00:00:00Z"


async def remember(
    scope: amem.Scope, event_id: str, text: str, quote: str, *, at: str = JAN, **draft: object
) -> amem.MemoryRecord:
    await scope.submit_event(text, role="user", event_id=event_id, session="s", occurred_at=at)
    fields = {"text": f"User said: {quote}", "quote": quote, "kind": "fact",
              "basis": "user_statement", **draft}  # fmt: skip
    [memory] = await scope.add_memories(event_id, [fields])
    return memory


async def test_correction_replaces_the_mistaken_memory(scope: amem.Scope) -> None:
    wrong = await remember(scope, "e-1", "I live in Suzhou", "Suzhou",
                           subject="user", fact_key="residence")  # fmt: skip
    fixed = await scope.correct(wrong.id, "User lives in Hangzhou", reason="misheard")
    assert fixed.revoked_id == wrong.id
    assert fixed.amended_event_id == "e-1"
    new = fixed.memory
    assert (new.text, new.quote, new.kind, new.basis, new.fact_key) == (
        "User lives in Hangzhou", "User lives in Hangzhou", "fact", "user_statement", "residence",
    )  # fmt: skip
    assert new.valid_at == wrong.valid_at  # an omitted valid_at keeps the old start
    source = await scope.read(fixed.correction_event_id)
    assert (source.event.category, source.event.role, source.event.session) == (
        "correction", "user", "s",
    )  # fmt: skip
    assert source.text == "User lives in Hangzhou"
    assert (await scope.read("e-1")).event.status == "amended"
    assert [i.id for i in (await scope.recall("lives", as_of=SEP)).items] == [new.id]


async def test_a_correction_records_its_lineage(db_path: Path, scope: amem.Scope) -> None:
    wrong = await remember(scope, "e-1", "I live in Suzhou", "Suzhou")
    fixed = await scope.correct(wrong.id, "User lives in Hangzhou", reason="misheard")
    conn = sqlite3.connect(db_path)
    rows = conn.execute("select from_id, to_id, kind, note from relations").fetchall()
    conn.close()
    assert rows == [(fixed.memory.id, wrong.id, "corrects", "misheard")]


async def test_a_correction_can_move_the_start(scope: amem.Scope) -> None:
    wrong = await remember(scope, "e-1", "I live in Suzhou", "Suzhou",
                           subject="user", fact_key="residence")  # fmt: skip
    fixed = await scope.correct(wrong.id, "User lives in Hangzhou", valid_at=JUN)
    assert fixed.memory.valid_at.isoformat() == "2026-06-01T00:00:00+00:00"
    assert (await scope.recall("Hangzhou", as_of="2026-03-01T00:00:00Z")).items == []


async def test_a_revoked_memory_never_comes_back(scope: amem.Scope) -> None:
    wrong = await remember(scope, "e-1", "I live in Suzhou", "Suzhou",
                           subject="user", fact_key="residence")  # fmt: skip
    other = await remember(scope, "e-2", "I like Suzhou noodles", "Suzhou noodles")
    await scope.correct(wrong.id, "User lives in Hangzhou")
    for history in (False, True):
        result = await scope.recall("Suzhou", as_of=SEP, include_history=history)
        assert wrong.id not in [item.id for item in result.items]
    with pytest.raises(amem.NotFound):
        await scope.read(wrong.id)
    with pytest.raises(amem.NotFound):
        await scope.correct(wrong.id, "again")
    with pytest.raises(amem.NotFound):
        await scope.relate(wrong.id, other.id)
    assert (await scope.read("e-1")).memories == []
    receipt = await scope.submit_event("I live in Suzhou", role="user", event_id="e-1",
                                       session="s")  # fmt: skip
    assert receipt.memory_ids == []


async def test_corrections_and_deletions_invalidate_the_scope_checkpoints(
    mem: amem.Memory,
) -> None:
    scope, elsewhere = mem.scope("a", "x"), mem.scope("a", "y")
    wrong = await remember(scope, "e-1", "I live in Suzhou", "Suzhou")
    for s in (scope, elsewhere):
        await s.save_checkpoint("s", goal="plan the move")
    await scope.correct(wrong.id, "User lives in Hangzhou")
    assert await scope.checkpoint("s") is None
    assert await elsewhere.checkpoint("s") is not None
    await scope.save_checkpoint("s", goal="plan the move again")
    removed = await scope.delete(event_id="e-1")
    assert removed.checkpoints_invalidated == 1
    assert await scope.checkpoint("s") is None


async def jazz_and_oslo(scope: amem.Scope) -> list[amem.MemoryRecord]:
    """One event ``e-1`` with two memories derived from it."""
    await scope.submit_event("I like jazz and live in Oslo", role="user", event_id="e-1")
    return await scope.add_memories(
        "e-1",
        [{"text": "User likes jazz", "quote": "jazz", "kind": "preference",
          "basis": "user_statement"},
         {"text": "User lives in Oslo", "quote": "Oslo", "kind": "fact",
          "basis": "user_statement"}],
    )  # fmt: skip


async def test_deleting_an_event_removes_everything_derived(
    db_path: Path, mem: amem.Memory
) -> None:
    scope = mem.scope()
    jazz, oslo = await jazz_and_oslo(scope)
    await mem._db.write(
        lambda c: c.execute(
            "insert into embeddings (memory_id, fingerprint, dim, vector, text_hash, created_at)"
            " values (?, 'fp', 1, x'00', 'h', '2026-01-01T00:00:00.000000Z')",
            (jazz.id,),
        )
    )
    removed = await scope.delete(event_id="e-1")
    assert removed.event_ids == ["e-1"]
    assert sorted(removed.memory_ids) == sorted([jazz.id, oslo.id])
    assert (removed.search_rows, removed.vectors, removed.relations) == (
        3,
        1,
        0,
    )  # 2 memories, 1 event
    with pytest.raises(amem.NotFound):
        await scope.read("e-1")
    assert (await scope.recall("jazz Oslo")).items == []
    conn = sqlite3.connect(db_path)
    counts = [conn.execute(f"select count(*) from {t}").fetchone()[0]
              for t in ("events", "memories", "embeddings", "search_docs")]  # fmt: skip
    conn.close()
    assert counts == [0, 0, 0, 0]


async def test_deleting_a_memory_removes_its_event_and_siblings(scope: amem.Scope) -> None:
    jazz, oslo = await jazz_and_oslo(scope)
    removed = await scope.delete(memory_id=oslo.id)
    assert removed.event_ids == ["e-1"]
    assert set(removed.memory_ids) == {jazz.id, oslo.id}


@pytest.mark.parametrize("start", ["original", "correction", "second correction"])
async def test_deletion_follows_the_correction_lineage_both_ways(
    scope: amem.Scope, start: str
) -> None:
    wrong = await remember(scope, "e-1", "I live in Suzhou", "Suzhou")
    first = await scope.correct(wrong.id, "User lives in Hangzhou")
    second = await scope.correct(first.memory.id, "User lives in Ningbo")
    bystander = await remember(scope, "e-2", "I like tea", "tea")
    target = {"original": {"event_id": "e-1"},
              "correction": {"memory_id": first.memory.id},
              "second correction": {"event_id": second.correction_event_id}}[start]  # fmt: skip
    removed = await scope.delete(**target)
    assert set(removed.event_ids) == {
        "e-1", first.correction_event_id, second.correction_event_id,
    }  # fmt: skip
    assert set(removed.memory_ids) == {wrong.id, first.memory.id, second.memory.id}
    assert removed.relations == 2
    assert [item.id for item in (await scope.recall("tea")).items] == [bystander.id]
    assert (await scope.recall("lives", include_history=True)).items == []


async def test_memories_linked_only_by_related_survive(scope: amem.Scope) -> None:
    doomed = await remember(scope, "e-1", "I like jazz", "jazz")
    kept = await remember(scope, "e-2", "I play the saxophone", "saxophone")
    await scope.relate(doomed.id, kept.id)
    removed = await scope.delete(memory_id=doomed.id)
    assert (removed.memory_ids, removed.relations) == ([doomed.id], 1)
    page = await scope.read(kept.id)
    assert page.memory == kept


async def test_delete_needs_exactly_one_target_in_scope(mem: amem.Memory) -> None:
    scope = mem.scope("a", "x")
    await scope.submit_event("hello", role="user", event_id="e-1")
    with pytest.raises(amem.InvalidInput):
        await scope.delete()
    with pytest.raises(amem.InvalidInput):
        await scope.delete(event_id="e-1", memory_id="m")
    with pytest.raises(amem.NotFound):
        await mem.scope("a", "y").delete(event_id="e-1")
    with pytest.raises(amem.NotFound):
        await scope.delete(memory_id="missing")
    assert (await scope.read("e-1")).text == "hello"


SECRET = "Zanzibar7731 我的秘密暗号是青龙偃月刀"


def file_bytes(db_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in db_path.parent.glob(db_path.name + "*"))


async def test_deleted_text_is_gone_from_the_database_file(db_path: Path) -> None:
    async with amem.open(db_path) as mem:
        scope = mem.scope()
        await scope.submit_event(f"Remember this: {SECRET}", role="user", event_id="secret")
        await scope.add_memories(
            "secret",
            [{"text": f"User's password hint is {SECRET}", "quote": SECRET, "kind": "fact",
              "basis": "user_statement"}],
        )  # fmt: skip
        for n in range(50):  # neighbours on the same pages, which must survive
            await scope.submit_event(f"ordinary note {n}", role="user")
        assert SECRET.encode() in file_bytes(db_path)  # the scan can see stored text
        assert b"zanzibar7731" in file_bytes(db_path)  # and the index term
        await scope.delete(event_id="secret")
        await scope.submit_event("after the delete", role="user")
    data = file_bytes(db_path)
    for needle in (SECRET, "Zanzibar7731", "zanzibar7731", "青龙偃月刀", "password hint"):
        assert needle.encode() not in data, needle
    assert b"ordinary note 49" in data


async def test_relations_stay_within_a_scope(mem: amem.Memory) -> None:
    a, b = mem.scope("p", "a"), mem.scope("p", "b")
    one = await remember(a, "e-1", "I like jazz", "jazz")
    two = await remember(a, "e-2", "I like blues", "blues")
    three = await remember(b, "e-3", "I like rock", "rock")
    link = await a.relate(one.id, two.id)
    assert (link.from_id, link.to_id, link.kind, link.persona, link.project) == (
        one.id, two.id, "related", "p", "a",
    )  # fmt: skip
    assert await a.relate(one.id, two.id) == link  # idempotent
    with pytest.raises(amem.NotFound):
        await a.relate(one.id, three.id)
    with pytest.raises(amem.NotFound):
        await b.relate(three.id, one.id)
    with pytest.raises(amem.InvalidInput):
        await a.relate(one.id, one.id)


async def test_checkpoints_record_the_host_task_state(scope: amem.Scope) -> None:
    receipt = await scope.submit_event("Let's ship v2", role="user", session="chat-7")
    saved = await scope.save_checkpoint(
        "chat-7", goal="ship v2", completed=["tests"], pending=["docs", "发布"],
        constraints=["no Friday deploys"], next_action="write docs", covered_seq=receipt.seq,
    )  # fmt: skip
    assert await scope.checkpoint("chat-7") == saved
    assert (saved.pending, saved.covered_seq, saved.session) == (
        ["docs", "发布"], receipt.seq, "chat-7",
    )  # fmt: skip
    newer = await scope.save_checkpoint("chat-7", goal="ship v2", completed=["tests", "docs"])
    assert await scope.checkpoint("chat-7") == newer
    assert await scope.checkpoint("other-session") is None


async def test_checkpoint_coverage_must_be_in_scope_and_session(mem: amem.Memory) -> None:
    scope = mem.scope("a", "x")
    here = await scope.submit_event("hello", role="user", session="chat-7")
    other_session = await scope.submit_event("hello", role="user", session="chat-8")
    other_scope = await mem.scope("a", "y").submit_event("hello", role="user", session="chat-7")
    for seq in (other_session.seq, other_scope.seq, here.seq + 100):
        with pytest.raises(amem.InvalidInput, match="covered_seq"):
            await scope.save_checkpoint("chat-7", goal="g", covered_seq=seq)
    assert await scope.checkpoint("chat-7") is None


@pytest.mark.parametrize(
    "kwargs",
    [{"goal": ""}, {"goal": "g", "pending": "not a list"}, {"goal": "g", "completed": [""]},
     {"goal": "g", "covered_seq": -1}],
)  # fmt: skip
async def test_bad_checkpoints_are_refused(scope: amem.Scope, kwargs: dict[str, object]) -> None:
    with pytest.raises(amem.InvalidInput):
        await scope.save_checkpoint("chat-7", **kwargs)  # type: ignore[arg-type]
