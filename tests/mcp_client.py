"""Clients for the MCP tests: ``amem serve`` as a real subprocess, driven by the official MCP
client (mcp 1.x, ``connect``) or by raw JSON-RPC lines over pipes (``raw_server``, ``Wire``).

Every MCP test runs on both backends of the test (``anyio_backend``). The server's backend
is parametrized too where it matters (``@server_backends``); elsewhere the server runs on
the other backend than the test (``other``), so both sides of every pairing are covered
across the two runs. Timeouts bound liveness only (``LIVENESS_SECONDS``).
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, closing, contextmanager
from pathlib import Path
from subprocess import PIPE
from typing import IO, Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import get_default_environment, stdio_client

import amem

PERSONA = "assistant"
PROJECT = "mcp-tests"
MARKER = "SECRET-MARKER-42"
"""Put into bad input; no error text may ever contain it."""
TOOLS_LIST_MAX_BYTES = 9_728 + 469 + 893
"""The most a ``tools/list`` answer may take, as sent: a host puts it into every
conversation. Issue 18 set 8 KiB for 17 tools (8,124 bytes then); the people tools and
``person`` arguments (issue 31) took it to 9,394, and issue 30 asks for 8 KiB again.
``memory_graph`` (issue 32) costs 469 bytes, ``consolidation_prepare`` and
``consolidation_apply`` (issue 32: their descriptions teach a model the patch) 893."""
LIVENESS_SECONDS = 60
"""Generous: how long a test waits for an answer or an exit before it calls the server hung
(under the per-test timeout, so a hung server fails its test, not the run)."""

SPEC_ARGS: dict[str, set[str]] = {
    "event_submit": {
        "text",
        "role",
        "event_id",
        "session",
        "source",
        "category",
        "occurred_at",
        "person",
    },
    "memory_add": {"event_id", "memories"},
    "memory_recall": {
        "query",
        "limit",
        "mode",
        "as_of",
        "include_history",
        "kinds",
        "exclude_event_ids",
        "exclude_from_seq",
        "explain",
        "person",
    },
    "memory_read": {"id", "offset", "limit"},
    "memory_correct": {"memory_id", "text", "valid_at", "reason"},
    "memory_delete": {"event_id", "memory_id", "dry_run"},
    "memory_retract": {"memory_id", "reason"},
    "memory_relate": {"from_id", "to_id"},
    "memory_graph": {"seed", "depth", "max_nodes", "max_edges"},
    "consolidation_prepare": {"session", "max_chars"},
    "consolidation_apply": {"run_id", "patch"},
    "checkpoint_save": {
        "session",
        "goal",
        "completed",
        "pending",
        "constraints",
        "next_action",
        "covered_seq",
    },
    "session_resume": {"session", "query", "budget_tokens", "model", "person"},
    "persona_get": {"persona", "version"},
    "extraction_retry": {"event_id"},
    "memory_status": set(),
    "memory_list": {
        "what",
        "kinds",
        "roles",
        "session",
        "since",
        "until",
        "include_revoked",
        "include_expired",
        "tier",
        "cursor",
        "limit",
        "person",
    },
    "memory_pin": {"memory_id", "pinned"},
    "memory_consolidate": {"dry_run"},
    "memory_compact_working": {"session", "keep", "dry_run"},
    "person_list": set(),
    "person_upsert": {"person_id", "display_name", "aliases", "locale", "timezone", "notes"},
    "person_assign": {"event_id", "person", "reason"},
}
"""Each tool's arguments besides ``persona`` and ``project`` (which every tool takes and
only ``persona_get`` shows)."""

server_backends = pytest.mark.parametrize("server_backend", ["asyncio", "trio"])
"""Run the test against ``amem serve --backend asyncio`` and ``--backend trio``."""


def other(backend: str) -> str:
    return "trio" if backend == "asyncio" else "asyncio"


def serve_args(db: Path | str, backend: str) -> list[str]:
    scope = ["--persona", PERSONA, "--project", PROJECT]
    return ["-m", "amem", "serve", "--db", str(db), *scope, "--backend", backend]


@contextmanager
def log_file(path: Path) -> Iterator[IO[bytes]]:
    """A file for the server's stderr (the subprocess gets its own descriptor)."""
    with path.open("ab") as file:
        yield file


