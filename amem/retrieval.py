"""Recall: which memories are eligible at ``as_of``, which match the query, and in what order.

Eligible: the scope's memories that are not revoked, have started (``valid_at <= as_of``;
future facts wait for their start) and are still valid (``as_of < invalid_at``), or, with
``include_history``, have expired (marked ``expired``).

Evidence: lexical matches of the query's tokens in the FTS index (``text.match_expression``)
and, in ``semantic``/``deep`` mode, vectors of the current fingerprint whose cosine
similarity to the query reaches the per-model threshold. ``semantic`` scans the most
recent ``semantic_scan`` eligible vectors, ``deep`` all of them; ``fast`` never reads a
vector or calls an embedding API. A query with no evidence returns nothing, never
unrelated memories.

Ranking is a weighted sum of parts in 0..1, each reported on the item: lexical (bm25,
relative to the best candidate), semantic (cosine), basis, confidence and freshness
(half-life 180 days from ``valid_at`` to ``as_of``). Related links join with the
retrieval work; until then ``link`` is 0.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from .embedding import Vector, cosine, from_blob
from .inputs import db_time, from_db_time
from .models import RecallItem, ScoreComponents
from .text import match_expression

CANDIDATES = 200
"""Most candidates ranked per query, from each kind of evidence."""
HALF_LIFE_DAYS = 180.0
BASIS_WEIGHT = {"user_statement": 1.0, "assistant_expression": 0.8, "inference": 0.5}
WEIGHTS = {"lexical": 0.45, "semantic": 0.25, "basis": 0.1, "confidence": 0.05, "freshness": 0.15}

ITEM_COLUMNS = """
    m.id, m.text, m.quote, m.kind, m.basis, m.confidence, m.subject, m.fact_key,
    m.valid_at, m.invalid_at, m.event_id, e.occurred_at
"""
ELIGIBLE = """
m.persona = :persona and m.project = :project and m.revoked_at is null
and m.valid_at <= :as_of and (:history or m.invalid_at is null or m.invalid_at > :as_of)
{kinds}
"""
SELECT_LEXICAL = f"""
select {ITEM_COLUMNS}, -bm25(search_fts)
from search_fts
join search_docs d on d.num = search_fts.rowid
join memories m on m.id = d.ref
join events e on e.id = m.event_id
where search_fts match :match and d.doc_kind = 'memory'
  and d.persona = :persona and d.project = :project and {ELIGIBLE}
order by bm25(search_fts) limit {CANDIDATES}
"""
SELECT_VECTORS = f"""
select m.id, v.vector from embeddings v join memories m on m.id = v.memory_id
where v.fingerprint = :fingerprint and {ELIGIBLE}
order by m.num desc limit :scan
"""
COUNT_ELIGIBLE = f"select count(*) from memories m where {ELIGIBLE}"
SELECT_ITEM = f"""
select {ITEM_COLUMNS}, 0.0 from memories m join events e on e.id = m.event_id where m.id = ?
"""


@dataclass(frozen=True, slots=True)
class RecallQuery:
    persona: str
    project: str
    query: str
    limit: int
    as_of: datetime
    include_history: bool
    kinds: frozenset[str] | None = None
    vector: Vector | None = None
    """The query's embedding, for ``semantic``/``deep``; None in ``fast`` mode."""
    fingerprint: str | None = None
    scan: int | None = None
    """Most recent eligible vectors to scan; None scans all (``deep``)."""
    min_similarity: float = 0.3


def recall_memories(conn: sqlite3.Connection, q: RecallQuery) -> tuple[list[RecallItem], list[str]]:
    """Ranked items and warnings (incomplete vector coverage, scan cut short)."""
    params, kinds = eligibility(q)
    lexical: dict[str, tuple[object, ...]] = {}
    match = match_expression(q.query)
    if match is not None:
        sql = SELECT_LEXICAL.format(kinds=kinds)
        lexical = {row[0]: row for row in conn.execute(sql, {**params, "match": match})}
    similarity: dict[str, float] = {}
    warnings: list[str] = []
    if q.vector is not None:
        similarity, warnings = semantic_matches(conn, q, params, kinds)
    rows = dict(lexical)
    for memory_id in similarity.keys() - rows.keys():
        rows[memory_id] = conn.execute(SELECT_ITEM, (memory_id,)).fetchone()
    best = max((float(row[12]) for row in lexical.values()), default=0.0) or 1.0  # type: ignore[arg-type]
    items = [
        recall_item(row, best, similarity.get(str(row[0]), 0.0), q.as_of) for row in rows.values()
    ]
    items.sort(key=lambda item: (-item.score, item.id))
    return items[: q.limit], warnings


def eligibility(q: RecallQuery) -> tuple[dict[str, object], str]:
    params: dict[str, object] = {
        "persona": q.persona, "project": q.project, "as_of": db_time(q.as_of),
        "history": q.include_history,
    }  # fmt: skip
    if not q.kinds:
        return params, ""
    names = [f"kind{n}" for n in range(len(q.kinds))]
    params.update(zip(names, sorted(q.kinds), strict=True))
    return params, f"and m.kind in ({', '.join(':' + name for name in names)})"


def semantic_matches(
    conn: sqlite3.Connection, q: RecallQuery, params: dict[str, object], kinds: str
) -> tuple[dict[str, float], list[str]]:
    """Cosine similarity of the query to scanned vectors, kept where it reaches the threshold."""
    assert q.vector is not None
    scan = q.scan if q.scan is not None else -1  # sqlite: a negative limit means none
    sql = SELECT_VECTORS.format(kinds=kinds)
    scored = [
        (cosine(q.vector, from_blob(blob)), str(memory_id))
        for memory_id, blob in conn.execute(
            sql, {**params, "fingerprint": q.fingerprint, "scan": scan}
        )
        if len(blob) == 4 * len(q.vector)  # another dimension is another space
    ]
    eligible = conn.execute(COUNT_ELIGIBLE.format(kinds=kinds), params).fetchone()[0]
    warnings = []
    if q.scan is not None and len(scored) >= q.scan and eligible > q.scan:
        warnings.append(
            f"semantic mode scanned the {q.scan} most recent of {eligible} eligible memories; "
            "use deep mode to scan all"
        )
    elif len(scored) < eligible:
        warnings.append(
            f"vector index covers {len(scored)} of {eligible} eligible memories; run reindex"
        )
    kept = sorted((pair for pair in scored if pair[0] >= q.min_similarity), reverse=True)
    return {memory_id: similarity for similarity, memory_id in kept[:CANDIDATES]}, warnings


def recall_item(
    row: Sequence[object], best_lexical: float, similarity: float, as_of: datetime
) -> RecallItem:
    (id_, text, quote, kind, basis, confidence, subject, fact_key, valid_at, invalid_at,
     event_id, occurred_at, lexical) = row  # fmt: skip
    valid = from_db_time(str(valid_at))
    ends = None if invalid_at is None else from_db_time(str(invalid_at))
    components = ScoreComponents(
        lexical=max(0.0, float(lexical)) / best_lexical,  # type: ignore[arg-type]
        semantic=max(0.0, min(1.0, similarity)),
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
