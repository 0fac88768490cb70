"""Links between memories of one scope: explicit ``related`` links, ``corrects`` lineage."""

from __future__ import annotations

import sqlite3

from ..db.times import from_db_time
from ..errors import InvalidInput
from ..models import Relation
from .facts import load_memory

INSERT_RELATION = """
insert into relations (from_id, to_id, kind, persona, project, note, created_at)
values (?, ?, ?, ?, ?, ?, ?)
on conflict (from_id, to_id, kind) do nothing
"""
COLUMNS = ("from_id", "to_id", "kind", "persona", "project", "note", "created_at")
"""A relation's columns: the fields of ``Relation``."""
SELECT_RELATION = f"""
select {", ".join(COLUMNS)} from relations where from_id = ? and to_id = ? and kind = ?
"""


def relate(
    conn: sqlite3.Connection, persona: str, project: str, from_id: str, to_id: str, now: str
) -> Relation:
    """Link two current memories of this scope; linking again returns the existing link."""
    if from_id == to_id:
        raise InvalidInput("from_id and to_id must be different memories")
    load_memory(conn, persona, project, from_id)  # NotFound for foreign or revoked memories
    load_memory(conn, persona, project, to_id)
    return add_relation(conn, persona, project, from_id, to_id, "related", None, now)


def add_relation(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    from_id: str,
    to_id: str,
    kind: str,
    note: str | None,
    now: str,
) -> Relation:
    conn.execute(INSERT_RELATION, (from_id, to_id, kind, persona, project, note, now))
    row = conn.execute(SELECT_RELATION, (from_id, to_id, kind)).fetchone()
    fields = dict(zip(COLUMNS, row, strict=True))
    fields["created_at"] = from_db_time(fields["created_at"])
    return Relation.model_validate(fields)
