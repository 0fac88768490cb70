"""Copies: later events of a scope that repeat text a delete or erase selects.

Erasing what a user said is not enough when the assistant echoed it ("I'll send it to 12
Rose Lane") or a tool output quoted it. A later event of the same scope is a *copy* of a
selected (earlier) event when, both normalised (``normalise``: NFKC, typographic quotes
and dashes made plain, white space collapsed, case folded), it holds a run of at least
``MIN_RUN`` characters of the selected event's text, or the exact quote of a memory
derived from it (a shorter quote must stand as whole words).

Finding them is bounded however large the scope: candidates come from the search index
(later event documents of the scope sharing a rare term with the selected text: a term of
at most ``RARE_POSTINGS`` documents) and from the few events that follow each selected
one in its session (an echo in the next turn, whatever its words); each candidate is then
checked against the set of ``MIN_RUN``-character shingles of the selected text. Only the
first ``MAX_SOURCE_CHARS`` of selected text, ``MAX_TERMS`` terms and ``MAX_CANDIDATES``
candidates are looked at. A copy's own copies are not looked for.

Plain functions of a connection, read-only: they run on a read snapshot for a preview
and inside the erasing transaction for ``delete``.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
import unicodedata
from collections.abc import Collection, Iterable

from ..db.times import from_db_time
from ..models import Copy
from ..search import postings
from ..search.text import CJK_RUN, RUN, STOP_WORDS, stem
from .quotes import FOLDS, fold

MIN_RUN = 12
"""Characters of normalised text a copy must repeat (12 Chinese characters are a long run)."""
MIN_QUOTE_CHARS = 4
"""A memory's quote shorter than this is not looked for on its own."""
MATCH_CHARS = 200
"""How much of the repeated text a ``Copy`` shows."""
RARE_POSTINGS = 100
"""A term with more documents in the scope than this finds no candidates (too common)."""
MAX_TERMS = 2_000
"""Distinct terms looked up in the index, over all selected events."""
FOLLOWING_EVENTS = 8
"""Events after each selected one in its session that are candidates whatever their words."""
MAX_SOURCE_CHARS = 500_000
"""Normalised characters of selected text whose runs are looked for (the first events')."""
MAX_CANDIDATES = 2_000
"""Later events checked, at most."""
MAX_CANDIDATE_CHARS = 50_000
"""Normalised characters of each candidate checked (its start)."""
MAX_COPIES = 1_000
"""Copies listed, at most (in event order)."""

WHITESPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    """``text`` as copies are compared: NFKC, typographic quotes and dashes plain
    (``quotes.FOLDS``), every run of white space one space, case folded."""
    return WHITESPACE.sub(" ", unicodedata.normalize("NFKC", text).translate(FOLDS)).casefold()


SELECT_SOURCE = "select seq, session, text from events where id = ? and persona = ? and project = ?"
SELECT_QUOTES = "select quote from memories where event_id = ? order by num"
SELECT_FOLLOWING = """
select id from events where persona = ? and project = ? and session is ? and seq > ?
order by seq limit ?
"""
SELECT_DOC_EVENT = "select ref from search_docs where num = ? and doc_kind = 'event'"
SELECT_CANDIDATE = """
select seq, session, role, occurred_at, text from events
where id = ? and persona = ? and project = ?
"""


class Sources:
    """The selected text, ready to check candidates against: each ``MIN_RUN``-character
    shingle with the earliest selected event holding it, and the short quotes."""

    def __init__(self) -> None:
        self.shingles: dict[str, tuple[int, str]] = {}
        """A normalised shingle -> ``(seq, event ID)`` of the earliest event holding it."""
        self.quotes: dict[str, tuple[int, str]] = {}
        """A normalised quote shorter than ``MIN_RUN`` -> its event, the same way."""
        self.chars = 0

    def add(self, seq: int, event_id: str, text: str, quotes: Iterable[str]) -> None:
        norm = normalise(text)[: max(0, MAX_SOURCE_CHARS - self.chars)]
        self.chars += len(norm)
        for start in range(len(norm) - MIN_RUN + 1):
            shingle = norm[start : start + MIN_RUN]
            if self.shingles.get(shingle, (seq + 1,))[0] > seq:
                self.shingles[shingle] = (seq, event_id)
        for quote in quotes:
            wanted = normalise(quote).strip()
            short = MIN_QUOTE_CHARS <= len(wanted) < MIN_RUN
            if short and self.quotes.get(wanted, (seq + 1,))[0] > seq:
                self.quotes[wanted] = (seq, event_id)

    def repeated(self, seq: int, norm: str) -> tuple[str, str] | None:
        """``(selected event ID, repeated normalised text)`` when the text ``norm`` of the
        event ``seq`` repeats an earlier selected event: its longest repeated run, else a
        whole-word quote."""
        best: tuple[str, str] | None = None
        start, end = 0, len(norm) - MIN_RUN + 1
        while start < end:
            owner = self.shingles.get(norm[start : start + MIN_RUN])
            if owner is None or owner[0] >= seq:
                start += 1
                continue
            stop = start + 1  # extend while the next shingle is selected text too
            while stop < end and norm[stop : stop + MIN_RUN] in self.shingles:
                stop += 1
            run = norm[start : stop - 1 + MIN_RUN]
            if best is None or len(run) > len(best[1]):
                best = (owner[1], run)
            start = stop
        if best is not None:
            return best
        for quote, (source_seq, event_id) in self.quotes.items():
            if source_seq < seq and whole_words_in(quote, norm):
                return event_id, quote
        return None


