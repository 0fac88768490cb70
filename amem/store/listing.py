"""Browsing a scope: pages of its memories or events, newest stored first, with totals.

Pages are keyset pages on the row number (``memories.num``, ``events.seq``), which only
grows: a cursor holds the number of the last row shown, and the next page starts below
it. Rows written while someone pages through are newer than the first page, so they never
shift a later page: no row is shown twice, none is skipped. The cursor also carries a
digest of the scope and filters it was made for, and is refused with other ones.

Totals count every row matching the filters (not only this page), when the page is read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..db import in_lists
from ..db.rules import CURRENT_MEMORY, PERSON_MEMORY, SHOWN_STATUS
from ..db.times import from_db_time
from ..errors import InvalidInput
from ..limits import LIST_PREVIEW_CHARS
from ..models import (
    MEMORY_KINDS,
    ROLES,
    ListedEvent,
    ListedMemory,
    Listing,
    ListTarget,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListQuery:
    """What ``Scope.list`` was asked for, validated; times in their stored form. A filter
    left out (None, False) filters nothing."""

    what: ListTarget
    limit: int
    now: str
    """The time ``expired`` is judged at."""
    kinds: frozenset[str] | None = None
    roles: frozenset[str] | None = None
    session: str | None = None
    since: str | None = None
    until: str | None = None
    include_revoked: bool = False
    include_expired: bool = False
    tier: str | None = None
    person: str | None = None
    """Only this person's events, and memories derived from them or about them."""

    def digest(self, persona: str, project: str) -> str:
        """Names the scope and filters (not the page size or time) a cursor belongs to."""
        filters = [
            persona,
            project,
            self.what,
            sorted(self.kinds or ()),
            sorted(self.roles or ()),
            self.session,
            self.since,
            self.until,
            self.include_revoked,
            self.include_expired,
        ]
        if self.tier is not None:  # only then: cursors made before tiers existed still hold
            filters.append(self.tier)
        if self.person is not None:  # likewise
            filters.append(["person", self.person])
        data = json.dumps(filters, ensure_ascii=False).encode()
        return hashlib.blake2b(data, digest_size=6).hexdigest()


def encode_cursor(query: ListQuery, persona: str, project: str, after: int) -> str:
    raw = f"{after}.{query.digest(persona, project)}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, query: ListQuery, persona: str, project: str) -> int:
    """The row number a cursor continues below; ``invalid_input`` for anything but a
    cursor a listing of this scope with these filters returned."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        after, digest = raw.split(".")
        number = int(after)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidInput("cursor is not one a listing returned") from None
    if digest != query.digest(persona, project) or number < 1:
        raise InvalidInput(
            "cursor belongs to another listing: ask with the scope and filters of the page "
            "that returned it"
        )
    return number


MEMORY_ROWS = """
select m.num, m.id, m.text, m.kind, m.basis, m.subject, m.fact_key, m.valid_at,
    m.invalid_at, m.event_id, e.role, e.session, m.revoked_at is not null,
    m.invalid_at is not null and m.invalid_at <= :now, m.tier, m.pinned, m.person, m.about
from memories m join events e on e.id = m.event_id
where {where}
order by m.num desc limit :limit
"""
MEMORY_TOTALS = """
select m.kind, count(*) from memories m {join}
where {where}
group by m.kind
"""
SOURCE_EVENT = "join events e on e.id = m.event_id"
"""Joined for the totals only when a filter looks at the source event."""
EVENT_ROWS = f"""
select e.seq, e.id, substr(e.text, 1, :preview), length(e.text), e.role, e.category,
    e.session, e.occurred_at, {SHOWN_STATUS}, e.person
