"""Persona versions: neutral default, append-only edits, rollback, history."""

from __future__ import annotations

import pytest

import amem
from amem.store.personas import NEUTRAL_PERSONA

# what the markers mean: tests/conftest.py
pytestmark = [pytest.mark.both_databases, pytest.mark.anyio, pytest.mark.one_backend]


async def test_reading_an_absent_persona_initialises_the_neutral_default(mem: amem.Memory) -> None:
    assert await mem.persona_history("assistant") == []
    persona = await mem.persona("assistant")
    assert (persona.persona, persona.version, persona.text) == ("assistant", 1, NEUTRAL_PERSONA)
    assert await mem.persona_history("assistant") == [persona]
    assert await mem.persona("assistant") == persona


async def test_set_appends_a_version_and_old_versions_stay_readable(mem: amem.Memory) -> None:
    v1 = await mem.set_persona("assistant", "You are 小助手, a cheerful guide.", note="first")
    v2 = await mem.set_persona("assistant", "You are a terse expert.")
    assert (v1.version, v2.version) == (1, 2)
    assert await mem.persona("assistant") == v2
    assert await mem.persona("assistant", version=1) == v1
    assert v1.note == "first"


async def test_rollback_appends_a_copy_of_the_old_version(mem: amem.Memory) -> None:
    v1 = await mem.set_persona("assistant", "version one")
    await mem.set_persona("assistant", "version two")
    v3 = await mem.rollback_persona("assistant", 1)
    assert (v3.version, v3.text) == (3, v1.text)
    assert v3.note == "rollback to version 1"
    history = await mem.persona_history("assistant")
    assert [p.text for p in history] == ["version one", "version two", "version one"]


async def test_unknown_versions_are_not_found(mem: amem.Memory) -> None:
    await mem.set_persona("assistant", "only version")
    with pytest.raises(amem.NotFound):
        await mem.persona("assistant", version=7)
    with pytest.raises(amem.NotFound):
        await mem.rollback_persona("assistant", 7)
    with pytest.raises(amem.NotFound):
        await mem.rollback_persona("nobody", 1)


async def test_personas_are_independent_of_each_other_and_of_projects(mem: amem.Memory) -> None:
    await mem.set_persona("a", "persona a")
    await mem.set_persona("b", "persona b")
    assert (await mem.persona("a")).text == "persona a"
    assert (await mem.persona("b")).version == 1


@pytest.mark.parametrize("text", ["", "x" * 20_001, "bad\x00"])
async def test_bad_persona_text_is_refused(mem: amem.Memory, text: str) -> None:
    with pytest.raises(amem.InvalidInput):
        await mem.set_persona("assistant", text)
    assert await mem.persona_history("assistant") == []
