"""Correcting a mistaken memory: for errors, not for changes (submit those as events).

One transaction: a new ``correction`` event carries the corrected text (role ``system``:
the host amends the record; no one said it in the conversation); the mistaken memory is
revoked (and leaves the search index and vector cache, so no read path can return it); a
new memory with the corrected text is derived from the correction event through the
normal validation path, its basis rules judged for the speaker the mistaken memory stood
for (``SPEAKER``: a user-stated fact stays user-stated); a ``corrects`` relation keeps the
lineage for audit; the mistaken memory's source event is marked ``amended`` (with
``include_history``, recall shows it as what was said, then corrected); the scope's
checkpoints are invalidated. An omitted ``valid_at`` keeps the mistaken memory's start and its place
among facts with the same start, so a correction never changes which value is current.
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta

from ..db.times import db_time
from ..models import Correction, MemoryDraft
from .checkpoints import invalidate_checkpoints
from .events import derived_event, insert_event
from .facts import SELECT_CHAIN_ORDER, derive_memories, load_event, load_memory
from .relations import add_relation
from .retraction import revoke

CARRY_PLACEMENT = "update memories set pinned = ?, expires_at = ? where id = ?"
"""The corrected memory keeps the mistaken one's pin and TTL (a fix is no new note)."""
SPEAKER = {"user_statement": "user", "assistant_expression": "assistant"}
"""Whose words a memory of this basis stands for (the role its source event had to have;
an inference: the source's own role). A correction's memory keeps the mistaken one's
basis, and the authority it was derived with, though its event is the host's."""
MARK_AMENDED = "update events set status = 'amended' where id = ?"


def correct(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    memory_id: str,
    text: str,
    segmented: str,
    valid_at: str | None,
    reason: str | None,
    correction_event_id: str,
    now: str,
    working_ttl: timedelta,
) -> Correction:
    old = load_memory(conn, persona, project, memory_id)
    source = load_event(conn, persona, project, old.event_id)
    insert_event(
        conn,
        derived_event(
            correction_event_id,
            persona,
            project,
            source.session,
            "system",
            "correction",
            "correction",
            text,
            segmented,
            now,
        ),
    )
    revoke(conn, old.id, None, now)
    start = valid_at or db_time(old.valid_at)
    end = db_time(old.invalid_at) if old.invalid_at else None
    # the corrected text is its own quote (in the correction event); the rest is kept
    kept = old.model_dump(
        include={"kind", "basis", "confidence", "subject", "fact_key", "emotion", "tier"}
    )
    changed = {"text": text, "quote": text, "valid_at": start, "invalid_at": end}
    if end is not None and end <= start:  # the new start is past the old end: drop it
        changed["invalid_at"] = None
    draft = MemoryDraft.model_validate(kept | changed)
    # keeping the start, the correction takes the mistaken fact's place among equal starts
    order = None if valid_at else conn.execute(SELECT_CHAIN_ORDER, (old.id,)).fetchone()[0]
    [new] = derive_memories(
        conn,
        persona,
        project,
        correction_event_id,
        [draft],
        [segmented],
        now,
        working_ttl=working_ttl,
        chain_order=order,
        speaker=SPEAKER.get(old.basis, source.role),
    )
    expires_at = None if old.expires_at is None else db_time(old.expires_at)
    conn.execute(CARRY_PLACEMENT, (int(old.pinned), expires_at, new.id))
    new = new.model_copy(update={"pinned": old.pinned, "expires_at": old.expires_at})
    add_relation(conn, persona, project, new.id, old.id, "corrects", reason, now)
    conn.execute(MARK_AMENDED, (old.event_id,))
    invalidate_checkpoints(conn, persona, project, now)
    return Correction(
        persona=persona,
        project=project,
        memory=new,
        revoked_id=old.id,
        correction_event_id=correction_event_id,
        amended_event_id=old.event_id,
    )
