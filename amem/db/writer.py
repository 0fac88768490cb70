"""The writer actor: one task owns the write connection and commits requests in batches.

A caller hands ``Writer.submit`` a plain function of the connection and awaits its result.
The actor drains every request waiting in its inbox into one ``BEGIN IMMEDIATE``
transaction (group commit), so one fsync serves many callers:

1. Optimistic pass: run every request, then COMMIT.
2. If any request raised, ROLLBACK and run the batch again with a SAVEPOINT around each
   request, so the bad one fails alone and its neighbours commit.

A caller's await returns only after COMMIT. A caller cancelled while its request still
waits in the inbox withdraws it (the store stays *before* the write); once the actor has
taken it, the request commits or fails with its batch (the store ends *after*). The actor
itself is shielded from cancellation and stops only when closed, so no transaction is
ever split and no queued request is dropped.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel

from ..errors import AmemError, Closed, StorageError
from .drivers import BUSY_TIMEOUT_MS, Connection

log = logging.getLogger("amem")

T = TypeVar("T")
Job = Callable[[sqlite3.Connection], Any]
Outcome = tuple[bool, Any]

MAX_BATCH = 512
WAL_CHECK_SECONDS = 1.0
WAL_WAIT_MS = 250
BEGIN_ATTEMPTS = 4
"""Tries at BEGIN IMMEDIATE; each already waits up to the busy timeout for the lock."""

QUEUED, TAKEN, WITHDRAWN = 0, 1, 2


@dataclass(eq=False, slots=True)
class Request:
    fn: Job
    done: anyio.Event = field(default_factory=anyio.Event)
    state: int = QUEUED
    outcome: Outcome = (False, None)


class Writer:
    """Serialises every write of one ``Memory`` through one connection."""

    def __init__(self, conn: Connection, *, wal: Path | None = None, wal_limit: int = 0) -> None:
        self._conn = conn
        self._wal = wal
        self._wal_limit = wal_limit
        self._wal_checked = 0.0
        self._inbox: deque[Request] = deque()
        self._wakeup = anyio.Event()
        self._closing = False
        self._stopped = anyio.Event()
        self.commits = 0
        """Transactions committed so far (a batch of requests counts once)."""

    async def submit(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` inside a write transaction; return after it commits."""
        await anyio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller queues nothing
        if self._closing:
            raise Closed("this Memory is closed")
        request = Request(fn)
        self._inbox.append(request)
        self._wakeup.set()
        try:
            await request.done.wait()
        except BaseException:
            if request.state == QUEUED:
                request.state = WITHDRAWN
            raise
        ok, value = request.outcome
        if ok:
            return value  # type: ignore[no-any-return]
        raise value

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """The actor loop; runs until ``close`` and an empty inbox.

        It is shielded from cancellation: when the scope around ``amem.open`` is
        cancelled, ``open`` still calls ``close``, and every request already queued
        commits (its caller, if cancelled, simply does not hear about it).
        """
        task_status.started()
        try:
            with anyio.CancelScope(shield=True):
                while True:
                    batch = self._take_batch()
                    if batch:
                        await self._commit(batch)
                        await self._bound_wal()
                    elif self._closing:
                        return
                    else:
                        self._wakeup = anyio.Event()
                        await self._wakeup.wait()
        finally:
            for request in self._inbox:
                _deliver(request, (False, Closed("this Memory was closed before the write")))
            self._inbox.clear()
            self._stopped.set()

    async def close(self) -> None:
        """Refuse new writes, let queued ones commit, and wait for the actor to stop."""
        self._closing = True
        self._wakeup.set()
        with anyio.CancelScope(shield=True):
            await self._stopped.wait()

    async def checkpoint_wal(self) -> None:
        """Copy the WAL into the database file and truncate it (best effort).

        Runs on the write connection between batches, never inside a transaction; readers
        holding an old snapshot can keep some pages in the WAL until the next checkpoint.
        """
        await self._conn.run(wal_checkpoint)

    async def _bound_wal(self) -> None:
        """Truncate the WAL once it passes its limit (checked at most once a second).

        SQLite restarts the WAL from its start only at a moment no reader uses it; readers
        that never pause (a busy server) keep that moment from coming, and the WAL grows
        by every commit. A truncating checkpoint waits for the readers of the moment to
        finish (new ones read the database file), for at most ``WAL_WAIT_MS``; if one is
        still reading, the next check tries again.
        """
        now = time.monotonic()
        if self._wal is None or now - self._wal_checked < WAL_CHECK_SECONDS:
            return
        self._wal_checked = now
        try:
            size = self._wal.stat().st_size
        except OSError:
            return
        if size > self._wal_limit:
            try:
                await self._conn.run(partial(wal_checkpoint, wait_ms=WAL_WAIT_MS))
            except sqlite3.Error as exc:  # the writes are committed; the next check retries
                log.warning("the WAL could not be truncated (%s)", type(exc).__name__)

    def _take_batch(self) -> list[Request]:
        batch: list[Request] = []
        while self._inbox and len(batch) < MAX_BATCH:
            request = self._inbox.popleft()
            if request.state == QUEUED:
                request.state = TAKEN
                batch.append(request)
        return batch

    async def _commit(self, batch: list[Request]) -> None:
        try:
            outcomes = await self._conn.run(partial(commit_batch, fns=[r.fn for r in batch]))
            self.commits += 1
        except BaseException as exc:  # the driver itself failed; nothing committed
            outcomes = [(False, exc)] * len(batch)
        for request, outcome in zip(batch, outcomes, strict=True):
            _deliver(request, outcome)


