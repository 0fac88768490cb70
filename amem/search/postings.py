"""The lexical index's one interface: every read and write of it goes through a
``Postings``, whichever database holds it (``of`` chooses from the connection).

What it holds: for each document of ``search_docs`` (``index`` decides which), its
tokens' postings, in document order (a document's ``num``; a newer document has a larger
one). What it answers, always bounded however common a term: a conjunction's newest or
oldest documents, how many documents hold a term (up to a limit) and where its oldest lie,
the documents holding a phrase, each document's length and the index's average length
(BM25). How recall uses the answers (``recall.lexical``) is the same on every database.

Every lookup is narrowed to the documents of one scope, or of one person of it: a
``Within``, which the implementation makes (``Postings.within``) and alone reads.

Implementations: ``fts5.Fts5Postings`` (SQLite's FTS5) and ``pg_postings.PgPostings``
(PostgreSQL: postings in a B-tree, ``db.pg_search``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

from ..db.postgres import is_postgres


class ScopeRows(NamedTuple):
    """A narrowing as PostgreSQL reads it: the scope's columns, which every lookup filters
    on, and a person's token, whose postings a person's recall intersects with."""

    persona: str
    project: str
    person_token: str | None
    alone: bool
    """Whether the index holds no other scope (``Postings.whole``)."""


Within = str | ScopeRows
"""What a lookup is narrowed to, as the implementation that made it spells it (FTS5: the
token every document found holds, or ``""`` for all): kept term counts
(``recall.lexical.KnownTerms``) tell narrowings apart by it."""


Sizes = Sequence[float]
"""How many documents hold each of a lookup's terms, as recall estimated them
(``recall.lexical.Term.df``): an implementation may choose by them how to intersect."""


class Count(NamedTuple):
    """The documents holding a term, counted up to a limit, oldest first."""

    documents: int
    """How many, up to the limit."""
    first: int
    """The oldest one (0 when none)."""
    oldest_last: int
    """The last of the oldest ``documents`` (0 when none)."""


class Eligible(NamedTuple):
    """Which of a term's newest documents may be found: an SQL condition on ``d``, their
    ``search_docs`` row, with the named parameters it reads; only the ``scan`` newest
    are tried (bounded however common the term), and ``limit`` are kept."""

    condition: str
    params: Mapping[str, object]
    scan: int
    limit: int


class Postings(Protocol):
    """The lexical index on one connection."""

    def within(self, persona: str, project: str, person: str | None = None) -> Within:
        """The narrowing to a scope's documents (a person's of it, when ``person``)."""
        ...

    def whole(self, within: Within) -> bool:
        """Whether ``within`` narrows to every document the index ever held: the index
        holds no other scope (its documents are counted by their newest number)."""
        ...

    def for_own_token(self, within: Within) -> Within:
        """The narrowing for lookups of ``within``'s own token (the scope's or the
        person's), which every document narrowed to holds."""
        ...

    def newest(
        self, within: Within, terms: Sequence[str], limit: int, sizes: Sizes = ()
    ) -> list[int]:
        """Up to ``limit`` documents holding every term, newest first. ``sizes``, when
        given: how many documents hold each term (an estimate), which an implementation
        may use to choose how to intersect them."""
        ...

    def oldest(
        self, within: Within, terms: Sequence[str], limit: int, sizes: Sizes = ()
    ) -> list[int]:
        """Up to ``limit`` documents holding every term, oldest first (the cheaper end on
        FTS5); ``sizes`` as for ``newest``."""
        ...

    def counts(self, within: Within, terms: Sequence[str], limit: int) -> list[Count]:
        """Each term's documents, counted up to ``limit``; in the order of ``terms``."""
        ...

    def phrase(
        self, within: Within, tokens: Sequence[str], floor: int, limit: int, sizes: Sizes = ()
    ) -> list[int]:
        """Up to ``limit`` documents newer than ``floor`` holding ``tokens`` side by side,
        in order; oldest first. ``sizes`` as for ``newest``, one for each token."""
        ...

    def eligible_newest(self, within: Within, term: str, eligible: Eligible) -> list[int]:
        """Of the ``eligible.scan`` newest documents holding ``term``, up to
        ``eligible.limit`` for which its condition holds, newest first."""
        ...

    def sizes(self, nums: Sequence[int]) -> dict[int, int]:
        """The tokens in each of the documents ``nums`` (the scope's token included), as
        the index counted them; a document it does not hold is left out."""
        ...

    def average_length(self) -> float:
        """The average number of tokens per indexed document, index-wide (the scope's
        token included), as FTS5's own ``bm25`` has it."""
        ...

    def add(self, persona: str, project: str, doc_kind: str, ref: str, tokens: str) -> int:
        """Store a document (its ``search_docs`` row) and index its ``tokens``; its num."""
        ...

    def retoken(self, num: int, persona: str, project: str, old: str, new: str) -> None:
        """Replace the tokens of the document ``num``: ``old`` by ``new``."""
        ...

    def remove(self, num: int, persona: str, project: str, tokens: str) -> None:
        """Remove the document ``num``, whose tokens are ``tokens``, and its row."""
        ...

    def purge(self) -> None:
        """Make the terms of removed documents leave the database's pages, not only the
        index (erasure). Its cost grows with the index: the writer runs it when idle, at
        most every few seconds, never once per deletion."""
        ...

    def merge_step(self) -> bool:
        """One bounded step of the index's upkeep; True while more is left to do."""
        ...

    def clear(self) -> None:
        """Empty the index and ``search_docs``, whatever state they are in (a rebuild)."""
        ...

    def check(self) -> str | None:
        """What is wrong with the index against ``search_docs``; None when nothing is."""
        ...


def of(conn: sqlite3.Connection) -> Postings:
    """The lexical index of the database ``conn`` is connected to."""
    if is_postgres(conn):
        from .pg_postings import PgPostings

        return PgPostings(conn)
    from .fts5 import Fts5Postings

    return Fts5Postings(conn)
