"""Evidence of words: the documents holding the query's tokens, scored with BM25, with
bounded work however large the archive grows (see the package docstring)."""

from __future__ import annotations

import itertools
import math
import sqlite3
from collections import defaultdict
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from ..db.in_lists import marks
from ..db.rules import CURRENT_MEMORY, EVENT_AS_OF, SAID_THEN_CORRECTED
from ..search import postings
from ..search.postings import Eligible, Postings, Within
from ..search.text import clause_tokens, person_token, phrase_tokens, scope_token
from ..store.facts import valid_as_of
from .query import Eligibility, RecallQuery
from .tuning import (
    CONJOINED,
    CONJOINED_KEPT,
    CONJUNCTIONS,
    K1,
    KNOWN_TERMS,
    MAX_TERMS,
    PER_TERM,
    PHRASE_TOKENS,
    PHRASE_WINDOW,
    POSTINGS,
    SCORED_CHARS,
    STATS_BATCH,
    TERM_SCAN,
    B,
)

# Documents that are evidence at as_of (``Postings.eligible_newest``): when the newest
# matches of a common term are revoked, amended or not yet valid, they must not take the
# places of older eligible ones.
ELIGIBLE_DOC = f"""
case d.doc_kind
    when 'memory' then exists (
        select 1 from memories m where m.id = d.ref and {CURRENT_MEMORY}
        and {valid_as_of(history=True)})
    else exists (
        select 1 from events e where e.id = d.ref and ({EVENT_AS_OF} or {SAID_THEN_CORRECTED}))
end
"""


SELECT_REMOVALS = "select removed from index_removals"


SELECT_DOCS = f"""
select num, doc_kind, ref, substr(tokens, 1, {SCORED_CHARS}) from search_docs where num in ({{}})
"""


COUNT_DOCS = "select max(num) from search_docs"


class Lexical(NamedTuple):
    matches: dict[tuple[str, str], float]
    """The best candidates' BM25, normalised to 0..1, by ``(doc_kind, ref)``."""
    capped: bool
    """Whether any term had more matches than ``PER_TERM``."""
    nats: float
    """The BM25 that a normalised score of 1.0 stands for."""
    terms: tuple[tuple[float, float], ...] = ()
    """Each scored term's document frequency and idf in the scope..."""
    documents: float = 1.0
    """...of this many documents: what chance gives the query (``chance.WordChance``)."""
    weights: Mapping[str, float] = MappingProxyType({})
    """Each scored term's idf, by term."""
    holding: Mapping[str, frozenset[str]] = MappingProxyType({})
    """The scored terms each matched event holds, by event ID: which of its words a
    memory derived from it says decides how much of its match the memory takes
    (``evidence.word_shares``)."""


