"""MCP's stdio transport: newline-delimited messages on stdin, answers on the wire.

Pipes and sockets (how MCP hosts start servers) are read and written on the event loop,
without a thread hop per message: large non-blocking reads are split into lines, and every
answer that is ready meanwhile goes out in one ``os.write``. Regular files are read
directly (they never block for long). A terminal or another device is read and written in
a worker thread, which works everywhere.

The answers waiting for the wire are bounded: past ``MAX_WAITING_BYTES`` no more lines are
read, so a client that sends faster than it reads is slowed down instead of filling
memory. A reader that takes nothing for ``STALL_SECONDS`` (or ``amem serve
--stall-seconds``) while the server waits for it is taken as gone, like one that closed the
pipe: what waits is dropped, and so is every later answer.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import anyio
import anyio.lowlevel

from ..limits import STALL_SECONDS

log = logging.getLogger("amem")

READ_BYTES = 1 << 16
MAX_LINE_BYTES = 64 << 20
"""Longest message read (the largest event, 100,000 characters, is under 1 MiB of JSON)."""
MAX_WAITING_BYTES = 4 << 20
"""Answers waiting for the wire, in bytes, past which no more lines are read. A client that
reads as it goes never gets near it (a pipe holds 64 KiB; the largest answer, a
60,000-character result, is under 200 KB), and it keeps a client that never reads from
costing more than a few MiB: one ``tools/list`` line of 50 bytes is answered with 17 KB."""
POLLED, FILE, OTHER = "polled", "file", "other"
READER_GONE = {errno.EPIPE, errno.ECONNRESET, errno.EIO}
"""Write errors that mean nobody reads the wire any more (EIO: a terminal hung up)."""


def fd_kind(fd: int) -> str:
    """Pipes and sockets are polled; regular files never block for long; the rest is other."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return POLLED
    return FILE if stat.S_ISREG(mode) else OTHER


async def read_lines(
    fd: int, on_line: Callable[[bytes | None], None], room: Callable[[], Awaitable[None]]
) -> None:
    """Hand each non-blank line of ``fd`` to ``on_line`` until end of file (a last line
    without its newline still counts). A line longer than ``MAX_LINE_BYTES`` is dropped and
    reported as ``None``. Each line first awaits ``room()``, so a client that sends faster
    than its requests finish, or than it reads their answers, is slowed down instead of
    filling memory."""
    kind = fd_kind(fd)
    with nonblocking(fd, kind):
        partial = bytearray()  # the start of a line whose newline has not come yet
        skipping = False  # that line passed MAX_LINE_BYTES: reported, dropped to its end
        while True:
            chunk = await read_chunk(fd, kind)
            if chunk is None:
                continue
            *lines, rest = (chunk or b"\n").split(b"\n")  # end of file ends the last line
            ready: list[bytes | None] = []
            for n, line in enumerate(lines):
                if n == 0:
                    line, was_skipping = bytes(partial) + line, skipping
                    partial.clear()
                    skipping = False
                    if was_skipping:
                        continue
                if len(line) > MAX_LINE_BYTES:
                    ready.append(None)
                elif line.strip():
                    ready.append(line)
            if not skipping:
                partial += rest
                if len(partial) > MAX_LINE_BYTES:
                    partial.clear()
                    skipping = True
                    ready.append(None)
            for read in ready:
                await room()
                on_line(read)
            if not chunk:
                return


async def read_chunk(fd: int, kind: str) -> bytes | None:
    """Up to ``READ_BYTES`` (``b""`` at end of file), or None when a poll woke for nothing."""
    if kind == OTHER:
        try:
            return await anyio.to_thread.run_sync(os.read, fd, READ_BYTES, abandon_on_cancel=True)
        except OSError as exc:
            if exc.errno == errno.EIO:  # the terminal hung up: that is the end of input
                return b""
            raise
    if kind == POLLED:
        await anyio.wait_readable(fd)
    else:
        await anyio.lowlevel.checkpoint()
    try:
        return os.read(fd, READ_BYTES)
    except BlockingIOError:
        return None