def integrity(db: Path) -> list[tuple[str]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute("pragma integrity_check").fetchall()


def count_events(db: Path) -> int:
    """Events committed so far (0 while the server has yet to create the database)."""
    if not db.exists():
        return 0
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        try:
            return int(conn.execute("select count(*) from events").fetchone()[0])
        except sqlite3.OperationalError:  # no schema yet
            return 0


@asynccontextmanager
async def default_scope(db: Path) -> AsyncIterator[amem.Scope]:
    """The server's default scope of ``db``, opened in the test's own process."""
    async with amem.open(db, settings=amem.Settings()) as memory:
        yield memory.scope(PERSONA, PROJECT)


async def wait_for_events(db: Path, count: int) -> None:
    """Return once ``count`` events are committed (the server read every line before them)."""
    with anyio.fail_after(LIVENESS_SECONDS):
        while count_events(db) < count:
            await anyio.sleep(0.05)


# --- the official client ---------------------------------------------------------------


@asynccontextmanager
async def client(db: Path | str, backend: str, log: Path) -> AsyncIterator[ClientSession]:
    """An MCP client session, not yet initialized, with a fresh ``amem serve`` subprocess on
    ``db`` (a file's path or a PostgreSQL URL; its environment: the SDK's safe default, so
    no ``AMEM_*`` setting leaks in)."""
    params = StdioServerParameters(command=sys.executable, args=serve_args(db, backend))
    with log_file(log) as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),  # type: ignore[arg-type]
            ClientSession(read, write) as session,
        ):
            yield session


@asynccontextmanager
async def connect(db: Path | str, backend: str, log: Path) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session with a fresh ``amem serve`` subprocess."""
    async with client(db, backend, log) as session:
        await session.initialize()
        yield session


async def tools_by_name(session: ClientSession) -> dict[str, types.Tool]:
    """The server's tools (``tools/list``), by name."""
    return {tool.name: tool for tool in (await session.list_tools()).tools}


