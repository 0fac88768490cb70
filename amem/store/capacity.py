"""Capacity accounting: what each scope stores, its optional limits, the file's size.

``scope_usage`` (schema v7) counts each scope's events and memories and the UTF-8 bytes of
their text and of its search documents; triggers keep it, so reading it is one lookup.
``scope_limits`` holds a scope's optional ``max_events`` and ``max_text_bytes``.

A write that adds an event or a memory calls ``check_capacity`` after its row went in,
inside the same transaction: over a limit, it raises ``capacity_exceeded`` and the writer
rolls the whole request back, so nothing of it is kept. The writer runs one transaction at
a time and other processes wait for ``BEGIN IMMEDIATE``, so two writers can never both
pass the check with room for one. A resubmitted duplicate adds no row and is never
refused; a deletion always goes through. A limit set below what the scope already holds
is kept: nothing is removed, and every new row is refused until the scope is back under it.

Index bytes are an estimate: the scope's segmented search documents (exact, from
``scope_usage``) times ``INDEX_OVERHEAD``, the ratio of the search tables' pages to those
bytes measured on English (LoCoMo, 2.6) and Chinese (MemoryBank, 2.2) conversations.
Vector bytes are exact: each fingerprint's vectors have one size.
"""

from __future__ import annotations

import os
import sqlite3
from typing import NamedTuple

from ..db.postgres import is_postgres
from ..db.rules import CURRENT_MEMORY
from ..db.schema import COUNT_USAGE, COUNTED_USAGE
from ..errors import StorageError
from ..models import Capacity, ScopeSummary

INDEX_OVERHEAD = 2.4
"""Search index pages (``search_docs``, ``search_fts`` and its shadow tables, their
indexes) per byte of segmented tokens, measured (see the module docstring)."""
NEAR_LIMIT = 0.9
"""``doctor`` warns when a scope holds this share of one of its limits."""


class Usage(NamedTuple):
    """A scope's row of ``scope_usage`` (zeros for a scope that never stored anything)."""

    events: int = 0
    memories: int = 0
    text_bytes: int = 0
    token_bytes: int = 0


class Limits(NamedTuple):
    max_events: int | None = None
    max_text_bytes: int | None = None


SELECT_USAGE = """
select events, memories, text_bytes, token_bytes from scope_usage
where persona = ? and project = ?
"""
SELECT_LIMITS = (
    "select max_events, max_text_bytes from scope_limits where persona = ? and project = ?"
)
SELECT_HEADROOM = """
select l.max_events, l.max_text_bytes, coalesce(u.events, 0), coalesce(u.text_bytes, 0)
from scope_limits l left join scope_usage u on u.persona = l.persona and u.project = l.project
where l.persona = ? and l.project = ?
"""


def usage(conn: sqlite3.Connection, persona: str, project: str) -> Usage:
    row = conn.execute(SELECT_USAGE, (persona, project)).fetchone()
    return Usage() if row is None else Usage(*row)


def limits(conn: sqlite3.Connection, persona: str, project: str) -> Limits:
    row = conn.execute(SELECT_LIMITS, (persona, project)).fetchone()
    return Limits() if row is None else Limits(*row)


def check_capacity(conn: sqlite3.Connection, persona: str, project: str) -> None:
    """Refuse (``capacity_exceeded``) a write that took the scope past one of its limits.

    Called after the new row went in, in the writer's transaction; the caller's request
    is rolled back whole when this raises. One primary-key lookup for a scope without
    limits."""
    row = conn.execute(SELECT_HEADROOM, (persona, project)).fetchone()
    if row is None:
        return
    max_events, max_text_bytes, events, text_bytes = row
    if max_events is not None and events > max_events:
        raise exceeded(f"{max_events:,} event{'s' if max_events > 1 else ''}")
    if max_text_bytes is not None and text_bytes > max_text_bytes:
        raise exceeded(f"{max_text_bytes:,} bytes of text")


def exceeded(limit: str) -> StorageError:
    return StorageError(
        f"this would take the scope past its limit of {limit}; nothing was written "
        "(raise or clear the limit, or delete what is no longer needed)",
        code="capacity_exceeded",
    )


UPSERT_LIMITS = """
insert into scope_limits (persona, project, max_events, max_text_bytes) values (?, ?, ?, ?)
on conflict (persona, project) do update set
    max_events = excluded.max_events, max_text_bytes = excluded.max_text_bytes
"""
DELETE_LIMITS = "delete from scope_limits where persona = ? and project = ?"


def set_limits(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    max_events: int | None,
    max_text_bytes: int | None,
) -> Capacity:
    """Make the scope's limits exactly these (None: no limit); returns its capacity."""
    if max_events is None and max_text_bytes is None:
        conn.execute(DELETE_LIMITS, (persona, project))
    else:
        conn.execute(UPSERT_LIMITS, (persona, project, max_events, max_text_bytes))
    return scope_capacity(conn, persona, project)


VECTOR_COUNTS = """
select fingerprint, count(*) from vectors where persona = ? and project = ?
group by fingerprint
"""
VECTOR_SIZE = """
select length(vector) from vectors where persona = ? and project = ? and fingerprint = ? limit 1
"""


