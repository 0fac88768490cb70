"""The candidates of a recall and the evidence each has: the memories and raw events that
matched, found by whatever kind of evidence, each read once and raised by every match."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from ..db import in_lists
from ..db.rules import CORRECTED_BY, CURRENT_MEMORY, SAID_AS_OF, SAID_THEN_CORRECTED
from ..models import Basis, MemoryKind, MemoryTier, Role
from ..search.text import CJK_RUN, surface_words
from .lexical import Lexical
from .query import Eligibility
from .tuning import RAW_CHARS, SCORED_CHARS, SOURCE_EVENT_DISCOUNT


class RecalledMemory(NamedTuple):
    """An eligible memory as ``RECALLED_COLUMNS`` reads it."""

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
    person: str | None
    """The person its source event belongs to."""
    about: str | None
    """The people it is about, a JSON list (None: none)."""


class RawEvent(NamedTuple):
    """A matching conversation event with no derived memory, recalled as itself; or, with
    ``include_history``, one whose memory was corrected (``corrected_by``)."""

    id: str
    text: str
    """At most ``RAW_CHARS`` of it."""
    length: int
    occurred_at: str
    role: Role
    corrected_by: tuple[str, ...] = ()
    """The memories that corrected what was derived from it: it is history."""
    person: str | None = None
    """The person it belongs to."""


RECALLED_COLUMNS = """
    m.id, m.text, m.quote, m.kind, m.basis, m.confidence, m.subject, m.fact_key,
    m.valid_at, m.invalid_at, m.event_id, e.occurred_at, m.gist, m.cue_key, e.role, m.tier,
    m.pinned, m.person, m.about
"""


SELECT_MEMORIES = f"""
select {RECALLED_COLUMNS} from memories m join events e on e.id = m.event_id
where m.id in ({{ids}}) and {{eligible}}
"""
SELECT_DERIVED = f"""
select {RECALLED_COLUMNS} from memories m join events e on e.id = m.event_id
where m.event_id in ({{ids}}) and {{eligible}}
"""


# Matched events: amended ones are no key to anything (with include_history, one that was
# corrected comes back as itself: what was said, then corrected); derived ones lead to their
# memories; the rest are raw fallback if they are conversation said by as_of that
# extraction has not run on (extracted and nothing stands: nothing worth keeping).
# Events the caller left out (``Eligibility.event_exclusion``) are neither.
# ``said``: conversation said by as_of, whose words are still held (``SAID_AS_OF``).
SELECT_EVENTS = f"""
select id, status,
    exists (select 1 from memories m where m.event_id = e.id and {CURRENT_MEMORY}),
    {SAID_AS_OF},
    substr(text, 1, :cap), length(text), occurred_at, role,
    case when {SAID_THEN_CORRECTED} then {CORRECTED_BY} end, person