def lexical_matches(
    conn: sqlite3.Connection,
    q: RecallQuery,
    where: Eligibility,
    eligible_only: bool,
    known: KnownTerms | None = None,
) -> Lexical:
    """BM25 of the best bounded candidates, normalised to 0..1, by ``(doc_kind, ref)``,
    and how BM25 spreads over the scope's documents; ``eligible_only``: each term's
    postings counting only documents eligible at ``as_of`` (slower)."""
    index = postings.of(conn)
    within = index.within(q.persona, q.project, q.person)
    newest = conn.execute(COUNT_DOCS).fetchone()[0] or 1  # documents ever indexed: cheap
    clauses = clause_tokens(q.query)
    distinct = list(dict.fromkeys(token for clause in clauses for token in clause))
    # a person the query names: each of their documents counts as saying their name
    distinct += [person_token(q.persona, q.project, person) for person in q.named]
    terms = informative_terms(term_stats(conn, distinct, within, newest, known))
    if not terms:
        return Lexical({}, False, 0.0)
    bounds = {"as_of": where.as_of, "history": where.history}
    eligible = Eligible(ELIGIBLE_DOC, bounds, TERM_SCAN, PER_TERM)
    term_rows = {}  # each term's postings, newest first
    budget = POSTINGS
    for term in terms:  # the rarest first: a rare term's few postings cost little
        if budget <= 0:
            break
        budget -= term.counted
        if eligible_only:
            rows = index.eligible_newest(within, term.text, eligible)
        else:
            rows = index.newest(within, [term.text], PER_TERM)
        term_rows[term.text] = rows
    if not eligible_only:  # all postings, not only eligible ones: both ends known
        terms = [term.refined(term_rows.get(term.text)) for term in terms]
        terms.sort(key=lambda term: term.df)
    total = scope_documents(conn, q, within, newest, known)
    idf = {t.text: math.log(1 + (total - min(t.df, total) + 0.5) / (t.df + 0.5)) for t in terms}
    ranked = max(q.depth, q.limit)
    lookups = Intersections(index, within, ranked, terms)
    together, saturated = conjunctions(lookups, clauses, terms, q.limit)
    sequence = phrase_tokens(q.query) if len(distinct) - len(q.named) <= PHRASE_TOKENS else []
    # Documents holding the query's tokens in its order count the phrase as one more term
    # (as rare as they are). Below ``ranked``, every document holding all the terms is a
    # candidate already, so its tokens tell; above it, the index looks the phrase up.
    phrase = phrase_matches(lookups, sequence, newest, total) if saturated else []
    presence: defaultdict[int, float] = defaultdict(float)
    for text, rows in term_rows.items():
        for rowid in rows:
            presence[rowid] += idf[text]
    best_present = sorted(presence, reverse=True)  # newest first among equals (a stable sort)
    best_present.sort(key=presence.__getitem__, reverse=True)
    chosen = list(dict.fromkeys(phrase + together[:CONJOINED_KEPT] + best_present[:ranked]))
    docs, scanned = scan_documents(conn, chosen)
    cut = {num for num, doc in scanned.items() if doc.cut}
    held = found_holding(cut, term_rows, lookups, phrase, sequence) if cut else {}
    scored, holds = bm25(scanned, idf, index.average_length() - 1, held)  # less the scope token
    whole = sum(idf.values())
    if len(sequence) > 1:
        holding = set(phrase) | {num for num, doc in scanned.items() if doc.holds(sequence)}
        if holding:
            phrase_idf = math.log(1 + (total + 0.5) / (len(holding) + 0.5))
            whole += phrase_idf
            for num in holding & scored.keys():
                scored[num] += phrase_idf
    capped = any(len(rows) == PER_TERM for rows in term_rows.values())
    best = sorted(docs, key=lambda doc: scored[doc[0]], reverse=True)[: 2 * ranked]
    # Relative to a document of average length holding every searched term once (1.0: a
    # full match), or to the best, if a shorter one scores more: never clipped, so a short
    # document holding some terms does not tie with one holding them all.
    scale = max([whole] + [scored[num] for num, *_ in best[:1]])
    # a document the index matched by a folded form alone (``oñ`` found ``on``: FTS5
    # removes diacritics) holds none of the query's words as written: no evidence
    matches = {(kind, ref): scored[num] / scale for num, kind, ref in best if scored[num] > 0}
    stats = tuple((t.df, idf[t.text]) for t in terms)
    said = {ref: holds[num] for num, kind, ref in best if kind == "event" and scored[num] > 0}
    return Lexical(matches, capped, scale, stats, total, idf, said)


class Term(NamedTuple):
    """A query token found in the scope, and how many documents hold it."""

    text: str
    counted: int
    """Its in-scope documents, up to ``PER_TERM``."""
    first: int
    """Its oldest document."""
    oldest_last: int
    """The last of its (up to ``PER_TERM``) oldest documents."""
    df: float
    """In-scope documents holding it: exact below ``PER_TERM``; else estimated from how
    densely its oldest (and, once read, newest) postings lie in the index."""

    @classmethod
    def from_count(cls, text: str, counted: int, first: int, oldest_last: int, newest: int) -> Term:
        """Its oldest postings' density, assumed to hold up to the ``newest`` document."""
        df = float(counted)
        if counted == PER_TERM:
            df = PER_TERM * (newest - first + 1) / (oldest_last - first + 1)
        return cls(text, counted, first, oldest_last, df)

    def refined(self, rows: list[int] | None) -> Term:
        """With its newest postings (``rows``, newest first): where its oldest and newest
        ``PER_TERM`` overlap, the exact count; else both ends' density over the gap."""
        if self.counted < PER_TERM or not rows or len(rows) < PER_TERM:
            return self
        newest_first = rows[-1]
        if newest_first <= self.oldest_last:
            return self._replace(df=float(PER_TERM + sum(r > self.oldest_last for r in rows)))
        ends = (self.oldest_last - self.first + 1) + (rows[0] - newest_first + 1)
        gap = newest_first - self.oldest_last - 1
        return self._replace(df=2 * PER_TERM * (1 + gap / ends))


KnownTerms = dict[tuple[Within, str], tuple[int, int]]
"""``(narrowing, token)`` -> ``Term.first`` and ``Term.oldest_last`` of a token held by
``PER_TERM`` documents or more."""


