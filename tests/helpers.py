"""Helpers the test files share (each lives here once, never rewritten per file)."""

from __future__ import annotations

from pathlib import Path

import amem

JAN = "2026-01-01T00:00:00Z"


async def remember(
    scope: amem.Scope, event_id: str, text: str, quote: str, *, at: str = JAN, **draft: object
) -> amem.MemoryRecord:
    """A user event ``text`` in session ``s`` and one fact quoting ``quote`` from it."""
    await scope.submit_event(text, role="user", event_id=event_id, session="s", occurred_at=at)
    fields = {"text": f"User said: {quote}", "quote": quote, "kind": "fact",
              "basis": "user_statement", **draft}  # fmt: skip
    [memory] = await scope.add_memories(event_id, [fields])
    return memory


def file_bytes(db_path: Path) -> bytes:
    """The database file and its companions (-wal, -shm), as one byte string to scan."""
    return b"".join(p.read_bytes() for p in db_path.parent.glob(db_path.name + "*"))
