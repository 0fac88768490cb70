"""The database one ``Memory`` owns: a writer actor and a pool of read-only connections."""

from __future__ import annotations

import errno
import os
import re
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import anyio
import anyio.abc

from ..config import is_postgres_url
from ..errors import InvalidInput, StorageError
from . import pg_schema, postgres
from .drivers import Connection, connect
from .schema import Reindex, check_existing, migrate, stored_version
from .writer import BEGIN_ATTEMPTS, Together, Writer, is_busy, storage_error

P = ParamSpec("P")
T = TypeVar("T")
Item = TypeVar("Item")


class Database:
    """Writes go through the actor; reads take a read-only connection from the pool.

    Readers see the last committed state (WAL snapshots), so a read never waits for
    the writer, and the writer never waits for a read.
    """

    def __init__(
        self, path: Path | str, writer: Writer, readers: list[Connection], *, postgres: bool = False
    ) -> None:
        self.path = path
        """The SQLite file, or the PostgreSQL URL without its password."""
        self.postgres = postgres
        self.writer = writer
        self._free_readers = list(readers)
        self._reader_available = anyio.Semaphore(len(readers))

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readers: int = 2,
        wal_limit: int = 64 << 20,
        reindex: Reindex | None = None,
    ) -> AsyncIterator[Database]:
        """Migrate ``path`` (creating it if needed) and open its connections; ``reindex``
        rebuilds the search index when a migration changes its tokens (``schema.migrate``).

        The caller must start ``db.writer.serve`` in its task group and close the writer
        before leaving this context.
        """
        if is_postgres_url(path):
            async with cls._open_postgres(str(path), readers=readers) as db:
                yield db
            return
        path = await anyio.to_thread.run_sync(prepare_file, path)
        write_conn = await _connect(path, readonly=False)
        opened: list[Connection] = [write_conn]
        try:
            await _with_busy_retry(write_conn, enable_wal)
            # a WAL that SQLite restarts is cut back to the limit, so its size on disk says
            # how much of it is in use (the writer bounds it by that, ``Writer._bound_wal``)
            await write_conn.run(lambda c: c.execute(f"pragma journal_size_limit = {wal_limit}"))
            try:
                await _with_busy_retry(write_conn, lambda conn: migrate(conn, reindex))
            except StorageError as exc:
                if exc.code != "database_busy":
                    raise
                raise StorageError(MIGRATION_BUSY, code="database_busy") from None
            for _ in range(readers):  # appended one by one, so a cancelled open closes each
                opened.append(await _connect(path, readonly=True))
            writer = Writer(write_conn, wal=Path(f"{path}-wal"), wal_limit=wal_limit)
            yield cls(path, writer, opened[1:])
        finally:
            with anyio.CancelScope(shield=True):
                for conn in reversed(opened):  # the writer closes last and checkpoints
                    await conn.close()

    @classmethod
    @asynccontextmanager
    async def _open_postgres(cls, url: str, *, readers: int) -> AsyncIterator[Database]:
        """``open`` on PostgreSQL: the same writer and readers, over ``PgDriver``s."""
        write_conn = await _connect_postgres(url, readonly=False)
        opened: list[Connection] = [write_conn]
        try:
            # a PgConnection stands in for sqlite3's (postgres.PgConnection)
            await _with_busy_retry(write_conn, pg_schema.migrate)
            for _ in range(readers):
                opened.append(await _connect_postgres(url, readonly=True))
            writer = Writer(write_conn, checkpoints=False)
            yield cls(postgres.without_password(url), writer, opened[1:], postgres=True)
        finally:
            with anyio.CancelScope(shield=True):
                for conn in reversed(opened):
                    await conn.close()

    async def write(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run ``fn(conn, *args, **kwargs)`` in a write transaction; returns after COMMIT."""
        return await self.writer.submit(lambda conn: fn(conn, *args, **kwargs))

    async def write_together(
        self, run_many: Callable[[sqlite3.Connection, list[Item]], list[T]], item: Item
    ) -> T:
        """``run_many(conn, [item])[0]``, in a write transaction; returns after COMMIT. The
        writes of other callers waiting in the same batch with the same ``run_many`` go in
        the same call (``writer.Together``)."""
        result: T = await self.writer.submit(Together(run_many, item))
        return result

    async def read(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run ``fn(conn, *args, **kwargs)`` in a read transaction on a read-only
        connection: every statement sees the same committed snapshot."""
        async with self._reader_available:
            conn = self._free_readers.pop()
            try:
                return await conn.run(lambda c: read_snapshot(c, lambda s: fn(s, *args, **kwargs)))
            except sqlite3.Error as exc:
                raise storage_error(exc, writing=False) from None
            finally:
                self._free_readers.append(conn)


def read_snapshot(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Every statement of ``fn`` sees the same committed snapshot."""
    conn.execute("begin")
    try:
        return fn(conn)
    finally:
        conn.execute("rollback")


def enable_wal(conn: sqlite3.Connection) -> None:
    mode = conn.execute("pragma journal_mode = wal").fetchone()[0]
    if mode != "wal":
        raise StorageError("the database could not be switched to WAL mode")


MIGRATION_BUSY = (
    "another process held the database lock for too long while this one opened the file: "
    "it may be migrating it to a new schema version, which rebuilds the search index "
    "(minutes for millions of memories); retry once it is done"
)

READ_ONLY = (
    "the database is on read-only storage or not writable by this user, and amem opens "
    "databases for writing; copy it to writable storage, or load it into a new file with "
    "`amem restore PATH --db NEW`"
)


def prepare_file(path: str | os.PathLike[str]) -> Path:
    """Refuse a file amem must not touch before writing anything; create a missing one.

    A new file is created readable by its owner only; SQLite gives its WAL the same mode.
    """
    refuse_url(path)
    path = Path(path).expanduser().absolute()
    if read_only_storage(path):
        raise StorageError(READ_ONLY, code="read_only")
    check_existing(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        denied = exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
        raise StorageError(
            f"the database file cannot be created ({exc.strerror or 'I/O error'})",
            code="read_only" if denied else "storage_error",
        ) from None
    return path


URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]+):/")
"""A URL's scheme and colon (two letters at least: ``C:/`` is a Windows drive). ``Path``
folds ``//`` to ``/``, so ``AMEM_DB=postgresql://...`` read into a ``Path`` still shows it."""


def refuse_url(path: str | os.PathLike[str]) -> None:
    """Refuse a URL of a database amem does not run on, which would otherwise be created
    as a folder of that name (``mysql:/user@host/db``), and a PostgreSQL URL read into a
    path (``Path`` folds its ``//``). The URL is not echoed: it may hold a password."""
    found = URL.match(os.fspath(path))
    if found and not is_postgres_url(path):
        raise InvalidInput(
            f"the database is given as a {found.group(1)}: URL; amem stores memory in a "
            "SQLite file (a path) or in PostgreSQL (a postgresql:// URL)",
            code="unsupported_database",
        )


def read_only_storage(path: Path) -> bool:
    """True when ``path`` (a missing one: its nearest existing folder) is on a read-only
    filesystem, or is a file this process may not write."""
    existing = next(p for p in (path, *path.parents) if p.exists())
    if os.statvfs(existing).f_flag & os.ST_RDONLY:
        return True
    return existing == path and not os.access(path, os.W_OK)


async def _connect(path: Path, *, readonly: bool) -> Connection:
    try:
        return await connect(str(path), readonly=readonly)
    except sqlite3.Error as exc:
        raise StorageError("the database file cannot be opened", code="not_a_database") from exc


async def _connect_postgres(url: str, *, readonly: bool) -> Connection:
    try:
        return await postgres.PgDriver.open(url, readonly=readonly)
    except ImportError:
        raise InvalidInput(
            "PostgreSQL needs psycopg: install amem with its postgres extra "
            "(pip install 'amem[postgres]')",
            code="unsupported_database",
        ) from None
    except sqlite3.Error as exc:
        raise StorageError(
            f"the PostgreSQL database cannot be reached ({exc})", code="database_unreachable"
        ) from None


async def stored_schema_version(url: str) -> int:
    """The schema version of the PostgreSQL database at ``url``, 0 when amem has no tables
    there; read without creating or migrating anything (for commands that only read)."""
    conn = await _connect_postgres(url, readonly=True)
    try:
        return await conn.run(stored_version)
    except sqlite3.Error as exc:
        raise storage_error(exc, writing=False) from None
    finally:
        with anyio.CancelScope(shield=True):
            await conn.close()


async def _with_busy_retry(conn: Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Start-up steps: another process starting at the same moment may hold the lock."""
    for attempt in range(BEGIN_ATTEMPTS):
        try:
            return await conn.run(fn)
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or attempt == BEGIN_ATTEMPTS - 1:
                raise storage_error(exc) from None
            await anyio.sleep(0.05 * (attempt + 1))
        except sqlite3.DatabaseError as exc:
            raise StorageError(
                "the file is not a usable SQLite database", code="not_a_database"
            ) from exc
    raise AssertionError("unreachable")