class TermCounts:
    """The oldest postings of common terms, as ``term_stats`` counted them, kept between
    queries by the readers of one ``Memory``.

    A term held by ``PER_TERM`` documents or more keeps its oldest ``PER_TERM`` postings
    until a document leaves the index or changes: a new one takes a number past every
    other. So they are kept until ``index_removals`` (a trigger counts removals) moves,
    and a long query (the last turns of a conversation) counts only the words it does not
    share with the queries before it, whose common words and characters recur in each.
    """

    def __init__(self, most: int = KNOWN_TERMS) -> None:
        self.most = most
        self._state: tuple[int, KnownTerms] = (-1, {})  # replaced whole: threads share it

    def for_snapshot(self, conn: sqlite3.Connection) -> KnownTerms | None:
        """The counts valid in the read transaction of ``conn`` (None for a snapshot older
        than the one they were counted in)."""
        row = conn.execute(SELECT_REMOVALS).fetchone()
        removed = -1 if row is None else int(row[0])
        counted_at, known = self._state
        if removed < counted_at:
            return None
        if removed > counted_at or len(known) >= self.most:
            known = {}
            self._state = (removed, known)
        return known


def searched_token(q: RecallQuery) -> str:
    """The token every document the query may find carries: its person's, else its
    scope's."""
    if q.person is not None:
        return person_token(q.persona, q.project, q.person)
    return scope_token(q.persona, q.project)


def informative_terms(terms: list[Term]) -> list[Term]:
    """Of the query's ``terms`` (``term_stats``), those found in the scope, fewest documents
    first, at most ``MAX_TERMS``.

    Every token's document frequency is read (a bounded count), so a long query is searched
    by its most informative words wherever they stand in it. Single characters count too,
    as in an exhaustive BM25: a CJK word's characters are indexed with it, and counting
    them ranks the memory holding the query's informative words first."""
    found = [term for term in terms if term.df]
    return sorted(found, key=lambda term: term.df)[:MAX_TERMS]


def term_stats(
    conn: sqlite3.Connection,
    tokens: list[str],
    within: Within,
    newest: int,
    known: KnownTerms | None = None,
) -> list[Term]:
    """Each token's documents ``within`` a scope (up to ``PER_TERM``), in one lookup per
    ``STATS_BATCH`` tokens not ``known``; in the order of ``tokens``."""
    known = {} if known is None else known
    counted = {}
    for token in tokens:
        if (ends := known.get((within, token))) is not None:
            counted[token] = Term.from_count(token, PER_TERM, *ends, newest)
    unknown = [token for token in tokens if token not in counted]
    index = postings.of(conn)
    for start in range(0, len(unknown), STATS_BATCH):
        batch = unknown[start : start + STATS_BATCH]
        for text, (count, first, oldest_last) in zip(
            batch, index.counts(within, batch, PER_TERM), strict=True
        ):
            term = Term.from_count(text, count, first, oldest_last, newest)
            counted[term.text] = term
            if count == PER_TERM:  # its oldest postings stay until a document leaves
                known[(within, term.text)] = (term.first, term.oldest_last)
    return [counted[token] for token in tokens]


def scope_documents(
    conn: sqlite3.Connection,
    q: RecallQuery,
    within: Within,
    newest: int,
    known: KnownTerms | None = None,
) -> float:
    """Documents of the scope (of the person, for a person's recall): those ever indexed
    when it is alone, else estimated like a term's frequency from its token's oldest and
    newest postings."""
    index = postings.of(conn)
    if index.whole(within):
        return float(newest)
    token = searched_token(q)
    own = index.for_own_token(within)
    [term] = term_stats(conn, [token], own, newest, known)
    return max(1.0, term.refined(index.newest(own, [token], PER_TERM)).df)


def scope_size(conn: sqlite3.Connection, q: RecallQuery, known: KnownTerms | None = None) -> float:
    """The number of memories and indexed events in the query's scope, estimated cheaply."""
    newest = conn.execute(COUNT_DOCS).fetchone()[0] or 1
    within = postings.of(conn).within(q.persona, q.project, q.person)
    return scope_documents(conn, q, within, newest, known)


