"""Extraction state in the store: which events wait for the model, and what an attempt
did to its event.

An attempt reads its pending event (``load_for_extraction``), the model is asked outside
any transaction (``llm.extraction``), then ``complete_extraction`` derives every memory
of the answer in one writer transaction through the one validation path
(``facts.derive_memories``), or marks the event failed; ``retry`` puts failed events back
in line (``mark_pending``).
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta

from pydantic import BaseModel

from ..errors import InvalidInput, StorageError
from ..models import MemoryDraft
from .events import EVENT_COLUMNS, StoredEvent, current_memory_ids
from .facts import derive_memories

SELECT_FOR_EXTRACTION = f"""
select {EVENT_COLUMNS} from events e
where id = ? and status = 'pending' and category = 'conversation'
"""
SELECT_STATE = "select persona, project, status from events where id = ?"
MARK_FAILED = """
update events set status = 'failed', error = ?, attempts = attempts + 1
where id = ? and status = 'pending'
"""
MARK_PENDING = """
update events set status = 'pending', error = null
where id = ? and persona = ? and project = ? and category = 'conversation'
  and status in ('stored', 'failed')
"""
SELECT_RETRYABLE = """
select id from events
where persona = ? and project = ? and category = 'conversation'
  and status in ('pending', 'failed')
order by seq
"""
SELECT_ERROR = "select error from events where id = ?"


class Outcome(BaseModel):
    """What one extraction attempt did to its event."""

    event_id: str
    status: str  # "extracted", "failed" or "skipped" (deleted, amended or not pending)
    memory_ids: list[str] = []
    new: bool = False
    """True when this attempt derived the memories (not a repeated completion)."""
    error: str | None = None


def load_for_extraction(conn: sqlite3.Connection, event_id: str) -> StoredEvent | None:
    row = conn.execute(SELECT_FOR_EXTRACTION, (event_id,)).fetchone()
    return None if row is None else StoredEvent(*row)


def complete_extraction(
    conn: sqlite3.Connection,
    event_id: str,
    drafts: list[MemoryDraft],
    segmented: list[str],
    now: str,
    working_ttl: timedelta,
) -> Outcome:
    """Validate the whole answer and derive every memory in this one transaction.

    An event already extracted returns its memory IDs (a repeated completion derives
    nothing). A draft that fails validation, or memories that would take the scope past a
    capacity limit, fail the event, with nothing derived (``retry`` tries it again).
    """
    state = conn.execute(SELECT_STATE, (event_id,)).fetchone()
    if state is None or state[2] != "pending":
        return current_outcome(conn, event_id)
    persona, project, _ = state
    conn.execute("savepoint derive")
    try:
        records = derive_memories(
            conn, persona, project, event_id, drafts, segmented, now, working_ttl=working_ttl
        )
    except (InvalidInput, StorageError) as exc:  # a bad draft, or capacity_exceeded
        conn.execute("rollback to derive")
        conn.execute("release derive")
        return mark_failed(conn, event_id, f"{exc.code}: {exc.message}")
    conn.execute("release derive")
    ids = [record.id for record in records]
    return Outcome(event_id=event_id, status="extracted", memory_ids=ids, new=True)


def mark_failed(conn: sqlite3.Connection, event_id: str, error: str) -> Outcome:
    conn.execute(MARK_FAILED, (error, event_id))
    return Outcome(event_id=event_id, status="failed", error=error)


def mark_pending(conn: sqlite3.Connection, persona: str, project: str, event_id: str) -> None:
    """Put a failed (or stored) conversation event of this scope back in line."""
    conn.execute(MARK_PENDING, (event_id, persona, project))


def retryable(conn: sqlite3.Connection, persona: str, project: str) -> list[str]:
    """The scope's pending and failed conversation events, oldest first."""
    return [row[0] for row in conn.execute(SELECT_RETRYABLE, (persona, project))]


def current_outcome(conn: sqlite3.Connection, event_id: str) -> Outcome:
    """What an event's extraction state says, for an event that is not pending."""
    state = conn.execute(SELECT_STATE, (event_id,)).fetchone()
    if state is not None and state[2] == "extracted":
        ids = current_memory_ids(conn, event_id)
        return Outcome(event_id=event_id, status="extracted", memory_ids=ids)
    if state is not None and state[2] == "failed":
        error = conn.execute(SELECT_ERROR, (event_id,)).fetchone()[0]
        return Outcome(event_id=event_id, status="failed", error=error)
    return Outcome(event_id=event_id, status="skipped")
