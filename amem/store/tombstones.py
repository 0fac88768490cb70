"""Tombstones: erased stays erased.

Every erased event leaves one row in ``erased_events`` (schema v6): the SHA-256 of its
scope and ID, and when it was erased; no content. An event ID whose tombstone is present
cannot be stored again in that scope (``erased``): not by ``submit_event``, and not by
host capture, which skips such an entry and reports it, so a host replaying its outbox
still makes progress. Tombstones travel in archives and are applied on import.

The digest is ``sha256(json([persona, project, event_id]))`` in lowercase hex: a JSON
array, so no choice of names can make two scopes and IDs collide. It hides content, not
existence: whoever can guess an ID and its scope can check whether it was erased.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable
from json.encoder import encode_basestring as quoted  # json.dumps(ensure_ascii=False)'s

from ..errors import Conflict, NotFound

INSERT_TOMBSTONE = """
insert into erased_events (digest, erased_at) values (?, ?) on conflict (digest) do nothing
"""
SELECT_TOMBSTONE = "select 1 from erased_events where digest = ?"


def digest(persona: str, project: str, event_id: str) -> str:
    """The tombstone of event ``event_id`` of scope ``persona`` + ``project``: the SHA-256
    of ``json.dumps([persona, project, event_id], ensure_ascii=False, separators=(",", ":"))``,
    written here with json's own string encoder (the same bytes, a few times faster: every
    stored event is checked against the tombstones)."""
    key = f"[{quoted(persona)},{quoted(project)},{quoted(event_id)}]"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def bury(conn: sqlite3.Connection, persona: str, project: str, ids: Iterable[str], now: str) -> int:
    """Record a tombstone for each erased event; returns how many were new."""
    rows = [(digest(persona, project, event_id), now) for event_id in ids]
    return sum(conn.execute(INSERT_TOMBSTONE, row).rowcount for row in rows)


def is_erased(conn: sqlite3.Connection, persona: str, project: str, event_id: str) -> bool:
    row = conn.execute(SELECT_TOMBSTONE, (digest(persona, project, event_id),)).fetchone()
    return row is not None


def missing_event(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    event_id: str,
    absent: str = "no event with this id in this scope",
) -> NotFound:
    """The error for an event ID this scope does not hold: ``erased`` when it was erased
    from it (what a caller holding an old ID needs to know), else ``not_found`` saying
    ``absent``."""
    if is_erased(conn, persona, project, event_id):
        return NotFound("this event was erased from this scope", code="erased")
    return NotFound(absent)


def refuse_erased(conn: sqlite3.Connection, persona: str, project: str, event_id: str) -> None:
    """Raise ``erased`` if this event ID was erased from this scope."""
    if is_erased(conn, persona, project, event_id):
        raise Conflict(
            "this event_id was erased from this scope; an erased event is never stored again",
            code="erased",
        )


# --- tombstones from an archive (``Memory.import_tombstones``) ----------------------------

SELECT_EVENT_KEYS = "select persona, project, id from events order by seq"


def add(conn: sqlite3.Connection, rows: Iterable[tuple[str, str]]) -> int:
    """Record ``(digest, erased_at)`` tombstones; returns how many were new."""
    return sum(conn.execute(INSERT_TOMBSTONE, row).rowcount for row in rows)


def count_new(conn: sqlite3.Connection, digests: Iterable[str]) -> int:
    """How many of ``digests`` this database does not hold yet."""
    return sum(conn.execute(SELECT_TOMBSTONE, (d,)).fetchone() is None for d in digests)


def find_events(
    conn: sqlite3.Connection, digests: frozenset[str]
) -> dict[tuple[str, str], list[str]]:
    """The stored events these tombstones name, by scope, in ``seq`` order. A tombstone
    cannot be reversed, so every event's digest is computed (one pass over the events'
    keys: a few seconds for a million events)."""
    found: dict[tuple[str, str], list[str]] = {}
    if digests:
        for persona, project, event_id in conn.execute(SELECT_EVENT_KEYS):
            if digest(persona, project, event_id) in digests:
                found.setdefault((persona, project), []).append(event_id)
    return found
