"""Reads that show one state: a context pack is read in one snapshot (a write racing it is
in all of the pack or in none of it), and the read-only tools never write."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import dump

import amem
from amem.testing import database
from amem.tools.table import TOOLS, Served

pytestmark = pytest.mark.anyio

SESSION = "chat-1"


async def agree(scope: amem.Scope, event_id: str, day: str, at: str) -> None:
    """An event of the session, in the past (so a pack as of now shows it), and the
    agreement it states."""
    text = f"Let's meet on {day}s from now on"
    await scope.submit_event(text, role="user", session=SESSION, event_id=event_id, occurred_at=at)
    draft = {"text": f"Meetings are on {day}s", "quote": f"meet on {day}s"}
    await scope.add_memories(event_id, [draft | {"kind": "agreement", "basis": "user_statement"}])


def shown(pack: amem.ContextPack) -> tuple[list[str], list[str], list[str]]:
    """The texts of a pack's agreements, memories and recent events."""
    context = json.loads(pack.context)

    def texts(name: str) -> list[str]:
        return [item["text"] for item in context.get(name, [])]

    return texts("agreements"), texts("memories"), texts("recent_events")


async def test_a_write_racing_a_resume_is_in_all_of_its_pack_or_in_none(
    mem: amem.Memory, scope: amem.Scope, monkeypatch: pytest.MonkeyPatch
) -> None:
    await mem.set_persona(scope.persona, "A patient assistant.")
    await agree(scope, "e-1", "Friday", "2026-01-01T09:00:00Z")
    db = database(mem)
    read = db.read
    raced = []

    async def read_then_write(fn: Callable[[Any], Any]) -> Any:
        """Every read of the pack, then (once) a new agreement and event of its session."""
        result = await read(fn)
        if not raced:
            raced.append(True)
            await agree(scope, "e-2", "Monday", "2026-01-02T09:00:00Z")
        return result

    monkeypatch.setattr(db, "read", read_then_write)
    before = await scope.resume(SESSION, query="when do we meet")
    assert raced
    agreements, memories, events = shown(before)
    assert agreements == ["Meetings are on Fridays"]
    assert not any("Monday" in text for text in memories)
    assert events == ["Let's meet on Fridays from now on"]
    agreements, _, events = shown(await scope.resume(SESSION, query="when do we meet"))
    assert agreements == ["Meetings are on Mondays", "Meetings are on Fridays"]
    assert events[-1] == "Let's meet on Mondays from now on"


async def test_persona_get_and_session_resume_leave_a_new_file_as_it_was(db_path: Path) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        await mem.scope().submit_event("hello", role="user", session=SESSION)
        before = dump(db_path)
        served = Served(memory=mem, persona="assistant", project="default")
        persona_get, session_resume = TOOLS["persona_get"], TOOLS["session_resume"]
        assert persona_get.read_only
        assert session_resume.read_only
        persona = await persona_get.run(served, persona_get.args())
        assert await persona_get.run(served, persona_get.args()) == persona
        pack = await session_resume.run(served, session_resume.args(session=SESSION))
        assert dump(db_path) == before
        assert await mem.persona_history("assistant") == []
        assert await mem.persona("assistant") == (await mem.persona_history("assistant"))[0]
    assert (persona.version, persona.note) == (1, "neutral default")
    expected = {"id": "assistant", "version": 1, "text": persona.text}
    assert json.loads(pack["context"])["persona"] == expected
