"""The lexical index's tables on PostgreSQL, beside ``search_docs`` (whose ``length``
column ``pg_schema`` adds): what ``search.pg_postings`` reads and writes in place of
SQLite's FTS5 table. Here, below the index, as SQLite's FTS5 table is in ``schema``.

Postings are a B-tree, not a ``tsvector`` with a GIN index: recall reads a term's newest
documents, its oldest, and conjunctions newest first, each bounded however common the
term (FTS5's ordered doclists); a B-tree on (scope, term, num) gives each of those as one
index range read in either direction, where GIN returns a bitmap to sort.
"""

from __future__ import annotations

POSTGRES_TABLES: tuple[str, ...] = (
    # One row per distinct token of a document (its scope's and people's tokens too);
    # persona and project lead every key: the scope (the Citus distribution column)
    # narrows every read. Removal names the document's tokens, so the key serves it too.
    """
    create table search_postings (
        persona text collate "C" not null,
        project text collate "C" not null,
        term text collate "C" not null,
        num bigint not null,
        primary key (persona, project, term, num)
    )
    """,
    # The index's documents and their tokens, for BM25's average length (FTS5 keeps the
    # same record): kept by the index's writes in their transaction, never counted.
    "create table search_totals (documents bigint not null, tokens bigint not null)",
    "insert into search_totals (documents, tokens) values (0, 0)",
)
"""The statements creating the lexical index's tables, as ``pg_schema`` runs them."""