def text_of(result: types.CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return content.text


async def ok(session: ClientSession, tool: str, /, **args: Any) -> Any:
    """Call ``tool``; it must succeed with one JSON text. Returns the parsed JSON."""
    result = await session.call_tool(tool, args)
    text = text_of(result)
    assert not result.isError, f"{tool}: {text}"
    return json.loads(text)


async def refused(session: ClientSession, tool: str, args: dict[str, Any] | None) -> str:
    """Call ``tool``; it must be a tool error ``"<code>: <message>"`` that echoes nothing.
    Returns the code."""
    result = await session.call_tool(tool, args)
    text = text_of(result)
    assert result.isError, f"{tool} {args!r} was not refused: {text[:300]}"
    assert_clean_error(text)
    return text.split(":", 1)[0]


def assert_clean_error(text: str) -> None:
    code, sep, message = text.partition(": ")
    assert sep, text
    assert code.isidentifier(), text
    assert code.islower(), text
    assert message.strip(), text
    assert MARKER.lower() not in text.lower(), text
    assert "Traceback" not in text, text
    assert 'File "' not in text, text


# --- raw JSON-RPC over pipes ------------------------------------------------------------


class Wire:
    """``amem serve`` over raw pipes: JSON-RPC lines in, every stdout line kept as is."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.lines: list[bytes] = []
        self.order: list[object] = []
        """Response IDs in the order their lines arrived."""
        self.responses: dict[object, dict[str, Any]] = {}
        self._arrived: dict[object, anyio.Event] = {}
        self._next_id = 0
        self._ended = False

    def request(self, method: str, params: dict[str, Any] | None = None) -> tuple[int, bytes]:
        """A request line (not yet sent) and its ID."""
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        return self._next_id, line(message)

    def call(self, tool: str, /, **arguments: Any) -> tuple[int, bytes]:
        return self.request("tools/call", {"name": tool, "arguments": arguments})

    async def send(self, *lines: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(b"".join(lines))

    async def response(self, id_: object) -> dict[str, Any]:
        await self._event(id_).wait()
        assert id_ in self.responses, f"stdout ended before an answer to {id_!r}"
        return self.responses[id_]

    async def close_stdin(self) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.aclose()

    async def exit_status(self) -> int:
        with anyio.fail_after(30):  # generous: a bound, not a timing assertion
            return await self.process.wait()

    def _event(self, id_: object) -> anyio.Event:
        if id_ not in self._arrived:
            self._arrived[id_] = anyio.Event()
            if self._ended:
                self._arrived[id_].set()
        return self._arrived[id_]

    async def read_all(self) -> None:
        try:
            await self._read_lines()
        finally:  # nothing more will come: wake whoever still waits
            self._ended = True
            for event in self._arrived.values():
                event.set()

    async def _read_lines(self) -> None:
        assert self.process.stdout is not None
        stdout = BufferedByteReceiveStream(self.process.stdout)
        while True:
            try:
                raw = await stdout.receive_until(b"\n", 64 * 1024 * 1024)
            except anyio.IncompleteRead:
                if stdout.buffer:  # an unterminated last line: flagged later
                    self.lines.append(bytes(stdout.buffer))
                return
            except (anyio.EndOfStream, anyio.ClosedResourceError):  # ended, or closed by a test
                return
            self.lines.append(raw)
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            if isinstance(message, dict) and "id" in message and "method" not in message:
                self.order.append(message["id"])
                self.responses[message["id"]] = message
                self._event(message["id"]).set()

    def assert_only_jsonrpc(self) -> None:
        assert self.lines, "the server wrote nothing"
        for raw in self.lines:
            try:
                message = json.loads(raw)  # every line is one JSON document
            except ValueError:
                pytest.fail(f"not JSON-RPC on stdout: {raw[:300]!r}")
            assert isinstance(message, dict), raw
            assert message.get("jsonrpc") == "2.0", raw

    def null_id_errors(self) -> list[int]:
        """The error codes of the answers with id null (lines that could not be read as a
        request), in the order they came."""
        messages = map(json.loads, self.lines)
        return [message["error"]["code"] for message in messages if message.get("id") is None]


def line(message: dict[str, Any]) -> bytes:
    return json.dumps(message, ensure_ascii=False).encode() + b"\n"


def initialize(wire: Wire) -> tuple[int, bytes]:
    return wire.request(
        "initialize",
        {
            "protocolVersion": types.LATEST_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "raw-test", "version": "0"},
        },
    )


INITIALIZED = line({"jsonrpc": "2.0", "method": "notifications/initialized"})


async def handshake(wire: Wire) -> None:
    """What a client does first: initialize, answered, the initialized notification, and
    tools/list, answered once the server's database is open."""
    init_id, init = initialize(wire)
    await wire.send(init, INITIALIZED)
    await wire.response(init_id)
    list_id, tools_list = wire.request("tools/list")
    await wire.send(tools_list)
    await wire.response(list_id)


def tool_result(response: dict[str, Any]) -> tuple[bool, str]:
    """``(is_error, text)`` of a tools/call response."""
    assert "result" in response, response
    result = response["result"]
    [content] = result["content"]
    return bool(result.get("isError")), content["text"]


@asynccontextmanager
async def raw_server(
    db: Path | str,
    backend: str,
    log: Path | None,
    *,
    env: dict[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
    read_stdout: bool = True,
) -> AsyncIterator[Wire]:
    """``amem serve`` with our own pipes; killed and reaped if the test leaves early. Its
    stderr goes to ``log``, or with ``log=None`` to a pipe (``wire.process.stderr``) that
    nobody reads unless the test does; ``read_stdout=False`` leaves stdout unread too."""
    with ExitStack() as stack:
        errlog = PIPE if log is None else stack.enter_context(log_file(log))
        process = await anyio.open_process(
            [sys.executable, *serve_args(db, backend), *extra_args],
            stdin=PIPE,
            stdout=PIPE,
            stderr=errlog,
            env={**get_default_environment(), **(env or {})},
        )
    async with process, anyio.create_task_group() as tg:
        wire = Wire(process)
        if read_stdout:
            tg.start_soon(wire.read_all)
        try:
            yield wire
        finally:
            if process.returncode is None:
                process.kill()


@asynccontextmanager
async def raw_session(db: Path, backend: str, log: Path | None) -> AsyncIterator[Wire]:
    """A ``raw_server`` past its handshake."""
    async with raw_server(db, backend, log) as wire:
        await handshake(wire)
        yield wire
