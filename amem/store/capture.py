"""Host capture: a host hands over its transcript, in order, and amem keeps up with it.

Each host instance has a cursor per scope: how many transcript entries it has captured.
One ingest is one transaction: entries before the cursor are skipped (so an event deleted
since is never resurrected by a replay), the others are stored idempotently by their
stable IDs, an optional checkpoint is saved, and only then does the cursor advance. An
entry past the cursor whose ID was erased from the scope (a tombstone names it) is not
stored again: it is skipped and reported in ``erased``, and the cursor moves past it, so
a host replaying an outbox that still holds an erased entry keeps making progress. A
caller that read the cursor first passes it back as ``expected_cursor``; if another
writer moved it meanwhile, nothing is written (``version_conflict``). Every person the
caller's speaker mapping names must be in the scope's registry, whether or not an entry
of this slice is theirs; one that is not refuses the ingest (``not_found``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Sequence
from typing import Any

from ..errors import Conflict, InvalidInput
from ..models import CaptureResult
from . import checkpoints, events
from .people import require_people
from .tombstones import is_erased

SELECT_CURSOR = """
select position from capture_cursors where persona = ? and project = ? and instance = ?
"""
UPSERT_CURSOR = """
insert into capture_cursors (persona, project, instance, position, last_event_id, updated_at)
values (?, ?, ?, ?, ?, ?)
on conflict (persona, project, instance) do update set
    position = excluded.position, last_event_id = excluded.last_event_id,
    updated_at = excluded.updated_at
"""


def read_cursor(conn: sqlite3.Connection, persona: str, project: str, instance: str) -> int:
    row = conn.execute(SELECT_CURSOR, (persona, project, instance)).fetchone()
    return 0 if row is None else int(row[0])


def ingest(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    instance: str,
    start: int,
    entries: Sequence[events.NewEvent],
    expected_cursor: int | None,
    checkpoint: dict[str, Any] | None,
    now: str,
    people: Collection[str] = (),
) -> CaptureResult:
    cursor = read_cursor(conn, persona, project, instance)
    if expected_cursor is not None and expected_cursor != cursor:
        raise Conflict(
            "another writer moved this capture cursor; read it again and resend from there",
            code="version_conflict",
        )
    if start > cursor:
        raise InvalidInput("the transcript slice starts after the cursor: entries would be lost")
    require_people(conn, persona, project, people, "people")
    skipped = min(len(entries), cursor - start)
    erased = [e.id for e in entries[skipped:] if is_erased(conn, persona, project, e.id)]
    gone = set(erased)
    receipts = [events.insert_event(conn, e) for e in entries[skipped:] if e.id not in gone]
    saved = None
    if checkpoint is not None:
        # a copy: the writer may run this function twice (a batch retried request by request)
        fields = dict(checkpoint)
        covered = fields.pop("covered_seq", None)
        if covered is None:  # the last captured entry of the checkpoint's own session
            covered = next(
                (r.seq for r in reversed(receipts) if r.session == fields["session"]), None
            )
        saved = checkpoints.save_checkpoint(
            conn, persona, project, covered_seq=covered, now=now, **fields
        )
    position = max(cursor, start + len(entries))
    last = receipts[-1].event_id if receipts else None
    conn.execute(UPSERT_CURSOR, (persona, project, instance, position, last, now))
    return CaptureResult(
        persona=persona,
        project=project,
        instance=instance,
        cursor=position,
        stored=[r.event_id for r in receipts if not r.duplicate],
        duplicates=[r.event_id for r in receipts if r.duplicate],
        skipped=skipped,
        erased=erased,
        checkpoint=saved,
        receipts=receipts,
    )


def combined(slices: Sequence[CaptureResult], skipped: int) -> CaptureResult:
    """The results of a transcript's slices, in order, as one: the last one's cursor and
    checkpoint, every slice's events, and ``skipped`` entries before the first."""
    return slices[-1].model_copy(
        update={
            "stored": [e for s in slices for e in s.stored],
            "duplicates": [e for s in slices for e in s.duplicates],
            "erased": [e for s in slices for e in s.erased],
            "skipped": skipped,
            "receipts": [r for s in slices for r in s.receipts],
        }
    )
