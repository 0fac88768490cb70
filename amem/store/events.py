"""Original events: insert (idempotent by ID) and read back. Plain functions of a connection."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

from ..db.postgres import is_postgres
from ..db.rules import CURRENT_MEMORY, SHOWN_STATUS
from ..db.times import from_db_time
from ..errors import Conflict
from ..models import Event, EventReceipt, EventStatus
from ..search import index, postings
from ..search.fts5 import Fts5Postings
from .capacity import check_capacity
from .people import require_people
from .tombstones import digest, refuse_erased


@dataclass(slots=True)
class EventFields:
    """What a new event and a stored one both carry; times in their stored form."""

    id: str
    persona: str
    project: str
    session: str | None
    role: str
    category: str
    source: str | None
    text: str
    occurred_at: str
    ingested_at: str
    status: EventStatus
    person: str | None
    """The person whose relationship it belongs to (``store.people``); None: no one."""


@dataclass(slots=True)
class NewEvent(EventFields):
    """A validated event, ready to insert."""

    occurred_at_given: bool
    segmented: str | None = None
    """The text's search tokens; None for categories that are not indexed."""


def derived_event(
    event_id: str,
    persona: str,
    project: str,
    session: str | None,
    role: str,
    category: str,
    source: str,
    text: str,
    segmented: str,
    now: str,
    person: str | None = None,
) -> NewEvent:
    """An event amem writes itself (a correction, a compaction) at ``now``: stored, never
    queued for extraction, its text's tokens ``segmented``."""
    return NewEvent(
        id=event_id,
        persona=persona,
        project=project,
        session=session,
        role=role,
        category=category,
        source=source,
        text=text,
        occurred_at=now,
        occurred_at_given=True,
        ingested_at=now,
        status="stored",
        person=person,
        segmented=segmented,
    )


@dataclass(slots=True)
class StoredEvent(EventFields):
    """An event as ``EVENT_COLUMNS`` reads it."""

    seq: int
    error: str | None
    evicted_at: str | None = None
    """When its raw text was let go (``store.eviction``): ``text`` is then empty and
    ``status`` shows ``evicted``."""


INSERT_EVENT = """
insert into events
    (id, persona, project, session, role, category, source, text,
     occurred_at, ingested_at, status, person)
values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
on conflict (id) do nothing
"""
EVENT_COLUMNS = f"""
e.id, e.persona, e.project, e.session, e.role, e.category, e.source, e.text, e.occurred_at,
e.ingested_at, {SHOWN_STATUS}, e.person, e.seq, e.error, e.evicted_at
"""
"""An event ``e``'s columns in ``StoredEvent`` order; the status as amem shows it."""
SELECT_EVENT = f"select {EVENT_COLUMNS} from events e where id = ?"
RESUME_EXTRACTION = "update events set status = 'pending', error = null where id = ?"
SELECT_MEMORY_IDS = f"""
select id from memories m where event_id = ? and {CURRENT_MEMORY} order by num
"""


def current_memory_ids(conn: sqlite3.Connection, event_id: str) -> list[str]:
    """The IDs of the memories that stand derived from an event, oldest first."""
    return [memory_id for (memory_id,) in conn.execute(SELECT_MEMORY_IDS, (event_id,))]


def insert_event(conn: sqlite3.Connection, event: NewEvent) -> EventReceipt:
    """Store ``event``, or acknowledge the identical event already stored under its ID.

    An ID erased from this scope is refused (``erased``): its tombstone outlives it. A new
    event that takes its scope past a limit is refused (``capacity_exceeded``); the
    writer then rolls the caller's whole request back."""
    refuse_erased(conn, event.persona, event.project, event.id)
    if event.person is not None:
        require_people(conn, event.persona, event.project, [event.person], "person")
    cursor = conn.execute(
        INSERT_EVENT,
        (*payload(event), event.occurred_at, event.ingested_at, event.status, event.person),
    )
    if cursor.rowcount == 1:  # else an event of that ID is stored already
        if event.segmented is not None:  # its people: the one it was just stored with
            tokens = index.event_tokens(event.persona, event.project, event.person, event.segmented)
            postings.of(conn).add(event.persona, event.project, "event", event.id, tokens)
        check_capacity(conn, event.persona, event.project)  # a duplicate adds nothing
        return receipt(event, cursor.lastrowid or 0, event.status, [], duplicate=False)
    existing = load_stored(conn, event.id)
    assert existing is not None
    if not replays(existing, event) or (
        event.occurred_at_given and existing.occurred_at != event.occurred_at
    ):  # a resubmission matches when scope and payload agree; an omitted time matches any
        raise Conflict(
            "an event with this event_id already exists with a different payload or scope",
            code="duplicate_conflict",
        )
    memory_ids = current_memory_ids(conn, event.id)
    status = existing.status
    if status == "failed" and event.status == "pending":  # resubmitting resumes extraction
        conn.execute(RESUME_EXTRACTION, (event.id,))
        status = "pending"
    return receipt(existing, existing.seq, status, memory_ids, duplicate=True)


def insert_events(conn: sqlite3.Connection, events: Sequence[NewEvent]) -> list[EventReceipt]:
    """``insert_event`` of each, in order, in the caller's one transaction."""
    return [insert_event(conn, event) for event in events]


