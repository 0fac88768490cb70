"""Recall: which memories are eligible at ``as_of``, what evidence matches the query, and
in what order they come back. One module per step, all bounded however large the archive
grows; ``ranked_candidates`` below runs them in this order:

1. **What may come back** (``query.Eligibility``): the scope's memories that are not
   revoked, have started (``valid_at <= as_of``; future facts wait for their start) and
   are still valid (``as_of < invalid_at``), or, with ``include_history``, have expired
   (marked ``expired``); events the caller leaves out (by ID, or from a ``seq`` on) and
   the memories derived from them are not eligible. The condition is part of every
   statement that reads candidates, so an excluded one never takes a place.
2. **Whether meaning takes part** (``nearest.search``), decided once: the query has a
   vector (``semantic``/``deep``, and ``auto`` with an embedding endpoint) and, in
   ``auto``, vectors cover enough of the scope.
3. **Words** (``lexical``): every query token (function words aside, and the characters
   of a Chinese function word) has its in-scope document count read, bounded; the
   ``MAX_TERMS`` most informative are scored wherever they stand in a long query.
   Candidates: documents holding the most informative terms together (FTS5 conjunctions,
   however old), those holding the query as a phrase, and the newest documents of each
   term, the rarest first, up to ``POSTINGS`` postings; all scored with BM25 on their
   stored tokens. A matching event brings in the current memories derived from it (a
   Chinese message finds the English memory extracted from it), each with the share of
   the match that the words it says weigh (``evidence.word_shares``), or comes back itself
   as raw fallback if nothing was derived from it and it was not amended, or for the
   words none of its memories says. No query ever reads every posting of a common term.
4. **Meaning** (``nearest``): the ``RANKED`` memories and events nearest the query's
   vector, which also says how the query's cosines spread over the scope; they count
   only when the query has evidence (a word match, or a nearest vector that is evidence
   by itself: ``nearest.stands_out``). Every other candidate has its own cosine read.
5. **Links** (``evidence.add_links``): memories linked by ``related`` to a matching one.
6. **Order** (``ranking``): in ``fast`` mode the evidence (weighted lexical and link
   parts) scaled by the priors (basis, confidence, freshness); in hybrid recall the
   surprise of the evidence, in nats: of the word match, the chance that an unrelated
   document of the scope scores its BM25 for the query's terms (``chance``), plus of the
   cosine, its standing above the query's cosines to the scope; ties going to the
   better word match; the reply to each of the best ``REPLIED`` turns is raised to
   ``REPLY_SHARE`` of that turn's score (a question matches the turn that asked it; the
   answer is the turn after).
7. **People** (``store.people.named_in``): a query that names people of the scope's
   registry (a display name or alias, as a word) counts each of their documents as
   saying the name (their person token is one more query term), and candidates that
   belong only to other people come after the rest. A recall for one ``person`` reads
   only their documents: their token narrows every lookup as the scope's does.
8. **Presentation** (``present``): candidates showing the same text are one item, so
   ``limit`` counts distinct texts; old episodes, observations and emotions show their
   gist or a labelled topic cue, and a coarse time label; originals stay readable
   through ``read``.

A query with no evidence returns nothing, never unrelated memories. Every number above
is in ``tuning``.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from typing import TYPE_CHECKING, Literal, NamedTuple

from ..models import RecallItem
from ..store.people import named_in
from .evidence import Candidate, RecalledMemory, add_lexical, add_links, has_memories
from .lexical import (
    KnownTerms,
    Lexical,
    TermCounts,
    held_terms,
    lexical_matches,
)
from .present import merge_identical, recall_item, shown_text
from .query import Eligibility, RecallQuery
from .ranking import add_replies, fuse, fusion_order, parts, ranking, score
from .tuning import EVIDENCE_WEIGHTS, MAX_DEPTH, RANKED

if TYPE_CHECKING:
    from ..search.vectors import Matrices


class Recalled(NamedTuple):
    items: list[RecallItem]
    warnings: list[str]
    """Incomplete vector coverage, a vector search cut short."""
    hybrid: bool
    """Whether vector search took part (``auto`` leaves it out of a scope it barely covers)."""


def recall_memories(
    conn: sqlite3.Connection,
    q: RecallQuery,
    matrices: Matrices | None = None,
    counts: TermCounts | None = None,
) -> Recalled:
    """The ranked items of a query (``counts``: the reader's term counts kept between
    queries, if any).

    Candidates showing the same text are one item, so copies of one text can crowd out
    the rest of the ``RANKED`` candidates: when the candidates were cut short and fewer
    than ``limit`` distinct texts came back, they are gathered again, four times as many,
    up to ``MAX_DEPTH``. An item's ``occurrences`` counts the copies among them."""
    known = counts.for_snapshot(conn) if counts is not None else None
    if q.person is None:
        q = replace(q, named=tuple(named_in(conn, q.persona, q.project, q.query)))
    depth = RANKED
    while True:
        scored, warnings, hybrid = ranked_candidates(conn, replace(q, depth=depth), matrices, known)
        merged = merge_identical(scored, q)
        if len(merged) >= q.limit or len(scored) < depth or depth >= MAX_DEPTH:
            break
        depth *= 4
    if q.named:  # stable: in the order ranked otherwise
        merged.sort(key=lambda entry: only_others(entry[0], q.named))
    items = [recall_item(best, q, others) for best, others in merged[: q.limit]]
    if q.explain:
        items = with_matched_terms(conn, q, items)
    return Recalled(items, warnings, hybrid)


