"""Permanent erasure, starting from events: one (``delete``) or many (``erase``).

What goes with an event: every memory derived from it, and the connected correction
lineage in both directions, followed to its end (a lineage memory's source event goes
too, and with it every memory derived from that event). With them go their search rows,
vectors and relation edges. Memories linked to them only by ``related`` survive (the link
does not). Every erased event leaves a tombstone (``tombstones``: a hash of its scope and
ID, no content), so the same ID is never stored again. Every checkpoint of the scope is
invalidated and the text of every invalidated one blanked; one that covered an erased
event covers nothing. Closed validity intervals of surviving facts are left as they are.

Preview and deed are one computation: ``Planner`` reads what erasing some events takes
with it, and ``apply`` removes exactly that plan in the same transaction (and checks that
it did). A dry run is the same planning on a read snapshot, without ``apply``.

A bulk erase can select a person's relationship (``Selector.person``: the events that
belong to them). Selecting it whole (the person alone) also deletes the person's state,
after the last batch; their registry entry stays (``people.remove_person`` takes it out).

A bulk erase (``Scope.erase``) is many small transactions: a read picks the next
``BATCH_EVENTS`` selected events after the last one seen (by ``seq``), then one write
transaction erases them with everything connected. Each batch leaves the database
consistent, so an interrupted bulk erase has erased whole events with everything derived
from them, and running it again erases the rest.

``secure_delete`` zeroes freed cells and pages, but not every copy: FTS5 keeps a deleted
row's terms in its index segments until a merge, and when SQLite rebalances a b-tree page
it leaves stale copies of moved cells in the page's unused middle, which no pragma zeroes.
So once the transaction commits the writer is asked to ``scrub`` when idle: merge the
index, rebuild the file (``VACUUM``: every page written anew from live rows only), and
truncate the WAL. Then the erased text is gone from the database file and its WAL, and
from backups made afterwards. Emitted context packs, copies, older backups and remote
logs are outside amem's reach.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..db.writer import immediate
from ..errors import NotFound, StorageError
from ..models import Copy, Deletion, Erasure
from ..search import index
from ..search.vector_rows import drop_vectors
from . import runs, tombstones
from .checkpoints import erase_checkpoint_text, erasure_effects
from .copies import find_copies
from .tombstones import missing_event

BATCH_EVENTS = 200
"""Selected events one bulk-erase transaction takes (with everything connected to them):
a few milliseconds of write lock each, so other writers interleave."""
MAX_RECEIPT_IDS = 1_000
"""Event and memory IDs an ``Erasure`` lists; past this it only counts them."""


def scrub(conn: sqlite3.Connection) -> None:
    """After erasures, outside any transaction: merge the search index so deleted terms
    leave it, then rebuild the file so no stale copy of a deleted cell stays in a page.

    ``VACUUM`` reads the whole file and writes it anew (about 75 MB/s here), through the
    WAL, which grows by the file's size until the writer truncates it; its scratch copy
    goes to a temporary file (``temp_store = file``), not to memory.
    """
    with immediate(conn):
        (erased,) = conn.execute(SELECT_ERASED).fetchone()
        index.purge_deleted_terms(conn)
    conn.execute("pragma temp_store = file")
    try:
        conn.execute("vacuum")
    finally:
        conn.execute("pragma temp_store = memory")
    with immediate(conn):  # a deletion after the first transaction leaves a scrub due
        conn.execute(UPDATE_SCRUBBED, (erased,))


SELECT_ERASED = "select erased from scrubs"
UPDATE_SCRUBBED = "update scrubs set scrubbed = max(scrubbed, ?)"


def scrub_due(conn: sqlite3.Connection) -> bool:
    """Whether rows were deleted since the last ``scrub`` finished (its process may have
    been killed first): triggers on ``events`` and ``memories`` count deletions."""
    return bool(conn.execute("select erased > scrubbed from scrubs").fetchone()[0])


SELECT_EVENT_SCOPE = "select persona, project from events where id = ?"
SELECT_MEMORY_SOURCE = "select event_id, persona, project from memories where id = ?"
SELECT_DERIVED = "select id from memories where event_id = ? order by num"
SELECT_LINEAGE = """
select to_id from relations where kind = 'corrects' and from_id = ?
union
select from_id from relations where kind = 'corrects' and to_id = ?
"""
SELECT_EDGES = "select from_id, to_id, kind from relations where from_id = ? or to_id = ?"
COUNT_VECTORS = "select count(*) from vectors where doc_kind = ? and ref = ?"
COUNT_DOCS = "select count(*) from search_docs where doc_kind = ? and ref = ?"
DELETE_RELATIONS = "delete from relations where from_id = ? or to_id = ?"
DELETE_MEMORY = "delete from memories where id = ?"
DELETE_EVENT = "delete from events where id = ?"


@dataclass
class Planner:
    """What erasing some events takes with it, accumulated event by event on one
    connection (one transaction); an event already planned adds nothing."""

    conn: sqlite3.Connection
    events: dict[str, None] = field(default_factory=dict)
    memories: dict[str, None] = field(default_factory=dict)
    edges: set[tuple[str, str, str]] = field(default_factory=set)
    """Relation edges touching a planned memory (an edge between two counts once)."""
    vectors: int = 0
    search_rows: int = 0

    def add(self, start_event: str) -> None:
        """Plan ``start_event`` and everything reachable from it through derivation and
        ``corrects`` links."""
        conn = self.conn
        todo: deque[tuple[str, str]] = deque([("event", start_event)])
        while todo:  # breadth first: an event, then its memories in order, then lineage
            kind, ident = todo.popleft()
            if kind == "event" and ident not in self.events:
                self.events[ident] = None
                self.count("event", ident)
                todo.extend(("memory", m) for (m,) in conn.execute(SELECT_DERIVED, (ident,)))
            elif kind == "memory" and ident not in self.memories:
                self.memories[ident] = None
                self.count("memory", ident)
                self.edges.update(conn.execute(SELECT_EDGES, (ident, ident)).fetchall())
                todo.extend(("memory", m) for (m,) in conn.execute(SELECT_LINEAGE, (ident, ident)))
                todo.append(("event", conn.execute(SELECT_MEMORY_SOURCE, (ident,)).fetchone()[0]))

    def count(self, kind: str, ref: str) -> None:
        self.vectors += self.conn.execute(COUNT_VECTORS, (kind, ref)).fetchone()[0]
        self.search_rows += self.conn.execute(COUNT_DOCS, (kind, ref)).fetchone()[0]


def apply(conn: sqlite3.Connection, persona: str, project: str, plan: Planner, now: str) -> None:
    """Erase exactly what ``plan`` (made in this transaction) holds, with tombstones for
    its events; refuses, rolling back, if the deed would differ from the plan."""
    events = list(plan.events)
    vectors, search_rows, relations = remove_memories(conn, list(plan.memories))
    event_vectors, event_rows = remove_events(conn, events)
    vectors, search_rows = vectors + event_vectors, search_rows + event_rows
    tombstones.bury(conn, persona, project, events, now)
    runs.forget_events(conn, events, now)
    if (vectors, search_rows, relations) != (plan.vectors, plan.search_rows, len(plan.edges)):
        raise StorageError("the erasure did not match its plan; nothing was erased")


def remove_memories(conn: sqlite3.Connection, memory_ids: Sequence[str]) -> tuple[int, int, int]:
    """Delete these memories' rows with their vectors, search rows and relation edges, and
    the consolidation runs' copies of their text (their events stay); returns how many
    vectors, search rows and edges went."""
    runs.forget_memories(conn, memory_ids)
    vectors = drop_vectors(conn, "memory", memory_ids)
    search_rows = index.remove_docs(conn, "memory", memory_ids)
    relations = 0
    for memory in memory_ids:
        relations += conn.execute(DELETE_RELATIONS, (memory, memory)).rowcount
        conn.execute(DELETE_MEMORY, (memory,))
    return vectors, search_rows, relations


def remove_events(conn: sqlite3.Connection, event_ids: Sequence[str]) -> tuple[int, int]:
    """Delete these events' rows with their vectors and search rows (no memory may be
    derived from them any more); returns how many vectors and search rows went."""
    vectors, search_rows = unindex_events(conn, event_ids)
    for event in event_ids:
        conn.execute(DELETE_EVENT, (event,))
    return vectors, search_rows


def unindex_events(conn: sqlite3.Connection, event_ids: Sequence[str]) -> tuple[int, int]:
    """Remove these events' vectors and search rows, their rows kept (an erasure deletes
    them next; an eviction empties their text); returns how many vectors and rows went."""
    return drop_vectors(conn, "event", event_ids), index.remove_docs(conn, "event", event_ids)


# --- one event (or one memory's event) -------------------------------------------------


def delete(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    event_id: str | None,
    memory_id: str | None,
    now: str,
    dry_run: bool = False,
    include_copies: bool = False,
) -> Deletion:
    """Erase one event (or a memory's source event) with everything connected; with
    ``dry_run``, only say what would go (nothing is written: it runs on a reader). Later
    events repeating its text are listed as ``copies``, and with ``include_copies`` go too."""
    plan = Planner(conn)
    plan.add(starting_event(conn, persona, project, event_id, memory_id))
    copies = find_copies(conn, persona, project, list(plan.events))
    if include_copies:
        for copy in copies:
            plan.add(copy.event_id)
    invalidated, cleared = erasure_effects(conn, persona, project)
    if not dry_run:
        apply(conn, persona, project, plan, now)
        if erase_checkpoint_text(conn, persona, project, now) != (invalidated, cleared):
            raise StorageError("the erasure did not match its plan; nothing was erased")
    return Deletion(
        event_ids=list(plan.events),
        memory_ids=list(plan.memories),
        **shared_receipt(persona, project, plan, invalidated, cleared, dry_run=dry_run),
        copies=copies,
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
        raise missing_event(conn, persona, project, event_id)
    return event_id


# --- many events: a selector, batches ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Selector:
    """Which events of a scope a bulk erase starts from (every given part must hold).
    Times are stored times; ``since <= occurred_at < until``."""

    session: str | None = None
    since: str | None = None
    until: str | None = None
    subject: str | None = None
    fact_key: str | None = None
    """Only with ``subject``: events with a memory of this subject and fact key."""
    person: str | None = None
    """Events of this person's relationship (``events.person``)."""
    everything: bool = False

    @property
    def whole_person(self) -> bool:
        """Whether it selects a person's whole relationship (``person`` alone): then the
        person's state goes too."""
        return self.person is not None and self == Selector(person=self.person)

    def sql(self, persona: str, project: str) -> tuple[str, dict[str, Any]]:
        """The ``where`` clause over events ``e`` of the scope, and its parameters."""
        params: dict[str, Any] = {"persona": persona, "project": project}
        clauses = ["e.persona = :persona", "e.project = :project"]
        if self.session is not None:
            clauses.append("e.session = :session")
            params["session"] = self.session
        if self.since is not None:
            clauses.append("e.occurred_at >= :since")
            params["since"] = self.since
        if self.until is not None:
            clauses.append("e.occurred_at < :until")
            params["until"] = self.until
        if self.subject is not None:
            key = "" if self.fact_key is None else " and m.fact_key = :fact_key"
            clauses.append(
                "exists (select 1 from memories m where m.event_id = e.id"
                f" and m.subject = :subject{key})"
            )
            params |= {"subject": self.subject, "fact_key": self.fact_key}
        if self.person is not None:
            clauses.append("e.person = :person")
            params["person"] = self.person
        return " and ".join(clauses), params


def select_events(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    selector: Selector,
    after: int,
) -> tuple[list[str], int]:
    """The next ``BATCH_EVENTS`` selected events with a ``seq`` above ``after``, in ``seq``
    order, and the last seq they reach (``after`` when there are none)."""
    where, params = selector.sql(persona, project)
    rows = conn.execute(
        f"select e.id, e.seq from events e where {where} and e.seq > :after"
        " order by e.seq limit :limit",
        params | {"after": after, "limit": BATCH_EVENTS},
    ).fetchall()
    return [row[0] for row in rows], (rows[-1][1] if rows else after)


def count_selected(conn: sqlite3.Connection, persona: str, project: str, selector: Selector) -> int:
    where, params = selector.sql(persona, project)
    return int(conn.execute(f"select count(*) from events e where {where}", params).fetchone()[0])


SELECT_PERSON_STATE = """
select count(*) from states where persona = ? and project = ? and person = ?
"""
DELETE_PERSON_STATE = "delete from states where persona = ? and project = ? and person = ?"


def person_states(conn: sqlite3.Connection, persona: str, project: str, selector: Selector) -> int:
    """How many states erasing ``selector``'s events takes with them: the person's own
    (0 or 1) when it selects a whole relationship, else none."""
    if not selector.whole_person:
        return 0
    return int(conn.execute(SELECT_PERSON_STATE, (persona, project, selector.person)).fetchone()[0])


def erase_person_state(
    conn: sqlite3.Connection, persona: str, project: str, selector: Selector
) -> int:
    """The last step of a bulk erase of a person's whole relationship: delete their state
    (``person_states`` says whether it would). How many states went."""
    if not selector.whole_person:
        return 0
    return conn.execute(DELETE_PERSON_STATE, (persona, project, selector.person)).rowcount


def erase_events(
    conn: sqlite3.Connection, persona: str, project: str, event_ids: Sequence[str], now: str
) -> Erasure:
    """One batch of a bulk erase: these events of the scope (those still there) with
    everything connected, in this transaction."""
    plan = Planner(conn)
    for event_id in event_ids:
        if conn.execute(SELECT_EVENT_SCOPE, (event_id,)).fetchone() == (persona, project):
            plan.add(event_id)
    invalidated = cleared = 0
    if plan.events:
        apply(conn, persona, project, plan, now)
        invalidated, cleared = erase_checkpoint_text(conn, persona, project, now)
    return receipt(persona, project, plan, invalidated, cleared, dry_run=False, batches=1)


def preview(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    selector: Selector | None = None,
    event_ids: Iterable[str] = (),
    include_copies: bool = False,
) -> Erasure:
    """What a bulk erase of the ``selector``'s events (or of ``event_ids``) would remove,
    read on one snapshot: the same plan the batches make, without applying it. A
    ``selector``'s preview lists the ``copies`` of its events, with ``include_copies``
    also counted as erased."""
    plan = Planner(conn)
    copies: list[Copy] = []
    if selector is not None:
        plan_selected(plan, persona, project, selector)
        copies = selected_copies(plan, persona, project, selector)
        if include_copies:
            for copy in copies:
                plan.add(copy.event_id)
    for event_id in event_ids:
        if conn.execute(SELECT_EVENT_SCOPE, (event_id,)).fetchone() == (persona, project):
            plan.add(event_id)
    invalidated, cleared = erasure_effects(conn, persona, project) if plan.events else (0, 0)
    done = receipt(persona, project, plan, invalidated, cleared, dry_run=True, batches=0)
    if selector is not None and (states := person_states(conn, persona, project, selector)):
        done = done.model_copy(update={"states": states})
    return done.model_copy(update={"copies": copies}) if copies else done


def plan_selected(plan: Planner, persona: str, project: str, selector: Selector) -> None:
    """Plan every event ``selector`` selects, in ``seq`` order."""
    where, params = selector.sql(persona, project)
    for (event_id,) in plan.conn.execute(
        f"select e.id from events e where {where} order by e.seq", params
    ):
        plan.add(event_id)


def selected_copies(plan: Planner, persona: str, project: str, selector: Selector) -> list[Copy]:
    """The copies of the events ``plan`` holds (``copies.find_copies``); none when the
    ``selector`` takes the whole scope."""
    if selector.everything:
        return []
    return find_copies(plan.conn, persona, project, list(plan.events))


def copies_of(
    conn: sqlite3.Connection, persona: str, project: str, selector: Selector
) -> list[Copy]:
    """The copies a bulk erase of ``selector``'s events leaves (``preview`` lists the
    same), read before its first batch: the events it selects are gone after."""
    if selector.everything:
        return []
    plan = Planner(conn)
    plan_selected(plan, persona, project, selector)
    return selected_copies(plan, persona, project, selector)


def shared_receipt(
    persona: str, project: str, plan: Planner, invalidated: int, cleared: int, *, dry_run: bool
) -> dict[str, Any]:
    """What the receipts of ``delete`` (``Deletion``) and ``erase`` (``Erasure``) both say."""
    return {
        "persona": persona,
        "project": project,
        "dry_run": dry_run,
        "relations": len(plan.edges),
        "search_rows": plan.search_rows,
        "vectors": plan.vectors,
        "checkpoints_invalidated": invalidated,
        "checkpoints_cleared": cleared,
    }


def receipt(
    persona: str,
    project: str,
    plan: Planner,
    invalidated: int,
    cleared: int,
    *,
    dry_run: bool,
    batches: int,
) -> Erasure:
    return Erasure(
        events=len(plan.events),
        memories=len(plan.memories),
        **shared_receipt(persona, project, plan, invalidated, cleared, dry_run=dry_run),
        batches=batches if plan.events else 0,
        event_ids=list(plan.events)[:MAX_RECEIPT_IDS],
        memory_ids=list(plan.memories)[:MAX_RECEIPT_IDS],
        ids_truncated=max(len(plan.events), len(plan.memories)) > MAX_RECEIPT_IDS,
    )


def nothing(persona: str, project: str) -> Erasure:
    """The receipt of a bulk erase before its first batch."""
    return Erasure(
        persona=persona,
        project=project,
        dry_run=False,
        events=0,
        memories=0,
        relations=0,
        search_rows=0,
        vectors=0,
        checkpoints_invalidated=0,
        checkpoints_cleared=0,
        batches=0,
        event_ids=[],
        memory_ids=[],
        ids_truncated=False,
    )


def combine(first: Erasure, second: Erasure) -> Erasure:
    """Two receipts of one bulk erase (batches in order) as one."""
    event_ids = (first.event_ids + second.event_ids)[:MAX_RECEIPT_IDS]
    memory_ids = (first.memory_ids + second.memory_ids)[:MAX_RECEIPT_IDS]
    events, memories = first.events + second.events, first.memories + second.memories
    return first.model_copy(
        update={
            "events": events,
            "memories": memories,
            "relations": first.relations + second.relations,
            "search_rows": first.search_rows + second.search_rows,
            "vectors": first.vectors + second.vectors,
            "checkpoints_invalidated": first.checkpoints_invalidated
            + second.checkpoints_invalidated,
            "checkpoints_cleared": first.checkpoints_cleared + second.checkpoints_cleared,
            "states": first.states + second.states,
            "batches": first.batches + second.batches,
            "event_ids": event_ids,
            "memory_ids": memory_ids,
            "ids_truncated": max(events, memories) > MAX_RECEIPT_IDS,
        }
    )