def _deliver(request: Request, outcome: Outcome) -> None:
    ok, value = outcome
    request.outcome = (ok, value if ok else storage_error(value))
    request.done.set()


def commit_batch(conn: sqlite3.Connection, fns: Sequence[Job]) -> list[Outcome]:
    """Run on the writer thread: commit ``fns`` optimistically, else one savepoint each.

    A request whose failure made SQLite roll back the whole transaction (a full disk or
    database can) fails alone: the batch starts again without it.
    """
    try:
        with immediate(conn):
            return [(True, fn(conn)) for fn in fns]
    except Exception as exc:
        if len(fns) == 1:
            return [(False, exc)]
    outcomes: dict[int, Outcome] = {}
    while True:
        todo = [index for index in range(len(fns)) if index not in outcomes]
        done: dict[int, Outcome] = {}
        try:
            with immediate(conn):
                for index in todo:
                    done[index] = run_in_savepoint(conn, fns[index])
        except TransactionLost as lost:
            outcomes[todo[len(done)]] = (False, lost.cause)
            continue
        except Exception as exc:  # COMMIT itself failed: nothing of todo was written
            done = dict.fromkeys(todo, (False, exc))
        outcomes.update(done)
        return [outcomes[index] for index in range(len(fns))]


def wal_checkpoint(conn: sqlite3.Connection, *, wait_ms: int = BUSY_TIMEOUT_MS) -> None:
    """Checkpoint and truncate the WAL, waiting at most ``wait_ms`` for readers (best
    effort: readers still on the WAL then keep it)."""
    conn.execute(f"pragma busy_timeout = {wait_ms}")
    try:
        # fetch the result row: an unfinished statement would block the next COMMIT
        conn.execute("pragma wal_checkpoint(truncate)").fetchall()
    finally:
        conn.execute(f"pragma busy_timeout = {BUSY_TIMEOUT_MS}")


class TransactionLost(Exception):
    """A request's failure made SQLite roll back the whole transaction, not just itself."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def run_in_savepoint(conn: sqlite3.Connection, fn: Job) -> Outcome:
    conn.execute("savepoint request")
    try:
        result = fn(conn)
    except Exception as exc:
        if not conn.in_transaction:
            raise TransactionLost(exc) from exc
        conn.execute("rollback to request")
        conn.execute("release request")
        return (False, exc)
    conn.execute("release request")
    return (True, result)


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE (with bounded retry when another process holds the lock) ... COMMIT."""
    begin_immediate(conn)
    try:
        yield
        conn.execute("commit")
    except BaseException:
        if conn.in_transaction:
            conn.execute("rollback")
        raise


def begin_immediate(conn: sqlite3.Connection) -> None:
    for attempt in range(BEGIN_ATTEMPTS):
        try:
            conn.execute("begin immediate")
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or attempt == BEGIN_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


def is_busy(exc: sqlite3.Error) -> bool:
    return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in (
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
    )


def storage_error(exc: BaseException, *, writing: bool = True) -> BaseException:
    """Translate a ``sqlite3`` error into the ``AmemError`` a caller sees."""
    if isinstance(exc, AmemError) or not isinstance(exc, sqlite3.Error):
        return exc
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if code == sqlite3.SQLITE_FULL:
        error = StorageError(
            "the disk or database is full; nothing was written", code="storage_full"
        )
    elif is_busy(exc):
        error = StorageError(
            "another process held the database lock for too long; retry", code="database_busy"
        )
    else:
        name = getattr(exc, "sqlite_errorname", type(exc).__name__)
        outcome = "; nothing was written" if writing else ""
        error = StorageError(f"the database failed ({name}){outcome}")
    error.__cause__ = exc
    return error
