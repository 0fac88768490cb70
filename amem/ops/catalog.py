"""What the operations read of a database's own structure, on SQLite and PostgreSQL alike:
which of amem's tables are there (and plain), their columns, and, on PostgreSQL, the
identity sequences a load moves past the row numbers it wrote.

SQLite answers from ``sqlite_master`` and ``pragma table_info``; PostgreSQL from
``pg_catalog`` and ``information_schema``, in the schema amem's tables are in (the first
of ``search_path``: ``current_schema()``). Everything else of these operations is the
same SQL on both (``db.postgres`` spells it).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import NamedTuple

from ..db.in_lists import literals
from ..db.postgres import is_postgres


class Column(NamedTuple):
    name: str
    blob: bool
    """Whether it holds bytes (``BLOB``, ``bytea``) rather than text or numbers."""


SQLITE_TABLES = "select name, type, sql from sqlite_master where name in ({names})"
PG_TABLES = """
select c.relname, c.relkind from pg_catalog.pg_class c
join pg_catalog.pg_namespace n on n.oid = c.relnamespace
where n.nspname = current_schema() and c.relname in ({names})
"""
PG_COLUMNS = """
select column_name, data_type from information_schema.columns
where table_schema = current_schema() and table_name = ? order by ordinal_position
"""


def plain_tables(conn: sqlite3.Connection, names: Iterable[str]) -> dict[str, bool]:
    """Which of ``names`` the database holds, each with whether it is a plain table (not a
    view, a virtual table or anything else that could compute its rows)."""
    if is_postgres(conn):
        found = conn.execute(PG_TABLES.format(names=literals(names))).fetchall()
        return {str(name): kind == "r" for name, kind in found}
    found = conn.execute(SQLITE_TABLES.format(names=literals(names))).fetchall()
    return {
        str(name): kind == "table" and str(sql).startswith("CREATE TABLE")
        for name, kind, sql in found
    }


def columns(conn: sqlite3.Connection, table: str) -> list[Column]:
    """The columns of ``table`` (one of amem's), in the order they were created."""
    if is_postgres(conn):
        found = conn.execute(PG_COLUMNS, (table,)).fetchall()
        return [Column(str(name), kind == "bytea") for name, kind in found]
    return [
        Column(str(row[1]), str(row[2]).upper() == "BLOB")
        for row in conn.execute(f"pragma table_info({table})")
    ]


PG_IDENTITIES = """
select table_name, column_name from information_schema.columns
where table_schema = current_schema() and is_identity = 'YES'
"""
PG_SET_NEXT = """
select setval(pg_get_serial_sequence(?, ?), coalesce(max({column}), 0) + 1, false) from {table}
"""


def advance_row_numbers(conn: sqlite3.Connection) -> None:
    """After a load wrote its rows' own numbers (``events.seq``, ``memories.num``, ...):
    on PostgreSQL, set each identity sequence past the largest number its column holds,
    so the next insert does not take one of them. SQLite numbers a row past the largest
    by itself."""
    if not is_postgres(conn):
        return
    for table, column in conn.execute(PG_IDENTITIES).fetchall():
        conn.execute(PG_SET_NEXT.format(column=column, table=table), (table, column))
