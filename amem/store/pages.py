"""Pages of original text: the event behind an event or memory ID, a page at a time."""

from __future__ import annotations

import sqlite3

from ..db.rules import CURRENT_MEMORY
from ..errors import NotFound
from ..models import Evidence, MemoryRecord
from .events import event_model, load_stored
from .facts import MEMORY_COLUMNS, load_memory, memory_from_row
from .tombstones import missing_event

SELECT_DERIVED = f"""
select {MEMORY_COLUMNS} from memories m where event_id = ? and {CURRENT_MEMORY} order by num
"""
IS_MEMORY = "select 1 from memories where id = ?"


def read_evidence(
    conn: sqlite3.Connection, persona: str, project: str, id: str, offset: int, limit: int
) -> Evidence:
    """Characters ``offset`` to ``offset + limit`` of the original event text.

    ``id`` is an event ID or a memory ID (then ``memory`` is set). IDs of other scopes and
    revoked memories read as absent.
    """
    memory: MemoryRecord | None = None
    event_id = id
    if conn.execute(IS_MEMORY, (id,)).fetchone() is not None:
        memory = load_memory(conn, persona, project, id)
        event_id = memory.event_id
    event = load_stored(conn, event_id)
    if event is None or (event.persona, event.project) != (persona, project):
        absent = "no event or memory with this id in this scope"
        if memory is None:
            raise missing_event(conn, persona, project, event_id, absent)
        raise NotFound(absent)
    end = offset + limit
    return Evidence(
        id=id,
        persona=persona,
        project=project,
        event=event_model(event),
        text=event.text[offset:end],
        offset=offset,
        limit=limit,
        total_chars=len(event.text),
        next_offset=end if end < len(event.text) else None,
        memory=memory,
        memories=[memory_from_row(r) for r in conn.execute(SELECT_DERIVED, (event_id,))],
    )
