"""Retracting one memory: "forget that", for that memory alone.

One transaction: the memory is revoked (``revoked_at``, ``revoke_reason``) and leaves the
search index and the vector cache, so recall and context packs never return it again; its
row stays, for audit (export carries it; retracted text is not erased). Its source event
is marked ``amended``: an amended event's words are no key to anything and never come back
as raw fallback, so the retracted fact cannot resurface through the message it came from.
Sibling memories derived from the same event stay current and are found by their own
text (no longer through the event's words). The scope's checkpoints are invalidated, as a
correction invalidates them: task prose may carry the retracted fact forward.

Retracting a memory already revoked (retracted or corrected) changes nothing and says so
(``already_revoked``), so a retried call is harmless. Closed validity intervals are not
reopened: a fact whose interval the retracted one closed stays closed, as after a deletion.
To remove the words themselves, erase the event (``erasure``).
"""

from __future__ import annotations

import sqlite3

from ..db.times import from_db_time
from ..errors import NotFound
from ..models import Retraction
from ..search import index
from ..search.vector_rows import drop_vectors
from .checkpoints import invalidate_checkpoints
from .events import current_memory_ids

SELECT_MEMORY = """
select persona, project, event_id, revoked_at, revoke_reason from memories where id = ?
"""
REVOKE = "update memories set revoked_at = ?, revoke_reason = ? where id = ?"
MARK_AMENDED = "update events set status = 'amended' where id = ? and status != 'amended'"


def revoke(
    conn: sqlite3.Connection, memory_id: str, reason: str | None, now: str
) -> tuple[int, int]:
    """Revoke one current memory: its row stays (with ``reason``), its search row and
    vectors go, so no read path returns it. Returns the vectors and search rows removed."""
    conn.execute(REVOKE, (now, reason, memory_id))
    vectors = drop_vectors(conn, "memory", [memory_id])
    return vectors, index.remove_docs(conn, "memory", [memory_id])


def retract(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    memory_id: str,
    reason: str | None,
    now: str,
) -> Retraction:
    row = conn.execute(SELECT_MEMORY, (memory_id,)).fetchone()
    if row is None or (row[0], row[1]) != (persona, project):
        raise NotFound("no memory with this id in this scope")
    _, _, event_id, revoked_at, old_reason = row
    already = revoked_at is not None
    vectors = search_rows = invalidated = 0
    amended = False
    if not already:
        vectors, search_rows = revoke(conn, memory_id, reason, now)
        amended = conn.execute(MARK_AMENDED, (event_id,)).rowcount == 1
        invalidated = invalidate_checkpoints(conn, persona, project, now)
    return Retraction(
        persona=persona,
        project=project,
        memory_id=memory_id,
        event_id=event_id,
        reason=old_reason if already else reason,
        revoked_at=from_db_time(revoked_at if already else now),
        already_revoked=already,
        event_amended=amended,
        sibling_ids=current_memory_ids(conn, event_id),
        search_rows=search_rows,
        vectors=vectors,
        checkpoints_invalidated=invalidated,
    )