class Outbox:
    """Messages waiting for the wire. One task writes them, all that are queued at once.

    ``room()`` and ``flushed()`` wait for the wire, but not forever: a reader that takes
    nothing for ``STALL_SECONDS`` meanwhile is taken as gone, as is one that closed the
    pipe (a broken pipe, a hung-up terminal). What waits is dropped then, and so is every
    later message, as there is no one left to read it.
    """

    def __init__(self, fd: int, stall_seconds: float = STALL_SECONDS) -> None:
        self._fd = fd
        self.stall_seconds = stall_seconds
        self._kind = fd_kind(fd)
        self._queued: list[bytes] = []
        self._waiting = 0
        """Bytes sent and not yet written: the queued ones and the rest of the batch."""
        self._ready = anyio.Event()
        self._wrote = anyio.Event()
        self._writing = anyio.CancelScope()
        self._gone = False

    def send(self, data: bytes) -> None:
        if not self._gone:
            self._queued.append(data)
            self._waiting += len(data)
            self._ready.set()

    async def room(self) -> None:
        """Return once at most ``MAX_WAITING_BYTES`` wait for the wire."""
        await self._wait_for(lambda: self._waiting <= MAX_WAITING_BYTES)

    async def flushed(self) -> None:
        """Return once everything sent is written (or dropped)."""
        await self._wait_for(lambda: not self._waiting)

    async def _wait_for(self, done: Callable[[], bool]) -> None:
        while not (self._gone or done()):
            self._wrote = anyio.Event()
            with anyio.move_on_after(self.stall_seconds) as stalled:
                await self._wrote.wait()
            if stalled.cancelled_caught:
                log.warning(
                    "the client read no answers for %g s: they are dropped", self.stall_seconds
                )
                self._drop()

    def _drop(self) -> None:
        self._gone = True
        self._queued.clear()
        self._writing.cancel()

    async def _write_queued(self) -> None:
        with self._writing:
            while True:
                if not self._queued:
                    self._ready = anyio.Event()
                    await self._ready.wait()
                    continue
                batch, self._queued = memoryview(b"".join(self._queued)), []
                while batch:
                    try:
                        written = await write_some(self._fd, self._kind, batch)
                    except OSError as exc:
                        if exc.errno not in READER_GONE:
                            raise
                        self._drop()
                        return
                    batch = batch[written:]
                    self._waiting -= written
                    self._wrote.set()


@asynccontextmanager
async def outbox(fd: int, stall_seconds: float = STALL_SECONDS) -> AsyncIterator[Outbox]:
    """An ``Outbox`` for ``fd``; leaving the block writes what is still queued, for at most
    ``stall_seconds`` in all (and not once the reader is gone: see ``Outbox``), so the
    server's exit is bounded even by a client that reads, but slowly."""
    box = Outbox(fd, stall_seconds)
    with nonblocking(fd, box._kind):
        async with anyio.create_task_group() as tg:
            tg.start_soon(box._write_queued)
            try:
                yield box
                with anyio.move_on_after(stall_seconds) as late:
                    await box.flushed()
                if late.cancelled_caught:
                    log.warning("the client read too slowly: the last answers are dropped")
                    box._drop()
            finally:
                tg.cancel_scope.cancel()


async def write_some(fd: int, kind: str, data: memoryview) -> int:
    """Write the start of ``data`` once ``fd`` takes it; return how many bytes were written."""
    if kind == OTHER:
        return await anyio.to_thread.run_sync(os.write, fd, data)
    while True:
        try:
            return os.write(fd, data)
        except BlockingIOError:  # only a polled (non-blocking) pipe or socket is full
            await anyio.wait_writable(fd)


@contextmanager
def nonblocking(fd: int, kind: str) -> Iterator[None]:
    """Make a polled ``fd`` non-blocking for the block, then restore its mode."""
    if kind != POLLED:
        yield
        return
    was_blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    try:
        yield
    finally:
        os.set_blocking(fd, was_blocking)
