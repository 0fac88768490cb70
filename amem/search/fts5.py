"""The lexical index on SQLite: ``search_fts``, an external-content FTS5 table over
``search_docs`` (``db.schema``), behind the ``postings.Postings`` interface.

Every FTS5 statement amem runs is here: the match strings (each token quoted by
``text.literal``, so no user text is ever executed as query syntax), the index's upkeep
(``merge``, ``optimize``), and what FTS5 keeps for its own BM25 (the averages record and
each document's size). A lookup narrowed to a scope or a person ANDs their token to its
terms; the index of a file holding one scope is not narrowed at all (see ``within``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence

from ..db.in_lists import marks
from ..db.schema import CREATE_SEARCH_FTS, SEARCH_FTS_SHADOWS
from .postings import Count, Eligible, Sizes, Within
from .text import literal, person_token, scope_token

SELECT_NEWEST = """
select rowid from search_fts where search_fts match :match order by rowid desc limit :per_term
"""


# In rowid order: FTS5 reads a long doclist backwards only by walking it from its start.
SELECT_OLDEST = """
select rowid from search_fts where search_fts match :match limit :per_term
"""


SELECT_PHRASE = """
select rowid from search_fts where search_fts match :match and rowid > :floor limit :per_term
"""


# Counting only documents ``eligible`` says may be found: the FTS scan stays bounded
# (:scan postings) however large the archive.
SELECT_ELIGIBLE = """
select d.num from (
    select rowid as num from search_fts where search_fts match :match
    order by rowid desc limit :scan
) f join search_docs d on d.num = f.num
where {eligible}
limit :per_term
"""


COUNT_TERM = """
select {n}, count(*), min(rowid), max(rowid) from (
    select rowid from search_fts where search_fts match ? limit {limit}
)
"""


# FTS5's count of each document's tokens (one varint per column): the length of a long one
# without reading its text.
SELECT_SIZES = "select id, sz from search_fts_docsize where id in ({})"


# The first and last scope in index order: equal to the query's scope when it is the only one.
SELECT_SCOPE_BOUNDS = """
select (select persona || char(31) || project from search_docs order by persona, project limit 1),
       (select persona || char(31) || project from search_docs
        order by persona desc, project desc limit 1)
