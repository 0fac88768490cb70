"""What the Python API refuses, and with which code: every time field takes the same
times, drafts need visible text, and an empty scope name is never the default."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

import amem

pytestmark = pytest.mark.anyio

OVERFLOWING = ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"]
"""Valid in their own offset, outside Python's years 1 to 9999 once turned into UTC."""

Call = Callable[[amem.Scope, object], Awaitable[object]]


async def add_draft(scope: amem.Scope, **fields: object) -> object:
    draft = {"text": "User likes tea", "quote": "I like tea", "kind": "preference",
             "basis": "user_statement"} | fields  # fmt: skip
    return await scope.add_memories("e-1", [draft])


async def correct_first(scope: amem.Scope, when: object) -> object:
    [memory] = await add_draft(scope)  # type: ignore[misc]
    return await scope.correct(memory.id, "User likes green tea", valid_at=when)  # type: ignore[arg-type]


TIME_FIELDS: dict[str, Call] = {
    "submit_event occurred_at": lambda s, t: s.submit_event(
        "x",
        role="user",
        occurred_at=t,  # type: ignore[arg-type]
    ),
    "recall as_of": lambda s, t: s.recall("tea", as_of=t),  # type: ignore[arg-type]
    "resume as_of": lambda s, t: s.resume("s-1", as_of=t),  # type: ignore[arg-type]
    "current_emotion as_of": lambda s, t: s.current_emotion(as_of=t),  # type: ignore[arg-type]
    "draft valid_at": lambda s, t: add_draft(s, valid_at=t),
    "draft invalid_at": lambda s, t: add_draft(s, invalid_at=t),
    "correct valid_at": correct_first,
}


@pytest.mark.parametrize("field", sorted(TIME_FIELDS))
@pytest.mark.parametrize("when", [*OVERFLOWING, 1767225600, "1767225600", "2026-01-01T00:00:00"])
async def test_every_time_field_refuses_the_same_times_as_invalid_time(
    scope: amem.Scope, field: str, when: object
) -> None:
    await scope.submit_event("I like tea", role="user", event_id="e-1", session="s-1")
    with pytest.raises(amem.InvalidInput) as caught:
        await TIME_FIELDS[field](scope, when)
    assert caught.value.code == "invalid_time"
    assert str(when) not in str(caught.value)


@pytest.mark.parametrize(
    "fields",
    [{"text": "   "}, {"text": "\n\t"}, {"quote": " "}, {"text": "User likes\x00 tea"},
     {"subject": "user\nname", "fact_key": "drink"}, {"subject": "user", "fact_key": "drink\t"},
     {"gist": "tea\nand more"}, {"gist": " tea"}],
)  # fmt: skip
async def test_drafts_need_visible_text_and_one_line_keys(
    scope: amem.Scope, fields: dict[str, object]
) -> None:
    await scope.submit_event("I like tea  and more", role="user", event_id="e-1")
    with pytest.raises(amem.InvalidInput) as caught:
        await add_draft(scope, **fields)
    assert caught.value.code == "invalid_input"
    assert (await scope.status()).memories == 0


@pytest.mark.parametrize("names", [{"persona": ""}, {"project": ""}])
async def test_an_empty_scope_name_is_refused_not_taken_for_the_default(
    mem: amem.Memory, names: dict[str, str]
) -> None:
    with pytest.raises(amem.InvalidInput, match="must not be empty"):
        mem.scope(**names)
