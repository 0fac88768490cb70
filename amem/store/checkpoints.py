"""Host-reported task checkpoints. amem records them; it cannot verify the work happened.

Correction, retraction and deletion invalidate every checkpoint of the affected scope,
because task prose cannot be reliably scrubbed of what was removed. Deletion also clears
the ``covered_seq`` of a checkpoint whose covered event it erased: the seq would name an
event that no longer exists (and that an import could give to a later event), and it
blanks the text of every invalidated checkpoint of the scope (goal, steps, constraints,
next action), keeping its scope, session, times and coverage: the erased words may be in
it, and an invalidated checkpoint is never shown again anyway.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ..db.times import from_db_time
from ..errors import InvalidInput
from ..inputs import CHECKPOINT_FIELDS
from ..models import Checkpoint

COLUMNS = ("persona", "project", *CHECKPOINT_FIELDS, "created_at")
"""A checkpoint's columns: the fields of ``Checkpoint``."""
JSON_COLUMNS = ("completed", "pending", "constraints")
"""The lists, stored as JSON text."""
INSERT_CHECKPOINT = f"""
insert into checkpoints ({", ".join(COLUMNS)}) values ({", ".join(f":{c}" for c in COLUMNS)})
"""
SELECT_COVERED = "select persona, project, session from events where seq = ?"
SELECT_LATEST = f"""
select {", ".join(COLUMNS)} from checkpoints
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
    fields = {
        "persona": persona,
        "project": project,
        "session": session,
        "goal": goal,
        "completed": list(completed),
        "pending": list(pending),
        "constraints": list(constraints),
        "next_action": next_action,
        "covered_seq": covered_seq,
        "created_at": now,
    }
    lists = {column: json.dumps(fields[column], ensure_ascii=False) for column in JSON_COLUMNS}
    conn.execute(INSERT_CHECKPOINT, fields | lists)
    return Checkpoint.model_validate(fields | {"created_at": from_db_time(now)})


def latest_checkpoint(
    conn: sqlite3.Connection, persona: str, project: str, session: str
) -> Checkpoint | None:
    row = conn.execute(SELECT_LATEST, (persona, project, session)).fetchone()
    return None if row is None else checkpoint_from_row(row)


def invalidate_checkpoints(conn: sqlite3.Connection, persona: str, project: str, now: str) -> int:
    return conn.execute(INVALIDATE, (now, persona, project)).rowcount


def uncover_removed(conn: sqlite3.Connection, persona: str, project: str) -> None:
    """Clear the ``covered_seq`` of the scope's checkpoints whose covered event is gone."""
    conn.execute(UNCOVER_ERASED, (persona, project))


def invalidate_after_deletion(
    conn: sqlite3.Connection, persona: str, project: str, now: str
) -> int:
    """After events of the scope were erased: clear what covered them, invalidate all."""
    uncover_removed(conn, persona, project)
    return invalidate_checkpoints(conn, persona, project, now)


BLANK = "goal = '', completed = '[]', pending = '[]', constraints = '[]', next_action = null"
"""A checkpoint's text, blanked (the columns stay NOT NULL where they were)."""
HAS_TEXT = (
    "(goal != '' or completed != '[]' or pending != '[]' or constraints != '[]'"
    " or next_action is not null)"
)
CLEAR_INVALIDATED = f"""
update checkpoints set {BLANK}
where persona = ? and project = ? and invalidated_at is not null and {HAS_TEXT}
"""
COUNT_ERASURE_EFFECTS = f"""
select count(*) filter (where invalidated_at is null), count(*) filter (where {HAS_TEXT})
from checkpoints where persona = ? and project = ?
"""


def erase_checkpoint_text(
    conn: sqlite3.Connection, persona: str, project: str, now: str
) -> tuple[int, int]:
    """After events of the scope were erased: clear what covered them, invalidate every
    checkpoint and blank the text of every invalidated one. Returns how many were
    invalidated and how many blanked (``erasure_effects`` counts them beforehand)."""
    invalidated = invalidate_after_deletion(conn, persona, project, now)
    cleared = conn.execute(CLEAR_INVALIDATED, (persona, project)).rowcount
    return invalidated, cleared


def erasure_effects(conn: sqlite3.Connection, persona: str, project: str) -> tuple[int, int]:
    """What ``erase_checkpoint_text`` would do now: checkpoints it would invalidate, and
    checkpoints whose text it would blank."""
    invalidated, cleared = conn.execute(COUNT_ERASURE_EFFECTS, (persona, project)).fetchone()
    return int(invalidated), int(cleared)


def checkpoint_from_row(row: Sequence[object]) -> Checkpoint:
    fields: dict[str, Any] = dict(zip(COLUMNS, row, strict=True))
    for column in JSON_COLUMNS:
        fields[column] = json.loads(fields[column])
    fields["created_at"] = from_db_time(fields["created_at"])
    return Checkpoint.model_validate(fields)