BULK_CHARS = 1_000_000
"""Most characters of text a batch of events holds to go in with a few statements."""


def insert_requests(
    conn: sqlite3.Connection, requests: list[list[NewEvent]]
) -> list[list[EventReceipt]]:
    """``insert_events`` of each request's events, in order, in the writer's one
    transaction (``Database.write_together``: the submits waiting in one batch).

    On SQLite, when every event is new (no ID stored, erased, or twice among them), they
    go in with a few statements for all of them (``insert_new``). Otherwise each is stored
    as ``insert_event`` stores it, and so is every event on PostgreSQL, and every event of
    a batch holding more than ``BULK_CHARS`` of text (a few long events gain nothing from
    it, and their text would be held twice, once as JSON)."""
    flat = [event for events in requests for event in events]
    one_by_one = len(flat) < 2 or sum(len(event.text) for event in flat) > BULK_CHARS
    if not one_by_one and not is_postgres(conn) and all_new(conn, flat):
        receipts = iter(insert_new(conn, flat))
        return [[next(receipts) for _ in events] for events in requests]
    return [insert_events(conn, events) for events in requests]


SELECT_KNOWN = """
select exists (select 1 from json_each(:ids) j join events e on e.id = j.value)
    or exists (select 1 from json_each(:digests) j join erased_events t on t.digest = j.value)
"""


def all_new(conn: sqlite3.Connection, events: Sequence[NewEvent]) -> bool:
    """Whether no event's ID is stored or erased in its scope, nor given twice."""
    ids = [event.id for event in events]
    if len(set(ids)) < len(ids):
        return False
    digests = [digest(event.persona, event.project, event.id) for event in events]
    (known,) = conn.execute(
        SELECT_KNOWN, {"ids": json.dumps(ids), "digests": json.dumps(digests)}
    ).fetchone()
    return not known


INSERT_EVENTS = f"""
insert into events
    (id, persona, project, session, role, category, source, text,
     occurred_at, ingested_at, status, person)
select {", ".join(f"json_extract(value, '$[{n}]')" for n in range(12))}
from json_each(?) order by key
"""
SELECT_SEQS = (
    "select json_group_object(id, seq) from events where id in (select value from json_each(?))"
)


def insert_new(conn: sqlite3.Connection, events: Sequence[NewEvent]) -> list[EventReceipt]:
    """Store events none of which is stored or erased (``all_new``) and index them, with a
    few statements for all of them: SQLite runs each whole without handing control back
    to Python, so the event loop goes on meanwhile. Each event's checks are
    ``insert_event``'s; a scope past its limit afterwards was taken past it by one of them,
    and the writer then tells which, one request at a time."""
    for event in events:
        if event.person is not None:
            require_people(conn, event.persona, event.project, [event.person], "person")
    rows = [
        [*payload(event), event.occurred_at, event.ingested_at, event.status, event.person]
        for event in events
    ]
    conn.execute(INSERT_EVENTS, (json.dumps(rows, ensure_ascii=False),))
    (seqs,) = conn.execute(SELECT_SEQS, (json.dumps([event.id for event in events]),)).fetchone()
    docs = [
        (
            e.persona,
            e.project,
            "event",
            e.id,
            index.event_tokens(e.persona, e.project, e.person, e.segmented),
        )
        for e in events
        if e.segmented is not None
    ]
    if docs:
        Fts5Postings(conn).add_many(docs)
    for persona, project in {(event.persona, event.project) for event in events}:
        check_capacity(conn, persona, project)
    seq = json.loads(seqs)
    return [receipt(event, seq[event.id], event.status, [], duplicate=False) for event in events]


def replays(stored: StoredEvent, event: NewEvent) -> bool:
    """Whether ``event`` resubmits ``stored``: the same payload, but for the text once
    ``stored`` is evicted (its text is gone, so a replay is a duplicate that restores
    nothing)."""
    if stored.evicted_at is not None:
        return payload(replace(stored, text=event.text)) == payload(event)
    return payload(stored) == payload(event)


def payload(event: EventFields) -> tuple[str | None, ...]:
    """The scope and content an event's ID stands for, in ``INSERT_EVENT`` order."""
    return (
        event.id,
        event.persona,
        event.project,
        event.session,
        event.role,
        event.category,
        event.source,
        event.text,
    )


def receipt(
    event: EventFields, seq: int, status: EventStatus, memory_ids: list[str], *, duplicate: bool
) -> EventReceipt:
    return EventReceipt(
        event_id=event.id,
        seq=seq,
        status=status,
        memory_ids=memory_ids,
        duplicate=duplicate,
        persona=event.persona,
        project=event.project,
        session=event.session,
        occurred_at=from_db_time(event.occurred_at),
        ingested_at=from_db_time(event.ingested_at),
        person=event.person,
    )


def load_stored(conn: sqlite3.Connection, event_id: str) -> StoredEvent | None:
    row = conn.execute(SELECT_EVENT, (event_id,)).fetchone()
    return None if row is None else StoredEvent(*row)


def event_model(event: StoredEvent) -> Event:
    """The public ``Event``: every field but the text, which is counted."""
    fields = asdict(event)
    fields["chars"] = len(fields.pop("text"))
    return Event.model_validate(fields)