def conjunctions(
    lookups: Intersections, clauses: list[list[str]], terms: list[Term], limit: int
) -> tuple[list[int], bool]:
    """The newest documents holding the most informative terms together, however old, and
    whether more than ``ranked`` hold the query's most informative terms.

    The index intersects their posting lists, so a document that holds every term but is among
    no single term's newest postings is still found. First the query's terms from the most
    informative on; then pairs of words standing in one clause (a query may be the last
    turns of a conversation: the words that name one memory stand together, among others
    that name nothing), most informative first, each narrowed by the clause's other words
    while too many documents hold it. At most ``CONJUNCTIONS`` lookups."""
    order = [term.text for term in terms]
    together, saturated = grown(lookups, order)
    spoken = [clause for clause in clauses if any(token in order for token in clause)]
    if len(spoken) < 2 and len(together) >= limit:  # one clause; enough hold its best terms
        return together, saturated
    tried = {frozenset(order[:2])}
    for words in clause_words(clauses, order):
        for first, second in itertools.combinations(words, 2):
            if frozenset((first, second)) in tried or not lookups.left:
                continue
            tried.add(frozenset((first, second)))
            rest = [word for word in words if word not in (first, second)]
            rows, _ = grown(lookups, [first, second, *rest])
            together += [rowid for rowid in rows if rowid not in together]
    return together, saturated


def clause_words(clauses: list[list[str]], order: list[str]) -> list[list[str]]:
    """The words (not single characters) of each clause found in the scope, most informative
    first; clauses with at least two, the most informative first."""
    found = []
    for clause in clauses:
        words = sorted({t for t in clause if len(t) > 1 and t in order}, key=order.index)
        if len(words) > 1:
            found.append(words)
    return sorted(found, key=lambda words: order.index(words[1]))


class Intersections:
    """One query's conjunctions: each set of terms looked up once, at most
    ``CONJUNCTIONS`` lookups."""

    def __init__(self, index: Postings, within: Within, ranked: int, terms: list[Term]) -> None:
        self.index, self.within, self.ranked = index, within, ranked
        self.left = CONJUNCTIONS
        self.known: dict[tuple[frozenset[str], bool], list[int]] = {}
        self.sizes = {term.text: term.df for term in terms}

    def holding(self, terms: list[str], newest: bool = False) -> list[int] | None:
        """Up to ``ranked`` documents holding every term (the newest ones if ``newest``,
        else in rowid order: cheaper); None once no lookup is left."""
        key = (frozenset(terms), newest)
        if key not in self.known:
            if not self.left:
                return None
            self.left -= 1
            lookup = self.index.newest if newest else self.index.oldest
            sizes = [self.sizes[term] for term in terms]
            self.known[key] = lookup(self.within, terms, self.ranked, sizes)
        return self.known[key]


def grown(lookups: Intersections, terms: list[str]) -> tuple[list[int], bool]:
    """Documents holding the first terms together: terms join, most informative first, while
    more than ``ranked`` documents hold them all (at most ``CONJOINED``); then those holding
    the most, and whether more than ``ranked`` do. A word inside a chosen word (``编号`` in
    ``项目编号``) adds nothing and is skipped. Growing from two terms keeps each
    intersection cheap: it stops at ``ranked`` documents."""
    chosen: list[str] = []
    held: list[str] = []  # the terms ``found`` holds
    found: list[int] = []
    for term in terms:
        if len(chosen) == CONJOINED:
            break
        if any(term in word for word in chosen):
            continue
        chosen.append(term)
        if len(chosen) == 1:
            continue
        rows = lookups.holding(chosen)
        if rows is None:
            break
        if len(rows) < lookups.ranked:  # all of them: fewer hold one more term
            return rows + [rowid for rowid in found if rowid not in rows], False
        held, found = list(chosen), rows
    if len(found) < lookups.ranked:
        return found, False
    return lookups.holding(held, newest=True) or found, True


def phrase_matches(
    lookups: Intersections, sequence: list[str], newest: int, total: float
) -> list[int]:
    """Documents holding ``sequence`` (a query's ``phrase_tokens``) in order, among the
    ``PHRASE_WINDOW`` newest documents: a phrase of common words costs the index the positions
    of every document holding them all, so the lookup is bounded like the rest. A token
    that is no scored term (a function word) counts as held by every document."""
    if not 1 < len(sequence) <= PHRASE_TOKENS:
        return []
    sizes = [lookups.sizes.get(token, total) for token in sequence]
    floor = newest - PHRASE_WINDOW
    return lookups.index.phrase(lookups.within, sequence, floor, lookups.ranked, sizes)


class Scanned(NamedTuple):
    """What BM25 reads of one document: its first ``SCORED_CHARS`` characters of tokens."""

    text: str
    """The tokens read (the scope token left out, and a token the cut split), one space
    between each."""
    words: list[str]
    length: int
    """Tokens in the whole document."""

    @property
    def cut(self) -> bool:
        return self.length > len(self.words)

    def holds(self, sequence: list[str]) -> bool:
        """Whether ``sequence`` stands in the tokens read, in order and side by side."""
        return f" {' '.join(sequence)} " in f" {self.text} "


