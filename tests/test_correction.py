"""Correcting a mistaken memory: what is revoked, kept, linked and marked."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from helpers import remember

import amem

# what the markers mean: tests/conftest.py
pytestmark = [pytest.mark.both_databases, pytest.mark.anyio, pytest.mark.one_backend]

JUN, SEP = "2026-06-01T00:00:00Z", "2026-09-01T00:00:00Z"


async def user_fact(scope: amem.Scope, said: str, quote: str, key: str) -> amem.MemoryRecord:
    """Event ``e-1`` saying ``said``, and the user's fact under ``fact_key`` ``key`` quoting
    ``quote`` from it."""
    return await remember(scope, "e-1", said, quote, subject="user", fact_key=key)


async def test_correction_replaces_the_mistaken_memory(scope: amem.Scope) -> None:
    wrong = await user_fact(scope, "I live in Suzhou", "Suzhou", "residence")
    fixed = await scope.correct(wrong.id, "User lives in Hangzhou", reason="misheard")
    assert fixed.revoked_id == wrong.id
    assert fixed.amended_event_id == "e-1"
    new = fixed.memory
    assert (new.text, new.quote, new.kind, new.basis, new.fact_key) == (
        "User lives in Hangzhou",
        "User lives in Hangzhou",
        "fact",
        "user_statement",
        "residence",
    )
    assert new.valid_at == wrong.valid_at  # an omitted valid_at keeps the old start
    source = await scope.read(fixed.correction_event_id)
    # the host corrects the record: no one said these words in the conversation
    assert (source.event.category, source.event.role, source.event.session) == (
        "correction",
        "system",
        "s",
    )
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
    wrong = await user_fact(scope, "I live in Suzhou", "Suzhou", "residence")
    fixed = await scope.correct(wrong.id, "User lives in Hangzhou", valid_at=JUN)
    assert fixed.memory.valid_at.isoformat() == "2026-06-01T00:00:00+00:00"
    assert (await scope.recall("Hangzhou", as_of="2026-03-01T00:00:00Z")).items == []


async def test_a_revoked_memory_never_comes_back(scope: amem.Scope) -> None:
    wrong = await user_fact(scope, "I live in Suzhou", "Suzhou", "residence")
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
    receipt = await scope.submit_event("I live in Suzhou", role="user", event_id="e-1", session="s")
    assert receipt.memory_ids == []


async def test_a_corrected_message_is_found_as_history(scope: amem.Scope) -> None:
    wrong = await user_fact(scope, "I have a cat named Mochi", "a cat named Mochi", "pet")
    fixed = await scope.correct(wrong.id, "User has a cat named Mocha", reason="misspelt")
    assert (await scope.recall("Mochi", as_of=SEP)).items == []
    [said] = (await scope.recall("Mochi", as_of=SEP, include_history=True)).items
    assert (said.id, said.text, said.role, said.expired, said.raw_fallback) == (
        "e-1",
        "I have a cat named Mochi",
        "user",
        True,
        True,
    )
    assert said.corrected_by == [fixed.memory.id]
    assert [i.id for i in (await scope.recall("cat named", as_of=SEP)).items] == [fixed.memory.id]
    history = await scope.recall("cat named", as_of=SEP, include_history=True)
    assert [i.id for i in history.items] == [fixed.memory.id, "e-1"]  # the correction first
    assert [i.expired for i in history.items] == [False, True]


async def test_a_retracted_message_is_no_history(scope: amem.Scope) -> None:
    wrong = await remember(scope, "e-1", "I have a cat named Mochi", "a cat named Mochi")
    await scope.retract(wrong.id)
    for history in (False, True):
        assert (await scope.recall("Mochi", as_of=SEP, include_history=history)).items == []
