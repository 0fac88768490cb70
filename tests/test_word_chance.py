"""The surprise of a word match measured against what chance gives the same query
(``amem.recall.chance``): what hybrid recall weighs a match by against its meaning."""

from __future__ import annotations

import math

import pytest

from amem.recall.chance import WordChance

N = 1000


def close(value: float) -> object:
    """Equal but for the grid the distribution is computed on."""
    return pytest.approx(value, rel=0.02)


def term(df: float) -> tuple[float, float]:
    """A term held by ``df`` of ``N`` documents: its df and idf."""
    return df, math.log(N / df)


def test_one_terms_match_is_as_surprising_as_the_share_of_documents_holding_it() -> None:
    chance = WordChance([term(10)], N)
    assert chance.surprise(math.log(100)) == close(math.log(100))


def test_no_score_is_no_surprise() -> None:
    assert WordChance([term(10)], N).surprise(0.0) == 0.0


def test_the_same_score_says_less_in_a_longer_query() -> None:
    # three common words matched: rare for a three-word query, ordinary among thirty
    words = [term(50)] * 30
    score = 3 * math.log(N / 50)
    short = WordChance(words[:3], N).surprise(score)
    long = WordChance(words, N).surprise(score)
    assert short == close(score)
    assert long < short / 3


def test_surprise_grows_with_the_score_and_past_holding_every_term_by_the_excess() -> None:
    terms = [term(50), term(5), term(200)]
    chance = WordChance(terms, N)
    values = [chance.surprise(s / 4) for s in range(1, 45)]
    assert values == sorted(values)
    every = sum(idf for _, idf in terms)
    assert chance.surprise(every) == close(every)
    assert chance.surprise(every + 3) == close(every + 3)


def test_a_score_between_two_combinations_is_between_their_surprises() -> None:
    # a short document holding two terms scores more than their idf: not as much as three
    terms = [term(94), term(94), term(380)]
    chance = WordChance(terms, N)
    two = terms[1][1] + terms[2][1]
    assert (
        chance.surprise(two)
        < chance.surprise(two * 1.1)
        < chance.surprise(sum(idf for _, idf in terms))
    )


def test_a_term_every_document_holds_is_no_evidence() -> None:
    chance = WordChance([(N, 0.1), term(10)], N)
    assert chance.surprise(0.1) == 0.0
    assert chance.surprise(0.1 + math.log(100)) == close(math.log(100))
