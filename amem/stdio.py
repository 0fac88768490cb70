"""MCP's stdio transport: newline-delimited messages on stdin, answers on the wire.

Pipes and sockets (how MCP hosts start servers) are read and written on the event loop,
without a thread hop per message: large non-blocking reads are split into lines, and every
answer that is ready meanwhile goes out in one ``os.write``. Regular files are read
directly (they never block for long). A terminal or another device is read and written in
a worker thread, which works everywhere.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager

import anyio
import anyio.lowlevel

READ_BYTES = 1 << 16
MAX_LINE_BYTES = 64 << 20
"""Longest message read (the largest event, 100,000 characters, is under 1 MiB of JSON)."""

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
    reported as ``None``. Each read first awaits ``room()``, so a client that sends faster
    than its requests finish is slowed down instead of filling memory."""
    kind = fd_kind(fd)
    with nonblocking(fd, kind):
        partial = bytearray()  # the start of a line whose newline has not come yet
        skipping = False  # that line passed MAX_LINE_BYTES: reported, dropped to its end
        while True:
            await room()
            chunk = await read_chunk(fd, kind)
            if chunk is None:
                continue
            *lines, rest = (chunk or b"\n").split(b"\n")  # end of file ends the last line
            for n, line in enumerate(lines):
                if n == 0:
                    line, was_skipping = bytes(partial) + line, skipping
                    partial.clear()
                    skipping = False
                    if was_skipping:
                        continue
                if len(line) > MAX_LINE_BYTES:
                    on_line(None)
                elif line.strip():
                    on_line(line)
            if not skipping:
                partial += rest
                if len(partial) > MAX_LINE_BYTES:
                    partial.clear()
                    skipping = True
                    on_line(None)
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

    A reader that went away (a broken pipe, a hung-up terminal) ends the writing; what is
    sent after that is dropped, as there is no one left to read it.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._kind = fd_kind(fd)
        self._queued: list[bytes] = []
        self._ready = anyio.Event()
        self._closing = False
        self._broken = False

    def send(self, data: bytes) -> None:
        if not self._broken:
            self._queued.append(data)
            self._ready.set()

    async def _write_queued(self) -> None:
        while True:
            if not self._queued:
                if self._closing:
                    return
                self._ready = anyio.Event()
                await self._ready.wait()
                continue
            data, self._queued = b"".join(self._queued), []
            try:
                await write_all(self._fd, self._kind, data)
            except OSError as exc:
                if exc.errno not in READER_GONE:
                    raise
                self._broken = True
                self._queued.clear()
                return


@asynccontextmanager
async def outbox(fd: int) -> AsyncIterator[Outbox]:
    """An ``Outbox`` for ``fd``; leaving the block writes what is still queued."""
    box = Outbox(fd)
    with nonblocking(fd, box._kind):
        async with anyio.create_task_group() as tg:
            tg.start_soon(box._write_queued)
            try:
                yield box
            finally:
                box._closing = True
                box._ready.set()


async def write_all(fd: int, kind: str, data: bytes) -> None:
    view = memoryview(data)
    while view:
        if kind == OTHER:
            written = await anyio.to_thread.run_sync(os.write, fd, view)
        else:
            try:
                written = os.write(fd, view)
            except BlockingIOError:  # only a polled (non-blocking) pipe or socket is full
                await anyio.wait_writable(fd)
                continue
        view = view[written:]


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
