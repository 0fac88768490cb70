"""Original events: insert (idempotent by ID) and read back. Plain functions of a connection."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from ..db.times import from_db_time
from ..errors import Conflict
from ..models import Event, EventReceipt, EventStatus
from ..search import index


@dataclass(slots=True)
class NewEvent:
    """A validated event, ready to insert; times are already in their stored form."""

    id: str
    persona: str
    project: str
    session: str | None
    role: str
    category: str
    source: str | None
    text: str
    occurred_at: str
    occurred_at_given: bool
    ingested_at: str
    status: EventStatus
    segmented: str | None = None
    """The text's search tokens; None for categories that are not indexed."""


INSERT_EVENT = """
insert into events
    (id, persona, project, session, role, category, source, text,
     occurred_at, ingested_at, status)
values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
on conflict (id) do nothing
"""

SELECT_EVENT = """
select seq, id, persona, project, session, role, category, source, text,
       occurred_at, ingested_at, status, error
from events where id = ?
"""

RESUME_EXTRACTION = "update events set status = 'pending', error = null where id = ?"
SELECT_MEMORY_IDS = "select id from memories where event_id = ? and revoked_at is null order by num"


def insert_event(conn: sqlite3.Connection, event: NewEvent) -> EventReceipt:
    """Store ``event``, or acknowledge the identical event already stored under its ID."""
    cursor = conn.execute(
        INSERT_EVENT,
        (
            event.id, event.persona, event.project, event.session, event.role,
            event.category, event.source, event.text, event.occurred_at,
            event.ingested_at, event.status,
        ),
    )  # fmt: skip
    if cursor.rowcount == 1:
        if event.segmented is not None:
            index.index_doc(conn, event.persona, event.project, "event", event.id, event.segmented)
        return EventReceipt(
            event_id=event.id, seq=cursor.lastrowid or 0, status=event.status, memory_ids=[],
            duplicate=False, persona=event.persona, project=event.project,
            session=event.session, occurred_at=from_db_time(event.occurred_at),
            ingested_at=from_db_time(event.ingested_at),
        )  # fmt: skip
    existing = conn.execute(SELECT_EVENT, (event.id,)).fetchone()
    if not same_payload(existing, event):
        raise Conflict(
            "an event with this event_id already exists with a different payload or scope",
            code="duplicate_conflict",
        )
    memory_ids = [row[0] for row in conn.execute(SELECT_MEMORY_IDS, (event.id,))]
    status = existing[11]
    if status == "failed" and event.status == "pending":  # resubmitting resumes extraction
        conn.execute(RESUME_EXTRACTION, (event.id,))
        status = "pending"
    return EventReceipt(
        event_id=event.id, seq=existing[0], status=status, memory_ids=memory_ids,
        duplicate=True, persona=existing[2], project=existing[3], session=existing[4],
        occurred_at=from_db_time(existing[9]), ingested_at=from_db_time(existing[10]),
    )  # fmt: skip


def same_payload(row: tuple[object, ...], event: NewEvent) -> bool:
    """A resubmission matches when scope and payload agree; an omitted time matches any."""
    _, _, persona, project, session, role, category, source, text, occurred_at, *_ = row
    return (
        (persona, project, session, role, category, source, text)
        == (event.persona, event.project, event.session, event.role,
            event.category, event.source, event.text)
        and (not event.occurred_at_given or occurred_at == event.occurred_at)
    )  # fmt: skip


def event_from_row(row: tuple[object, ...]) -> Event:
    seq, id_, persona, project, session, role, category, source, text, occ, ing, status, error = row
    return Event.model_validate(
        {
            "id": id_, "seq": seq, "persona": persona, "project": project,
            "session": session, "role": role, "category": category, "source": source,
            "occurred_at": occ, "ingested_at": ing, "status": status, "error": error,
            "chars": len(text),  # type: ignore[arg-type]
        }
    )  # fmt: skip
