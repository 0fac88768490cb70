"""What the Python API refuses, and with which code: every time field takes the same
times, drafts need visible text, an empty scope name is never the default, and no
identifier holds a character that hides or reorders what it shows."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from helpers import memory_draft

import amem

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]  # see tests/conftest.py

OVERFLOWING = ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"]
"""Valid in their own offset, outside Python's years 1 to 9999 once turned into UTC."""

Call = Callable[[amem.Scope, object], Awaitable[object]]


async def add_draft(scope: amem.Scope, **fields: object) -> object:
    draft = memory_draft("User likes tea", "I like tea", "preference") | fields
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
    [
        {"text": "   "},
        {"text": "\n\t"},
        {"quote": " "},
        {"text": "User likes\x00 tea"},
        {"subject": "user\nname", "fact_key": "drink"},
        {"subject": "user", "fact_key": "drink\t"},
        {"gist": "tea\nand more"},
        {"gist": " tea"},
    ],
)
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


# --- identifiers show what they are ----------------------------------------------------------

HIDDEN = {
    "zero width space": "\u200b",
    "byte order mark": "\ufeff",
    "right-to-left override": "\u202e",
    "first strong isolate": "\u2068",
    "private use": "\ue000",
    "supplementary private use": "\U000f0041",
}
"""Characters of the categories no identifier holds now (format Cf, private use Co); control
characters (Cc) never passed."""


def spoofed(char: str) -> str:
    return f"Zq{char}xv"


async def first_event(scope: amem.Scope, text: str = "I like tea") -> None:
    await scope.submit_event(text, role="user", event_id="e-1", session="s-1")


NAME_FIELDS: dict[str, Call] = {
    "event_id": lambda s, n: s.submit_event("hi", role="user", event_id=n),  # type: ignore[arg-type]
    "session": lambda s, n: s.submit_event("hi", role="user", session=n),  # type: ignore[arg-type]
    "source": lambda s, n: s.submit_event("hi", role="user", source=n),  # type: ignore[arg-type]
    "instance": lambda s, n: s.host_ingest(
        n,  # type: ignore[arg-type]
        [{"event_id": "h-1", "role": "user", "text": "hi"}],
    ),
    "host entry event_id": lambda s, n: s.host_ingest(
        "laptop", [{"event_id": n, "role": "user", "text": "hi"}]
    ),
    "checkpoint session": lambda s, n: s.save_checkpoint(n, goal="book a hotel"),  # type: ignore[arg-type]
    "subject": lambda s, n: add_draft(s, subject=n, fact_key="drink"),
    "fact_key": lambda s, n: add_draft(s, subject="user", fact_key=n),
}


@pytest.mark.parametrize("char", HIDDEN.values(), ids=HIDDEN.keys())
@pytest.mark.parametrize("field", sorted(NAME_FIELDS))
async def test_identifiers_refuse_invisible_bidirectional_and_private_use_characters(
    scope: amem.Scope, field: str, char: str
) -> None:
    await first_event(scope)
    with pytest.raises(amem.InvalidInput) as caught:
        await NAME_FIELDS[field](scope, spoofed(char))
    assert caught.value.code == "invalid_input"
    assert field.split()[-1] in str(caught.value)  # it names the field ...
    assert "Zq" not in str(caught.value)  # ... never the value
    status = await scope.status()
    assert (sum(status.events.values()), status.memories) == (1, 0)


@pytest.mark.parametrize("char", HIDDEN.values(), ids=HIDDEN.keys())
@pytest.mark.parametrize("name", ["persona", "project"])
async def test_scope_names_refuse_them_too(mem: amem.Memory, name: str, char: str) -> None:
    with pytest.raises(amem.InvalidInput, match=f"^invalid_input: {name} must not contain cont"):
        mem.scope(**{name: spoofed(char)})


async def test_free_text_keeps_them_and_names_keep_every_visible_script(scope: amem.Scope) -> None:
    text = "مرحبا \u202eabc\u202c and a ZWJ family: 👨\u200d👩\u200d👧 \ue000"
    await scope.submit_event(text, role="user", event_id="小明-1", session="会话\u3000一")
    [memory] = await scope.add_memories(
        "小明-1",
        [
            memory_draft(
                "User greets in Arabic \u202b(مرحبا)\u202c", "مرحبا", "observation", subject="小明"
            )
        ],
    )
    assert (await scope.read("小明-1")).text == text
    assert memory.text == "User greets in Arabic \u202b(مرحبا)\u202c"
    [event] = (await scope.list("events")).items
    assert event.session == "会话\u3000一"  # an ideographic space is visible: a name may hold it
