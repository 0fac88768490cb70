"""The lexical index: segmented copies of memory and event text in ``search_docs`` (the
tokens of ``text.tokens``: English words as their Snowball stems since schema v5),
indexed by the external-content FTS5 table ``search_fts``. Rows are written and removed in
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
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from ..db.in_lists import literals
from ..db.rules import CURRENT_MEMORY, HELD_EVENT
from ..models import Category
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


INSERT_DOC = """
insert into search_docs (persona, project, doc_kind, ref, tokens) values (?, ?, ?, ?, ?)
returning num
"""
INSERT_FTS = "insert into search_fts (rowid, tokens) values (?, ?)"
SELECT_DOCS = "select num, tokens from search_docs where doc_kind = ? and ref = ?"
DELETE_FTS = "insert into search_fts (search_fts, rowid, tokens) values ('delete', ?, ?)"
DELETE_DOC = "delete from search_docs where num = ?"


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
    [num] = conn.execute(INSERT_DOC, (persona, project, doc_kind, ref, tokens)).fetchone()
    conn.execute(INSERT_FTS, (num, tokens))


UPDATE_TOKENS = "update search_docs set tokens = ? where num = ?"


def reindex_people(conn: sqlite3.Connection, doc_kind: str, ref: str) -> None:
    """Give a document the tokens of its row's people as they are now (after an assignment
    or a change of whom a memory is about); its text's tokens stay as they were."""
    people = people_of(conn, doc_kind, ref)
    for num, tokens in conn.execute(SELECT_DOCS, (doc_kind, ref)).fetchall():
        _scope, _, rest = tokens.partition(" ")
        words = rest.split(" ")
        while words and words[0].startswith(PERSON_PREFIX):
            words.pop(0)
        persona, project = conn.execute(SELECT_DOC_SCOPE, (num,)).fetchone()
        new = doc_tokens(persona, project, people, " ".join(words))
        if new != tokens:
            conn.execute(DELETE_FTS, (num, tokens))
            conn.execute(UPDATE_TOKENS, (new, num))
            conn.execute(INSERT_FTS, (num, new))


SELECT_DOC_SCOPE = "select persona, project from search_docs where num = ?"


def remove_docs(conn: sqlite3.Connection, doc_kind: str, refs: Iterable[str]) -> int:
    """Remove the index rows of ``refs``; returns how many there were."""
    removed = 0
    for ref in refs:
        for num, tokens in conn.execute(SELECT_DOCS, (doc_kind, ref)).fetchall():
            conn.execute(DELETE_FTS, (num, tokens))
            conn.execute(DELETE_DOC, (num,))
            removed += 1
    return removed


OPTIMIZE_CAPS_LEVELS = (3, 41, 0)
"""Before SQLite 3.41.0, every FTS5 ``optimize`` of an index spread over several segments
adds a level to the index's structure record, with no cap; past 2,000 levels
(``FTS5_MAX_SEGMENT``) FTS5 refuses the record as corrupt (``SQLITE_CORRUPT_VTAB``) and
every read and write of the table fails. 3.41.0 caps the levels an optimize can add at
``FTS5_MAX_LEVEL`` (``pNew->nLevel = MIN(pStruct->nLevel+1, FTS5_MAX_LEVEL)`` in
``fts5IndexOptimizeStruct``). ``merge`` with a negative argument takes the same path."""
MAX_LEVELS = 64
"""``FTS5_MAX_LEVEL``: the cap 3.41.0 enforces, which amem keeps on older SQLite."""
STRUCTURE_ROWID = 10
"""``FTS5_STRUCTURE_ROWID``: the row of ``search_fts_data`` holding the structure record."""


