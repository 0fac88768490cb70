"""How surprising a word match is: the chance that a document of the scope, unrelated to
the query, scores at least as much for the query's terms.

BM25 adds up its terms' idf, the surprise of one document holding each, as if each term
were the query. A long query (the last turns of a conversation, a Chinese sentence whose
every character is a term) has many: some of them stand in any document by chance, and
the sum grows with the query's length whatever the match means. Measured against what
chance gives the same query, a match is worth what it says: three common words of a
three-word query are rare together, three of a thirty-word one are ordinary. The order
of the word matches stays BM25's; what changes is how much they weigh against meaning
(``ranking.fuse``)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

GRID = 0.05
"""Nats per step of the score distribution (``WordChance``): finer than idfs differ."""

SMALLEST = 1e-300
"""Probabilities below this count as none (690 nats: past any comparison)."""


class WordChance:
    """The distribution of a query's BM25 over documents holding each of its terms
    independently, as often as the scope's documents hold it (``df / N``), a held term
    scoring its idf (once, in a document of average length)."""

    def __init__(self, terms: Iterable[tuple[float, float]], documents: float) -> None:
        """``terms``: each scored term's ``(df, idf)``; ``documents``: the scope's size, N."""
        n = max(documents, 1.0)
        distribution = np.ones(1)  # P(score = step * GRID), from score 0
        for df, idf in terms:
            p = min(max(df, 0.0), n) / n
            shift = max(0, round(idf / GRID))
            held = np.zeros(len(distribution) + shift)
            held[: len(distribution)] = (1 - p) * distribution
            held[shift:] += p * distribution
            distribution = held
        tail = np.cumsum(distribution[::-1])[::-1]  # P(score >= step * GRID)
        reached = np.flatnonzero(distribution > SMALLEST)  # the scores chance gives
        self._scores = reached * GRID
        self._surprise = -np.log(np.clip(tail[reached], SMALLEST, 1.0))

    def surprise(self, score: float) -> float:
        """``-log P(S >= score)``, in nats. Between the scores chance gives it is read on
        the straight line joining them (BM25 varies with a document's length and how often
        it holds a term, so a score falls between them); past the highest, each nat of
        BM25 more is a nat more."""
        if score <= 0:
            return 0.0
        top = self._scores[-1]
        if score >= top:
            return float(self._surprise[-1] + score - top)
        return float(np.interp(score, self._scores, self._surprise))
