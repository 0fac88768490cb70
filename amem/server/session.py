"""The MCP session over stdio: JSON-RPC requests in, answers out, tool calls concurrent.

amem is a tools-only server, so it answers the few methods such a server has itself:
``initialize``, ``ping``, ``tools/list`` and ``tools/call``, and the ``initialized`` and
``cancelled`` notifications; any other method is ``Method not found``. Messages stay plain
dicts from ``json_input.parse_json`` to ``json.dumps``. The SDK's server session validates each
message against the protocol's whole pydantic union, then passes it through memory
streams and a new task: about 180 µs of event-loop time per message, more than storing
an event costs. The protocol revisions amem speaks are its own reviewed list
(``PROTOCOL_VERSIONS``); error codes are JSON-RPC 2.0's own.

The session answers as soon as it starts: ``initialize`` and ``ping`` need nothing but
``ServerInfo``. The tools arrive once the database is open (``Tools``, from ``backend``,
opened after ``initialize`` is answered, or ``GREETING_SECONDS`` after the start if it
has not come): a ``tools/list`` or ``tools/call`` that comes before waits for them.

Requests are answered in the order they finish. A request cancelled by the client
(``notifications/cancelled``) gets no answer; a write it started still commits. At end
of input the requests still running are answered (for up to ``DRAIN_SECONDS``) before
the session ends, so a host that sends its last requests and closes stdin still hears
back; then reads still running are stopped and answered ``closed``, so the server exits
within ``EXIT_SECONDS`` however slow they are. The answers are written while the client
reads them (``stdio.Outbox`` says how long it is waited for). Requests before
``initialize`` are answered too. The next line is read only once there is room: fewer
than ``MAX_RUNNING`` calls running, and few enough answers waiting for the wire
(``stdio.MAX_WAITING_BYTES``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, TypeGuard

import anyio
import anyio.abc

from ..json_input import parse_json
from ..limits import STALL_SECONDS
from . import stdio

log = logging.getLogger("amem")

PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""The MCP revisions amem speaks, oldest first; a client asking for any other is answered
with the last. Each was reviewed against its specification for what a tools-only stdio
server owes: the lifecycle (initialize, initialized, ping), tools/list and tools/call,
cancellation, the stdio transport, and the tools page's errors: an unknown tool is -32602
in all four; bad arguments are a tool result (2025-11-25 says so; the earlier ones name
"invalid arguments" among their examples of protocol errors, and amem keeps one answer for
all). What amem leaves out is optional in each: listChanged, pagination, progress,
structured output (2025-06-18), titles and icons, tasks (2025-11-25). One gap: 2025-03-26
has servers receive JSON-RPC batches; amem refuses them (-32600) as the SDK's server does,
and 2025-06-18 removed batches. ``test_mcp_protocol`` fails once the installed SDK knows a
newer revision: review it the same way before adding it here."""
EXIT_SECONDS = 60.0
"""The server exits at most this long after end of input: ``DRAIN_SECONDS``, then
``STOP_SECONDS``, then at most ``limits.STALL_SECONDS`` (``--stall-seconds`` is never more) for
the answers to be read, and the rest (seconds to spare) to close the database."""
DRAIN_SECONDS = 40.0
"""How long end of input waits for the answers to requests still running."""
STOP_SECONDS = 5.0
"""Then reads still running are stopped (answered ``closed``), and the calls get this long
to answer; a read stops within milliseconds, a write commits with its batch."""
MAX_RUNNING = 256
"""Tool calls run at once; past it, stdin is read only as calls finish."""
GREETING_SECONDS = 0.5
"""How long the tools wait for ``initialize`` to be answered before they are loaded
anyway (loading them holds the event loop for about half a second)."""

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
"""JSON-RPC 2.0's error codes (its specification, section 5.1), which MCP uses."""

RequestId = int | str
Message = dict[str, Any]
ToolCall = Callable[[str, dict[str, Any] | None], Awaitable[Message]]


@dataclass(frozen=True)
class ServerInfo:
    """What ``initialize`` answers."""

    name: str
    version: str
    instructions: str


