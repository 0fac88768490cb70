"""Scope statistics for ``Scope.status`` and the ``memory_status`` tool."""

from __future__ import annotations

import sqlite3

from ..config import Settings
from ..models import Status

EVENTS_BY_STATUS = """
select status, count(*) from events where persona = ? and project = ? group by status
"""
MEMORY_COUNTS = """
select count(*) filter (where revoked_at is null), count(*) filter (where revoked_at is not null)
from memories where persona = ? and project = ?
"""
EMBEDDED = """
select count(*) from embeddings v join memories m on m.id = v.memory_id
where m.persona = ? and m.project = ? and m.revoked_at is null and v.fingerprint = ?
"""


def scope_status(
    conn: sqlite3.Connection, persona: str, project: str, settings: Settings
) -> Status:
    events = {"stored": 0, "pending": 0, "extracted": 0, "failed": 0, "amended": 0}
    events.update(dict(conn.execute(EVENTS_BY_STATUS, (persona, project)).fetchall()))
    memories, revoked = conn.execute(MEMORY_COUNTS, (persona, project)).fetchone()
    fingerprint = settings.embed_fingerprint
    embedded = 0
    if fingerprint is not None:
        embedded = conn.execute(EMBEDDED, (persona, project, fingerprint)).fetchone()[0]
    return Status(
        persona=persona,
        project=project,
        default_persona=settings.default_persona,
        default_project=settings.default_project,
        schema_version=conn.execute("pragma user_version").fetchone()[0],
        events=events,
        memories=memories,
        revoked=revoked,
        embedded=embedded,
        coverage=None if fingerprint is None else (embedded / memories if memories else 1.0),
        fingerprint=fingerprint,
        extraction=settings.extraction_enabled,
    )
