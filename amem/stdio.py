"""MCP's stdio transport without a thread hop per message.

The SDK's ``stdio_server`` reads each stdin line and writes each response through a worker
thread (``anyio.wrap_file``): about 600 messages/s on two cores, the ceiling of every tool
call. When stdin and the wire are pipes or sockets (how MCP hosts start servers), this
transport reads them on the event loop instead: large non-blocking reads split into lines,
and every response queued meanwhile written in one ``os.write``. Anything else (a
terminal, a regular file) keeps the SDK's transport, which works everywhere.
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

Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]


@asynccontextmanager
async def stdio_transport(stdin: BinaryIO, wire: BinaryIO) -> AsyncIterator[Streams]:
    """(read stream, write stream) of JSON-RPC messages over ``stdin`` and ``wire``."""
    fds = (stdin.fileno(), wire.fileno())
    if not all(pollable(fd) for fd in fds):
        text_in = TextIOWrapper(stdin, encoding="utf-8", errors="replace")
        text_out = TextIOWrapper(wire, encoding="utf-8", line_buffering=True)
        async with stdio_server(anyio.wrap_file(text_in), anyio.wrap_file(text_out)) as streams:
            yield streams
        return
    blocking = [os.get_blocking(fd) for fd in fds]
    incoming_in, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](QUEUED)
    outgoing, outgoing_out = anyio.create_memory_object_stream[SessionMessage](QUEUED)
    try:
        for fd in fds:
            os.set_blocking(fd, False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_messages, fds[0], incoming_in)
            tg.start_soon(write_messages, fds[1], outgoing_out)
            yield incoming, outgoing
    finally:
        for fd, was_blocking in zip(fds, blocking, strict=True):
            os.set_blocking(fd, was_blocking)


def pollable(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


async def read_messages(
    fd: int, messages: MemoryObjectSendStream[SessionMessage | Exception]
) -> None:
    """Parse newline-delimited JSON-RPC from ``fd`` until end of file."""
    async with messages:
        pending = b""
        while True:
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, READ_BYTES)
            except BlockingIOError:
                continue
            *lines, pending = (pending + chunk).split(b"\n")
            if not chunk:  # end of file: a last line without its newline still counts
                lines, pending = [pending], b""
            for line in lines:
                if line.strip():
                    await messages.send(parse(line))
            if not chunk:
                return


def parse(line: bytes) -> SessionMessage | Exception:
    """A message, or the error the SDK's session reports for a line that is not one."""
    try:
        text = line.decode("utf-8", errors="replace")
        return SessionMessage(types.JSONRPCMessage.model_validate_json(text))
    except Exception as exc:
        return exc


async def write_messages(fd: int, messages: MemoryObjectReceiveStream[SessionMessage]) -> None:
    """Write each response as one line; responses queued meanwhile go in the same write."""
    async with messages:
        async for message in messages:
            batch = [encode(message)]
            while True:
                try:
                    batch.append(encode(messages.receive_nowait()))
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
            await write_all(fd, b"".join(batch))


def encode(message: SessionMessage) -> bytes:
    return message.message.model_dump_json(by_alias=True, exclude_none=True).encode() + b"\n"


async def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await anyio.wait_writable(fd)