"""


INSERT_DOC = """
insert into search_docs (persona, project, doc_kind, ref, tokens) values (?, ?, ?, ?, ?)
"""
INSERT_FTS = "insert into search_fts (rowid, tokens) values (?, ?)"
DELETE_FTS = "insert into search_fts (search_fts, rowid, tokens) values ('delete', ?, ?)"
DELETE_DOC = "delete from search_docs where num = ?"
UPDATE_TOKENS = "update search_docs set tokens = ? where num = ?"
INSERT_DOCS = """
insert into search_docs (persona, project, doc_kind, ref, tokens)
select json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]')
from json_each(?) order by key
"""
INSERT_FTS_AFTER = (
    "insert into search_fts (rowid, tokens) select num, tokens from search_docs where num > ?"
)


class Fts5Postings:
    """``postings.Postings`` on a SQLite connection. A ``Within`` here is the token every
    document found holds (the scope's, or a person's), or ``""`` for every document."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def within(self, persona: str, project: str, person: str | None = None) -> Within:
        """The person's token for a person's recall, else the scope's, or nothing when the
        index holds no other scope.

        Intersecting each term with the scope token costs several times the term alone;
        when the index holds no other scope (two index seeks tell), the intersection
        changes nothing."""
        if person is not None:  # a person's token stands for their scope's too
            return person_token(persona, project, person)
        first, last = self.conn.execute(SELECT_SCOPE_BOUNDS).fetchone()
        if first == last == f"{persona}\x1f{project}":
            return ""
        return scope_token(persona, project)

    def whole(self, within: Within) -> bool:
        return within == ""

    def for_own_token(self, within: Within) -> Within:
        return ""  # only the documents ``within`` narrows to hold its token

    def newest(
        self, within: Within, terms: Sequence[str], limit: int, sizes: Sizes = ()
    ) -> list[int]:
        return self._rows(SELECT_NEWEST, {"match": match(terms, within), "per_term": limit})

    def oldest(
        self, within: Within, terms: Sequence[str], limit: int, sizes: Sizes = ()
    ) -> list[int]:
        return self._rows(SELECT_OLDEST, {"match": match(terms, within), "per_term": limit})

    def counts(self, within: Within, terms: Sequence[str], limit: int) -> list[Count]:
        sql = " union all ".join(
            COUNT_TERM.format(n=n, limit=int(limit)) for n in range(len(terms))
        )
        found = [Count(0, 0, 0)] * len(terms)
        for n, count, first, oldest_last in self.conn.execute(
            sql, [match([term], within) for term in terms]
        ).fetchall():
            found[n] = Count(count, first or 0, oldest_last or 0)
        return found

    def phrase(
        self, within: Within, tokens: Sequence[str], floor: int, limit: int, sizes: Sizes = ()
    ) -> list[int]:
        query = {"match": literal(" ".join(tokens)) + narrowing(within), "floor": floor}
        return self._rows(SELECT_PHRASE, {**query, "per_term": limit})

    def eligible_newest(self, within: Within, term: str, eligible: Eligible) -> list[int]:
        query = {"match": match([term], within), "scan": eligible.scan, "per_term": eligible.limit}
        return self._rows(
            SELECT_ELIGIBLE.format(eligible=eligible.condition), {**eligible.params, **query}
        )

    def _rows(self, sql: str, params: Mapping[str, object]) -> list[int]:
        return [rowid for (rowid,) in self.conn.execute(sql, params)]

    def sizes(self, nums: Sequence[int]) -> dict[int, int]:
        rows = self.conn.execute(SELECT_SIZES.format(marks(len(nums))), list(nums)).fetchall()
        return {num: next(varints(size, 0), 0) for num, size in rows}

    def average_length(self) -> float:
        """From the record FTS5 keeps for its own BM25: the row count, then the tokens of
        each column."""
        row = self.conn.execute(SELECT_RECORD, (AVERAGES_ROWID,)).fetchone()
        if row is None:
            return 0.0
        counts = varints(row[0], 0)
        rows, tokens = next(counts, 0), next(counts, 0)
        return tokens / rows if rows else 0.0

    def add(self, persona: str, project: str, doc_kind: str, ref: str, tokens: str) -> int:
        num = self.conn.execute(INSERT_DOC, (persona, project, doc_kind, ref, tokens)).lastrowid
        assert num is not None  # an insert always numbers its row
        self.conn.execute(INSERT_FTS, (num, tokens))
        return num

    def add_many(self, docs: Sequence[tuple[str, str, str, str, str]]) -> None:
        """``add`` of each ``(persona, project, doc_kind, ref, tokens)``, in two statements
        whatever their number: a batch of writes indexes its rows without a Python call,
        and a lock on the interpreter, per row."""
        (top,) = self.conn.execute("select coalesce(max(num), 0) from search_docs").fetchone()
        self.conn.execute(INSERT_DOCS, (json.dumps(docs, ensure_ascii=False),))
        self.conn.execute(INSERT_FTS_AFTER, (top,))

    def retoken(self, num: int, persona: str, project: str, old: str, new: str) -> None:
        self.conn.execute(DELETE_FTS, (num, old))
        self.conn.execute(UPDATE_TOKENS, (new, num))
        self.conn.execute(INSERT_FTS, (num, new))

    def remove(self, num: int, persona: str, project: str, tokens: str) -> None:
        self.conn.execute(DELETE_FTS, (num, tokens))
        self.conn.execute(DELETE_DOC, (num,))

    def purge(self) -> None:
        """FTS5 records a deletion as a marker beside the old entries (SQLite 3.40 has no
        ``secure-delete`` option); both stay in index segments until a merge reaches them.
        ``optimize`` merges everything into one segment, and ``secure_delete`` zeroes the
        freed pages. On SQLite before 3.41 an index already at ``MAX_LEVELS`` levels is
        rebuilt from ``search_docs`` instead, which starts a fresh structure record (see
        ``OPTIMIZE_CAPS_LEVELS``)."""
        if (
            sqlite3.sqlite_version_info >= OPTIMIZE_CAPS_LEVELS
            or index_levels(self.conn) < MAX_LEVELS
        ):
            self.conn.execute("insert into search_fts (search_fts) values ('optimize')")
        else:
            self.conn.execute("insert into search_fts (search_fts) values ('rebuild')")

    def merge_step(self) -> bool:
        """Every write transaction adds a segment, and FTS5 merges them only four at a time
        per level, so a store written over time holds a dozen segments and every term
        lookup pays for each: at a million memories, a long query took half again as long.
        Two segments of a level are merged into the next, so each document is rewritten
        about log2(size) times over the store's life, in steps taken when the writer is
        idle."""
        conn = self.conn
        if conn.execute(SELECT_USERMERGE).fetchone() != (USERMERGE,):
            conn.execute(
                "insert into search_fts (search_fts, rank) values ('usermerge', ?)", (USERMERGE,)
            )
        before = conn.total_changes
        conn.execute(
            "insert into search_fts (search_fts, rank) values ('merge', ?)", (MERGE_PAGES,)
        )
        return conn.total_changes - before >= 2  # FTS5's own sign that it merged something

    def clear(self) -> None:
        """Drop ``search_fts`` (even when FTS5 cannot read it), empty ``search_docs`` and
        create ``search_fts`` anew: whatever state the old index was in."""
        drop_search_fts(self.conn)
        self.conn.execute("delete from search_docs")
        self.conn.execute(CREATE_SEARCH_FTS)

    def check(self) -> str | None:
        """FTS5's own check, comparing the index with ``search_docs`` (rank 1)."""
        conn = self.conn
        conn.execute("savepoint fts_check")
        try:
            conn.execute("insert into search_fts (search_fts, rank) values ('integrity-check', 1)")
            problem = None
        except sqlite3.DatabaseError as exc:
            problem = f"the index does not match its content ({exc.sqlite_errorname})"
        finally:
            conn.execute("rollback to fts_check")
            conn.execute("release fts_check")
        return problem


