"""What the inspector reads: plain functions of a read-only connection.

Events and memories are pages of ``store.listing`` (keyset pages on the row number, with
totals), the text of an event is ``store.pages``, search is ``recall`` in ``fast``
mode: the same functions the Python API runs, here over a read-only snapshot. Only the
list of scopes and a memory's full row (revoked ones included) have queries of their own.
"""

from __future__ import annotations

import base64
import binascii
import json
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..db.times import db_time, from_db_time
from ..errors import InvalidInput, NotFound
from ..json_input import parse_json
from ..models import Event, Listing, MemoryRecord, ScopeSummary
from ..store.capacity import SCOPE_SUMMARIES, STORED_SCOPE
from ..store.events import event_model, load_stored
from ..store.facts import MEMORY_COLUMNS, memory_from_row
from ..store.listing import ListQuery, decode_cursor, list_items

SCOPES_PAGE = f"""
{SCOPE_SUMMARIES} and (u.persona, u.project) > (:persona, :project)
order by u.persona, u.project limit :limit
"""
"""``store.capacity.scopes`` (``Memory.scopes``), a page at a time."""
SCOPES_TOTAL = f"select count(*) from scope_usage u where {STORED_SCOPE}"
MEMORY_ROW = f"""
select {MEMORY_COLUMNS}, revoked_at, revoke_reason from memories
where id = ? and persona = ? and project = ?
"""
ONE_MICROSECOND = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class ScopesPage:
    scopes: list[ScopeSummary]
    total: int
    next_cursor: str | None


def scopes_page(conn: sqlite3.Connection, cursor: str | None, limit: int) -> ScopesPage:
    """Scopes that store an event or a memory, by persona then project, ``limit`` at a time
    after the scope ``cursor`` names."""
    persona, project = ("", "") if cursor is None else decode_scope_cursor(cursor)
    params = {"persona": persona, "project": project, "limit": limit + 1}
    rows = conn.execute(SCOPES_PAGE, params).fetchall()
    scopes = [ScopeSummary(persona=p, project=q, events=e, memories=m) for p, q, e, m in rows]
    more = len(scopes) > limit
    scopes = scopes[:limit]
    last = scopes[-1] if more else None
    return ScopesPage(
        scopes=scopes,
        total=conn.execute(SCOPES_TOTAL).fetchone()[0],
        next_cursor=None if last is None else scope_cursor(last.persona, last.project),
    )


def scope_cursor(persona: str, project: str) -> str:
    raw = json.dumps([persona, project], ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_scope_cursor(cursor: str) -> tuple[str, str]:
    try:
        persona, project = parse_json(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, TypeError, binascii.Error):  # ValueError: nested too deep too
        raise InvalidInput("cursor is not one a page of scopes returned") from None
    if not isinstance(persona, str) or not isinstance(project, str):
        raise InvalidInput("cursor is not one a page of scopes returned")
    return persona, project


def events_query(limit: int, now: datetime) -> ListQuery:
    """Every event of a scope, newest first."""
    return ListQuery(
        what="events",
        kinds=None,
        roles=None,
        session=None,
        since=None,
        until=None,
        include_revoked=False,
        include_expired=False,
        tier=None,
        limit=limit,
        now=db_time(now),
    )


def memories_query(limit: int, now: datetime, as_of: datetime | None) -> ListQuery:
    """Without ``as_of``: every memory of a scope, revoked and expired ones flagged. With
    it: the memories valid at ``as_of`` (``valid_at <= as_of < invalid_at``, not revoked),
    as recall sees them; ``until`` (a strict bound) one microsecond past ``as_of``, the
    precision of stored times, makes ``valid_at <= as_of``."""
    everything = as_of is None
    return ListQuery(
        what="memories",
        kinds=None,
        roles=None,
        session=None,
        since=None,
        until=None if as_of is None else db_time(as_of + ONE_MICROSECOND),
        include_revoked=everything,
        include_expired=everything,
        tier=None,
        limit=limit,
        now=db_time(now if as_of is None else as_of),
    )


def listing_page(
    conn: sqlite3.Connection, persona: str, project: str, query: ListQuery, cursor: str | None
) -> Listing:
    """One page of ``query`` after ``cursor`` (a cursor a page of the same query returned)."""
    after = None if cursor is None else decode_cursor(cursor, query, persona, project)
    return list_items(conn, persona, project, query, after)


@dataclass(frozen=True, slots=True)
class MemoryDetail:
    memory: MemoryRecord
    revoked_at: datetime | None
    revoke_reason: str | None
    source: Event


def memory_detail(
    conn: sqlite3.Connection, persona: str, project: str, memory_id: str
) -> MemoryDetail:
    """A memory of this scope, revoked or not, and its source event."""
    row = conn.execute(MEMORY_ROW, (memory_id, persona, project)).fetchone()
    if row is None:
        raise NotFound("no memory with this id in this scope")
    *columns, revoked_at, revoke_reason = row
    memory = memory_from_row(columns)
    source = load_stored(conn, memory.event_id)
    if source is None:  # a foreign key: only a damaged file lacks it
        raise NotFound("the memory's source event is missing")
    return MemoryDetail(
        memory=memory,
        revoked_at=None if revoked_at is None else from_db_time(revoked_at),
        revoke_reason=revoke_reason,
        source=event_model(source),
    )
