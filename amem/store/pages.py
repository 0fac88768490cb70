"""Reading original evidence: a page of the event behind an event or memory ID."""

from __future__ import annotations

import sqlite3

from ..errors import NotFound
from ..models import Evidence, MemoryRecord
from .events import SELECT_EVENT, event_from_row
from .facts import MEMORY_COLUMNS, load_memory, memory_from_row

SELECT_DERIVED = f"""
select {MEMORY_COLUMNS} from memories where event_id = ? and revoked_at is null order by num
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
    row = conn.execute(SELECT_EVENT, (event_id,)).fetchone()
    if row is None or (row[2], row[3]) != (persona, project):
        raise NotFound("no event or memory with this id in this scope")
    text: str = row[8]
    end = offset + limit
    return Evidence(
        id=id, persona=persona, project=project, event=event_from_row(row),
        text=text[offset:end], offset=offset, limit=limit, total_chars=len(text),
        next_offset=end if end < len(text) else None, memory=memory,
        memories=[memory_from_row(r) for r in conn.execute(SELECT_DERIVED, (event_id,))],
    )  # fmt: skip
