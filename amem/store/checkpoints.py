"""Host-reported task checkpoints. amem records them; it cannot verify the work happened.

Correction and deletion invalidate every checkpoint of the affected scope, because task
prose cannot be reliably scrubbed of what was removed. Deletion also clears the
``covered_seq`` of a checkpoint whose covered event it erased: the seq would name an
event that no longer exists (and that an import could give to a later event).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ..db.times import from_db_time
from ..errors import InvalidInput
from ..models import Checkpoint

INSERT_CHECKPOINT = """
insert into checkpoints (persona, project, session, goal, completed, pending, constraints,
                         next_action, covered_seq, created_at)
values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
SELECT_COVERED = "select persona, project, session from events where seq = ?"
SELECT_LATEST = """
select persona, project, session, goal, completed, pending, constraints, next_action,
       covered_seq, created_at
from checkpoints
where persona = ? and project = ? and session = ? and invalidated_at is null
order by num desc limit 1
"""
INVALIDATE = """
update checkpoints set invalidated_at = ?
where persona = ? and project = ? and invalidated_at is null
"""
UNCOVER_ERASED = """
update checkpoints set covered_seq = null
where persona = ? and project = ? and covered_seq is not null
  and not exists (select 1 from events where seq = checkpoints.covered_seq)
"""


def save_checkpoint(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    session: str,
    goal: str,
    completed: Sequence[str],
    pending: Sequence[str],
    constraints: Sequence[str],
    next_action: str | None,
    covered_seq: int | None,
    now: str,
) -> Checkpoint:
    if covered_seq is not None:
        owner = conn.execute(SELECT_COVERED, (covered_seq,)).fetchone()
        if owner != (persona, project, session):
            raise InvalidInput("covered_seq must be the seq of an event in this scope and session")
    row = (
        persona, project, session, goal, json.dumps(list(completed), ensure_ascii=False),
        json.dumps(list(pending), ensure_ascii=False),
        json.dumps(list(constraints), ensure_ascii=False), next_action, covered_seq, now,
    )  # fmt: skip
    conn.execute(INSERT_CHECKPOINT, row)
    return checkpoint_from_row(row)


def latest_checkpoint(
    conn: sqlite3.Connection, persona: str, project: str, session: str
) -> Checkpoint | None:
    row = conn.execute(SELECT_LATEST, (persona, project, session)).fetchone()
    return None if row is None else checkpoint_from_row(row)


def invalidate_checkpoints(conn: sqlite3.Connection, persona: str, project: str, now: str) -> int:
    return conn.execute(INVALIDATE, (now, persona, project)).rowcount


def invalidate_after_deletion(
    conn: sqlite3.Connection, persona: str, project: str, now: str
) -> int:
    """After events of the scope were erased: clear what covered them, invalidate all."""
    conn.execute(UNCOVER_ERASED, (persona, project))
    return invalidate_checkpoints(conn, persona, project, now)


def checkpoint_from_row(row: Sequence[object]) -> Checkpoint:
    persona, project, session, goal, completed, pending, constraints, action, seq, at = row
    return Checkpoint.model_validate(
        {
            "persona": persona, "project": project, "session": session, "goal": goal,
            "completed": json.loads(str(completed)), "pending": json.loads(str(pending)),
            "constraints": json.loads(str(constraints)), "next_action": action,
            "covered_seq": seq, "created_at": from_db_time(str(at)),
        }
    )  # fmt: skip
