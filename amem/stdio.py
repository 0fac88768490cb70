"""MCP's stdio transport without a thread hop per message.

The SDK's ``stdio_server`` reads each stdin line and writes each response through a worker
thread (``anyio.wrap_file``): about 600 messages/s on two cores, the ceiling of every tool
call. When stdin and the wire are pipes or sockets (how MCP hosts start servers) or
regular files, this transport reads them on the event loop instead: large non-blocking
reads split into lines, and every message queued meanwhile written in one ``os.write``.
At end of input it answers the requests still running before it closes (the SDK would
cancel them). A terminal or device keeps the SDK's transport, which works everywhere.
"""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from io import TextIOWrapper
from typing import BinaryIO

import anyio
import mcp.types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

READ_BYTES = 1 << 16
QUEUED = 64
"""Messages buffered each way: a burst of requests is parsed while earlier ones run."""
DRAIN_SECONDS = 60.0
"""How long end of input waits for the answers to requests still running."""

Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]


@asynccontextmanager
async def stdio_transport(stdin: BinaryIO, wire: BinaryIO) -> AsyncIterator[Streams]:
    """(read stream, write stream) of JSON-RPC messages over ``stdin`` and ``wire``."""
    fds = (stdin.fileno(), wire.fileno())
    kinds = [fd_kind(fd) for fd in fds]
    if OTHER in kinds:  # a terminal or device: the SDK's transport, which works everywhere
        text_in = TextIOWrapper(stdin, encoding="utf-8", errors="replace")
        text_out = TextIOWrapper(wire, encoding="utf-8", line_buffering=True)
        async with stdio_server(anyio.wrap_file(text_in), anyio.wrap_file(text_out)) as streams:
            yield streams
        return
    polled = [kind == POLLED for kind in kinds]
    blocking = [os.get_blocking(fd) for fd in fds]
    incoming_in, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](QUEUED)
    outgoing, outgoing_out = anyio.create_memory_object_stream[SessionMessage](QUEUED)
    unanswered = Unanswered()
    try:
        for fd, poll in zip(fds, polled, strict=True):
            if poll:
                os.set_blocking(fd, False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_messages, fds[0], polled[0], incoming_in, unanswered)
            tg.start_soon(write_messages, fds[1], outgoing_out, unanswered)
            yield incoming, outgoing
    finally:
        for fd, was_blocking in zip(fds, blocking, strict=True):
            os.set_blocking(fd, was_blocking)


POLLED, FILE, OTHER = "polled", "file", "other"


def fd_kind(fd: int) -> str:
    """Pipes and sockets are polled; regular files never block for long; the rest is other."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return POLLED
    return FILE if stat.S_ISREG(mode) else OTHER


class Unanswered:
    """IDs of requests read but not yet answered: end of input waits for their answers,
    so a host that sends its last requests and closes stdin still hears back."""

    def __init__(self) -> None:
        self.ids: set[types.RequestId] = set()
        self.none_left = anyio.Event()

    def add(self, message: SessionMessage | Exception) -> None:
        if isinstance(message, SessionMessage) and isinstance(
            message.message.root, types.JSONRPCRequest
        ):
            self.ids.add(message.message.root.id)

    def answered(self, message: SessionMessage) -> None:
        root = message.message.root
        if isinstance(root, types.JSONRPCResponse | types.JSONRPCError):
            self.ids.discard(root.id)
        if not self.ids:
            self.none_left.set()

    async def wait(self) -> None:
        if self.ids:
            self.none_left = anyio.Event()
            with anyio.move_on_after(DRAIN_SECONDS):
                await self.none_left.wait()


async def read_messages(
    fd: int,
    polled: bool,
    messages: MemoryObjectSendStream[SessionMessage | Exception],
    unanswered: Unanswered,
) -> None:
    """Parse newline-delimited JSON-RPC from ``fd`` until end of file."""
    async with messages:
        pending = b""
        while True:
            if polled:
                await anyio.wait_readable(fd)
            else:
                await anyio.lowlevel.checkpoint()
            try:
                chunk = os.read(fd, READ_BYTES)
            except BlockingIOError:
                continue
            *lines, pending = (pending + chunk).split(b"\n")
            if not chunk:  # end of file: a last line without its newline still counts
                lines, pending = [pending], b""
            for line in lines:
                if line.strip():
                    message = parse(line)
                    unanswered.add(message)
                    await messages.send(message)
            if not chunk:
                await unanswered.wait()
                return


def parse(line: bytes) -> SessionMessage | Exception:
    """A message, or the error the SDK's session reports for a line that is not one."""
    try:
        text = line.decode("utf-8", errors="replace")
        return SessionMessage(types.JSONRPCMessage.model_validate_json(text))
    except Exception as exc:
        return exc


async def write_messages(
    fd: int,
    messages: MemoryObjectReceiveStream[SessionMessage],
    unanswered: Unanswered,
) -> None:
    """Write each message as one line; messages queued meanwhile go in the same write."""
    async with messages:
        async for first in messages:
            batch = [first]
            while True:
                try:
                    batch.append(messages.receive_nowait())
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
            await write_all(fd, b"".join(map(encode, batch)))
            for message in batch:
                unanswered.answered(message)


def encode(message: SessionMessage) -> bytes:
    return message.message.model_dump_json(by_alias=True, exclude_none=True).encode() + b"\n"


async def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:  # only a polled (non-blocking) pipe or socket is ever full
            await anyio.wait_writable(fd)
