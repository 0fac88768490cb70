"""What the inspector reads: plain functions of a read-only connection.

Events and memories are pages of ``store.listing`` (keyset pages on the row number, with
totals), the text of an event is ``store.pages``, search is ``recall`` in ``fast``
mode: the same functions the Python API runs, here over a read-only snapshot. Only the
list of scopes, a scope's people with their counts, the display names of the people a
page shows and a memory's full row (revoked ones included) have queries of their own.
"""

from __future__ import annotations

import base64
import binascii
import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from ..db.in_lists import marks
from ..db.rules import CURRENT_MEMORY
from ..db.times import db_time, from_db_time
from ..errors import InvalidInput, NotFound
from ..json_input import parse_json
from ..models import (
    Event,
    Evidence,
    ListedEvent,
    Listing,
    MemoryRecord,
    Person,
    ScopeSummary,
)
from ..store.capacity import SCOPE_SUMMARIES, STORED_SCOPE
from ..store.events import event_model, load_stored
from ..store.facts import MEMORY_COLUMNS, memory_from_row
from ..store.listing import ListQuery, decode_cursor, list_items
from ..store.pages import read_evidence
from ..store.people import PERSON_COLUMNS, load_person, person_model

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


def decode_scope_cursor(cursor: str, what: str = "scopes") -> tuple[str, str]:
    """The two strings a ``scope_cursor`` holds (a page of ``what`` returned it)."""
    try:
        persona, project = parse_json(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, TypeError, binascii.Error):  # ValueError: nested too deep too
        raise InvalidInput(f"cursor is not one a page of {what} returned") from None
    if not isinstance(persona, str) or not isinstance(project, str):
        raise InvalidInput(f"cursor is not one a page of {what} returned")
    return persona, project


# --- people ------------------------------------------------------------------------------

PEOPLE_PAGE = f"""
select {PERSON_COLUMNS} from people
where persona = :persona and project = :project and (created_at, id) > (:created, :id)
order by created_at, id limit :limit
"""
"""``store.people.list_people`` (``Scope.people``), a page at a time."""
PEOPLE_TOTAL = "select count(*) from people where persona = ? and project = ?"
EVENTS_OWNED = """
select person, count(*) from events
where persona = ? and project = ? and person in ({ids}) group by person
"""
MEMORIES_OF = f"""
select person, count(*) from (
    select m.person from memories m
    where m.persona = ? and m.project = ? and {CURRENT_MEMORY} and m.person in ({{ids}})
    union all
    select j.value from memories m, json_each(m.about) j
    where m.persona = ? and m.project = ? and {CURRENT_MEMORY} and m.about is not null
      and j.value in ({{ids}}) and m.person is not j.value
) group by person
"""
"""The current memories of each person: derived from their events or about them
(``db.rules.PERSON_MEMORY``, what ``/scope?person=`` lists), each once, in one pass."""
DISPLAY_NAMES = """
select id, display_name from people where persona = ? and project = ? and id in ({ids})
"""


@dataclass(frozen=True, slots=True)
class PersonCounts:
    person: Person
    events: int
    """Events of the person's relationship (``events.person``)."""
    memories: int
    """Current memories derived from those events or about the person."""


@dataclass(frozen=True, slots=True)
class PeoplePage:
    people: list[PersonCounts]
    total: int
    next_cursor: str | None


