"""The order of the candidates: in ``fast`` mode their evidence scaled by their priors; in
hybrid recall the surprise of their evidence, words and meaning summed, with replies."""

from __future__ import annotations

import math
import sqlite3
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..db import in_lists
from ..db.times import from_db_time
from ..models import ScoreComponents
from .evidence import Candidate, Kind, RawEvent, add_events
from .query import Eligibility, RecallQuery
from .tuning import (
    BASIS_WEIGHT,
    EVIDENCE_WEIGHTS,
    LEXICAL_EVIDENCE,
    PRIOR_WEIGHTS,
    RAW_BASIS,
    RAW_CONFIDENCE,
    REPLIED,
    REPLY_SHARE,
)

if TYPE_CHECKING:
    from .lexical import Lexical
    from .nearest import Spread

# The turn after each event in its session (null sessions are one stream), if someone else
# said it: one index step.
SELECT_REPLIES = """
select e.id, n.id from events e join events n on n.seq = (
    select x.seq from events x
    where x.persona = e.persona and x.project = e.project and x.session is e.session
    and x.seq > e.seq order by x.seq limit 1
)
where e.id in ({ids}) and e.category = 'conversation'
and n.category = 'conversation' and n.role != e.role
"""


def lexical_rank_score(candidate: Candidate, q: RecallQuery) -> float:
    """What the lexical list ranks by: lexical and link evidence scaled by the priors.

    Among equal fusion scores it puts the better word match first: the query's words
    stand in it, while a cosine in e5's narrow band says less (on MemoryBank, Chinese,
    hit@5 0.853 to 0.863 with it; on LoCoMo recall@10 0.636 to 0.638; before, the memory
    ID decided)."""
    if not (candidate.lexical or candidate.link):
        return 0.0
    return score(parts(candidate, q), LEXICAL_EVIDENCE)


def fuse(found: dict[str, Candidate], q: RecallQuery, words: Lexical, meaning: Spread) -> None:
    """Set every candidate's ``fusion``: the evidence of its words and of its meaning, each
    as the surprise of seeing it by chance (in nats), summed.

    A word match is as surprising as the chance that a document of the scope, unrelated
    to the query, scores its BM25 for the query's terms (``chance.WordChance``): a rare
    name's match is many nats, common words shared by a long query few. A cosine is
    surprising by how far it stands above the query's cosines to the whole scope
    (``meaning``, in standard deviations z), as the upper tail of a normal distribution
    says: ``-log P(Z >= z)``. Both in one unit, neither needs a weight: a query whose
    words name a memory scores it many nats, while its cosines crowd in a narrow band; a
    paraphrase shares no word, and the memory it means stands out in meaning. A
    candidate with no vector has no meaning to count."""
    from .chance import WordChance  # numpy: hybrid recall only

    chance = WordChance(words.terms, words.documents)
    for candidate in found.values():
        candidate.word_rank = lexical_rank_score(candidate, q)
        said = chance.surprise(max(candidate.lexical, candidate.link) * words.nats)
        near = 0.0 if candidate.cosine is None else surprise(meaning.standing(candidate.cosine))
        candidate.fusion = said + near


def surprise(z: float) -> float:
    """``-log P(Z >= z)`` of a standard normal Z (its upper tail past 8: the asymptotic
    series, where ``erfc`` underflows)."""
    if z < 8:
        return -math.log(0.5 * math.erfc(z / math.sqrt(2)))
    return z * z / 2 + math.log(z) + 0.5 * math.log(2 * math.pi) - math.log1p(-1 / (z * z))


def fusion_order(memory_id: str, candidate: Candidate) -> tuple[float, float, str]:
    """Hybrid order: fusion score, then the better word match, then the ID."""
    return (-round(candidate.fusion or 0.0, 6), -candidate.word_rank, memory_id)


def add_replies(conn: sqlite3.Connection, found: dict[str, Candidate], where: Eligibility) -> None:
    """Raise the reply of each of the best ``REPLIED`` conversation turns (the next event of
    its session) to ``REPLY_SHARE`` of that turn's fusion score, bringing it in if need be:
    a question often matches the turn that asked it, and the answer is the turn after
    (docs/decisions/recall-fusion.md)."""
    best = sorted(found.items(), key=lambda entry: fusion_order(*entry))[:REPLIED]
    share: dict[str, float] = {}  # event -> the fusion its reply is raised to
    for _, candidate in best:
        event_id = candidate.event_id
        share[event_id] = max(share.get(event_id, 0.0), REPLY_SHARE * (candidate.fusion or 0.0))
    if not share:
        return
    ids, values = in_lists.named("v", share)
    replies: dict[str, float] = {}
    for event_id, reply_id in conn.execute(SELECT_REPLIES.format(ids=ids), values):
        replies[reply_id] = max(replies.get(reply_id, 0.0), share[event_id])
    add_events(conn, found, where, replies, Kind.REPLY, derived_share=1.0)
    for candidate in found.values():
        if candidate.reply:
            candidate.fusion = max(candidate.fusion or 0.0, candidate.reply)


def ranking(candidate: Candidate, q: RecallQuery) -> float:
    """``score`` of a candidate: its fusion score as it stands (hybrid), else its evidence
    scaled by its priors."""
    if candidate.fusion is not None:
        return candidate.fusion
    return score(parts(candidate, q))


def parts(candidate: Candidate, q: RecallQuery) -> dict[str, Any]:
    """The score components of a candidate, before any model is built."""
    row = candidate.row
    if isinstance(row, RawEvent):
        basis, confidence, since = RAW_BASIS, RAW_CONFIDENCE, row.occurred_at
    else:
        basis, confidence, since = BASIS_WEIGHT[row.basis], row.confidence, row.valid_at
    return {
        "lexical": candidate.lexical,
        "semantic": max(0.0, min(1.0, candidate.semantic)),
        "link": candidate.link,
        "fusion": candidate.fusion,
        "basis": basis,
        "confidence": float(confidence),
        "freshness": freshness(from_db_time(since), q.as_of, q.half_life_days),
    }


def score(
    components: ScoreComponents | dict[str, Any], evidence_weights: dict[str, float] | None = None
) -> float:
    """The ``fusion`` score in hybrid recall; otherwise evidence scaled by the priors:
    ``evidence * (1 - sum(weight * (1 - prior)))``, with ``evidence_weights`` (all the
    evidence by default).

    Scaling, not adding, keeps an old or inferred strong match above a fresh weak one,
    while among equal matches the fresher, better-sourced one still comes first.
    """
    values = components if isinstance(components, dict) else components.model_dump()
    if evidence_weights is None:
        if values["fusion"] is not None:
            return float(values["fusion"])
        evidence_weights = EVIDENCE_WEIGHTS
    evidence = shortfall = 0.0
    for name, weight in evidence_weights.items():  # plain loops: this runs per candidate
        evidence += values[name] * weight
    for name, weight in PRIOR_WEIGHTS.items():
        shortfall += (1 - values[name]) * weight
    return evidence * (1 - shortfall)


def freshness(valid_at: datetime, as_of: datetime, half_life_days: float) -> float:
    age_days = max(0.0, (as_of - valid_at).total_seconds() / 86400)
    return float(0.5 ** (age_days / half_life_days))