def with_matched_terms(
    conn: sqlite3.Connection, q: RecallQuery, items: list[RecallItem]
) -> list[RecallItem]:
    """Each item with the query's terms that its words or its source event's hold."""
    memories = held_terms(conn, q.query, "memory", [i.id for i in items if not i.raw_fallback])
    events = held_terms(conn, q.query, "event", [item.source_event_id for item in items])
    return [
        item.model_copy(
            update={
                "matched": list(
                    dict.fromkeys(memories.get(item.id, []) + events.get(item.source_event_id, []))
                )
            }
        )
        for item in items
    ]


def recalled_refs(
    conn: sqlite3.Connection, q: RecallQuery
) -> list[tuple[Literal["memory", "event"], str]]:
    """The items of a query as ``(doc_kind, id)``: a raw event or a memory."""
    return [
        ("event" if item.raw_fallback else "memory", item.id)
        for item in recall_memories(conn, q).items
    ]


def only_others(candidate: Candidate, named: tuple[str, ...]) -> bool:
    """Whether a candidate belongs only to people the query does not name: when a query
    names someone, another person's memory never answers it ahead of theirs or of one
    that belongs to no one."""
    row = candidate.row
    people = {row.person} if row.person else set()
    if isinstance(row, RecalledMemory) and row.about:
        people.update(json.loads(row.about))
    return bool(people) and people.isdisjoint(named)


def ranked_candidates(
    conn: sqlite3.Connection, q: RecallQuery, matrices: Matrices | None, known: KnownTerms | None
) -> tuple[list[tuple[float, str, Candidate]], list[str], bool]:
    """Every candidate of the query (``q.depth`` of each kind at most), best first; the
    warnings; whether vectors took part."""
    where = Eligibility.of(q)
    meaning = None  # ranked by words alone
    if q.vector is not None:  # only a recall that ranks by meaning loads numpy
        from . import nearest

        meaning = nearest.search(conn, q, matrices, known)
    hybrid = meaning is not None
    found: dict[str, Candidate] = {}
    words = word_matches(conn, found, q, where, known, hybrid)
    if meaning is not None:
        nearest.add_nearest(conn, found, where, meaning, q.min_similarity)
    add_links(conn, found, where)
    if meaning is not None:
        nearest.add_similarities(conn, found, q)
        fuse(found, q, words, meaning.spread)
        add_replies(conn, found, where)
    scored = [(round(ranking(c, q), 6), memory_id, c) for memory_id, c in found.items()]
    if hybrid:  # ties go to the better word match
        scored.sort(key=lambda entry: fusion_order(entry[1], entry[2]))
    else:
        scored.sort(key=lambda entry: (-entry[0], entry[1]))
    return scored, [] if meaning is None else meaning.warnings, hybrid


def word_matches(
    conn: sqlite3.Connection,
    found: dict[str, Candidate],
    q: RecallQuery,
    where: Eligibility,
    known: KnownTerms | None,
    hybrid: bool,
) -> Lexical:
    """The query's word matches, added to ``found``. When a capped term's newest documents
    gave fewer eligible candidates than ``limit`` (revoked, amended or not yet valid at an
    earlier ``as_of``), the terms are looked up again counting only eligible documents."""
    lexical = lexical_matches(conn, q, where, False, known)
    add_candidates(conn, found, where, lexical, q, hybrid)
    if lexical.capped and len(found) < q.limit:
        found.clear()
        lexical = lexical_matches(conn, q, where, True, known)
        add_candidates(conn, found, where, lexical, q, hybrid)
    return lexical


def add_candidates(
    conn: sqlite3.Connection,
    found: dict[str, Candidate],
    where: Eligibility,
    words: Lexical,
    q: RecallQuery,
    hybrid: bool,
) -> None:
    """``add_lexical`` for the matches that can reach the top ``limit``.

    Hybrid recall reads the best ``RANKED`` (50, or ``limit``) as its lexical list: further
    down a reciprocal rank is worth little, and a match the vectors find too comes in
    through them (the next 50 cost 1 ms a query at 100k; on LoCoMo and MemoryBank the
    items were as good: docs/embeddings.md).

    Fast recall reads them all, except where nothing but raw events is in play (no memory
    among the matches or derived from them): a raw event scores at most its lexical weight
    times its match, and no link reaches it. So once the best matches have given ``limit``
    items, a match below the ``limit``-th score even at that bound is left out, unread.
    The items returned are exactly those a full read would return; a scope whose events
    have no memories yet (no extraction configured) is common.
    """
    matches = words.matches
    order = sorted(matches, key=matches.__getitem__, reverse=True)
    head, rest = order[: 2 * q.limit], order[2 * q.limit :]

    def add(keys: list[tuple[str, str]]) -> None:
        add_lexical(conn, found, where, {key: matches[key] for key in keys}, words)

    if hybrid:
        add(order[: max(q.depth, q.limit)])
        return
    if not rest or any(kind == "memory" for kind, _ in order):
        add(order)
        return
    add(head)
    raw = [c for c in found.values() if c.raw]
    best: dict[str, float] = {}  # identical texts are one item (merge_identical)
    for c in raw:
        text = " ".join(shown_text(c, q).split())
        best[text] = max(best.get(text, 0.0), score(parts(c, q)))
    scores = sorted(best.values(), reverse=True)
    if len(scores) < q.limit or len(raw) < len(found):  # too few, or memories came in
        add(rest)
        return
    # below the limit-th score by more than the rounding of scores: never even a tie
    bound = (round(scores[q.limit - 1], 6) - 1e-6) / EVIDENCE_WEIGHTS["lexical"]
    dropped = [key[1] for key in rest if matches[key] < bound]
    if dropped and has_memories(conn, dropped):  # they would bring memories (and links)
        add(rest)
    else:
        add([key for key in rest if matches[key] >= bound])