def people_page(
    conn: sqlite3.Connection, persona: str, project: str, cursor: str | None, limit: int
) -> PeoplePage:
    """The scope's registry, oldest first (as ``Scope.people``), ``limit`` at a time after
    the person ``cursor`` names, each with how many events and memories are theirs."""
    created, person = ("", "") if cursor is None else decode_scope_cursor(cursor, "people")
    params = {
        "persona": persona,
        "project": project,
        "created": created,
        "id": person,
        "limit": limit + 1,
    }
    people = [person_model(row) for row in conn.execute(PEOPLE_PAGE, params)]
    more = len(people) > limit
    people = people[:limit]
    ids = [p.id for p in people]
    events, memories = {}, {}
    if ids:
        scope = (persona, project)
        events = dict(conn.execute(EVENTS_OWNED.format(ids=marks(len(ids))), (*scope, *ids)))
        sql = MEMORIES_OF.format(ids=marks(len(ids)))
        memories = dict(conn.execute(sql, (*scope, *ids, *scope, *ids)))
    last = people[-1] if more else None
    return PeoplePage(
        people=[PersonCounts(p, events.get(p.id, 0), memories.get(p.id, 0)) for p in people],
        total=conn.execute(PEOPLE_TOTAL, (persona, project)).fetchone()[0],
        next_cursor=None if last is None else scope_cursor(db_time(last.created_at), last.id),
    )


def display_names(
    conn: sqlite3.Connection, persona: str, project: str, people: Iterable[str | None]
) -> dict[str, str]:
    """The display names of ``people`` (IDs; None left out) in the scope's registry."""
    ids = sorted({p for p in people if p is not None})
    if not ids:
        return {}
    sql = DISPLAY_NAMES.format(ids=marks(len(ids)))
    return dict(conn.execute(sql, (persona, project, *ids)))


# --- events and memories -----------------------------------------------------------------


def events_query(limit: int, now: datetime, person: str | None = None) -> ListQuery:
    """Every event of a scope (of ``person``'s relationship, when given), newest first."""
    return ListQuery(what="events", limit=limit, now=db_time(now), person=person)


def memories_query(
    limit: int, now: datetime, as_of: datetime | None, person: str | None = None
) -> ListQuery:
    """Without ``as_of``: every memory of a scope, revoked and expired ones flagged. With
    it: the memories valid at ``as_of`` (``valid_at <= as_of < invalid_at``, not revoked),
    as recall sees them; ``until`` (a strict bound) one microsecond past ``as_of``, the
    precision of stored times, makes ``valid_at <= as_of``. With ``person``: only theirs,
    derived from their events or about them."""
    everything = as_of is None
    return ListQuery(
        what="memories",
        limit=limit,
        now=db_time(now if as_of is None else as_of),
        until=None if as_of is None else db_time(as_of + ONE_MICROSECOND),
        include_revoked=everything,
        include_expired=everything,
        person=person,
    )


@dataclass(frozen=True, slots=True)
class ListingPage:
    listing: Listing
    person: Person | None
    """The person the page is filtered by."""
    names: dict[str, str]
    """The display names of the people its rows belong to or are about, by ID."""


def listing_page(
    conn: sqlite3.Connection, persona: str, project: str, query: ListQuery, cursor: str | None
) -> ListingPage:
    """One page of ``query`` after ``cursor`` (a cursor a page of the same query returned);
    ``not_found`` when it is filtered by a person the registry does not have."""
    person = None if query.person is None else load_person(conn, persona, project, query.person)
    after = None if cursor is None else decode_cursor(cursor, query, persona, project)
    listing = list_items(conn, persona, project, query, after)
    people = [
        p
        for item in listing.items
        for p in ([item.person] if isinstance(item, ListedEvent) else [item.person, *item.about])
    ]
    return ListingPage(listing, person, display_names(conn, persona, project, people))


def event_page(
    conn: sqlite3.Connection, persona: str, project: str, event_id: str, offset: int, limit: int
) -> tuple[Evidence, dict[str, str]]:
    """A page of an event's text (``store.pages.read_evidence``) and its person's name."""
    evidence = read_evidence(conn, persona, project, event_id, offset, limit)
    return evidence, display_names(conn, persona, project, [evidence.event.person])


@dataclass(frozen=True, slots=True)
class MemoryDetail:
    memory: MemoryRecord
    revoked_at: datetime | None
    revoke_reason: str | None
    source: Event
    names: dict[str, str] = field(default_factory=dict)
    """The display names of its person and the people it is about, by ID."""


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
        names=display_names(conn, persona, project, [memory.person, *memory.about]),
    )
