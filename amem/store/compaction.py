"""Compacting a session's working notes: extractive and offline (no model call).

A session's working notes are the current ``working`` memories whose source event is in
that session. The pinned ones stay, and so do the newest ``keep`` of the others (in the
order they were stored); the older ones are folded, in one transaction:

- a new event in the session (role ``system``, category ``conversation``, source
  ``amem:compaction``) lists every folded note, oldest first, as ``- <id>: <text>``: their
  words, exactly;
- one ``episodic`` memory (kind ``episode``, basis ``inference``) quotes that event
  whole, starts when the earliest folded note did, takes their lowest confidence, and is
  linked (``related``) to each folded note;
- the folded notes are revoked with the reason ``compacted into <memory id>``: their rows
  stay for audit, out of recall; their source events are not touched.

So nothing is lost (the event holds every word; the rows stay) and recall finds the
folded notes' words through the new memory. With nothing to fold, nothing is written, so
a second call is a no-op. The event is at most ``MAX_EVENT_CHARS`` long: if the notes to
fold would pass that, the oldest that fit are folded and another call folds the rest.

The texts are segmented for the index before the transaction (off the event loop), from
a plan read on a snapshot; the transaction folds only if its own plan is the same (else
the caller plans again: ``Scope.compact_working``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import NamedTuple

from ..db.rules import CURRENT_MEMORY
from ..db.times import from_db_time
from ..limits import MAX_EVENT_CHARS, MAX_MEMORY_CHARS
from ..models import Compaction, MemoryDraft
from .events import NewEvent, derived_event, insert_event
from .facts import derive_memories
from .relations import add_relation
from .retraction import revoke

SOURCE = "amem:compaction"
"""The ``source`` of a compaction event."""
SELECT_NOTES = f"""
select m.id, m.text, m.pinned, m.valid_at, m.confidence
from events e join memories m on m.event_id = e.id
where e.persona = ? and e.project = ? and e.session = ? and m.tier = 'working'
  and {CURRENT_MEMORY}
order by m.num
"""


class Note(NamedTuple):
    """A working note of the session, as ``SELECT_NOTES`` reads it."""

    id: str
    text: str
    pinned: int
    valid_at: str
    confidence: float


@dataclass(frozen=True, slots=True)
class Plan:
    kept: list[str]
    """IDs of the working notes that stay."""
    folded: list[Note]
    """The notes to fold, oldest first."""

    def event_text(self, session: str) -> str:
        """The compaction event's text: every folded note, word for word."""
        return listing(session, self.folded)

    def summary(self, session: str) -> str:
        """The episodic memory's text: the notes on one line, cut to a memory's length."""
        notes = "; ".join(" ".join(note.text.split()) for note in self.folded)
        text = f"Working notes of session {session}: {notes}"
        return text if len(text) <= MAX_MEMORY_CHARS else text[: MAX_MEMORY_CHARS - 1] + "…"


def listing(session: str, notes: Sequence[Note]) -> str:
    """A header line, then ``- <id>: <text>`` for each note."""
    header = f"Working notes of session {session}, compacted ({len(notes)}, oldest first):"
    return "\n".join([header, *(f"- {note.id}: {note.text}" for note in notes)])


def plan(conn: sqlite3.Connection, persona: str, project: str, session: str, keep: int) -> Plan:
    """Which of the session's working notes stay and which are folded."""
    notes = [Note(*row) for row in conn.execute(SELECT_NOTES, (persona, project, session))]
    unpinned = [note for note in notes if not note.pinned]
    older = unpinned[: max(0, len(unpinned) - keep)]
    folded = older
    while folded and len(listing(session, folded)) > MAX_EVENT_CHARS:
        folded = folded[:-1]  # the newest of them wait for the next call
    ids = {note.id for note in folded}
    return Plan(kept=[note.id for note in notes if note.id not in ids], folded=folded)


def new_event(
    persona: str, project: str, session: str, event_id: str, text: str, segmented: str, now: str
) -> NewEvent:
    """The compaction event (``text``: ``Plan.event_text``, its tokens ``segmented``)."""
    return derived_event(
        event_id, persona, project, session, "system", "conversation", SOURCE, text, segmented, now
    )


def receipt(
    persona: str, project: str, session: str, planned: Plan, *, dry_run: bool
) -> Compaction:
    """The answer when nothing is written: a dry run, or nothing to fold."""
    return Compaction(
        persona=persona,
        project=project,
        session=session,
        dry_run=dry_run,
        kept=planned.kept,
        folded=[note.id for note in planned.folded],
        memory=None,
        event_id=None,
    )


def compact(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    keep: int,
    expected: Sequence[str],
    event: NewEvent,
    summary: str,
    segmented: str,
    now: str,
    working_ttl: timedelta,
) -> Compaction | None:
    """Fold the notes ``expected`` names into ``event`` (``Plan.event_text``) and one
    episodic memory (``summary``, whose tokens are ``segmented``); None, writing nothing,
    if the session's notes no longer plan to exactly those."""
    assert event.session is not None
    current = plan(conn, persona, project, event.session, keep)
    if [note.id for note in current.folded] != list(expected) or not expected:
        return None
    insert_event(conn, event)
    draft = MemoryDraft(
        text=summary,
        quote=event.text,
        kind="episode",
        basis="inference",
        confidence=min(note.confidence for note in current.folded),
        valid_at=from_db_time(min(note.valid_at for note in current.folded)),
        tier="episodic",
    )
    [memory] = derive_memories(
        conn, persona, project, event.id, [draft], [segmented], now, working_ttl=working_ttl
    )
    for note in current.folded:
        add_relation(conn, persona, project, memory.id, note.id, "related", None, now)
        revoke(conn, note.id, f"compacted into {memory.id}", now)
    return Compaction(
        persona=persona,
        project=project,
        session=event.session,
        dry_run=False,
        kept=current.kept,
        folded=list(expected),
        memory=memory,
        event_id=event.id,
    )