def vector_bytes(conn: sqlite3.Connection, persona: str, project: str) -> int:
    """The scope's vector bytes: per fingerprint, its count (from the scope's index) times
    the size of one of its vectors, so no vector is read but one per fingerprint."""
    total = 0
    for fingerprint, count in conn.execute(VECTOR_COUNTS, (persona, project)).fetchall():
        size = conn.execute(VECTOR_SIZE, (persona, project, fingerprint)).fetchone()[0]
        total += count * (size or 0)
    return total


class FileSize(NamedTuple):
    file_bytes: int
    wal_bytes: int
    free_bytes: int


def file_size(conn: sqlite3.Connection) -> FileSize:
    """The database file's size on disk, its WAL's, and its free pages' bytes (on
    PostgreSQL: the database's size as the server counts it; no WAL or free pages of its
    own)."""
    if is_postgres(conn):
        [(size,)] = conn.execute("select pg_database_size(current_database())").fetchall()
        return FileSize(int(size), 0, 0)
    path = next(row[2] for row in conn.execute("pragma database_list") if row[1] == "main")
    page_size = conn.execute("pragma page_size").fetchone()[0]
    free = conn.execute("pragma freelist_count").fetchone()[0] * page_size
    return FileSize(size_of(path), size_of(f"{path}-wal") if path else 0, free)


def size_of(path: str) -> int:
    try:
        return os.stat(path).st_size if path else 0
    except FileNotFoundError:
        return 0


def scope_capacity(conn: sqlite3.Connection, persona: str, project: str) -> Capacity:
    used = usage(conn, persona, project)
    limit = limits(conn, persona, project)
    return Capacity(
        persona=persona,
        project=project,
        events=used.events,
        memories=used.memories,
        text_bytes=used.text_bytes,
        index_bytes=round(used.token_bytes * INDEX_OVERHEAD),
        vector_bytes=vector_bytes(conn, persona, project),
        max_events=limit.max_events,
        max_text_bytes=limit.max_text_bytes,
        **file_size(conn)._asdict(),
    )


STORED_SCOPE = "(u.events > 0 or u.memories > 0)"
"""A scope ``u`` of ``scope_usage`` that stores something (its row stays when it empties)."""
SCOPE_SUMMARIES = f"""
select u.persona, u.project, u.events,
    (select count(*) from memories m
     where m.persona = u.persona and m.project = u.project and {CURRENT_MEMORY})
from scope_usage u where {STORED_SCOPE}
"""
"""A ``ScopeSummary`` of every scope that stores something, to order (and page)."""
SELECT_SCOPES = f"{SCOPE_SUMMARIES} order by u.persona, u.project"


def scopes(conn: sqlite3.Connection) -> list[ScopeSummary]:
    """Every scope that stores an event or a memory, by persona then project."""
    return [
        ScopeSummary(persona=persona, project=project, events=events, memories=memories)
        for persona, project, events, memories in conn.execute(SELECT_SCOPES)
    ]


SELECT_LIMITED = """
select l.persona, l.project, l.max_events, l.max_text_bytes,
    coalesce(u.events, 0), coalesce(u.text_bytes, 0)
from scope_limits l left join scope_usage u on u.persona = l.persona and u.project = l.project
order by l.persona, l.project
"""


class NearLimit(NamedTuple):
    """A scope holding at least ``NEAR_LIMIT`` of one of its limits."""

    persona: str
    project: str
    what: str
    """``events`` or ``bytes of text``."""
    used: int
    limit: int


def near_limits(conn: sqlite3.Connection) -> tuple[int, list[NearLimit]]:
    """How many scopes have limits, and each limit held at ``NEAR_LIMIT`` or more."""
    limited, near = 0, []
    for persona, project, max_events, max_bytes, events, text_bytes in conn.execute(SELECT_LIMITED):
        limited += 1
        for what, used, limit in (
            ("events", events, max_events),
            ("bytes of text", text_bytes, max_bytes),
        ):
            if limit is not None and used >= NEAR_LIMIT * limit:
                near.append(NearLimit(persona, project, what, used, limit))
    return limited, near


SELECT_ALL_USAGE = """
select persona, project, events, memories, text_bytes, token_bytes from scope_usage
"""


def usage_drift(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """Scopes whose ``scope_usage`` row differs from a count of their rows (reads every
    text): only a write made around amem, with its triggers off, can cause one."""
    counted = {tuple(row[:2]): tuple(row[2:]) for row in conn.execute(COUNTED_USAGE)}
    stored = {
        tuple(row[:2]): tuple(row[2:]) for row in conn.execute(SELECT_ALL_USAGE) if any(row[2:])
    }
    return sorted(
        scope for scope in counted.keys() | stored.keys() if counted.get(scope) != stored.get(scope)
    )


def recount_usage(conn: sqlite3.Connection) -> None:
    """Count every scope's usage anew from its rows."""
    conn.execute("delete from scope_usage")
    conn.execute(COUNT_USAGE)
