"""Recall: which memories are eligible at ``as_of``, which match the query, and in what order.

Eligible: the scope's memories that are not revoked, have started (``valid_at <= as_of``;
future facts wait for their start) and are still valid (``as_of < invalid_at``), or, with
``include_history``, have expired (marked ``expired``). Matching: the query's tokens
against the lexical index (``text.match_expression``); a query with no matching evidence
returns nothing, never unrelated memories.

Ranking is a weighted sum of parts in 0..1, each reported on the item: lexical (bm25,
relative to the best candidate), basis, confidence and freshness (half-life 180 days
from ``valid_at`` to ``as_of``). Semantic similarity and related links join with the
embedding and retrieval work; until then they are 0.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Sequence
from datetime import datetime

from .inputs import db_time, from_db_time
from .models import RecallItem, ScoreComponents
from .text import match_expression

CANDIDATES = 200
"""Most lexical candidates ranked per query."""
HALF_LIFE_DAYS = 180.0
BASIS_WEIGHT = {"user_statement": 1.0, "assistant_expression": 0.8, "inference": 0.5}
WEIGHTS = {"lexical": 0.55, "basis": 0.15, "confidence": 0.1, "freshness": 0.2}

SELECT_CANDIDATES = """
select m.id, m.text, m.quote, m.kind, m.basis, m.confidence, m.subject, m.fact_key,
       m.valid_at, m.invalid_at, m.event_id, e.occurred_at, -bm25(search_fts) as lexical
from search_fts
join search_docs d on d.num = search_fts.rowid
join memories m on m.id = d.ref
join events e on e.id = m.event_id
where search_fts match :match and d.doc_kind = 'memory'
  and d.persona = :persona and d.project = :project
  and m.revoked_at is null and m.valid_at <= :as_of
  and (:history or m.invalid_at is null or m.invalid_at > :as_of)
  {kinds}
order by bm25(search_fts) limit :candidates
"""


def recall_memories(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    query: str,
    limit: int,
    as_of: datetime,
    include_history: bool,
    kinds: Collection[str] | None,
) -> list[RecallItem]:
    match = match_expression(query)
    if match is None:
        return []
    kind_filter = ""
    params: dict[str, object] = {
        "match": match, "persona": persona, "project": project, "as_of": db_time(as_of),
        "history": include_history, "candidates": CANDIDATES,
    }  # fmt: skip
    if kinds:
        names = [f":kind{n}" for n in range(len(kinds))]
        kind_filter = f"and m.kind in ({', '.join(names)})"
        params.update({name[1:]: kind for name, kind in zip(names, sorted(kinds), strict=True)})
    rows = conn.execute(SELECT_CANDIDATES.format(kinds=kind_filter), params).fetchall()
    best = max((row[12] for row in rows), default=0.0) or 1.0
    items = [recall_item(row, best, as_of) for row in rows]
    items.sort(key=lambda item: (-item.score, item.id))
    return items[:limit]


def recall_item(row: Sequence[object], best_lexical: float, as_of: datetime) -> RecallItem:
    (id_, text, quote, kind, basis, confidence, subject, fact_key, valid_at, invalid_at,
     event_id, occurred_at, lexical) = row  # fmt: skip
    valid = from_db_time(str(valid_at))
    ends = None if invalid_at is None else from_db_time(str(invalid_at))
    components = ScoreComponents(
        lexical=max(0.0, float(lexical)) / best_lexical,  # type: ignore[arg-type]
        semantic=0.0,
        link=0.0,
        basis=BASIS_WEIGHT[str(basis)],
        confidence=float(confidence),  # type: ignore[arg-type]
        freshness=freshness(valid, as_of),
    )
    return RecallItem.model_validate(
        {
            "id": id_, "text": text, "quote": quote, "kind": kind, "basis": basis,
            "confidence": confidence, "subject": subject, "fact_key": fact_key,
            "valid_at": valid, "invalid_at": ends,
            "expired": ends is not None and ends <= as_of,
            "source_event_id": event_id, "occurred_at": from_db_time(str(occurred_at)),
            "score": round(score(components), 6), "components": components,
        }
    )  # fmt: skip


def freshness(valid_at: datetime, as_of: datetime) -> float:
    age_days = max(0.0, (as_of - valid_at).total_seconds() / 86400)
    return float(0.5 ** (age_days / HALF_LIFE_DAYS))


def score(parts: ScoreComponents) -> float:
    return sum(float(getattr(parts, name)) * weight for name, weight in WEIGHTS.items())
