"""Single-valued facts over time: half-open intervals, ordering, as_of and history."""

from __future__ import annotations

import pytest
from helpers import memory_draft

import amem

# what the markers mean: tests/conftest.py
pytestmark = [pytest.mark.both_databases, pytest.mark.anyio, pytest.mark.one_backend]

JAN, MAR, JUN, SEP = (f"2026-{m}-01T00:00:00Z" for m in ("01", "03", "06", "09"))


async def say_city(
    scope: amem.Scope, city: str, at: str, *, key: str = "residence", valid_at: str | None = None
) -> amem.MemoryRecord:
    """A user event naming ``city`` at ``at``, and the residence fact derived from it."""
    receipt = await scope.submit_event(f"I live in {city} now", role="user", occurred_at=at)
    draft = memory_draft(f"User lives in {city}", city, subject="user", fact_key=key)
    if valid_at:
        draft["valid_at"] = valid_at
    [memory] = await scope.add_memories(receipt.event_id, [draft])
    return memory


async def current(scope: amem.Scope, at: str, **kwargs: object) -> list[str]:
    result = await scope.recall("lives", as_of=at, limit=50, **kwargs)  # type: ignore[arg-type]
    return [item.text.removeprefix("User lives in ") for item in result.items]


async def test_a_new_fact_closes_the_earlier_interval(scope: amem.Scope) -> None:
    beijing = await say_city(scope, "Beijing", JAN)
    shanghai = await say_city(scope, "Shanghai", JUN)
    [beijing_now] = [m for m in (await scope.read(beijing.id)).memories if m.id == beijing.id]
    assert beijing_now.invalid_at == shanghai.valid_at
    assert await current(scope, MAR) == ["Beijing"]
    assert await current(scope, JUN) == ["Shanghai"]  # half-open: the old one ends at JUN
    assert await current(scope, SEP) == ["Shanghai"]


async def test_unknown_validity_starts_at_the_event_time(scope: amem.Scope) -> None:
    memory = await say_city(scope, "Oslo", "2026-02-03T04:05:06+02:00")
    assert memory.valid_at.isoformat() == "2026-02-03T02:05:06+00:00"
    assert await current(scope, "2026-02-03T02:05:05Z") == []
    assert await current(scope, "2026-02-03T02:05:06Z") == ["Oslo"]


async def test_a_late_historical_insert_lands_in_validity_order(scope: amem.Scope) -> None:
    await say_city(scope, "Beijing", JAN)
    await say_city(scope, "Hangzhou", SEP)
    shanghai = await say_city(scope, "Shanghai", "2026-11-30T00:00:00Z", valid_at=JUN)
    assert shanghai.invalid_at is not None
    assert shanghai.invalid_at.isoformat() == "2026-09-01T00:00:00+00:00"
    assert await current(scope, MAR) == ["Beijing"]
    assert await current(scope, "2026-07-01T00:00:00Z") == ["Shanghai"]
    assert await current(scope, "2026-10-01T00:00:00Z") == ["Hangzhou"]


async def test_equal_starts_break_ties_by_insertion(scope: amem.Scope) -> None:
    first = await say_city(scope, "Beijing", MAR)
    second = await say_city(scope, "Shanghai", MAR)
    assert await current(scope, MAR) == ["Shanghai"]
    history = await scope.recall("lives", as_of=SEP, include_history=True)
    [old] = [item for item in history.items if item.id == first.id]
    assert (old.valid_at, old.invalid_at, old.expired) == (first.valid_at, first.valid_at, True)
    assert second.invalid_at is None


async def test_future_facts_wait_for_their_start(scope: amem.Scope) -> None:
    await say_city(scope, "Beijing", JAN)
    await say_city(scope, "Mars Base", JAN, valid_at="2099-01-01T00:00:00Z")
    assert await current(scope, SEP) == ["Beijing"]
    assert await current(scope, SEP, include_history=True) == ["Beijing"]
    assert await current(scope, "2099-06-01T00:00:00Z") == ["Mars Base"]
    assert "Mars Base" not in [i.text for i in (await scope.recall("lives")).items]


async def test_history_returns_expired_facts_marked(scope: amem.Scope) -> None:
    await say_city(scope, "Beijing", JAN)
    await say_city(scope, "Shanghai", MAR)
    await say_city(scope, "Hangzhou", JUN)
    result = await scope.recall("lives", as_of=SEP, include_history=True)
    expired = {item.text.removeprefix("User lives in "): item.expired for item in result.items}
    assert expired == {"Beijing": True, "Shanghai": True, "Hangzhou": False}
    assert await current(scope, "2025-12-31T00:00:00Z", include_history=True) == []


async def test_deleting_a_successor_does_not_reopen_the_interval(scope: amem.Scope) -> None:
    beijing = await say_city(scope, "Beijing", JAN)
    shanghai = await say_city(scope, "Shanghai", JUN)
    await scope.delete(memory_id=shanghai.id)
    assert await current(scope, SEP) == []
    [item] = (await scope.recall("lives", as_of=SEP, include_history=True)).items
    assert (item.id, item.expired) == (beijing.id, True)


async def test_keys_subjects_and_unkeyed_memories_do_not_close_each_other(
    scope: amem.Scope,
) -> None:
    await say_city(scope, "Beijing", JAN)
    await say_city(scope, "Paris", MAR, key="office")
    await scope.submit_event("I like Lisbon", role="user", event_id="pref", occurred_at=JUN)
    await scope.add_memories(
        "pref",
        [memory_draft("User lives in spirit in Lisbon", "Lisbon", "preference")],
    )
    assert sorted(await current(scope, SEP)) == ["Beijing", "Paris", "spirit in Lisbon"]


async def test_scopes_keep_separate_chains(mem: amem.Memory) -> None:
    a, b = mem.scope("p", "a"), mem.scope("p", "b")
    await say_city(a, "Beijing", JAN)
    await say_city(b, "Shanghai", JUN)
    assert await current(a, SEP) == ["Beijing"]
    assert await current(b, SEP) == ["Shanghai"]


async def test_a_correction_keeps_its_place_among_equal_starts(scope: amem.Scope) -> None:
    paris = await say_city(scope, "Paris", MAR)
    rome = await say_city(scope, "Rome", MAR)  # inserted later: Rome is current
    fixed = await scope.correct(paris.id, "User lives in Parma")
    assert await current(scope, SEP) == ["Rome"]
    assert (fixed.memory.valid_at, fixed.memory.invalid_at) == (paris.valid_at, paris.valid_at)
    latest = await say_city(scope, "Milan", MAR)  # a new equal start still goes last
    assert await current(scope, SEP) == ["Milan"]
    assert rome.id not in [i.id for i in (await scope.recall("lives", as_of=SEP)).items]
    assert latest.invalid_at is None