from events e
where {{where}}
order by e.seq desc limit :limit
"""
EVENT_TOTALS = "select e.role, count(*) from events e where {where} group by e.role"


def memory_filters(query: ListQuery) -> list[str]:
    where = ["m.persona = :persona", "m.project = :project"]
    if query.kinds is not None:
        where.append(f"m.kind in ({in_lists.named('kind', sorted(query.kinds))[0]})")
    if query.tier is not None:
        where.append("m.tier = :tier")
    if query.person is not None:
        where.append(PERSON_MEMORY)
    where += event_and_time_filters(query, "m.valid_at")
    if not query.include_revoked:
        where.append(CURRENT_MEMORY)
    if not query.include_expired:
        where.append("(m.invalid_at is null or m.invalid_at > :now)")
    return where


def event_filters(query: ListQuery) -> list[str]:
    scope = ["e.persona = :persona", "e.project = :project"]
    if query.person is not None:
        scope.append("e.person = :person")
    return [*scope, *event_and_time_filters(query, "e.occurred_at")]


def event_and_time_filters(query: ListQuery, time: str) -> list[str]:
    """The (source) event ``e``'s role and session, and the column ``time`` in the query's
    window: what memories and events are filtered by alike."""
    where = []
    if query.roles is not None:
        where.append(role_filter(query.roles))
    if query.session is not None:
        where.append("e.session = :session")
    if query.since is not None:
        where.append(f"{time} >= :since")
    if query.until is not None:
        where.append(f"{time} < :until")
    return where


def role_filter(roles: frozenset[str]) -> str:
    """Of an event ``e`` (a memory's source event), said by one of ``roles``."""
    return f"e.role in ({in_lists.named('role', sorted(roles))[0]})"


def list_items(
    conn: sqlite3.Connection, persona: str, project: str, query: ListQuery, after: int | None
) -> Listing:
    """One page of ``query``'s rows below row number ``after`` (from the newest when None),
    and the totals of every page."""
    params: dict[str, Any] = {
        "persona": persona,
        "project": project,
        **in_lists.named("kind", sorted(query.kinds or ()))[1],
        **in_lists.named("role", sorted(query.roles or ()))[1],
        "session": query.session,
        "tier": query.tier,
        "person": query.person,
        "since": query.since,
        "until": query.until,
        "now": query.now,
        "preview": LIST_PREVIEW_CHARS,
        "limit": query.limit + 1,  # one more tells whether another page follows
        "after": after,
    }
    memories = query.what == "memories"
    where = memory_filters(query) if memories else event_filters(query)
    joined = SOURCE_EVENT if query.roles is not None or query.session is not None else ""
    totals_sql = (MEMORY_TOTALS if memories else EVENT_TOTALS).format(
        where=" and ".join(where), join=joined
    )
    totals: dict[str, int] = dict.fromkeys(MEMORY_KINDS if memories else ROLES, 0)
    totals.update(dict(conn.execute(totals_sql, params).fetchall()))
    if after is not None:
        where.append("m.num < :after" if memories else "e.seq < :after")
    rows_sql = (MEMORY_ROWS if memories else EVENT_ROWS).format(where=" and ".join(where))
    rows = conn.execute(rows_sql, params).fetchall()
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    items: list[ListedMemory] | list[ListedEvent] = (
        [listed_memory(row) for row in rows] if memories else [listed_event(row) for row in rows]
    )
    return Listing(
        persona=persona,
        project=project,
        what=query.what,
        items=items,
        total=sum(totals.values()),
        totals=totals,
        next_cursor=encode_cursor(query, persona, project, rows[-1][0]) if more else None,
    )


def listed_memory(row: tuple[Any, ...]) -> ListedMemory:
    (
        _,
        memory_id,
        text,
        kind,
        basis,
        subject,
        fact_key,
        valid_at,
        invalid_at,
        event_id,
        role,
        session,
        revoked,
        expired,
        tier,
        pinned,
        person,
        about,
    ) = row
    fields: Mapping[str, Any] = {
        "id": memory_id,
        "text": text,
        "kind": kind,
        "basis": basis,
        "subject": subject,
        "fact_key": fact_key,
        "valid_at": from_db_time(valid_at),
        "invalid_at": None if invalid_at is None else from_db_time(invalid_at),
        "source_event_id": event_id,
        "role": role,
        "session": session,
        "revoked": bool(revoked),
        "expired": bool(expired),
        "tier": tier,
        "pinned": bool(pinned),
        "person": person,
        "about": json.loads(about) if about else [],
    }
    return ListedMemory.model_validate(fields)


def listed_event(row: tuple[Any, ...]) -> ListedEvent:
    seq, event_id, text, chars, role, category, session, occurred_at, status, person = row
    return ListedEvent(
        id=event_id,
        seq=seq,
        text=text,
        chars=chars,
        truncated=chars > len(text),
        role=role,
        category=category,
        session=session,
        occurred_at=from_db_time(occurred_at),
        status=status,
        person=person,
    )
