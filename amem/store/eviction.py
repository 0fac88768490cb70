"""Natural eviction: the raw text of derived events goes, what was learned from it stays.

An event is derived once extraction (or a host's ``add_memories``) ran on it: its status
is ``extracted``, or ``amended`` after a correction or a retraction. Evicting it empties
its text and sets ``events.evicted_at``; its row, its memories and their quotes stay, so
recall and context packs keep working on the memories. Its search rows and vectors go
with the text (``erasure.unindex_events``), and ``search.index.INDEXED_EVENT`` and
``db.rules.HELD_EVENT`` keep it out of the index, the embeddings, a recall's raw fallback
and a pack's recent events from then on. amem shows its status as ``evicted``
(``db.rules.SHOWN_STATUS``). An event not derived yet (``stored``, ``pending``,
``failed``) is never evicted: its words are all there is.

The scope's text bytes drop at once (the ``scope_usage`` triggers count the emptied text;
the event still counts as an event). The words leave the file as an erasure's do: each
eviction counts in ``scrubs`` (the triggers there count deletions only), so
``erasure.scrub`` runs when the writer is next idle, or at the next open of a process
killed first.

``evict_events`` runs inside its caller's write transaction and never commits: a
consolidation applies a patch's ``evict`` list in its own transaction with it. A dry run
is the same computation on a read snapshot, nothing written. ``Scope.evict`` with
``before`` takes ``BATCH_EVENTS`` events a transaction (``select_derived`` picks them), so
a killed eviction leaves each event wholly evicted or wholly intact.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from ..db.in_lists import literals
from ..db.schema import COUNT_ERASURE
from ..errors import StorageError
from ..models import Eviction, EvictionSkip, EvictionSkipReason
from . import runs
from .erasure import COUNT_DOCS, COUNT_VECTORS, MAX_RECEIPT_IDS, unindex_events

DERIVED_STATUSES = ("extracted", "amended")
"""Stored statuses of an event whose memories are derived: its raw text may go."""
SELECT_EVENT = """
select persona, project, status, evicted_at, occurred_at, length(text),
    length(cast(text as blob))
from events where id = ?
"""
EVICT = "update events set text = '', evicted_at = ? where id = ? and evicted_at is null"
SELECT_DERIVED = f"""
select id, seq from events
where persona = :persona and project = :project and evicted_at is null
  and status in ({literals(DERIVED_STATUSES)}) and occurred_at < :before and seq > :after
order by seq limit :limit
"""


def evict_events(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    event_ids: Sequence[str],
    *,
    now: str,
    before: str | None = None,
    dry_run: bool = False,
) -> Eviction:
    """Let go of the raw text of these events of the scope, in the caller's transaction
    (never committed here); with ``dry_run`` (on a reader), only say what would go.

    Each event must be derived (``DERIVED_STATUSES``), not evicted yet and, with
    ``before`` (a stored time), have occurred before it; the others are listed in
    ``skipped`` with the reason. ``now`` is the stored ``evicted_at``."""
    evicted: list[str] = []
    skipped: list[EvictionSkip] = []
    chars = text_bytes = vectors = search_rows = 0
    for event_id in dict.fromkeys(event_ids):  # an ID named twice is one event
        row = conn.execute(SELECT_EVENT, (event_id,)).fetchone()
        reason = refusal(row, persona, project, before)
        if reason is not None:
            skipped.append(EvictionSkip(event_id=event_id, reason=reason))
            continue
        evicted.append(event_id)
        chars, text_bytes = chars + row[5], text_bytes + row[6]
        vectors += conn.execute(COUNT_VECTORS, ("event", event_id)).fetchone()[0]
        search_rows += conn.execute(COUNT_DOCS, ("event", event_id)).fetchone()[0]
    if evicted and not dry_run:
        if unindex_events(conn, evicted) != (vectors, search_rows):
            raise StorageError("the eviction did not match its plan; nothing was evicted")
        conn.executemany(EVICT, [(now, event_id) for event_id in evicted])
        conn.execute(COUNT_ERASURE)  # a scrub is due: the text leaves the file when idle
        runs.drop_event_text(conn, evicted, now)  # nor does a consolidation run keep a copy
    return Eviction(
        persona=persona,
        project=project,
        dry_run=dry_run,
        evicted=len(evicted),
        events=evicted[:MAX_RECEIPT_IDS],
        skipped=skipped[:MAX_RECEIPT_IDS],
        chars=chars,
        text_bytes=text_bytes,
        search_rows=search_rows,
        vectors=vectors,
        batches=1 if evicted and not dry_run else 0,
        ids_truncated=max(len(evicted), len(skipped)) > MAX_RECEIPT_IDS,
    )


def refusal(
    row: tuple[object, ...] | None, persona: str, project: str, before: str | None
) -> EvictionSkipReason | None:
    """Why an event (its ``SELECT_EVENT`` row) is not evicted; None when it is."""
    if row is None or (row[0], row[1]) != (persona, project):
        return "not_found"
    if row[3] is not None:
        return "already_evicted"
    if row[2] not in DERIVED_STATUSES:
        return "not_derived"
    if before is not None and not str(row[4]) < before:
        return "not_before"
    return None


def select_derived(
    conn: sqlite3.Connection, persona: str, project: str, before: str, after: int, limit: int
) -> tuple[list[str], int]:
    """The next ``limit`` derived events of the scope, not evicted, that occurred before
    ``before`` (a stored time), with a ``seq`` above ``after``, in ``seq`` order; and the
    last seq they reach (``after`` when there are none)."""
    params = {
        "persona": persona,
        "project": project,
        "before": before,
        "after": after,
        "limit": limit,
    }
    rows = conn.execute(SELECT_DERIVED, params).fetchall()
    return [row[0] for row in rows], (rows[-1][1] if rows else after)


def nothing(persona: str, project: str, *, dry_run: bool = False) -> Eviction:
    """The receipt of an eviction before its first batch."""
    return Eviction(
        persona=persona,
        project=project,
        dry_run=dry_run,
        evicted=0,
        events=[],
        skipped=[],
        chars=0,
        text_bytes=0,
        search_rows=0,
        vectors=0,
        batches=0,
    )


def combine(first: Eviction, second: Eviction) -> Eviction:
    """Two receipts of one eviction (batches in order) as one."""
    evicted = first.evicted + second.evicted
    skipped = first.skipped + second.skipped
    return first.model_copy(
        update={
            "evicted": evicted,
            "events": (first.events + second.events)[:MAX_RECEIPT_IDS],
            "skipped": skipped[:MAX_RECEIPT_IDS],
            "chars": first.chars + second.chars,
            "text_bytes": first.text_bytes + second.text_bytes,
            "search_rows": first.search_rows + second.search_rows,
            "vectors": first.vectors + second.vectors,
            "batches": first.batches + second.batches,
            "ids_truncated": first.ids_truncated
            or second.ids_truncated
            or max(evicted, len(skipped)) > MAX_RECEIPT_IDS,
        }
    )


def preview(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    event_ids: Sequence[str] | None,
    *,
    before: str | None,
    now: str,
) -> Eviction:
    """What evicting ``event_ids`` (None: every derived event before ``before``) would let
    go, read on one snapshot: the same computation as the batches, nothing written."""
    if event_ids is None:
        assert before is not None
        event_ids, _ = select_derived(conn, persona, project, before, 0, -1)  # -1: no limit
    return evict_events(conn, persona, project, event_ids, now=now, before=before, dry_run=True)
