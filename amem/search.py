"""The lexical index: segmented copies of memory and event text in ``search_docs``,
indexed by the external-content FTS5 table ``search_fts``. Rows are written and removed in
the same transaction as the row they index; the text is segmented before that transaction
(``text.segment_off_loop``), never inside the writer. Every document starts with its
scope token, so FTS can filter by scope. Plain functions of a connection.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable

from .text import scope_token

INDEXED_CATEGORIES = ("conversation", "correction")
"""Event categories whose text is indexed; reference and persona events are only archived."""

INSERT_DOC = """
insert into search_docs (persona, project, doc_kind, ref, tokens) values (?, ?, ?, ?, ?)
"""
INSERT_FTS = "insert into search_fts (rowid, tokens) values (?, ?)"
SELECT_DOCS = "select num, tokens from search_docs where doc_kind = ? and ref = ?"
DELETE_FTS = "insert into search_fts (search_fts, rowid, tokens) values ('delete', ?, ?)"
DELETE_DOC = "delete from search_docs where num = ?"


def index_doc(
    conn: sqlite3.Connection, persona: str, project: str, doc_kind: str, ref: str, segmented: str
) -> None:
    """Index one document: ``segmented`` is its text as ``text.segment`` returns it."""
    tokens = f"{scope_token(persona, project)} {segmented}"
    num = conn.execute(INSERT_DOC, (persona, project, doc_kind, ref, tokens)).lastrowid
    conn.execute(INSERT_FTS, (num, tokens))


def remove_docs(conn: sqlite3.Connection, doc_kind: str, refs: Iterable[str]) -> int:
    """Remove the index rows of ``refs``; returns how many there were."""
    removed = 0
    for ref in refs:
        for num, tokens in conn.execute(SELECT_DOCS, (doc_kind, ref)).fetchall():
            conn.execute(DELETE_FTS, (num, tokens))
            conn.execute(DELETE_DOC, (num,))
            removed += 1
    return removed


def purge_deleted_terms(conn: sqlite3.Connection) -> None:
    """Merge the FTS index so terms of deleted rows leave the file, not only their markers.

    SQLite 3.40's FTS5 has no ``secure-delete`` option: a deleted row's terms stay in old
    index segments until a merge. ``optimize`` rewrites the index, and ``secure_delete``
    zeroes the freed pages. Its cost grows with the index; deletions are rare.
    """
    conn.execute("insert into search_fts (search_fts) values ('optimize')")