def purge_deleted_terms(conn: sqlite3.Connection) -> None:
    """Rewrite the FTS index so terms of deleted rows leave the file, not only their markers.

    FTS5 records a deletion as a marker beside the old entries (SQLite 3.40 has no
    ``secure-delete`` option); both stay in index segments until a merge reaches them.
    ``optimize`` merges everything into one segment, and ``secure_delete`` zeroes the freed
    pages. On SQLite before 3.41 an index already at ``MAX_LEVELS`` levels is rebuilt from
    ``search_docs`` instead, which starts a fresh structure record (see
    ``OPTIMIZE_CAPS_LEVELS``). Its cost grows with the index: the writer runs it when idle,
    at most every few seconds, never once per deletion.
    """
    if sqlite3.sqlite_version_info >= OPTIMIZE_CAPS_LEVELS or index_levels(conn) < MAX_LEVELS:
        conn.execute("insert into search_fts (search_fts) values ('optimize')")
    else:
        conn.execute("insert into search_fts (search_fts) values ('rebuild')")


def index_levels(conn: sqlite3.Connection) -> int:
    """How many levels the FTS5 structure record lists (0 for an empty index)."""
    return index_structure(conn)[0]


def index_segments(conn: sqlite3.Connection) -> int:
    """How many segments the FTS5 structure record lists (0 for an empty index)."""
    return index_structure(conn)[1]


def index_structure(conn: sqlite3.Connection) -> tuple[int, int]:
    """The levels and segments of the FTS5 structure record: it starts with a 4-byte
    cookie, then those two counts as SQLite varints."""
    row = conn.execute(SELECT_RECORD, (STRUCTURE_ROWID,)).fetchone()
    if row is None or len(row[0]) < 5:
        return 0, 0
    counts = varints(row[0], 4)
    return next(counts, 0), next(counts, 0)


MERGE_PAGES = 64
"""Leaf pages one upkeep step of the index writes (a few milliseconds of the writer)."""
USERMERGE = 2
"""Segments of one level that the upkeep merges (FTS5's ``usermerge``; its default, 4,
leaves up to three segments on every level, and each query term looks into each)."""
SELECT_USERMERGE = "select v from search_fts_config where k = 'usermerge'"


def merge_step(conn: sqlite3.Connection) -> bool:
    """Merge some of the index's segments (at most ``MERGE_PAGES`` pages written); True
    while more are left to merge.

    Every write transaction adds a segment, and FTS5 merges them only four at a time per
    level, so a store written over time holds a dozen segments and every term lookup pays
    for each: at a million memories, a long query took half again as long. Two segments of
    a level are merged into the next, so each document is rewritten about log2(size)
    times over the store's life, in steps taken when the writer is idle."""
    if conn.execute(SELECT_USERMERGE).fetchone() != (USERMERGE,):
        conn.execute(
            "insert into search_fts (search_fts, rank) values ('usermerge', ?)", (USERMERGE,)
        )
    before = conn.total_changes
    conn.execute("insert into search_fts (search_fts, rank) values ('merge', ?)", (MERGE_PAGES,))
    return conn.total_changes - before >= 2  # FTS5's own sign that it merged something


AVERAGES_ROWID = 1
"""``FTS5_AVERAGES_ROWID``: the record counting the index's rows and their tokens."""
SELECT_RECORD = "select block from search_fts_data where id = ?"


def average_length(conn: sqlite3.Connection) -> float:
    """The average number of tokens per indexed document (scope token included), from the
    record FTS5 keeps for its own BM25: the row count, then the tokens of each column."""
    row = conn.execute(SELECT_RECORD, (AVERAGES_ROWID,)).fetchone()
    if row is None:
        return 0.0
    counts = varints(row[0], 0)
    rows, tokens = next(counts, 0), next(counts, 0)
    return tokens / rows if rows else 0.0


def varints(data: bytes, start: int) -> Iterator[int]:
    """The SQLite varints in ``data`` from ``start`` on: big-endian 7-bit groups, high bit
    set on all but the last; a ninth byte, if reached, carries 8 bits."""
    position = start
    while position < len(data):
        value = 0
        for size in range(9):
            if position >= len(data):
                return
            byte = data[position]
            position += 1
            if size == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        yield value
