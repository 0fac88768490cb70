"""The writer actor: one task owns the write connection and commits requests in batches.

A caller hands ``Writer.submit`` a plain function of the connection and awaits its result.
The actor drains every request waiting in its inbox into one ``BEGIN IMMEDIATE``
transaction (group commit), so one fsync serves many callers:

1. Optimistic pass: run every request, then COMMIT. Neighbouring requests that say they
   can run together (``Together``: the same function over a list of their items) run in
   one call, so their rows go in with a few statements rather than a few each.
2. If any request raised, ROLLBACK and run the batch again with a SAVEPOINT around each
   request, so the bad one fails alone and its neighbours commit.

A caller's await returns only after COMMIT. A caller cancelled while its request still
waits in the inbox withdraws it (the store stays *before* the write); once the actor has
taken it, the request commits or fails with its batch (the store ends *after*). The actor
itself is shielded from cancellation and stops only when closed, so no transaction is
ever split and no queued request is dropped.

Between batches the actor keeps the WAL bounded (``wal_limit``): past it, the WAL is
truncated; when a reader's snapshot keeps it from being truncated, the actor takes no
batch until it is (tried every ``WAL_RETRY_SECONDS``, idle or not), and a request that
waited ``WAL_HOLD_SECONDS`` for that fails with nothing written. When its inbox is empty
it runs the chores callers left with ``when_idle`` (after a deletion: scrubbing the
erased text from the index and the file), then truncates the WAL so deleted pages leave
it too. A chore never makes a caller wait on readers: a WAL truncation that readers hold
up is tried again later.
Once no write came for ``UPKEEP_QUIET`` seconds after a commit, it also takes bounded
steps of the upkeep set with ``keep_up`` (merging the search index's segments) until none
is left: a request that arrives meanwhile waits for one step at most.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from itertools import groupby
from pathlib import Path
from typing import Any, TypeVar, cast

import anyio
import anyio.abc
import anyio.lowlevel

from ..errors import AmemError, Closed, StorageError
from .drivers import BUSY_TIMEOUT_MS, Connection

log = logging.getLogger("amem")

T = TypeVar("T")
Job = Callable[[sqlite3.Connection], Any]
JobResult = tuple[bool, Any]
"""``(True, what the job returned)`` or ``(False, the exception it raised)``."""

MAX_BATCH = 512
WAL_RETRY_SECONDS = 0.5
"""How soon a WAL truncation that readers held up is tried again."""
WAL_WAIT_MS = 100
"""How long a WAL truncation waits for the readers of its moment (new readers read the
database file, so the wait ends as soon as the old ones finish)."""
WAL_HOLD_SECONDS = BUSY_TIMEOUT_MS / 1000
"""How long a write waits for a reader to let the WAL be truncated once it is past its
limit, before it fails (as long as a write waits for another process's lock)."""
CHORE_SECONDS = 5.0
"""The same chore runs at most this often: merging a large search index takes a while."""
CHORE_SHARE = 0.1
"""The most of the writer's time a chore takes: one that ran for t seconds runs again no
sooner than t / CHORE_SHARE after it started (a scrub of a large file takes seconds)."""
BEGIN_ATTEMPTS = 4
"""Tries at BEGIN IMMEDIATE; each already waits up to the busy timeout for the lock."""
UPKEEP_QUIET = 0.2
"""Seconds without a write before the upkeep starts: a burst of writes gains nothing from
merging between its batches, only waits."""

QUEUED, TAKEN, WITHDRAWN = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Together:
    """A job that runs in one call with the neighbouring jobs of its batch that have the
    same ``run_many`` (``commit_batch``): ``run_many(conn, items)`` returns one result per
    item, in order, as if each had run alone. Alone (a batch of one, or the batch's second
    pass, one savepoint per request), it runs on its own item."""

    run_many: Callable[[sqlite3.Connection, list[Any]], list[Any]]
    item: Any

    def __call__(self, conn: sqlite3.Connection) -> Any:
        [result] = self.run_many(conn, [self.item])
        return result


@dataclass(eq=False, slots=True)
class Request:
    fn: Job
    done: anyio.Event = field(default_factory=anyio.Event)
    state: int = QUEUED
    outcome: JobResult = (False, None)
    queued_at: float = field(default_factory=time.monotonic)


class Writer:
    """Serialises every write of one ``Memory`` through one connection."""

    def __init__(
        self,
        conn: Connection,
        *,
        wal: Path | None = None,
        wal_limit: int = 0,
        checkpoints: bool = True,
    ) -> None:
        self._conn = conn
        self._checkpoints = checkpoints
        """Whether the database has a WAL to truncate after a chore (PostgreSQL has none)."""
        self._wal = wal
        self._wal_limit = wal_limit
        self._wal_tried = 0.0
        self._wal_full = False
        """Whether the WAL is past its limit and the last truncation failed (a reader)."""
        self._chores: dict[Job, float] = {}
        """Chores waiting for an idle moment, with the earliest time each may run."""
        self._chores_next: dict[Job, float] = {}
        """The earliest time each chore may run again (``CHORE_SECONDS``, ``CHORE_SHARE``)."""
        self._settling: list[anyio.Event] = []
        """Callers of ``settle``, woken once every waiting chore has run."""
        self._chore_running = False
        self._scrub_due: float | None = None
        """When to try truncating the WAL again after a chore (None: nothing to scrub)."""
        self._upkeep: Callable[[sqlite3.Connection], bool] | None = None
        self._upkeep_due = False
        """Whether a commit came after the upkeep last found nothing to do."""
        self._last_write = 0.0
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
                    if self._wal_full and not self._closing:
                        await self._hold_for_wal()
                        continue
                    batch = self._take_batch()
                    if batch:
                        if await self._commit(batch) and self._upkeep is not None:
                            self._upkeep_due = True
                            self._last_write = time.monotonic()
                        await self._bound_wal()
                    elif self._closing:
                        await self._run_chores(everything=True)
                        return
                    else:
                        next_due = await self._run_chores(everything=bool(self._settling))
                        if self._inbox or self._closing or self._settling:  # came meanwhile
                            continue
                        upkeep_due = (
                            self._last_write + UPKEEP_QUIET if self._upkeep_due else math.inf
                        )
                        if upkeep_due <= time.monotonic():
                            await self._upkeep_step()
                            continue
                        self._wakeup = anyio.Event()
                        with anyio.move_on_after(min(next_due, upkeep_due) - time.monotonic()):
                            await self._wakeup.wait()
        finally:
            for request in self._inbox:
                _deliver(request, (False, Closed("this Memory was closed before the write")))
            self._inbox.clear()
            self._wake_settling()
            self._stopped.set()

    async def close(self) -> None:
        """Refuse new writes, let queued ones commit, and wait for the actor to stop."""
        self._closing = True
        self._wakeup.set()
        with anyio.CancelScope(shield=True):
            await self._stopped.wait()

    def keep_up(self, step: Callable[[sqlite3.Connection], bool]) -> None:
        """Run ``step(conn)``, in a transaction of its own, once no write came for
        ``UPKEEP_QUIET`` seconds after a commit, again while it returns True (work is
        left) and no request waits. Each step must be bounded: a request arriving
        meanwhile waits for it."""
        self._upkeep = step

    async def _upkeep_step(self) -> None:
        assert self._upkeep is not None
        try:
            self._upkeep_due = await self._conn.run(partial(run_alone, fn=self._upkeep))
        except (sqlite3.Error, AmemError) as exc:  # nothing lost: the next commit retries
            self._upkeep_due = False
            log.warning("the index upkeep failed (%s)", type(exc).__name__)
        await self._bound_wal()  # a merge rewrites index pages: the WAL grows by them

    def when_idle(self, chore: Job) -> None:
        """Run ``chore(conn)`` once no request waits, then truncate the WAL. The chore runs
        outside any transaction and opens its own. The same chore runs at most every
        ``CHORE_SECONDS`` (and takes at most ``CHORE_SHARE`` of the writer's time); asking
        again before it ran is a no-op. A chore still waiting at close runs then."""
        if chore not in self._chores:
            self._chores[chore] = self._chores_next.get(chore, -math.inf)
            self._wakeup.set()

    async def settle(self) -> None:
        """Run every waiting chore now, however recently it ran (and the WAL truncation
        after them); returns once they ran. Returns at once when none waits."""
        if not self._chores and self._scrub_due is None and not self._chore_running:
            return
        settled = anyio.Event()
        self._settling.append(settled)
        self._wakeup.set()
        with anyio.CancelScope(shield=True):
            await settled.wait()

    def _wake_settling(self) -> None:
        for settled in self._settling:
            settled.set()
        self._settling.clear()

    async def _run_chores(self, *, everything: bool) -> float:
        """Run the chores that are due (all of them when ``everything``) and a WAL
        truncation after them; returns when the next one is due (``inf`` when none waits).
        A chore that another process's lock kept from running waits for its next turn."""
        for chore, due in list(self._chores.items()):
            started = time.monotonic()
            if not everything and due > started:
                continue
            del self._chores[chore]
            self._chores_next[chore] = started + CHORE_SECONDS  # asked again while it runs
            self._chore_running = True
            try:
                await self._conn.run(chore)
            except sqlite3.Error as exc:  # the deletion itself is committed
                log.warning("an idle chore failed (%s)", type(exc).__name__)
                if is_busy(exc) and not self._closing:
                    self._chores[chore] = started + CHORE_SECONDS
            finally:
                self._chore_running = False
            took = time.monotonic() - started
            self._chores_next[chore] = started + max(CHORE_SECONDS, took / CHORE_SHARE)
            if self._checkpoints:
                self._scrub_due = started
        now = time.monotonic()
        if self._scrub_due is not None and (everything or self._scrub_due <= now):
            truncated = await self._truncate_wal()
            final = everything and (self._closing or not truncated)
            self._scrub_due = None if truncated or final else now + WAL_RETRY_SECONDS
        if everything:
            self._wake_settling()
        return min([*self._chores.values(), self._scrub_due or math.inf])

    async def _bound_wal(self) -> None:
        """Truncate the WAL once it passes its limit (tried at most every
        ``WAL_RETRY_SECONDS``); ``_wal_full`` says whether a reader kept it from that.

        SQLite restarts the WAL from its start only at a moment no reader uses it; readers
        that never pause (a busy server) keep that moment from coming, and the WAL grows
        by every commit. Its size is looked at after every batch (a ``stat``), since a few
        large events can add megabytes in a moment.
        """
        if self._wal is None:
            return
        try:
            size = self._wal.stat().st_size
        except OSError:
            return
        if size <= self._wal_limit:
            self._wal_full = False
        elif time.monotonic() - self._wal_tried >= WAL_RETRY_SECONDS:
            self._wal_tried = time.monotonic()
            self._wal_full = not await self._truncate_wal()

    async def _hold_for_wal(self) -> None:
        """The WAL is past its limit and a reader's snapshot keeps it: commit nothing
        until it is truncated, which is tried again every ``WAL_RETRY_SECONDS`` (so it
        happens as soon as the reader leaves, write or no write). A request that waited
        ``WAL_HOLD_SECONDS`` fails (``database_busy``, nothing written)."""
        overdue = time.monotonic() - WAL_HOLD_SECONDS
        while self._inbox and self._inbox[0].queued_at <= overdue:
            request = self._inbox.popleft()
            if request.state == QUEUED:
                request.state = TAKEN
                _deliver(request, (False, StorageError(WAL_HELD, code="database_busy")))
        await self._bound_wal()
        if self._wal_full:
            self._wake_settling()  # no chore can run now; do not keep them waiting
            waits = [self._wal_tried + WAL_RETRY_SECONDS]
            if self._inbox:
                waits.append(self._inbox[0].queued_at + WAL_HOLD_SECONDS)
            self._wakeup = anyio.Event()
            with anyio.move_on_after(min(waits) - time.monotonic()):
                while not self._closing:  # a new request changes nothing: keep holding
                    await self._wakeup.wait()
                    self._wakeup = anyio.Event()

    async def _truncate_wal(self) -> bool:
        """A truncating checkpoint that waits at most ``WAL_WAIT_MS`` for readers; True if
        the WAL is now empty."""
        try:
            return await self._conn.run(partial(wal_checkpoint, wait_ms=WAL_WAIT_MS))
        except sqlite3.Error as exc:  # the writes are committed; a later try may succeed
            log.warning("the WAL could not be truncated (%s)", type(exc).__name__)
            return False

    def _take_batch(self) -> list[Request]:
        batch: list[Request] = []
        while self._inbox and len(batch) < MAX_BATCH:
            request = self._inbox.popleft()
            if request.state == QUEUED:
                request.state = TAKEN
                batch.append(request)
        return batch

    async def _commit(self, batch: list[Request]) -> bool:
        """Commit ``batch``; returns whether any of its requests was written."""
        try:
            outcomes = await self._conn.run(partial(commit_batch, fns=[r.fn for r in batch]))
            self.commits += 1
        except BaseException as exc:  # the driver itself failed; nothing committed
            outcomes = [(False, exc)] * len(batch)
        for request, outcome in zip(batch, outcomes, strict=True):
            _deliver(request, outcome)
        return any(ok for ok, _ in outcomes)


WAL_HELD = (
    "another connection has held a read transaction so long that the write-ahead log "
    "reached its limit (wal_limit_mb); nothing was written; retry once that reader is done"
)


def _deliver(request: Request, outcome: JobResult) -> None:
    ok, value = outcome
    request.outcome = (ok, value if ok else storage_error(value))
    request.done.set()


def commit_batch(conn: sqlite3.Connection, fns: Sequence[Job]) -> list[JobResult]:
    """Run on the writer thread: commit ``fns`` optimistically, else one savepoint each.

    A request whose failure made SQLite roll back the whole transaction (a full disk or
    database can) fails alone: the batch starts again without it.
    """
    try:
        with immediate(conn):
            return [(True, result) for result in run_all(conn, fns)]
    except Exception as exc:
        if len(fns) == 1:
            return [(False, exc)]
    outcomes: dict[int, JobResult] = {}
    while True:
        todo = [index for index in range(len(fns)) if index not in outcomes]
        done: dict[int, JobResult] = {}
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


def run_all(conn: sqlite3.Connection, fns: Sequence[Job]) -> list[Any]:
    """What each of ``fns`` returns, run in order; neighbours that are ``Together`` with
    the same ``run_many`` run in one call."""
    results: list[Any] = []
    for _, jobs in groupby(fns, key=lambda fn: getattr(fn, "run_many", fn)):
        group = list(jobs)
        first = group[0]
        if len(group) > 1 and isinstance(first, Together):
            results += first.run_many(conn, [cast(Together, job).item for job in group])
        else:
            results += [job(conn) for job in group]
    return results


def wal_checkpoint(conn: sqlite3.Connection, *, wait_ms: int) -> bool:
    """Checkpoint and truncate the WAL, waiting at most ``wait_ms`` for readers; True if
    it was truncated (readers still on the WAL keep it: ``busy`` is then 1)."""
    conn.execute(f"pragma busy_timeout = {wait_ms}")
    try:
        # fetch the result row: an unfinished statement would block the next COMMIT
        [(busy, _, _)] = conn.execute("pragma wal_checkpoint(truncate)").fetchall()
    finally:
        conn.execute(f"pragma busy_timeout = {BUSY_TIMEOUT_MS}")
    return bool(busy == 0)


def run_alone(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """``fn`` in a write transaction of its own; returns what it returned."""
    with immediate(conn):
        return fn(conn)


class TransactionLost(Exception):
    """A request's failure made SQLite roll back the whole transaction, not just itself."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


def run_in_savepoint(conn: sqlite3.Connection, fn: Job) -> JobResult:
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
