"""Evidence of meaning: the memories and events whose vectors are nearest the query's,
and how the query's cosines spread over the scope."""

from __future__ import annotations

import functools
import math
import sqlite3
from statistics import NormalDist
from typing import NamedTuple

import numpy as np

from ..db.rules import CURRENT_MEMORY, PERSON_MEMORY
from ..search.vector_rows import Nearest
from ..search.vectors import Matrices, similarities
from .evidence import Candidate, Kind, add_events, add_memories
from .lexical import KnownTerms, scope_size
from .query import Eligibility, RecallQuery
from .tuning import COVERED, SIMULATED


class Spread(NamedTuple):
    """How a query's cosines spread over the scope: their mean and standard deviation."""

    mean: float
    deviation: float

    def standing(self, cosine: float) -> float:
        """How far ``cosine`` stands above the mean, in deviations."""
        return (cosine - self.mean) / self.deviation if self.deviation > 0 else 0.0


class Meaning(NamedTuple):
    """What the vector search found for a query that vectors rank (``search``)."""

    nearest: Nearest
    spread: Spread
    warnings: list[str]
    """Incomplete coverage, a search cut short."""


def search(
    conn: sqlite3.Connection, q: RecallQuery, matrices: Matrices | None, known: KnownTerms | None
) -> Meaning | None:
    """The vectors nearest the query's, or None when vectors take no part in this recall:
    none was asked for (``fast``), or ``auto`` finds them covering too little of the scope,
    which is then ranked by its words alone. Decided here once for the whole recall."""
    if q.vector is None or q.fingerprint is None or matrices is None:
        return None
    if q.person is not None:
        nearest = person_nearest(conn, q)
    else:
        scope = (q.persona, q.project)
        nearest = matrices.nearest(conn, scope, q.fingerprint, q.vector, q.depth, q.scan)
    documents = scope_size(conn, q, known)
    if q.auto_coverage is not None and nearest.embedded < q.auto_coverage * documents:
        return None
    warnings: list[str] = []
    if nearest.embedded < COVERED * documents:
        warnings.append(
            f"vectors cover about {min(nearest.embedded / documents, 1):.0%} of this scope's "
            "memories and events; the rest is found by its words only (the next process "
            "to open the file embeds what is missing; `amem reindex` embeds it now)"
        )
    if q.scan is not None and nearest.embedded > q.scan:
        warnings.append(
            f"semantic mode searched only the {q.scan} newest vectors; deep mode searches all"
        )
    return Meaning(nearest, Spread(nearest.mean, nearest.spread), warnings)


SELECT_PERSON_DOCS = f"""
select 'event', id from events
where persona = :persona and project = :project and person = :person
union all
select 'memory', id from memories m
where persona = :persona and project = :project and {CURRENT_MEMORY} and {PERSON_MEMORY}
"""


def person_nearest(conn: sqlite3.Connection, q: RecallQuery) -> Nearest:
    """``Matrices.nearest`` over one person's documents only: each read by key (a person's
    share of a large scope is small, and the scope's nearest would crowd it out)."""
    assert q.vector is not None
    assert q.fingerprint is not None
    key = {"persona": q.persona, "project": q.project, "person": q.person}
    keys = [(kind, ref) for kind, ref in conn.execute(SELECT_PERSON_DOCS, key)]
    found = similarities(conn, q.fingerprint, q.vector, keys)
    cosines = np.fromiter(found.values(), dtype=np.float64, count=len(found))
    best = dict(sorted(found.items(), key=lambda pair: -pair[1])[: q.depth])
    mean = float(cosines.mean()) if len(cosines) else 0.0
    spread = float(cosines.std()) if len(cosines) else 0.0
    return Nearest(best, len(found), len(found), mean, spread)


def add_nearest(
    conn: sqlite3.Connection,
    found: dict[str, Candidate],
    where: Eligibility,
    meaning: Meaning,
    floor: float,
) -> None:
    """The memories and events nearest the query as ``semantic`` evidence, when the query
    has evidence at all: a word match (``found``), or a nearest vector that is evidence by
    itself (``stands_out``). Without it nothing is returned, however near the nearest."""
    if not found and not stands_out(meaning.nearest, meaning.spread, floor):
        return
    toward = {key: cosine for key, cosine in meaning.nearest.found.items() if cosine > 0}
    memories = {ref: cosine for (doc, ref), cosine in toward.items() if doc == "memory"}
    events = {ref: cosine for (doc, ref), cosine in toward.items() if doc == "event"}
    add_memories(conn, found, where, memories, Kind.SEMANTIC)
    add_events(conn, found, where, events, Kind.SEMANTIC)


def stands_out(nearest: Nearest, meaning: Spread, floor: float) -> bool:
    """Whether the nearest vector is evidence on its own, with no word in common: its
    cosine reaches the model's ``floor`` (``embed_min_similarity``: as near as unrelated
    texts never come), or it stands further above the query's cosines to the rest of the
    scope than the nearest of as many unrelated texts would (``chance_standing``).

    A query nothing answers still has a nearest memory, as near as chance makes it. How
    far it stands out is the query's own measure (one model's cosines crowd in a band
    whose place moves with the query and the language); the floor decides where a scope
    is too small for chance to be told apart."""
    best = max(nearest.found.values(), default=-1.0)
    n = nearest.searched
    if best >= floor or n < 3:
        return best >= floor
    rest = (n * meaning.mean - best) / (n - 1)  # the others' spread, the best left out
    squares = n * (meaning.deviation**2 + meaning.mean**2) - best * best
    others = Spread(rest, math.sqrt(max(0.0, squares / (n - 1) - rest * rest)))
    return others.standing(best) > chance_standing(n)


@functools.cache
def chance_standing(n: int) -> float:
    """How far, in expectation, the largest of ``n`` unrelated cosines stands above the
    mean of the other ``n - 1``, in their standard deviations: the largest of n normal
    draws (Blom's formula for expected order statistics), which in a small scope stands
    further out of the few others (2.2 of 11, where Blom says 1.6): simulated there, with
    a fixed seed, by powers of two."""
    if n > SIMULATED:
        return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))
    size = 1 << max(2, math.ceil(math.log2(n)))
    draws = np.random.default_rng(0).standard_normal((4000, size))
    draws.sort(axis=1)
    others = draws[:, :-1]
    return float(np.mean((draws[:, -1] - others.mean(axis=1)) / others.std(axis=1)))


def add_similarities(conn: sqlite3.Connection, found: dict[str, Candidate], q: RecallQuery) -> None:
    """Give the candidates the nearest search did not reach (found by their words, a link
    or a reply) their own cosine, so that every candidate's meaning counts in ``fuse``:
    a point lookup each."""
    assert q.vector is not None
    assert q.fingerprint is not None
    keys = {
        ("event" if c.raw else "memory", key): c for key, c in found.items() if c.cosine is None
    }
    for key, similarity in similarities(conn, q.fingerprint, q.vector, keys).items():
        keys[key].cosine = similarity
        keys[key].semantic = max(keys[key].semantic, similarity, 0.0)