SELECT_TOKENS = f"""
select ref, substr(tokens, 1, {SCORED_CHARS}) from search_docs
where doc_kind = ? and ref in ({{}})
"""


def held_terms(
    conn: sqlite3.Connection, query: str, kind: str, refs: list[str]
) -> dict[str, list[str]]:
    """The query's tokens each document of ``kind`` (by ref) holds, in the query's order."""
    wanted = list(dict.fromkeys(token for clause in clause_tokens(query) for token in clause))
    rows = conn.execute(SELECT_TOKENS.format(marks(len(refs))), [kind, *refs]) if refs else []
    held = {}
    for ref, stored in rows:
        words = set(stored.split())
        held[ref] = [token for token in wanted if token in words]
    return held


def scan_documents(
    conn: sqlite3.Connection, nums: list[int]
) -> tuple[list[tuple[int, str, str]], dict[int, Scanned]]:
    """``(num, doc_kind, ref)`` of the documents ``nums`` and what BM25 reads of each: one
    longer than ``SCORED_CHARS`` is read only that far, its length from the index's count."""
    sql = SELECT_DOCS.format(marks(len(nums)))
    docs, scanned, long = [], {}, []
    for num, kind, ref, stored in conn.execute(sql, nums).fetchall():
        docs.append((num, kind, ref))
        body = stored.partition(" ")[2]  # the first token is the scope's
        if len(stored) >= SCORED_CHARS:  # perhaps cut inside a token: that one is left out
            body = body.rpartition(" ")[0]
            long.append(num)
        words = body.split()
        scanned[num] = Scanned(body, words, len(words))
    if long:
        sizes = postings.of(conn).sizes(long)
        for num in long:  # no size (an index out of step with its rows): what was read
            length = sizes[num] - 1 if num in sizes else 0  # no scope token
            scanned[num] = scanned[num]._replace(length=max(length, scanned[num].length))
    return docs, scanned


def found_holding(
    nums: set[int],
    term_rows: dict[str, list[int]],
    lookups: Intersections,
    phrase: list[int],
    sequence: list[str],
) -> dict[int, set[str]]:
    """The terms the index found each of the documents ``nums`` by: a term's postings, a
    conjunction's terms, a phrase's tokens. Only a document read in part needs them
    (``term_counts``), and most queries find none."""
    held: defaultdict[int, set[str]] = defaultdict(set)
    for term, rows in term_rows.items():
        for rowid in nums.intersection(rows):
            held[rowid].add(term)
    for (terms, _), rows in lookups.known.items():
        for rowid in nums.intersection(rows):
            held[rowid] |= terms
    for rowid in nums.intersection(phrase):
        held[rowid].update(sequence)
    return held


def bm25(
    documents: dict[int, Scanned],
    idf: dict[str, float],
    average: float,
    held: dict[int, set[str]] | None = None,
) -> tuple[dict[int, float], dict[int, frozenset[str]]]:
    """Okapi BM25 of each document's tokens for the query terms in ``idf``, ``average`` the
    index's average document length (as FTS5's own ``bm25`` has it), and the terms each
    document holds.

    A document read only in part (``Scanned.cut``) has its counts scaled from the part
    read to its whole length, and a term the index found it by (``held``) counts at least once:
    a long document matched past its first tokens still scores."""
    average = average if average > 0 else 1.0
    scores, holding = {}, {}
    for rowid, doc in documents.items():
        norm = K1 * (1 - B + B * doc.length / average)
        total = 0.0
        counts = term_counts(doc, idf, (held or {}).get(rowid, set()))
        for term, n in counts:
            total += idf[term] * n * (K1 + 1) / (n + norm)
        scores[rowid] = total
        holding[rowid] = frozenset(term for term, _ in counts)
    return scores, holding


def term_counts(doc: Scanned, idf: dict[str, float], held: set[str]) -> list[tuple[str, float]]:
    """How often each query term stands in ``doc``: counted in a document read whole;
    in one read in part, scaled to its length, each term of ``held`` at least once."""
    # Count only the query's terms (a document holds a few among many words), in the
    # order they first stand in it: the same sum, to the last bit, as counting all. A
    # plain loop: a ``Counter`` costs three times as much on a document of a dozen words.
    counts: dict[str, int] = {}
    for word in doc.words:
        if word in idf:
            counts[word] = counts.get(word, 0) + 1
    if not doc.cut:
        return [(term, float(n)) for term, n in counts.items()]
    scale = doc.length / max(len(doc.words), 1)
    scaled = {term: n * scale for term, n in counts.items()}
    for term in held & idf.keys():
        scaled[term] = max(scaled.get(term, 0.0), 1.0)
    return list(scaled.items())
