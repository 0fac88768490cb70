"""Persona versions: immutable rows keyed by persona ID + version; edits append.

Reading a persona that has no versions yet initialises the neutral default as version 1.
A rollback appends a new version carrying an old version's text, so history is never
erased. Persona versions span projects.
"""

from __future__ import annotations

import sqlite3

from ..errors import NotFound
from ..models import Persona

NEUTRAL_PERSONA = (
    "A helpful, honest assistant. No persona has been configured; "
    "the operator can set one with `amem persona set`."
)

SELECT_VERSION = """
select persona, version, text, note, created_at from personas
where persona = ? and version = ?
"""
SELECT_LATEST = """
select persona, version, text, note, created_at from personas
where persona = ? order by version desc limit 1
"""
SELECT_HISTORY = """
select persona, version, text, note, created_at from personas
where persona = ? order by version
"""
INSERT_VERSION = (
    "insert into personas (persona, version, text, note, created_at) values (?, ?, ?, ?, ?)"
)


def get_persona(conn: sqlite3.Connection, persona: str, version: int | None) -> Persona | None:
    """The given version, or the latest; None when the persona has no version at all."""
    if version is None:
        row = conn.execute(SELECT_LATEST, (persona,)).fetchone()
    else:
        row = conn.execute(SELECT_VERSION, (persona, version)).fetchone()
        # Version 1 of a new persona is the neutral default the caller creates on read.
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


def append_version(
    conn: sqlite3.Connection, persona: str, text: str, note: str | None, now: str
) -> Persona:
    latest = conn.execute(SELECT_LATEST, (persona,)).fetchone()
    version = 1 if latest is None else latest[1] + 1
    conn.execute(INSERT_VERSION, (persona, version, text, note, now))
    return persona_from_row((persona, version, text, note, now))


def rollback_to(conn: sqlite3.Connection, persona: str, version: int, now: str) -> Persona:
    """Append a new version whose text equals ``version``'s."""
    old = conn.execute(SELECT_VERSION, (persona, version)).fetchone()
    if old is None:
        raise NotFound("this persona has no such version")
    return append_version(conn, persona, old[2], f"rollback to version {version}", now)


def persona_history(conn: sqlite3.Connection, persona: str) -> list[Persona]:
    return [persona_from_row(row) for row in conn.execute(SELECT_HISTORY, (persona,))]


def persona_from_row(row: tuple[object, ...]) -> Persona:
    persona, version, text, note, created_at = row
    return Persona.model_validate(
        {"persona": persona, "version": version, "text": text, "note": note,
         "created_at": created_at}
    )  # fmt: skip
