"""Persona versions: immutable rows keyed by persona ID + version; edits append.

Reading a persona that has no versions yet through ``Memory.persona`` initialises the
neutral default as version 1. The read-only tools (``persona_get``, ``session_resume``)
show that default without storing it (``read_persona``). A rollback appends a new
version carrying an old version's text, so history is never erased. Persona versions
span projects.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime

from ..errors import NotFound
from ..models import Persona

NEUTRAL_PERSONA = "A helpful, honest assistant."
"""The persona of one nobody has set (``amem persona set`` sets one): part of every pack,
so it says nothing a model should not read as its persona."""
NEUTRAL_SINCE = datetime(1970, 1, 1, tzinfo=UTC)
"""The ``created_at`` of the neutral default shown before it is stored: it reads the
same every time."""

COLUMNS = ("persona", "version", "text", "note", "created_at")
"""A persona version's columns: the fields of ``Persona``."""
SELECT = f"select {', '.join(COLUMNS)} from personas"
SELECT_VERSION = f"{SELECT} where persona = ? and version = ?"
SELECT_LATEST = f"{SELECT} where persona = ? order by version desc limit 1"
SELECT_HISTORY = f"{SELECT} where persona = ? order by version"
SELECT_LAST_VERSION = "select max(version) from personas where persona = ?"
INSERT_VERSION = (
    "insert into personas (persona, version, text, note, created_at) values (?, ?, ?, ?, ?)"
)


def get_persona(conn: sqlite3.Connection, persona: str, version: int | None) -> Persona | None:
    """The given version, or the latest; None when the persona has no version at all."""
    if version is None:
        row = conn.execute(SELECT_LATEST, (persona,)).fetchone()
    else:
        row = conn.execute(SELECT_VERSION, (persona, version)).fetchone()
        # Version 1 of a new persona is the neutral default (``read_persona``).
        if row is None and not (
            version == 1 and conn.execute(SELECT_LATEST, (persona,)).fetchone() is None
        ):
            raise NotFound("this persona has no such version")
    return None if row is None else persona_from_row(row)


def ensure_persona(conn: sqlite3.Connection, persona: str, now: str) -> Persona:
    """The latest version, creating the neutral default when the persona is new."""
    existing = get_persona(conn, persona, None)
    if existing is not None:
        return existing
    return append_version(conn, persona, NEUTRAL_PERSONA, "neutral default", now)


def read_persona(conn: sqlite3.Connection, persona: str, version: int | None) -> Persona:
    """``get_persona``, where a persona with no versions shows the neutral default it
    would be initialised with, without storing it."""
    found = get_persona(conn, persona, version)
    if found is not None:
        return found
    return Persona(
        persona=persona,
        version=1,
        text=NEUTRAL_PERSONA,
        note="neutral default",
        created_at=NEUTRAL_SINCE,
    )


def append_version(
    conn: sqlite3.Connection, persona: str, text: str, note: str | None, now: str
) -> Persona:
    version = (conn.execute(SELECT_LAST_VERSION, (persona,)).fetchone()[0] or 0) + 1
    row = (persona, version, text, note, now)
    conn.execute(INSERT_VERSION, row)
    return persona_from_row(row)


def rollback_to(conn: sqlite3.Connection, persona: str, version: int, now: str) -> Persona:
    """Append a new version whose text equals ``version``'s."""
    old = conn.execute(SELECT_VERSION, (persona, version)).fetchone()
    if old is None:
        raise NotFound("this persona has no such version")
    text = persona_from_row(old).text
    return append_version(conn, persona, text, f"rollback to version {version}", now)


def persona_history(conn: sqlite3.Connection, persona: str) -> list[Persona]:
    return [persona_from_row(row) for row in conn.execute(SELECT_HISTORY, (persona,))]


def persona_from_row(row: Sequence[object]) -> Persona:
    return Persona.model_validate(dict(zip(COLUMNS, row, strict=True)))
