"""The database file as the inspector reads it: read-only, never created, never migrated.

Every request opens its own ``mode=ro`` connection with ``query_only`` on, reads one
committed snapshot and closes it, so nothing in the inspector holds a connection that
could write, and a writer working on the file meanwhile is never blocked for long.
A WAL-mode file without its ``-wal`` and ``-shm`` files gets empty ones from SQLite (a
reader needs them to find the last commit); the database file and the content of its WAL
are never changed.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from ..db.database import read_snapshot
from ..db.drivers import open_sqlite
from ..db.schema import SCHEMA_VERSION, refuse_newer
from ..db.writer import storage_error
from ..errors import StorageError

P = ParamSpec("P")
T = TypeVar("T")

MISSING = "there is no database file at --db; the inspector reads existing files only"
NOT_A_FILE = "--db is not a regular file"
TOO_OLD = (
    "the database was written by an older amem (schema version {version}; this amem reads "
    "{current}); the inspector never migrates a file: run 'amem doctor --db FILE' once to "
    "migrate it, then inspect it"
)
NOT_AMEM = "the file holds no amem database (schema version 0)"


def readable_file(path: str | os.PathLike[str]) -> Path:
    """The absolute path of an amem database the inspector can read, checked without
    writing or creating anything; ``StorageError`` otherwise."""
    path = Path(path).expanduser().absolute()
    if not path.exists():
        raise StorageError(MISSING, code="no_database")
    if not path.is_file():
        raise StorageError(NOT_A_FILE, code="no_database")
    read(path, lambda conn: None)
    return path


def check_version(conn: sqlite3.Connection) -> None:
    """Refuse a schema this amem does not read as it is: the inspector's queries are
    written for the current tables."""
    try:
        version = int(conn.execute("pragma user_version").fetchone()[0])
    except sqlite3.DatabaseError:
        raise StorageError("the file is not a SQLite database", code="not_a_database") from None
    refuse_newer(version)
    if version == 0:
        raise StorageError(NOT_AMEM, code="not_amem_database")
    if version < SCHEMA_VERSION:
        message = TOO_OLD.format(version=version, current=SCHEMA_VERSION)
        raise StorageError(message, code="schema_too_old")


def read(
    path: Path,
    fn: Callable[Concatenate[sqlite3.Connection, P], T],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """Run ``fn(conn, *args, **kwargs)`` on a new read-only connection, in one snapshot,
    once the schema is one it reads (blocking: call it from a worker thread)."""

    def checked(conn: sqlite3.Connection) -> T:
        check_version(conn)  # every time: another process may migrate the file meanwhile
        return fn(conn, *args, **kwargs)

    try:
        conn = open_sqlite(str(path), readonly=True)
    except sqlite3.Error as exc:
        raise StorageError("the database file cannot be opened", code="not_a_database") from exc
    try:
        return read_snapshot(conn, checked)
    except sqlite3.Error as exc:
        raise storage_error(exc, writing=False) from None
    finally:
        conn.close()
