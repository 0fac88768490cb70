"""Explicit relations between memories, and the host's task checkpoints."""

from __future__ import annotations

import pytest
from helpers import remember

import amem

# what the markers mean: tests/conftest.py
pytestmark = [pytest.mark.both_databases, pytest.mark.anyio, pytest.mark.one_backend]


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


async def test_relations_stay_within_a_scope(mem: amem.Memory) -> None:
    a, b = mem.scope("p", "a"), mem.scope("p", "b")
    one = await remember(a, "e-1", "I like jazz", "jazz")
    two = await remember(a, "e-2", "I like blues", "blues")
    three = await remember(b, "e-3", "I like rock", "rock")
    link = await a.relate(one.id, two.id)
    assert (link.from_id, link.to_id, link.kind, link.persona, link.project) == (
        one.id,
        two.id,
        "related",
        "p",
        "a",
    )
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
        "chat-7",
        goal="ship v2",
        completed=["tests"],
        pending=["docs", "发布"],
        constraints=["no Friday deploys"],
        next_action="write docs",
        covered_seq=receipt.seq,
    )
    assert await scope.checkpoint("chat-7") == saved
    assert (saved.pending, saved.covered_seq, saved.session) == (
        ["docs", "发布"],
        receipt.seq,
        "chat-7",
    )
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
    [
        {"goal": ""},
        {"goal": "g", "pending": "not a list"},
        {"goal": "g", "completed": [""]},
        {"goal": "g", "covered_seq": -1},
    ],
)
async def test_bad_checkpoints_are_refused(scope: amem.Scope, kwargs: dict[str, object]) -> None:
    with pytest.raises(amem.InvalidInput):
        await scope.save_checkpoint("chat-7", **kwargs)  # type: ignore[arg-type]