@dataclass(frozen=True)
class Tools:
    tools: list[Message]
    """``tools/list`` entries, as JSON."""
    call: ToolCall
    """Runs one tool; returns the ``CallToolResult`` as JSON."""
    stop_reads: Callable[[], None]
    """Interrupts the reads still running, which then answer with an error."""


class Refused(Exception):
    """A request answered with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


async def serve(
    server: ServerInfo,
    backend: Callable[[], AbstractAsyncContextManager[Tools]],
    stdin_fd: int,
    wire_fd: int,
    stall_seconds: float = STALL_SECONDS,
) -> None:
    """Answer MCP requests read from ``stdin_fd`` on ``wire_fd`` until end of input, with
    the tools ``backend`` opens (and closes after the last answer); a client that reads
    nothing for ``stall_seconds`` is taken as gone (``stdio.Outbox``)."""
    ended, closed = anyio.Event(), anyio.Event()
    async with stdio.outbox(wire_fd, stall_seconds) as out, anyio.create_task_group() as tg:
        session = Session(server, out.send, tg)

        async def provide() -> None:
            try:
                with anyio.move_on_after(GREETING_SECONDS):
                    await session.greeted.wait()
                async with backend() as tools:
                    session.attach(tools)
                    await ended.wait()
            finally:
                closed.set()

        async def room() -> None:  # for the next request: fewer calls running, answers waiting
            await session.room()
            await out.room()

        tg.start_soon(provide)
        await stdio.read_lines(stdin_fd, session.receive, room)
        with anyio.move_on_after(DRAIN_SECONDS):
            await session.drained()
        session.stop_reads()  # no waiting for reads that would not finish: they answer closed
        with anyio.move_on_after(STOP_SECONDS):
            await session.drained()
        ended.set()
        await closed.wait()  # the database closes before the answers' last flush
        tg.cancel_scope.cancel()


class Session:
    def __init__(
        self, server: ServerInfo, send: Callable[[bytes], None], tg: anyio.abc.TaskGroup
    ) -> None:
        self._server = server
        self._tools: Tools | None = None
        self._ready = anyio.Event()
        self.greeted = anyio.Event()
        """Set once ``initialize`` is answered."""
        self._send = send
        self._tg = tg
        self._running: dict[RequestId, anyio.CancelScope] = {}
        self._call_ended = anyio.Event()

    def attach(self, tools: Tools) -> None:
        """The tools are ready: answer what waited for them, and what comes next."""
        self._tools = tools
        self._ready.set()

    def stop_reads(self) -> None:
        if self._tools is not None:
            self._tools.stop_reads()

    def receive(self, line: bytes | None) -> None:
        """Handle one line from the client (None: one too long to read): answer it now, or
        start the tool call."""
        if line is None:
            self._error(None, INVALID_REQUEST, "Invalid Request: the message is too large")
            return
        try:
            message = parse_json(line)
        except ValueError:  # not UTF-8, not JSON, or nested too deep
            self._error(None, PARSE_ERROR, "Parse error")
            return
        if not isinstance(message, dict):  # a batch, or no object at all
            self._error(None, INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 object")
            return
        id_ = message.get("id")
        id_ = id_ if is_request_id(id_) else None  # an id that cannot be read is answered null
        method, params = message.get("method"), message.get("params") or {}
        if message.get("jsonrpc") != "2.0":
            self._error(id_, INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 object")
        elif "id" not in message:
            if method is None:
                self._error(None, INVALID_REQUEST, "Invalid Request: neither method nor id")
            elif isinstance(method, str) and isinstance(params, dict):
                self._notified(method, params)
        elif method is None:
            return  # a response: amem sends the client no requests, so nothing waits for it
        elif not isinstance(method, str) or id_ is None:
            self._error(id_, INVALID_REQUEST, "Invalid Request")
        elif not isinstance(params, dict):
            self._error(id_, INVALID_PARAMS, "Invalid params: params must be an object")
        else:
            self._request(id_, method, params)

    async def room(self) -> None:
        """Return once fewer than ``MAX_RUNNING`` tool calls run."""
        await self._wait_for(lambda: len(self._running) < MAX_RUNNING)

    async def drained(self) -> None:
        """Return once no tool call is running."""
        await self._wait_for(lambda: not self._running)

    async def _wait_for(self, done: Callable[[], bool]) -> None:
        while not done():
            if self._call_ended.is_set():
                self._call_ended = anyio.Event()
            await self._call_ended.wait()

    def _request(self, id_: RequestId, method: str, params: Message) -> None:
        if method == "initialize":
            self._reply(id_, self._initialize(params))
            self.greeted.set()
        elif method == "ping":
            self._reply(id_, {})
        elif method not in ("tools/list", "tools/call"):
            self._error(id_, METHOD_NOT_FOUND, "Method not found")
        elif id_ in self._running:
            self._error(id_, INVALID_REQUEST, "Invalid Request: this id is still in use")
        elif self._tools is None:  # answered once they are
            self._start(id_, method, params)
        elif method == "tools/list":
            self._reply(id_, {"tools": self._tools.tools})
        else:
            try:
                self._tool_call(params, self._tools)
            except Refused as refused:
                self._error(id_, refused.code, str(refused))
            else:
                self._start(id_, method, params)

    def _initialize(self, params: Message) -> Message:
        asked = params.get("protocolVersion")
        return {
            "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1],
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": self._server.name, "version": self._server.version},
            "instructions": self._server.instructions,
        }

    @staticmethod
    def _tool_call(params: Message, tools: Tools) -> tuple[str, Message | None]:
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str) or not (arguments is None or isinstance(arguments, dict)):
            raise Refused(
                INVALID_PARAMS, "Invalid params: name must be a string and arguments an object"
            )
        if name not in {tool["name"] for tool in tools.tools}:  # a protocol error, not a result
            raise Refused(INVALID_PARAMS, "Invalid params: no tool of that name")
        return name, arguments

    def _start(self, id_: RequestId, method: str, params: Message) -> None:
        scope = self._running[id_] = anyio.CancelScope()
        self._tg.start_soon(self._answer, id_, method, params, scope)

    async def _answer(
        self, id_: RequestId, method: str, params: Message, scope: anyio.CancelScope
    ) -> None:
        try:
            # Waiting for the tools is not cancelled: a call the client cancels right
            # away runs as it would once they are ready (a write it makes still commits).
            await self._ready.wait()
            assert self._tools is not None
            with scope:
                try:
                    result = await self._answer_with(self._tools, method, params)
                except Refused as refused:
                    self._error(id_, refused.code, str(refused))
                except Exception:
                    log.exception("%s failed unexpectedly", params.get("name") or method)
                    self._error(id_, INTERNAL_ERROR, "Internal error")
                else:
                    if not scope.cancel_called:  # a write finishes even then, unanswered
                        self._reply(id_, result)
        finally:
            if self._running.get(id_) is scope:
                del self._running[id_]
            self._call_ended.set()

    async def _answer_with(self, tools: Tools, method: str, params: Message) -> Message:
        if method == "tools/list":
            return {"tools": tools.tools}
        name, arguments = self._tool_call(params, tools)
        return await tools.call(name, arguments)

    def _notified(self, method: str, params: Message) -> None:
        if method == "notifications/cancelled":
            id_ = params.get("requestId")
            scope = self._running.pop(id_, None) if is_request_id(id_) else None
            if scope is not None:
                scope.cancel()  # the client no longer waits: no answer
                self._call_ended.set()

    def _reply(self, id_: RequestId, result: Message) -> None:
        self._send(encode({"jsonrpc": "2.0", "id": id_, "result": result}))

    def _error(self, id_: RequestId | None, code: int, message: str) -> None:
        log.warning("answered a client message with error %d (%s)", code, message)
        error = {"code": code, "message": message}
        self._send(encode({"jsonrpc": "2.0", "id": id_, "error": error}))


def is_request_id(value: object) -> TypeGuard[RequestId]:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def encode(message: Message) -> bytes:
    """One line of compact JSON; text that UTF-8 cannot carry (a lone surrogate) is escaped."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode() + b"\n"
    except UnicodeEncodeError:
        return json.dumps(message, separators=(",", ":")).encode() + b"\n"
