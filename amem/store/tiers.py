"""Tiers, pins and consolidation: what a memory is for, and how long it lives.

Every memory has a tier: ``working`` (the current task's scratch notes), ``episodic``
(what happened) or ``profile`` (lasting facts about the user). A draft names its tier or
takes its kind's default (``models.DEFAULT_TIERS``). A working note expires
``Settings.working_ttl_hours`` after it is stored; nothing happens then by itself.

``consolidate`` runs only when called, in one transaction, and only over current
memories (revoked ones stay, for audit, as they are):

1. working notes move to ``episodic``: a pinned one whose TTL has passed (it graduates
   instead of dying), and every one whose text, whitespace aside, working notes of at
   least ``promote_after`` distinct events state;
2. episodic facts and preferences the user stated (basis ``user_statement``) move to
   ``profile`` when at least ``promote_after`` distinct events state their text among
   them (those promoted in step 1 included);
3. the remaining expired, unpinned working notes are deleted completely (their rows,
   search rows, vectors and relation edges, as ``erasure`` removes a memory); their source
   events stay, being the originals. A note that corrects another (``correct``) expires
   with its whole lineage, as a deletion takes it: the earlier versions its corrections
   revoked and the correction events that hold only its corrected texts go with it, so no
   correction event is left without its memory and no revoked version without the link
   saying why. The original event the first version came from stays, still ``amended``.

After it, nothing is left for a second call at the same time to do. The plan is computed
from the rows first (so a dry run is the same computation on a read snapshot), then
applied. Two partial indexes keep it cheap: current expiring notes, and current memories
by tier and kind.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

from ..db.in_lists import literals
from ..db.rules import CURRENT_MEMORY
from ..db.times import db_time
from ..models import Consolidation, MemoryRecord, MemoryTier, Promotion
from .checkpoints import uncover_removed
from .erasure import remove_events, remove_memories
from .facts import KEYED_KINDS, load_memory

SET_PINNED = "update memories set pinned = ? where id = ?"
SELECT_WORKING = f"""
select id, text, event_id, kind, basis, pinned, expires_at from memories m
where persona = ? and project = ? and expires_at is not null and {CURRENT_MEMORY}
  and tier = 'working'
order by num
"""
SELECT_EPISODIC = f"""
select id, text, event_id, kind, basis, pinned, expires_at from memories m
where persona = ? and project = ? and tier = 'episodic'
  and kind in ({literals(sorted(KEYED_KINDS))}) and {CURRENT_MEMORY} and basis = 'user_statement'
order by num
"""
PROMOTE = "update memories set tier = ?, expires_at = null where id = ?"
SELECT_CORRECTED = """
select r.to_id from relations r join memories m on m.id = r.to_id
where r.kind = 'corrects' and r.from_id = ? and m.revoked_at is not null
"""
SELECT_CORRECTION_SOURCE = """
select e.id from memories m join events e on e.id = m.event_id
where m.id = ? and e.category = 'correction'
"""
SELECT_DERIVED = "select id from memories where event_id = ?"


def pin(
    conn: sqlite3.Connection, persona: str, project: str, memory_id: str, pinned: bool
) -> MemoryRecord:
    """Pin (or unpin) a current memory of this scope; pinning it again changes nothing."""
    memory = load_memory(conn, persona, project, memory_id)
    if memory.pinned != pinned:
        conn.execute(SET_PINNED, (int(pinned), memory_id))
    return memory.model_copy(update={"pinned": pinned})


class Note(NamedTuple):
    """A memory consolidation may move or delete, as ``SELECT_WORKING`` reads it."""

    id: str
    text: str
    event_id: str
    kind: str
    basis: str
    pinned: int
    expires_at: str | None


def consolidate(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    as_of: datetime,
    promote_after: int,
    dry_run: bool = False,
) -> Consolidation:
    """Promote and delete by the policy above, judging TTLs at ``as_of``; with
    ``dry_run``, only say what would happen (nothing is written: it runs on a reader)."""
    now = db_time(as_of)
    working = [Note(*row) for row in conn.execute(SELECT_WORKING, (persona, project))]
    graduating = restated(working, promote_after) | {
        note.id for note in working if note.pinned and expired(note, now)
    }
    graduates = [note for note in working if note.id in graduating]
    episodic = [Note(*row) for row in conn.execute(SELECT_EPISODIC, (persona, project))]
    to_profile = restated(
        episodic + [n for n in graduates if n.kind in KEYED_KINDS and n.basis == "user_statement"],
        promote_after,
    )
    promotions = [promotion(note.id, to_profile) for note in graduates]
    promotions += [
        Promotion(id=note.id, from_tier="episodic", to_tier="profile")
        for note in episodic
        if note.id in to_profile
    ]
    expiring = [
        note.id
        for note in working
        if expired(note, now) and not note.pinned and note.id not in graduating
    ]
    deleted = [memory for note in expiring for memory in [note, *earlier_versions(conn, note)]]
    if not dry_run:
        for moved in promotions:
            conn.execute(PROMOTE, (moved.to_tier, moved.id))
        events = correction_events(conn, deleted)
        remove_memories(conn, deleted)
        remove_events(conn, events)
        uncover_removed(conn, persona, project)
    return Consolidation(
        persona=persona,
        project=project,
        as_of=as_of,
        dry_run=dry_run,
        deleted=deleted,
        promotions=promotions,
    )


def earlier_versions(conn: sqlite3.Connection, memory_id: str) -> list[str]:
    """The memories a current one's corrections revoked, newest first: its ``corrects``
    links followed back through revoked memories."""
    versions: list[str] = []
    todo = [memory_id]
    while todo:
        for (older,) in conn.execute(SELECT_CORRECTED, (todo.pop(),)).fetchall():
            if older != memory_id and older not in versions:
                versions.append(older)
                todo.append(older)
    return versions


def correction_events(conn: sqlite3.Connection, memory_ids: Iterable[str]) -> list[str]:
    """The correction events these memories come from that no other memory comes from."""
    going = set(memory_ids)
    events: dict[str, None] = {}
    for memory_id in going:
        for (event_id,) in conn.execute(SELECT_CORRECTION_SOURCE, (memory_id,)):
            derived = {row[0] for row in conn.execute(SELECT_DERIVED, (event_id,))}
            if derived <= going:
                events[event_id] = None
    return list(events)


def expired(note: Note, now: str) -> bool:
    return note.expires_at is not None and note.expires_at <= now


def restated(notes: Iterable[Note], at_least: int) -> set[str]:
    """IDs of the notes whose text (whitespace runs as one space) notes of at least
    ``at_least`` distinct events state; none when ``at_least`` is 0."""
    if at_least < 1:
        return set()
    groups: dict[str, list[Note]] = {}
    for note in notes:
        groups.setdefault(" ".join(note.text.split()), []).append(note)
    return {
        note.id
        for group in groups.values()
        if len({note.event_id for note in group}) >= at_least
        for note in group
    }


def promotion(memory_id: str, to_profile: set[str]) -> Promotion:
    """A graduating working note: to episodic, or on to profile when ``to_profile`` names
    it (reported once, from its tier before)."""
    after: MemoryTier = "profile" if memory_id in to_profile else "episodic"
    return Promotion(id=memory_id, from_tier="working", to_tier=after)