def match(terms: Sequence[str], within: Within) -> str:
    """The FTS5 query of documents holding every term (and ``within``'s token)."""
    return " AND ".join(map(literal, terms)) + narrowing(within)


def narrowing(within: Within) -> str:
    if not isinstance(within, str):
        raise TypeError("a narrowing made for another database")
    return f" AND {literal(within)}" if within else ""


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


AVERAGES_ROWID = 1
"""``FTS5_AVERAGES_ROWID``: the record counting the index's rows and their tokens."""
SELECT_RECORD = "select block from search_fts_data where id = ?"


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


def drop_search_fts(conn: sqlite3.Connection) -> None:
    """Drop ``search_fts`` and its shadow tables, even when FTS5 cannot read them.

    FTS5 reads the index's structure record to open the table at all, even to drop it; a
    broken record makes ``DROP TABLE`` fail too. Then the table's schema row is removed
    by hand (``writable_schema``) and its shadow tables dropped as the plain tables they are.
    """
    conn.execute("savepoint drop_fts")
    try:
        conn.execute("drop table search_fts")
    except sqlite3.DatabaseError:
        conn.execute("rollback to drop_fts")
        conn.execute("pragma writable_schema = on")
        try:
            conn.execute("delete from sqlite_master where type = 'table' and name = 'search_fts'")
        finally:
            conn.execute("pragma writable_schema = reset")
        for table in SEARCH_FTS_SHADOWS:
            conn.execute(f"drop table if exists {table}")
    conn.execute("release drop_fts")
