"""The lexical index: segmented copies of memory and event text in ``search_docs`` (the
tokens of ``text.tokens``: English words as their Snowball stems since schema v5),
indexed through ``postings.Postings`` (FTS5 on SQLite). Rows are written and removed in
the same transaction as the row they index; the text is segmented before that transaction
(``text.segment_off_loop``), never inside the writer. Every document starts with its
scope token, so FTS can filter by scope. Plain functions of a connection.

What the index holds is decided here, once: conversation and correction events that
still hold their text (not evicted), and current (unrevoked) memories. Submit, import and
doctor follow ``indexes_event`` and ``indexes_memory``, or the SQL ``INDEXED_EVENT`` and
``INDEXED_MEMORY`` that say the same; a correction (an indexed event and a new memory), a
revocation and an eviction keep to it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import NamedTuple

from ..db.in_lists import literals
from ..db.rules import CURRENT_MEMORY, HELD_EVENT
from ..models import Category
from . import postings
from .fts5 import MAX_LEVELS as MAX_LEVELS  # FTS5's structure, which tests look into
from .fts5 import index_levels as index_levels
from .fts5 import index_segments as index_segments
from .text import PERSON_PREFIX, person_token, scope_token

INDEXED_CATEGORIES: tuple[Category, ...] = ("conversation", "correction")
"""Event categories whose text is indexed; reference and persona events are only archived."""


def indexes_event(category: str, evicted_at: str | None = None) -> bool:
    """Whether the index holds an event of this category: never once it is evicted."""
    return category in INDEXED_CATEGORIES and evicted_at is None


def indexes_memory(revoked_at: str | None) -> bool:
    """Whether the index holds a memory: only while it is not revoked."""
    return revoked_at is None


INDEXED_CATEGORY = f"e.category in ({literals(INDEXED_CATEGORIES)})"
"""``indexes_event`` of an event ``e`` that is not evicted, in SQL: all a migration of a
file older than eviction (schema v12) asks, since no event there is evicted."""
INDEXED_EVENT = f"{INDEXED_CATEGORY} and {HELD_EVENT}"
"""``indexes_event`` in SQL, for an event ``e``."""
INDEXED_MEMORY = CURRENT_MEMORY
"""``indexes_memory`` in SQL, for a memory ``m``: the index holds current memories."""


class Document(NamedTuple):
    """What the index holds for one event or memory; ``text`` is its text, or its tokens
    once segmented."""

    doc_kind: str
    ref: str
    persona: str
    project: str
    text: str


SELECT_DOCS = """
select num, persona, project, tokens from search_docs where doc_kind = ? and ref = ?
"""


SELECT_PEOPLE = {
    "event": "select person, null from events where id = ?",
    "memory": "select person, about from memories where id = ?",
}
"""The people a document belongs to, read from its row: the owner, and for a memory the
people it is about (a JSON list)."""


def people_of(conn: sqlite3.Connection, doc_kind: str, ref: str) -> list[str]:
    """The people whose tokens the document of this row carries, sorted."""
    row = conn.execute(SELECT_PEOPLE[doc_kind], (ref,)).fetchone()
    if row is None:
        return []
    owner, about = row
    return sorted({*([owner] if owner else []), *(json.loads(about) if about else [])})


def doc_tokens(persona: str, project: str, people: Iterable[str], segmented: str) -> str:
    """What the index stores for a document: the scope's token first (``scan_documents``
    leaves it out), its people's tokens, then its text's tokens."""
    heads = [scope_token(persona, project), *(person_token(persona, project, p) for p in people)]
    return " ".join([*heads, segmented])


def event_tokens(persona: str, project: str, person: str | None, segmented: str) -> str:
    """``doc_tokens`` of a new event, whose people are the one it is stored with."""
    return doc_tokens(persona, project, [] if person is None else [person], segmented)


def index_doc(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    doc_kind: str,
    ref: str,
    segmented: str,
    people: Iterable[str] | None = None,
) -> None:
    """Index one document of a stored row: ``segmented`` is its text as ``text.segment``
    returns it; its people are read from the row, unless ``people`` says them (a
    migration rebuilding the index of a file older than people: its rows have none, nor
    the columns that would say so)."""
    owners = people_of(conn, doc_kind, ref) if people is None else sorted(people)
    tokens = doc_tokens(persona, project, owners, segmented)
    postings.of(conn).add(persona, project, doc_kind, ref, tokens)


def reindex_people(conn: sqlite3.Connection, doc_kind: str, ref: str) -> None:
    """Give a document the tokens of its row's people as they are now (after an assignment
    or a change of whom a memory is about); its text's tokens stay as they were."""
    people = people_of(conn, doc_kind, ref)
    for num, persona, project, tokens in conn.execute(SELECT_DOCS, (doc_kind, ref)).fetchall():
        _scope, _, rest = tokens.partition(" ")
        words = rest.split(" ")
        while words and words[0].startswith(PERSON_PREFIX):
            words.pop(0)
        new = doc_tokens(persona, project, people, " ".join(words))
        if new != tokens:
            postings.of(conn).retoken(num, persona, project, tokens, new)


def remove_docs(conn: sqlite3.Connection, doc_kind: str, refs: Iterable[str]) -> int:
    """Remove the index rows of ``refs``; returns how many there were."""
    index = postings.of(conn)
    removed = 0
    for ref in refs:
        for num, persona, project, tokens in conn.execute(SELECT_DOCS, (doc_kind, ref)).fetchall():
            index.remove(num, persona, project, tokens)
            removed += 1
    return removed


def purge_deleted_terms(conn: sqlite3.Connection) -> None:
    """Rewrite the index so terms of deleted rows leave the file, not only their markers
    (``Postings.purge``)."""
    postings.of(conn).purge()


def merge_step(conn: sqlite3.Connection) -> bool:
    """One step of the index's upkeep the writer takes when idle (``Postings.merge_step``);
    True while more is left."""
    return postings.of(conn).merge_step()
