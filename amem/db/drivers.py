"""One small connection interface over two drivers.

Everything above this module hands a connection a plain synchronous function of a
``sqlite3.Connection``; the driver runs it on the thread that owns the connection and
returns its result. Nothing above this module knows which driver runs:

- on asyncio the connection is an ``aiosqlite.Connection``;
- on trio (aiosqlite creates asyncio futures, so it cannot run there) it is a
  ``sqlite3.Connection`` owned by one dedicated thread, driven through the trio token.

A caller that is cancelled while waiting stops waiting; the function it queued still runs
to completion on the connection's thread. Transactions are therefore never cut in half by
cancellation, and the writer actor (not the caller) decides what a transaction contains.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Protocol, TypeVar

import aiosqlite
import anyio

T = TypeVar("T")
Job = Callable[[sqlite3.Connection], Any]

BUSY_TIMEOUT_MS = 10_000
READ_MAP_BYTES = 1 << 31
"""How much of the file a reader maps into memory (SQLite caps it at its build's limit,
2 GB for Python's): a recall touches hundreds of pages (postings, memory rows, vectors),
and reading each with a system call cost a semantic recall at 100k vectors a third of its
time (p50 14-18 ms, p99 22-30; mapped 9-11.5 and 15-20)."""


class Connection(Protocol):
    """A SQLite connection owned by one thread."""

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` on the connection's thread and return its result."""
        ...

    async def close(self) -> None:
        """Finish queued work, then close the connection; idempotent."""
        ...


def configure(conn: sqlite3.Connection, *, readonly: bool) -> None:
    """Pragmas every amem connection carries (see docs/architecture.md, "Durability")."""
    conn.execute(f"pragma busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("pragma foreign_keys = on")
    conn.execute("pragma temp_store = memory")
    if readonly:
        conn.execute("pragma query_only = on")
        # Reads only: SQLite still writes with write(), so durability is as before. The
        # pages are the OS's page cache, shared with other processes, not private memory.
        conn.execute(f"pragma mmap_size = {READ_MAP_BYTES}")
    else:
        # FULL: the WAL is fsynced at every commit, so an acknowledged write survives a
        # killed process *and* a power cut. Group commit pays that fsync once per batch.
        conn.execute("pragma synchronous = full")
        # Deleted content is overwritten with zeros instead of lingering in free pages.
        conn.execute("pragma secure_delete = on")


def sqlite_uri(path: str, *, readonly: bool, immutable: bool = False) -> str:
    """A ``file:`` URI for ``path``; read-only connections can never write. ``immutable``
    is for files on read-only storage, which nobody can change: SQLite then takes no locks
    and needs no ``-shm`` file (a WAL-mode file cannot be opened there otherwise), and
    reads no ``-wal`` either."""
    quoted = path.replace("?", "%3f").replace("#", "%23")
    return f"file:{quoted}?mode={'ro' if readonly else 'rwc'}{'&immutable=1' * immutable}"


def open_sqlite(path: str, *, readonly: bool, immutable: bool = False) -> sqlite3.Connection:
    """Open and configure a plain ``sqlite3`` connection (autocommit; amem issues BEGIN)."""
    conn = sqlite3.connect(
        sqlite_uri(path, readonly=readonly, immutable=immutable),
        uri=True,
        isolation_level=None,
        timeout=BUSY_TIMEOUT_MS / 1000,
        check_same_thread=True,
    )
    try:
        configure(conn, readonly=readonly)
    except BaseException:
        conn.close()
        raise
    return conn


async def connect(path: str, *, readonly: bool) -> Connection:
    """Open a connection with the driver that fits the running event loop."""
    if _running_on_asyncio():
        return await AioConnection.open(path, readonly=readonly)
    return await ThreadConnection.open(path, readonly=readonly)


def _running_on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


RUN_JOB = "-- amem: run the job given as the parameter"
"""What ``AioConnection`` sends through aiosqlite's ``execute`` to run a job (never SQL:
``JobConnection`` takes it before sqlite3 would see it)."""


class PendingJob:
    """A job on its way to aiosqlite's thread, and its result once it ran there."""

    __slots__ = ("fn", "result")

    def __init__(self, fn: Job) -> None:
        self.fn = fn
        self.result: Any = None


class JobConnection(sqlite3.Connection):
    """The ``sqlite3.Connection`` aiosqlite opens for amem (sqlite3's ``factory`` hook):
    ``execute(RUN_JOB, [job])`` runs the job with this connection, on the thread that
    called it; any other statement is sqlite3's own."""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        if sql is RUN_JOB:
            [job] = parameters
            job.result = job.fn(self)
            return self.cursor()
        return super().execute(sql, parameters)


class AioConnection:
    """The asyncio driver: an ``aiosqlite.Connection``, through its public API only.

    aiosqlite runs each of its methods as one ``sqlite3`` call on its connection's thread
    (``execute``, ``commit``, ...), while amem runs a whole job in one hop (a transaction is
    one function, which a cancelled caller never cuts in half). aiosqlite passes
    ``connect``'s keyword arguments to ``sqlite3.connect``, so the connection it opens is a
    ``JobConnection``, and ``run`` sends the job through aiosqlite's ``execute``, which
    hands its arguments to that connection's ``execute`` on the thread: there the job runs
    whole, in the order of everything else queued on the connection.
    """

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn
        self._closed = False

    @classmethod
    async def open(cls, path: str, *, readonly: bool) -> AioConnection:
        conn = aiosqlite.connect(
            sqlite_uri(path, readonly=readonly),
            uri=True,
            isolation_level=None,
            timeout=BUSY_TIMEOUT_MS / 1000,
            factory=JobConnection,
        )
        await conn
        self = cls(conn)
        try:
            await self.run(lambda c: configure(c, readonly=readonly))
        except BaseException:
            await self.close()
            raise
        return self

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise ValueError("connection closed")
        job = PendingJob(fn)
        await self._conn.execute(RUN_JOB, [job])
        result: T = job.result
        return result

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            with anyio.CancelScope(shield=True):
                await self._conn.close()


class ThreadConnection:
    """The trio driver: a ``sqlite3.Connection`` owned by one dedicated thread."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._conn: sqlite3.Connection | None = None
        self._thread = threading.Thread(target=self._serve, name="amem-sqlite", daemon=True)
        self._closed = False

    @classmethod
    async def open(cls, path: str, *, readonly: bool) -> ThreadConnection:
        self = cls()
        self._thread.start()
        try:
            self._conn = await self._call(lambda: open_sqlite(path, readonly=readonly))
        except BaseException:
            self._jobs.put(None)
            raise
        return self

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            job()

    async def _call(self, fn: Callable[[], T]) -> T:
        import trio

        token = trio.lowlevel.current_trio_token()
        done = anyio.Event()
        box: list[tuple[bool, Any]] = []

        def job() -> None:
            try:
                box.append((True, fn()))
            except BaseException as exc:
                box.append((False, exc))
            with suppress(trio.RunFinishedError):  # nobody is left to wait for the result
                token.run_sync_soon(done.set)

        self._jobs.put(job)
        await done.wait()
        ok, value = box[0]
        if ok:
            return value  # type: ignore[no-any-return]
        raise value

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._conn
        if conn is None or self._closed:
            raise ValueError("connection closed")
        return await self._call(lambda: fn(conn))

    async def close(self) -> None:
        if self._closed or self._conn is None:
            return
        self._closed = True
        conn, self._conn = self._conn, None
        with anyio.CancelScope(shield=True):
            await self._call(conn.close)
        self._jobs.put(None)
