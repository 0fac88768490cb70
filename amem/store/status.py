"""Scope statistics for ``Scope.status`` and the ``memory_status`` tool: counts, model
work, and capacity (``store.capacity``)."""

from __future__ import annotations

import sqlite3

from ..config import Settings
from ..db.rules import CURRENT_MEMORY, SHOWN_STATUS
from ..db.schema import stored_version
from ..models import EVENT_STATUSES, MEMORY_KINDS, Status
from ..search.vector_rows import coverage
from .capacity import scope_capacity

EVENTS_BY_STATUS = f"""
select {SHOWN_STATUS}, count(*) from events e where persona = ? and project = ? group by 1
"""
MEMORY_COUNTS = f"""
select kind, count(*) filter (where {CURRENT_MEMORY}),
    count(*) filter (where not ({CURRENT_MEMORY}))
from memories m where persona = ? and project = ?
group by kind
"""


def scope_status(
    conn: sqlite3.Connection, persona: str, project: str, settings: Settings
) -> Status:
    events: dict[str, int] = dict.fromkeys(EVENT_STATUSES, 0)
    events.update(dict(conn.execute(EVENTS_BY_STATUS, (persona, project)).fetchall()))
    counts = conn.execute(MEMORY_COUNTS, (persona, project)).fetchall()
    kinds: dict[str, int] = dict.fromkeys(MEMORY_KINDS, 0)
    kinds.update({kind: current for kind, current, _ in counts})
    revoked = sum(row[2] for row in counts)
    fingerprint = settings.embed_fingerprint
    covered = None if fingerprint is None else coverage(conn, persona, project, fingerprint)
    return Status(
        persona=persona,
        project=project,
        default_persona=settings.default_persona,
        default_project=settings.default_project,
        schema_version=stored_version(conn),
        events=events,
        memories=sum(kinds.values()),
        revoked=revoked,
        embedded=0 if covered is None else covered.embedded_memories,
        embedded_events=0 if covered is None else covered.embedded_events,
        coverage=None if covered is None else covered.share,
        fingerprint=fingerprint,
        extraction=settings.extraction_enabled,
        memory_kinds=kinds,
        capacity=scope_capacity(conn, persona, project),
    )
