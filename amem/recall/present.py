"""What a candidate looks like to the caller: one ``RecallItem`` per shown text, old detail
faded to its gist or cue."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ..db.times import from_db_time
from ..models import RecallItem, ScoreComponents, Via
from ..store.facts import FADING_KINDS
from .evidence import Candidate, Kind, RawEvent
from .query import RecallQuery
from .ranking import parts, score
from .tuning import RAW_CHARS

STORED_FIELDS = ("id", "quote", "kind", "basis", "confidence", "subject", "fact_key", "tier")
"""What an item shows of a memory as stored."""


VIA: dict[Kind, Via] = {
    Kind.LEXICAL: "lexical",
    Kind.SEMANTIC: "semantic",
    Kind.LINK: "link",
    Kind.REPLY: "reply",
}
"""``RecallItem.via``: each kind of evidence by its name."""


NOT_RAW: dict[str, Any] = dict.fromkeys((*STORED_FIELDS[1:], "valid_at", "invalid_at"))
"""The fields only a memory has: None in a raw event's item."""


def merge_identical(
    scored: list[tuple[float, str, Candidate]], q: RecallQuery
) -> list[tuple[Candidate, list[str]]]:
    """One entry per shown text (whitespace runs as one space, case kept), in ranked
    order: its best scored candidate (the newest on ties) and the IDs of the others.

    A message said five times is one item, so ``limit`` counts distinct texts.
    """
    groups: dict[str, list[tuple[float, str, Candidate]]] = {}
    for entry in scored:  # a group's place is its best member's: dicts keep first insertion
        groups.setdefault(" ".join(shown_text(entry[2], q).split()), []).append(entry)
    merged = []
    for group in groups.values():
        best = max(group, key=lambda entry: (entry[0], entry[2].row.occurred_at))
        merged.append((best[2], [memory_id for _, memory_id, _ in group if best[1] != memory_id]))
    return merged


def shown_text(candidate: Candidate, q: RecallQuery) -> str:
    """The text an item of this candidate shows: the raw event's, or the memory's as
    ``present`` fades it."""
    row = candidate.row
    if isinstance(row, RawEvent):
        return row.text
    valid = from_db_time(row.valid_at)
    return present(row.text, row.kind, row.gist, row.cue_key, valid, q)[0]


def recall_item(candidate: Candidate, q: RecallQuery, merged_ids: list[str]) -> RecallItem:
    """The item of a candidate that stands for itself and the candidates ``merged_ids``,
    which showed the same text."""
    row = candidate.row
    components = ScoreComponents(**parts(candidate, q))
    via = [VIA[kind] for kind in Kind if kind in candidate.found_by]
    if isinstance(row, RawEvent):
        return raw_item(row, components, merged_ids, via)
    valid = from_db_time(row.valid_at)
    ends = None if row.invalid_at is None else from_db_time(row.invalid_at)
    shown, faded, coarse = present(row.text, row.kind, row.gist, row.cue_key, valid, q)
    return RecallItem(
        **{name: getattr(row, name) for name in STORED_FIELDS},
        text=shown,
        valid_at=valid,
        invalid_at=ends,
        expired=ends is not None and ends <= q.as_of,
        source_event_id=row.event_id,
        occurred_at=from_db_time(row.occurred_at),
        score=round(score(components), 6),
        components=components,
        gist=faded,
        coarse_time=coarse,
        role=row.role,
        occurrences=1 + len(merged_ids),
        merged_ids=merged_ids,
        pinned=bool(row.pinned),
        person=row.person,
        about=json.loads(row.about) if row.about else [],
        via=via,
    )


def raw_item(
    event: RawEvent, components: ScoreComponents, merged_ids: list[str], via: list[Via]
) -> RecallItem:
    return RecallItem(
        **NOT_RAW,
        id=event.id,
        text=event.text,
        role=event.role,
        occurrences=1 + len(merged_ids),
        merged_ids=merged_ids,
        expired=bool(event.corrected_by),
        corrected_by=sorted(event.corrected_by),
        source_event_id=event.id,
        occurred_at=from_db_time(event.occurred_at),
        score=round(score(components), 6),
        components=components,
        raw_fallback=True,
        truncated=event.length > RAW_CHARS,
        person=event.person,
        via=via,
    )


def present(
    text: str, kind: str, gist: str | None, cue: str | None, valid_at: datetime, q: RecallQuery
) -> tuple[str, bool, str | None]:
    """``(text shown, is a gist, coarse time label)`` for a memory of this age."""
    age_days = (q.as_of - valid_at).total_seconds() / 86400
    if kind not in FADING_KINDS:
        return text, False, None
    coarse = f"{valid_at.year // 10 * 10}s" if age_days > q.coarsen_after_days else None
    if age_days <= q.fade_after_days:
        return text, False, coarse
    if gist:
        return gist, True, coarse
    return f"[topic cue] {cue or text[:80]}", True, coarse
