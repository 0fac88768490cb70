"""Reads that stop when their work can no longer be used.

A read is a function of a read-only connection, run on that connection's thread; an
``await`` that is cancelled stops waiting for it, but the function itself runs on (a
recall over long events, seconds), holding its reader and keeping a closing ``Memory``
waiting. So each read runs with a SQLite progress handler (as datasette does) that
interrupts it:

- when its caller was cancelled: nobody waits for the answer (``notifications/cancelled``
  in ``amem serve``, a task group cancelled around a recall);
- once the ``Memory`` stops its reads (``Reads.stop``): when it closes, or when
  ``amem serve``'s drain time is up. The read then raises ``Closed``, and so does every
  read started afterwards.

Writes are never interrupted: a write request commits or fails whole with its batch.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

from .errors import Closed

T = TypeVar("T")

PROGRESS_STEPS = 10_000
"""SQLite virtual-machine steps between two looks at whether a read should stop: well
under a millisecond of SQLite's work, and a few microseconds of Python per look."""
STOPPED = "this Memory is closing: the read was stopped before it finished"


class Reads:
    """Whether the reads of one ``Memory`` must stop."""

    def __init__(self) -> None:
        self._stopped = False

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        """Interrupt every read running now and refuse new ones (``Closed``)."""
        self._stopped = True


class Read:
    """One read: ``run`` it on the connection's thread; ``abandon`` it once its caller no
    longer waits (after it finished, that changes nothing)."""

    def __init__(self, reads: Reads) -> None:
        self._reads = reads
        self._abandoned = False

    def abandon(self) -> None:
        self._abandoned = True

    def run(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._reads.stopped:
            raise Closed(STOPPED)
        conn.set_progress_handler(self._must_stop, PROGRESS_STEPS)
        try:
            return fn(conn)
        except sqlite3.OperationalError:
            if self._reads.stopped:  # interrupted by the handler: say why
                raise Closed(STOPPED) from None
            raise
        finally:  # before the snapshot's rollback, which must not be interrupted
            conn.set_progress_handler(None, 0)

    def _must_stop(self) -> int:
        """The progress handler: non-zero interrupts the statement running."""
        return int(self._abandoned or self._reads.stopped)
