"""Every ``check (column in (...))`` of the schema lists exactly its ``Literal``'s values.

The lists are read from a new database's ``sqlite_master`` (the schema as the migrations
leave it, columns added by ``alter table`` included), so a value added to one side only,
or a new enumerated column with no type, fails here.
"""

from __future__ import annotations

import ast
import re
import sqlite3
from pathlib import Path
from typing import Any, get_args

from amem.db.schema import migrate
from amem.models import (
    Basis,
    Category,
    DocKind,
    MemoryKind,
    MemoryTier,
    RelationKind,
    Role,
    RunStatus,
    StoredStatus,
)

LITERALS: dict[tuple[str, str], Any] = {
    ("events", "role"): Role,
    ("events", "category"): Category,
    ("events", "status"): StoredStatus,
    ("consolidation_runs", "status"): RunStatus,
    ("memories", "kind"): MemoryKind,
    ("memories", "basis"): Basis,
    ("memories", "tier"): MemoryTier,
    ("relations", "kind"): RelationKind,
    ("search_docs", "doc_kind"): DocKind,
    ("vectors", "doc_kind"): DocKind,
}
"""Each enumerated column and the type its values are checked against in Python."""
FLAGS = {("memories", "pinned")}
"""Booleans, stored as ``check (x in (0, 1))``."""

CHECK_IN = re.compile(r"check\s*\(\s*(\w+)\s+in\s*\(([^()]*)\)\s*\)", re.IGNORECASE)


def checked_lists(path: Path) -> dict[tuple[str, str], set[object]]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        migrate(conn)
        tables = conn.execute("select name, sql from sqlite_master where type = 'table'")
        return {
            (table, column): set(ast.literal_eval(f"({values},)"))
            for table, sql in tables.fetchall()
            for column, values in CHECK_IN.findall(sql or "")
        }
    finally:
        conn.close()


def test_every_check_list_is_its_literal(tmp_path: Path) -> None:
    checked = checked_lists(tmp_path / "schema.db")
    assert set(checked) == set(LITERALS) | FLAGS
    for column, literal in LITERALS.items():
        assert checked[column] == set(get_args(literal)), column
    for column in FLAGS:
        assert checked[column] == {0, 1}, column