def whole_words_in(part: str, text: str) -> bool:
    """Whether ``part`` occurs in ``text`` not inside a longer word (a CJK end needs no
    boundary: CJK text has no spaces)."""
    found = text.find(part)
    while found >= 0:
        before = text[found - 1] if found else " "
        after = text[found + len(part)] if found + len(part) < len(text) else " "
        if (CJK_RUN.match(part[0]) or not before.isalnum()) and (
            CJK_RUN.match(part[-1]) or not after.isalnum()
        ):
            return True
        found = text.find(part, found + 1)
    return False


def terms(text: str) -> list[str]:
    """Index terms of ``text`` a copy would share, without jieba (it may run in the
    writer): a word's search token (function words left out), and each pair of adjacent
    CJK characters as a phrase (the index holds every CJK character, in order)."""
    found: list[str] = []
    for run in RUN.findall(text):
        if CJK_RUN.match(run):
            found += [f"{a} {b}" for a, b in itertools.pairwise(run)] or [run]
        elif (word := run.lower()) not in STOP_WORDS:
            found.append(stem(word))
    return found


def find_copies(
    conn: sqlite3.Connection, persona: str, project: str, event_ids: Collection[str]
) -> list[Copy]:
    """The later events of the scope that repeat the text of ``event_ids`` (the events a
    delete or erase selects, in ``seq`` order), not themselves among them; in event order."""
    sources = Sources()
    rare: dict[str, None] = {}
    candidates: dict[str, None] = {}
    first_seq: int | None = None
    for event_id in event_ids:
        row = conn.execute(SELECT_SOURCE, (event_id, persona, project)).fetchone()
        if row is None or sources.chars >= MAX_SOURCE_CHARS:
            continue
        seq, session, text = row
        first_seq = seq if first_seq is None else min(first_seq, seq)
        quotes = [quote for (quote,) in conn.execute(SELECT_QUOTES, (event_id,))]
        sources.add(seq, event_id, text, quotes)
        rare |= dict.fromkeys(terms(text))
        following = (persona, project, session, seq, FOLLOWING_EVENTS)
        candidates |= dict.fromkeys(ident for (ident,) in conn.execute(SELECT_FOLLOWING, following))
    if first_seq is None:
        return []
    index = postings.of(conn)
    within = index.within(persona, project)
    for term in list(rare)[:MAX_TERMS]:
        nums = index.phrase(within, term.split(" "), 0, RARE_POSTINGS + 1)
        if len(nums) > RARE_POSTINGS:
            continue
        for num in nums:
            if (doc := conn.execute(SELECT_DOC_EVENT, (num,)).fetchone()) is not None:
                candidates[doc[0]] = None
        if len(candidates) >= MAX_CANDIDATES:
            break
    selected = set(event_ids)
    found: list[tuple[int, Copy]] = []
    for event_id in list(candidates)[:MAX_CANDIDATES]:
        if event_id in selected:
            continue
        row = conn.execute(SELECT_CANDIDATE, (event_id, persona, project)).fetchone()
        if row is None or row[0] <= first_seq:
            continue
        seq, session, role, occurred_at, text = row
        repeat = sources.repeated(seq, normalise(text)[:MAX_CANDIDATE_CHARS])
        if repeat is not None:
            of, match = repeat
            copy = Copy(
                event_id=event_id,
                session=session,
                role=role,
                occurred_at=from_db_time(occurred_at),
                of=of,
                match=as_written(text, match)[:MATCH_CHARS],
            )
            found.append((seq, copy))
    return [copy for _, copy in sorted(found, key=lambda item: item[0])[:MAX_COPIES]]


def as_written(text: str, match: str) -> str:
    """The span of ``text`` whose normalised form is ``match``, as ``text`` has it (the
    normalised ``match`` itself when it cannot be mapped back)."""
    folded, origins = fold(text[: MAX_CANDIDATE_CHARS * 2])
    chars: list[str] = []
    where: list[int] = []
    for char, origin in zip(folded, origins, strict=True):
        lower = char.casefold()
        chars.append(lower)
        where.extend([origin] * len(lower))
    found = "".join(chars).find(match)
    if found < 0:
        return match.strip()
    return text[where[found] : where[found + len(match) - 1] + 1].strip()
