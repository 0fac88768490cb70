"""Permanent deletion, starting from an event or a memory.

What goes, in one transaction: the source event, every memory derived from it, and the
connected correction lineage in both directions, followed to its end (a lineage memory's
source event goes too, and with it every memory derived from that event). With them go
their search rows, vectors and relation edges. Memories linked to them only by
``related`` survive (the link does not). Every checkpoint of the scope is invalidated,
and one that covered an erased event covers nothing.
Closed validity intervals of surviving facts are left as they are.

``secure_delete`` zeroes the freed pages. FTS5 keeps a deleted row's terms in its index
segments until a merge, so once the transaction commits the writer is asked, when idle, to
merge the index (``index.purge_deleted_terms``) and truncate the WAL: then the deleted
text is gone from the database file and its WAL. Emitted context packs, copies, backups
and remote logs are outside amem's reach.
"""

from __future__ import annotations

import sqlite3

from ..errors import NotFound
from ..models import Deletion
from ..search import index
from ..search.vectors import drop_vectors
from .checkpoints import invalidate_after_deletion

SELECT_EVENT_SCOPE = "select persona, project from events where id = ?"
SELECT_MEMORY_SOURCE = "select event_id, persona, project from memories where id = ?"
SELECT_DERIVED = "select id from memories where event_id = ?"
SELECT_LINEAGE = """
select to_id from relations where kind = 'corrects' and from_id = ?
union
select from_id from relations where kind = 'corrects' and to_id = ?
"""
DELETE_RELATIONS = "delete from relations where from_id = ? or to_id = ?"
DELETE_MEMORY = "delete from memories where id = ?"
DELETE_EVENT = "delete from events where id = ?"


def delete(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    event_id: str | None,
    memory_id: str | None,
    now: str,
) -> Deletion:
    start = starting_event(conn, persona, project, event_id, memory_id)
    event_ids, memory_ids = connected(conn, start)
    relation_ids = {
        edge for memory in memory_ids for edge in relation_edges(conn, memory)
    }  # an edge between two doomed memories counts once
    vector_rows = drop_vectors(conn, "memory", memory_ids) + drop_vectors(conn, "event", event_ids)
    search_rows = index.remove_docs(conn, "memory", memory_ids)
    search_rows += index.remove_docs(conn, "event", event_ids)
    for memory in memory_ids:
        conn.execute(DELETE_RELATIONS, (memory, memory))
        conn.execute(DELETE_MEMORY, (memory,))
    for event in event_ids:
        conn.execute(DELETE_EVENT, (event,))
    return Deletion(
        persona=persona,
        project=project,
        event_ids=event_ids,
        memory_ids=memory_ids,
        relations=len(relation_ids),
        search_rows=search_rows,
        vectors=vector_rows,
        checkpoints_invalidated=invalidate_after_deletion(conn, persona, project, now),
    )


def starting_event(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    event_id: str | None,
    memory_id: str | None,
) -> str:
    if memory_id is not None:
        row = conn.execute(SELECT_MEMORY_SOURCE, (memory_id,)).fetchone()
        if row is None or (row[1], row[2]) != (persona, project):
            raise NotFound("no memory with this id in this scope")
        return str(row[0])
    assert event_id is not None
    if conn.execute(SELECT_EVENT_SCOPE, (event_id,)).fetchone() != (persona, project):
        raise NotFound("no event with this id in this scope")
    return event_id


def connected(conn: sqlite3.Connection, start_event: str) -> tuple[list[str], list[str]]:
    """Events and memories reachable through derivation and ``corrects`` links, in order."""
    events: dict[str, None] = {}
    memories: dict[str, None] = {}
    todo: list[tuple[str, str]] = [("event", start_event)]
    while todo:
        kind, ident = todo.pop()
        if kind == "event" and ident not in events:
            events[ident] = None
            todo += [("memory", m) for (m,) in conn.execute(SELECT_DERIVED, (ident,))]
        elif kind == "memory" and ident not in memories:
            memories[ident] = None
            todo += [("memory", m) for (m,) in conn.execute(SELECT_LINEAGE, (ident, ident))]
            todo.append(("event", conn.execute(SELECT_MEMORY_SOURCE, (ident,)).fetchone()[0]))
    return list(events), list(memories)


def relation_edges(conn: sqlite3.Connection, memory_id: str) -> list[tuple[str, str, str]]:
    return conn.execute(
        "select from_id, to_id, kind from relations where from_id = ? or to_id = ?",
        (memory_id, memory_id),
    ).fetchall()