from events e where id in ({{ids}}) {{exclude}}
"""


SELECT_LINKED = """
select from_id, to_id from relations
where kind = 'related' and (from_id in ({ids}) or to_id in ({ids}))
"""


class Kind(Enum):
    """The kinds of evidence a candidate can have, each kept as its strongest match."""

    LEXICAL = "lexical"
    """Its words (or its source event's) match the query's: BM25, normalised."""
    SEMANTIC = "semantic"
    """Its vector (or its source event's) is among the nearest the query's."""
    LINK = "link"
    """A ``related`` link from a memory whose words matched: that memory's match."""
    REPLY = "reply"
    """It answers one of the best turns (``ranking.add_replies``): a fusion score."""


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
    found_by: set[Kind] = field(default_factory=set)
    """The kinds of evidence that brought it in (``RecallItem.via``); a cosine read for a
    candidate found otherwise (``nearest.add_similarities``) is not one."""

    @property
    def raw(self) -> bool:
        return isinstance(self.row, RawEvent)

    def support(self, kind: Kind, value: float) -> None:
        """Record a match of ``kind``; the strongest of each kind counts."""
        if value > 0:
            self.found_by.add(kind)
        match kind:
            case Kind.LEXICAL:
                self.lexical = max(self.lexical, value)
            case Kind.SEMANTIC:
                self.semantic = max(self.semantic, value)
            case Kind.LINK:
                self.link = max(self.link, value)
            case Kind.REPLY:
                self.reply = max(self.reply, value)

    @property
    def event_id(self) -> str:
        """The event it is (raw fallback) or was derived from."""
        return self.row.id if isinstance(self.row, RawEvent) else self.row.event_id


def add_memories(
    conn: sqlite3.Connection,
    found: dict[str, Candidate],
    where: Eligibility,
    scores: dict[str, float],
    kind: Kind,
) -> None:
    """Record evidence of ``kind`` (by memory ID: its score) for the eligible memories
    among ``scores``."""
    new = [memory_id for memory_id in scores if memory_id not in found]
    if new:
        ids, values = in_lists.named("v", new)
        sql = SELECT_MEMORIES.format(ids=ids, eligible=where.memory_condition())
        for row in conn.execute(sql, where.params() | values).fetchall():
            memory = RecalledMemory._make(row)
            found[memory.id] = Candidate(memory)
    for memory_id, value in scores.items():
        candidate = found.get(memory_id)
        if candidate is not None and not candidate.raw:
            candidate.support(kind, value)


def add_events(
    conn: sqlite3.Connection,
    found: dict[str, Candidate],
    where: Eligibility,
    scores: dict[str, float],
    kind: Kind = Kind.LEXICAL,
    derived_share: float = SOURCE_EVENT_DISCOUNT,
    words: Lexical | None = None,
) -> None:
    """Matched events (by ID: their score): their current memories, with ``derived_share``
    of it, or the events themselves as raw fallback.

    With ``words`` (a word match), a memory takes the share of its event's match that the
    words it says weigh, and the event comes back as itself, at the share its other words
    weigh, when it matched by words none of its memories says (``word_shares``).

    An amended event's words were corrected or retracted: they are no key to anything.
    With ``include_history``, a corrected one comes back as itself, as history.
    """
    if not scores:
        return
    ids, values = in_lists.named("v", scores)
    query = where.params() | {"cap": RAW_CHARS} | values
    sql = SELECT_EVENTS.format(ids=ids, exclude=where.event_exclusion("e.id", "e.seq", "e.person"))
    derived = {}
    raws = {}  # events that may come back as themselves, for words no memory says
    for (
        event_id,
        status,
        has_memories,
        said_as_of,
        text,
        length,
        occurred_at,
        role,
        corrected_by,
        person,
    ) in conn.execute(sql, query).fetchall():
        said = (event_id, text, length, occurred_at, role)
        if status == "amended":
            if corrected_by and not where.kinds:  # said, then corrected: history
                raw = RawEvent(*said, tuple(corrected_by.split()), person)
                found.setdefault(event_id, Candidate(raw)).support(kind, scores[event_id])
            continue
        if has_memories:
            derived[event_id] = scores[event_id] * derived_share
            if said_as_of and not where.kinds:  # raw events have no kind
                raws[event_id] = RawEvent(*said, person=person)
        elif said_as_of and status != "extracted" and not where.kinds:
            raw = RawEvent(*said, person=person)
            found.setdefault(event_id, Candidate(raw)).support(kind, scores[event_id])
    if not derived:
        return
    ids, values = in_lists.named("v", derived)
    sql = SELECT_DERIVED.format(ids=ids, eligible=where.memory_condition())
    memories = [RecalledMemory._make(row) for row in conn.execute(sql, where.params() | values)]
    shares, unsaid = ({}, {}) if words is None else word_shares(conn, words, list(derived))
    by_memory: dict[str, float] = {}
    for memory in memories:
        match = derived[memory.event_id] * shares.get(memory.id, 1.0)
        if match > 0:
            found.setdefault(memory.id, Candidate(memory))
            by_memory[memory.id] = max(by_memory.get(memory.id, 0.0), match)
    add_memories(conn, found, where, by_memory, kind)
    for event_id, share in unsaid.items():
        if event_id in raws:
            found.setdefault(event_id, Candidate(raws[event_id])).support(
                kind, scores[event_id] * share
            )


SELECT_SAYING = f"""
select m.id, m.event_id, m.quote, substr(d.tokens, 1, {SCORED_CHARS}) from memories m
left join search_docs d on d.doc_kind = 'memory' and d.ref = m.id
where m.event_id in ({{ids}}) and {CURRENT_MEMORY}
"""
"""The current memories of events: their quotes and their texts' tokens, as indexed."""


def word_shares(
    conn: sqlite3.Connection, words: Lexical, event_ids: list[str]
) -> tuple[dict[str, float], dict[str, float]]:
    """How an event's word match divides among what was derived from it: for each current
    memory of the events, the share of the match that the query terms its own words (its
    text as indexed, or its quote) hold weigh, by idf; for each event, the share that the
    terms none of its current memories says weigh.

    A message may say more than its memories keep: after "I have a cat named Mochi, and
    I'm allergic to peanuts" with the one memory "User has a cat named Mochi", a recall
    of "peanuts" finds the message, and the cat memory says nothing about peanuts. Every
    current memory counts as saying its words, eligible at ``as_of`` or not: a word said
    by a fact that has since ended (a residence, superseded) is no message's left-over."""
    ids, values = in_lists.named("v", event_ids)
    shares: dict[str, float] = {}
    covered: dict[str, set[str]] = {}
    for memory_id, event_id, quote, indexed in conn.execute(SELECT_SAYING.format(ids=ids), values):
        terms = words.holding.get(event_id)
        if not terms:  # not scored word by word: the whole match, as before
            continue
        says = terms.intersection((indexed or "").split())
        if says != terms:  # the quote is the source's own words: a Chinese quote of an
            says |= quoted(terms - says, quote)  # English memory holds the Chinese terms
        shares[memory_id] = weight(words, says) / weight(words, terms)
        covered.setdefault(event_id, set()).update(says)
    unsaid = {
        event_id: weight(words, terms - covered[event_id]) / weight(words, terms)
        for event_id, terms in words.holding.items()
        if event_id in covered and terms - covered[event_id]
    }
    return shares, unsaid


def quoted(terms: set[str] | frozenset[str], quote: str) -> set[str]:
    """The ``terms`` a quote says: a Chinese term as it stands in it (jieba's words and
    single characters are spans of the text they came from), another as the stem of one
    of its words; no segmentation, which would cost a recall tens of microseconds a
    Chinese quote."""
    stems = surface_words(quote)
    return {term for term in terms if (term in quote if CJK_RUN.match(term) else term in stems)}


def weight(words: Lexical, terms: set[str] | frozenset[str]) -> float:
    return sum(words.weights.get(term, 0.0) for term in terms)


def add_links(conn: sqlite3.Connection, found: dict[str, Candidate], where: Eligibility) -> None:
    """One hop along explicit ``related`` links from every memory that matched."""
    strength = {memory_id: c.lexical for memory_id, c in found.items() if not c.raw and c.lexical}
    if not strength:
        return
    ids, values = in_lists.named("v", strength)
    links: dict[str, float] = {}
    for pair in conn.execute(SELECT_LINKED.format(ids=ids), values).fetchall():
        for source, neighbour in (pair, pair[::-1]):
            if source in strength:
                links[neighbour] = max(links.get(neighbour, 0.0), strength[source])
    add_memories(conn, found, where, links, Kind.LINK)


def add_lexical(
    conn: sqlite3.Connection,
    found: dict[str, Candidate],
    where: Eligibility,
    matches: dict[tuple[str, str], float],
    words: Lexical,
) -> None:
    """Word matches (by ``(doc_kind, ref)``: their score, from ``words``) as evidence."""
    memories = {ref: score for (doc, ref), score in matches.items() if doc == "memory"}
    events = {ref: score for (doc, ref), score in matches.items() if doc != "memory"}
    add_memories(conn, found, where, memories, Kind.LEXICAL)
    add_events(conn, found, where, events, words=words)


def has_memories(conn: sqlite3.Connection, event_ids: list[str]) -> bool:
    sql = f"""
select 1 from memories m where m.event_id in ({in_lists.marks(len(event_ids))})
and {CURRENT_MEMORY} limit 1
"""
    return conn.execute(sql, event_ids).fetchone() is not None
