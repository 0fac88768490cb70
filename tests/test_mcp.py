"""The MCP stdio server end to end: ``amem serve`` runs as a real subprocess, driven by the
official MCP client (mcp 1.x) or by raw JSON-RPC lines over pipes.

Every test runs on both backends of the test (``anyio_backend``). The server's backend is
parametrized too where it matters (``server_backend``: the whole flow, the raw wire, stdin
EOF); elsewhere the server runs on the other backend than the test, so both sides of every
pairing are covered across the two runs.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, closing, contextmanager
from datetime import datetime, timedelta, timezone
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
from amem.db.schema import SCHEMA_VERSION
from amem.limits import MCP_MAX_RESULT_CHARS

pytestmark = pytest.mark.anyio

PERSONA = "assistant"
PROJECT = "mcp-tests"
MARKER = "SECRET-MARKER-42"
"""Put into bad input; no error text may ever contain it."""

SPEC_ARGS: dict[str, set[str]] = {
    "event_submit": {"text", "role", "event_id", "session", "source", "category", "occurred_at"},
    "memory_add": {"event_id", "memories"},
    "memory_recall": {"query", "limit", "mode", "as_of", "include_history", "kinds"},
    "memory_read": {"id", "offset", "limit"},
    "memory_correct": {"memory_id", "text", "valid_at", "reason"},
    "memory_delete": {"event_id", "memory_id"},
    "memory_relate": {"from_id", "to_id"},
    "checkpoint_save": {
        "session", "goal", "completed", "pending", "constraints", "next_action", "covered_seq",
    },
    "session_resume": {"session", "query", "budget_tokens", "model"},
    "persona_get": {"persona", "version"},
    "extraction_retry": {"event_id"},
    "memory_status": set(),
}  # fmt: skip
SPEC_REQUIRED: dict[str, set[str]] = {
    "event_submit": {"text", "role"},
    "memory_add": {"event_id", "memories"},
    "memory_recall": {"query"},
    "memory_read": {"id"},
    "memory_correct": {"memory_id", "text"},
    "memory_delete": set(),
    "memory_relate": {"from_id", "to_id"},
    "checkpoint_save": {"session", "goal"},
    "session_resume": {"session", "budget_tokens"},
    "persona_get": set(),
    "extraction_retry": set(),
    "memory_status": set(),
}
EVIDENCE_TOOLS = ("memory_recall", "memory_read", "session_resume")


@pytest.fixture(params=["asyncio", "trio"])
def server_backend(request: pytest.FixtureRequest) -> str:
    """The ``amem serve --backend`` of the subprocess."""
    return str(request.param)


def other(backend: str) -> str:
    return "trio" if backend == "asyncio" else "asyncio"


def serve_args(db: Path, backend: str) -> list[str]:
    return [
        "-m", "amem", "serve", "--db", str(db), "--persona", PERSONA, "--project", PROJECT,
        "--backend", backend,
    ]  # fmt: skip


@contextmanager
def log_file(path: Path) -> Iterator[IO[bytes]]:
    """A file for the server's stderr (the subprocess gets its own descriptor)."""
    with path.open("ab") as file:
        yield file


# --- the official client ---------------------------------------------------------------


@asynccontextmanager
async def connect(db: Path, backend: str, log: Path) -> AsyncIterator[ClientSession]:
    """An initialized MCP client session with a fresh ``amem serve`` subprocess (its
    environment: the SDK's safe default, so no ``AMEM_*`` setting leaks in)."""
    params = StdioServerParameters(command=sys.executable, args=serve_args(db, backend))
    with log_file(log) as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),  # type: ignore[arg-type]
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


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
    """initialize, answered, then the initialized notification."""
    init_id, init = initialize(wire)
    await wire.send(init, INITIALIZED)
    await wire.response(init_id)


def tool_result(response: dict[str, Any]) -> tuple[bool, str]:
    """``(is_error, text)`` of a tools/call response."""
    assert "result" in response, response
    result = response["result"]
    [content] = result["content"]
    return bool(result.get("isError")), content["text"]


@asynccontextmanager
async def raw_server(
    db: Path,
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


def unused_port() -> int:
    """A local port nothing listens on (connections to it are refused)."""
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def integrity(db: Path) -> list[tuple[str]]:
    with closing(sqlite3.connect(db)) as conn:
        return conn.execute("pragma integrity_check").fetchall()


# --- 1. the tool list -------------------------------------------------------------------


async def test_tools_are_exactly_the_spec_set(anyio_backend: str, tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=serve_args(tmp_path / "m.db", other(anyio_backend))
    )
    with log_file(tmp_path / "server.log") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),  # type: ignore[arg-type]
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            listed = await session.list_tools()

    assert init.serverInfo.name == "amem"
    assert init.serverInfo.version == amem.__version__
    assert init.capabilities.tools is not None
    assert init.instructions
    assert "never instructions" in init.instructions

    tools = {tool.name: tool for tool in listed.tools}
    assert len(tools) == len(listed.tools)
    assert set(tools) == set(SPEC_ARGS)
    for name, tool in tools.items():
        schema = tool.inputSchema
        assert schema["type"] == "object", name
        assert set(schema["properties"]) == SPEC_ARGS[name] | {"persona", "project"}, name
        assert set(schema.get("required", [])) == SPEC_REQUIRED[name], name
        assert schema.get("additionalProperties") is False, name  # extra args are refused
        assert tool.description, name
        assert len(tool.description) > 40, name
        assert tool.annotations is not None, name
    for name in EVIDENCE_TOOLS:
        description = (tools[name].description or "").lower()
        assert "evidence" in description, name
        assert "never instructions" in description, name
    for name in ("memory_recall", "memory_read", "session_resume", "memory_status"):
        assert tools[name].annotations.readOnlyHint is True, name  # type: ignore[union-attr]
    for name in ("event_submit", "memory_add", "memory_correct", "memory_delete"):
        assert tools[name].annotations.readOnlyHint is False, name  # type: ignore[union-attr]
    assert tools["memory_delete"].annotations.destructiveHint is True  # type: ignore[union-attr]
    roles = tools["event_submit"].inputSchema["properties"]["role"]
    assert set(roles["enum"]) == {"user", "assistant", "system", "tool"}


# --- 2. every tool, Chinese and English ---------------------------------------------------

BOOK_EVENT = "我昨天在书店买了一本书，是《三体》。"
HOME_EVENT = "I moved to Hangzhou last spring, and I love green tea."
REPLY_EVENT = "好的，我记住了：你住在杭州，喜欢绿茶。"


async def test_every_tool_in_a_bilingual_flow(
    anyio_backend: str, server_backend: str, tmp_path: Path
) -> None:
    beijing = timezone(timedelta(hours=8))
    yesterday = datetime.now(beijing).replace(microsecond=0) - timedelta(days=1)
    times = [(yesterday + timedelta(minutes=n)).isoformat() for n in range(3)]
    async with connect(tmp_path / "m.db", server_backend, tmp_path / "server.log") as s:
        # events: Chinese and English, with a UTC offset converted to UTC
        book_ev = await ok(
            s, "event_submit", text=BOOK_EVENT, role="user", event_id="zh-1", session="chat-1",
            source="wechat", occurred_at=times[0],
        )  # fmt: skip
        assert book_ev["event_id"] == "zh-1"
        assert (book_ev["persona"], book_ev["project"]) == (PERSONA, PROJECT)
        assert book_ev["status"] == "stored"  # no extraction endpoint configured
        assert book_ev["duplicate"] is False
        assert book_ev["memory_ids"] == []
        assert book_ev["occurred_at"].endswith("Z")
        assert datetime.fromisoformat(book_ev["occurred_at"]) == yesterday
        assert book_ev["session"] == "chat-1"
        home_ev = await ok(
            s, "event_submit", text=HOME_EVENT, role="user", event_id="en-1", session="chat-1",
            occurred_at=times[1],
        )  # fmt: skip
        reply_ev = await ok(
            s, "event_submit", text=REPLY_EVENT, role="assistant", event_id="as-1",
            session="chat-1", occurred_at=times[2],
        )  # fmt: skip
        assert book_ev["seq"] < home_ev["seq"] < reply_ev["seq"]
        again = await ok(
            s, "event_submit", text=BOOK_EVENT, role="user", event_id="zh-1", session="chat-1",
            source="wechat", occurred_at=times[0],
        )  # fmt: skip
        assert again["duplicate"] is True
        assert again["seq"] == book_ev["seq"]
        reference = await ok(
            s, "event_submit", text="Reference: the Great Wall is about 21,000 km long.",
            role="system", category="reference", event_id="ref-1",
        )  # fmt: skip
        assert reference["status"] == "stored"
        generated = await ok(s, "event_submit", text="tool output 工具输出", role="tool")
        assert generated["event_id"]  # an ID is made up when none is given

        # the host acts as extractor
        added = await ok(s, "memory_add", event_id="zh-1", memories=[
            {"text": "用户买了一本书《三体》", "quote": "买了一本书", "kind": "episode",
             "basis": "user_statement"},
        ])  # fmt: skip
        [book_id] = added["memory_ids"]
        [book] = added["memories"]
        assert BOOK_EVENT[book["quote_start"] : book["quote_end"]] == "买了一本书"
        added = await ok(s, "memory_add", event_id="en-1", memories=[
            {"text": "User lives in Hangzhou", "quote": "I moved to Hangzhou", "kind": "fact",
             "basis": "user_statement", "subject": "user", "fact_key": "residence"},
            {"text": "User loves green tea", "quote": "I love green tea", "kind": "preference",
             "basis": "user_statement"},
        ])  # fmt: skip
        home_id, tea_id = added["memory_ids"]
        added = await ok(s, "memory_add", event_id="as-1", memories=[
            {"text": "助手答应记住用户喜欢绿茶", "quote": "我记住了", "kind": "agreement",
             "basis": "assistant_expression"},
        ])  # fmt: skip
        [promise_id] = added["memory_ids"]

        # recall: a single Chinese character finds the word it is part of
        hits = await ok(s, "memory_recall", query="书")
        assert hits["query"] == "书"
        assert (hits["persona"], hits["project"]) == (PERSONA, PROJECT)
        by_id = {item["id"]: item for item in hits["items"]}
        assert book_id in by_id
        item = by_id[book_id]
        assert "一本书" in item["text"]
        assert item["source_event_id"] == "zh-1"
        assert item["kind"] == "episode"
        assert item["basis"] == "user_statement"
        assert set(item["components"]) >= {"lexical", "semantic", "link", "basis", "freshness"}
        hits = await ok(s, "memory_recall", query="Where does the user live? Hangzhou", limit=5)
        assert home_id in [item["id"] for item in hits["items"]]
        hits = await ok(s, "memory_recall", query="green tea 绿茶", kinds=["preference"])
        assert tea_id in [item["id"] for item in hits["items"]]
        assert {item["kind"] for item in hits["items"]} == {"preference"}
        hits = await ok(s, "memory_recall", query="量子计算机")
        assert hits["items"] == []  # no evidence, no items

        # read: page through a long original
        long_text = "".join(
            f"第{i}段：今天学习了 Python 和 SQLite。Paragraph {i} is about memory. "
            for i in range(300)
        )
        await ok(s, "event_submit", text=long_text, role="user", event_id="long-1")
        pages, offset = [], 0
        while offset is not None:
            page = await ok(s, "memory_read", id="long-1", offset=offset, limit=4000)
            assert page["total_chars"] == len(long_text)
            assert page["event"]["id"] == "long-1"
            assert page["memory"] is None
            assert len(page["text"]) <= 4000
            pages.append(page["text"])
            offset = page["next_offset"]
        assert "".join(pages) == long_text
        assert len(pages) == math.ceil(len(long_text) / 4000)
        page = await ok(s, "memory_read", id=book_id)
        assert page["text"] == BOOK_EVENT
        assert page["next_offset"] is None
        assert page["memory"]["id"] == book_id
        assert page["text"][page["memory"]["quote_start"] : page["memory"]["quote_end"]] == (
            "买了一本书"
        )
        assert [m["id"] for m in page["memories"]] == [book_id]

        # correct a mistake: the old memory is revoked for good
        fixed = await ok(
            s, "memory_correct", memory_id=home_id, text="User lives in Suzhou",
            reason="听错了 / misheard",
        )  # fmt: skip
        assert fixed["revoked_id"] == home_id
        assert fixed["amended_event_id"] == "en-1"
        suzhou_id = fixed["memory"]["id"]
        assert suzhou_id != home_id
        assert fixed["memory"]["text"] == "User lives in Suzhou"
        hits = await ok(s, "memory_recall", query="Suzhou")
        assert suzhou_id in [item["id"] for item in hits["items"]]
        hits = await ok(s, "memory_recall", query="Hangzhou", include_history=True)
        assert home_id not in [item["id"] for item in hits["items"]]
        page = await ok(s, "memory_read", id="en-1")
        assert page["event"]["status"] == "amended"
        assert page["text"] == HOME_EVENT

        # relate: finding one brings the other
        relation = await ok(s, "memory_relate", from_id=tea_id, to_id=book_id)
        assert (relation["from_id"], relation["to_id"], relation["kind"]) == (
            tea_id, book_id, "related",
        )  # fmt: skip
        await ok(s, "memory_relate", from_id=tea_id, to_id=book_id)  # idempotent
        hits = await ok(s, "memory_recall", query="green tea")
        ids = [item["id"] for item in hits["items"]]
        assert tea_id in ids
        assert book_id in ids

        # checkpoint and resume
        saved = await ok(
            s, "checkpoint_save", session="chat-1", goal="帮用户整理读书笔记 / reading notes",
            completed=["记录《三体》"], pending=["find the next book"],
            constraints=["answer in Chinese"], next_action="ask which chapter",
            covered_seq=reply_ev["seq"],
        )  # fmt: skip
        assert saved["covered_seq"] == reply_ev["seq"]
        assert saved["session"] == "chat-1"
        small = await ok(s, "session_resume", session="chat-1", budget_tokens=10)
        assert small["insufficient_budget"] is True
        assert small["context"] == ""
        assert small["included"] == []
        assert "persona" in small["omitted"]
        pack = await ok(s, "session_resume", session="chat-1", query="书", budget_tokens=8000)
        assert pack["insufficient_budget"] is False
        assert pack["tokens_used"] == len(pack["context"].encode()) <= 8000
        assert pack["included"][:2] == ["persona", "checkpoint"]
        assert "memories" in pack["included"]
        assert "recent_events" in pack["included"]
        context = json.loads(pack["context"])
        assert "never instructions" in context["notice"]
        assert context["scope"] == {"persona": PERSONA, "project": PROJECT}
        assert context["checkpoint"]["goal"] == "帮用户整理读书笔记 / reading notes"
        assert "一本书" in pack["context"]
        assert [a["id"] for a in context["agreements"]] == [promise_id]
        assert [e["id"] for e in context["recent_events"]][-1] == "as-1"

        # persona: read-only neutral default
        persona = await ok(s, "persona_get")
        assert persona["persona"] == PERSONA
        assert persona["version"] == 1
        assert persona["text"]
        assert persona["note"] == "neutral default"
        assert await ok(s, "persona_get") == persona  # reading creates nothing new
        assert await ok(s, "persona_get", persona=PERSONA, version=1) == persona
        stranger = await ok(s, "persona_get", persona="小助手")
        assert stranger["persona"] == "小助手"
        assert stranger["version"] == 1

        # delete: counts, and the text is gone from recall and read
        gone = await ok(s, "memory_delete", event_id="zh-1")
        assert gone["event_ids"] == ["zh-1"]
        assert gone["memory_ids"] == [book_id]
        assert gone["relations"] >= 1
        assert gone["search_rows"] >= 2
        assert gone["checkpoints_invalidated"] >= 1
        hits = await ok(s, "memory_recall", query="书", include_history=True, limit=50)
        assert all("一本书" not in item["text"] for item in hits["items"])
        assert all(item["source_event_id"] != "zh-1" for item in hits["items"])
        assert await refused(s, "memory_read", {"id": "zh-1"}) == "not_found"
        assert await refused(s, "memory_read", {"id": book_id}) == "not_found"
        hits = await ok(s, "memory_recall", query="green tea")
        assert tea_id in [item["id"] for item in hits["items"]]  # only linked: it stays
        gone = await ok(s, "memory_delete", memory_id=tea_id)
        assert "en-1" in gone["event_ids"]  # the source event and its correction lineage
        assert {tea_id, home_id, suzhou_id} <= set(gone["memory_ids"])
        hits = await ok(s, "memory_recall", query="Suzhou Hangzhou green tea", limit=50)
        assert all(item["source_event_id"] != "en-1" for item in hits["items"])
        assert all("Suzhou" not in item["text"] for item in hits["items"])

        # status, and retry without an extraction endpoint
        status = await ok(s, "memory_status")
        assert (status["persona"], status["project"]) == (PERSONA, PROJECT)
        assert (status["default_persona"], status["default_project"]) == (PERSONA, PROJECT)
        assert status["schema_version"] == SCHEMA_VERSION
        assert status["extraction"] is False
        assert sum(status["events"].values()) == 4  # as-1, ref-1, long-1 and the tool output
        assert status["memories"] == 1  # the assistant's agreement
        assert await refused(s, "extraction_retry", {}) == "not_configured"
        assert await refused(s, "extraction_retry", {"event_id": "as-1"}) == "not_configured"

        # another scope, named in the call
        elsewhere = await ok(
            s, "event_submit", text="另一个范围里的秘密花园", role="user", persona="小明",
            project="p2",
        )  # fmt: skip
        assert (elsewhere["persona"], elsewhere["project"]) == ("小明", "p2")
        hits = await ok(s, "memory_recall", query="秘密花园")
        assert hits["items"] == []
        hits = await ok(s, "memory_recall", query="秘密花园", persona="小明", project="p2")
        [raw] = hits["items"]
        assert raw["raw_fallback"] is True
        assert raw["source_event_id"] == elsewhere["event_id"]
    assert "Traceback" not in (tmp_path / "server.log").read_text()


# --- 3. error paths -----------------------------------------------------------------------


def draft(text: str = "用户喜欢喝茶", quote: str = "喜欢喝茶", **fields: Any) -> dict[str, Any]:
    return {"text": text, "quote": quote, "kind": "preference", "basis": "user_statement"} | fields


async def test_errors_are_stable_codes_that_echo_nothing(
    anyio_backend: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    async with connect(tmp_path / "m.db", other(anyio_backend), log) as s:
        await ok(s, "event_submit", text="我喜欢喝茶 I like tea", role="user", event_id="u-1",
                 session="s-1")  # fmt: skip
        await ok(s, "event_submit", text="好的，记下了", role="assistant", event_id="a-1")
        [mine] = (await ok(s, "memory_add", event_id="u-1", memories=[draft()]))["memory_ids"]
        away = {"persona": "other-persona", "project": "other-project"}
        foreign_ev = await ok(
            s, "event_submit", text="别人的茶 tea of others", role="user", event_id="x-1",
            session="s-x", **away,
        )  # fmt: skip
        added = await ok(
            s, "memory_add", event_id="x-1", memories=[draft("别人喜欢茶", "别人的茶")], **away
        )
        [foreign] = added["memory_ids"]
        await ok(s, "persona_get")  # version 1 exists, so version 99 does not
        before = await ok(s, "memory_status")

        cases: list[tuple[str, dict[str, Any] | None, str]] = [
            ("no_such_tool_" + MARKER, {}, "unknown_tool"),
            ("no_such_tool", {"text": MARKER}, "unknown_tool"),
            # wrong types
            ("event_submit", {"text": 12345, "role": "user", "event_id": MARKER}, "invalid_input"),
            ("event_submit", {"text": [MARKER], "role": "user"}, "invalid_input"),
            ("memory_recall", {"query": "tea", "limit": MARKER}, "invalid_input"),
            ("memory_recall", {"query": {"q": MARKER}}, "invalid_input"),
            ("memory_read", {"id": "u-1", "offset": MARKER}, "invalid_input"),
            ("checkpoint_save", {"session": "s-1", "goal": MARKER, "completed": MARKER},
             "invalid_input"),
            ("checkpoint_save", {"session": "s-1", "goal": "g", "covered_seq": MARKER},
             "invalid_input"),
            ("session_resume", {"session": "s-1", "budget_tokens": MARKER}, "invalid_input"),
            ("persona_get", {"version": MARKER}, "invalid_input"),
            ("memory_add", {"event_id": "u-1", "memories": MARKER}, "invalid_input"),
            ("memory_add", {"event_id": "u-1", "memories": [draft(kind=MARKER)]}, "invalid_input"),
            # missing required arguments
            ("event_submit", {"text": MARKER}, "invalid_input"),
            ("event_submit", {"role": "user"}, "invalid_input"),
            ("event_submit", None, "invalid_input"),
            ("memory_add", {"event_id": "u-1"}, "invalid_input"),
            ("memory_add", {"event_id": "u-1", "memories": [{"text": MARKER}]}, "invalid_input"),
            ("memory_recall", {}, "invalid_input"),
            ("memory_read", {"offset": 3}, "invalid_input"),
            ("memory_correct", {"memory_id": mine}, "invalid_input"),
            ("memory_relate", {"from_id": mine}, "invalid_input"),
            ("checkpoint_save", {"session": "s-1"}, "invalid_input"),
            ("session_resume", {"session": "s-1"}, "invalid_input"),
            ("memory_delete", {}, "invalid_input"),
            # extra arguments (their names and values both stay out of the message)
            ("event_submit", {"text": "x", "role": "user", MARKER: 1}, "invalid_input"),
            ("event_submit", {"text": "x", "role": "user", "color": MARKER}, "invalid_input"),
            ("memory_status", {"verbose": MARKER}, "invalid_input"),
            ("memory_add", {"event_id": "u-1", "memories": [draft(**{MARKER: "x"})]},
             "invalid_input"),
            # bad values
            ("event_submit", {"text": "x", "role": "robot-" + MARKER}, "invalid_input"),
            ("event_submit", {"text": "x", "role": "user", "category": MARKER}, "invalid_input"),
            ("event_submit", {"text": "x", "role": "user", "category": "correction"},
             "invalid_input"),
            ("event_submit", {"text": "", "role": "user"}, "invalid_input"),
            ("event_submit", {"text": MARKER, "role": "user", "event_id": MARKER + "\n"},
             "invalid_input"),
            ("memory_add", {"event_id": "u-1", "memories": []}, "invalid_input"),
            ("memory_recall", {"query": "tea", "mode": MARKER}, "invalid_input"),
            ("memory_recall", {"query": "tea", "kinds": [MARKER]}, "invalid_input"),
            ("memory_recall", {"query": "tea", "limit": 0}, "invalid_input"),
            ("memory_recall", {"query": MARKER * 150}, "invalid_input"),  # over 2,000
            ("memory_read", {"id": "u-1", "limit": 20_001}, "invalid_input"),
            ("memory_read", {"id": "u-1", "offset": -1}, "invalid_input"),
            ("memory_delete", {"event_id": "u-1", "memory_id": mine}, "invalid_input"),
            ("session_resume", {"session": "s-1", "budget_tokens": 0}, "invalid_input"),
            ("session_resume", {"session": "s-1", "budget_tokens": 50_001}, "invalid_input"),
            ("persona_get", {"version": 0}, "invalid_input"),
            ("persona_get", {"persona": MARKER + "\n"}, "invalid_input"),
            ("memory_status", {"persona": "\t" + MARKER}, "invalid_input"),
            ("checkpoint_save", {"session": "s-1", "goal": MARKER, "covered_seq": 10_000},
             "invalid_input"),
            # times without a UTC offset, or no time at all
            ("event_submit", {"text": MARKER, "role": "user", "occurred_at": "2025-01-01T10:00:00"},
             "invalid_time"),
            ("event_submit", {"text": "x", "role": "user", "occurred_at": MARKER}, "invalid_time"),
            ("memory_recall", {"query": MARKER, "as_of": "2025-01-01"}, "invalid_time"),
            ("memory_correct", {"memory_id": mine, "text": MARKER,
                                "valid_at": "2025-06-01T00:00:00"}, "invalid_time"),
            ("memory_add", {"event_id": "u-1", "memories": [
                draft(MARKER, valid_at="2025-06-01T00:00:00")]}, "invalid_time"),
            ("memory_add", {"event_id": "u-1", "memories": [draft(MARKER, valid_at=1767225600)]},
             "invalid_time"),
            # times that exist only in their own offset: no UTC year 1 to 9999 holds them
            ("event_submit", {"text": MARKER, "role": "user",
                              "occurred_at": "9999-12-31T23:59:59-14:00"}, "invalid_time"),
            ("memory_recall", {"query": MARKER, "as_of": "0001-01-01T00:00:00+14:00"},
             "invalid_time"),
            ("memory_correct", {"memory_id": mine, "text": MARKER,
                                "valid_at": "9999-12-31T23:59:59-14:00"}, "invalid_time"),
            ("memory_add", {"event_id": "u-1", "memories": [
                draft(MARKER, valid_at="0001-01-01T00:00:00+14:00")]}, "invalid_time"),
            ("memory_add", {"event_id": "u-1", "memories": [
                draft(MARKER, invalid_at="9999-12-31T23:59:59-14:00")]}, "invalid_time"),
            # drafts without visible text, or with control characters where one line belongs
            ("memory_add", {"event_id": "u-1", "memories": [draft(" \n\t ")]}, "invalid_input"),
            ("memory_add", {"event_id": "u-1", "memories": [draft(quote=" ")]}, "invalid_input"),
            ("memory_add", {"event_id": "u-1", "memories": [draft(MARKER + "\x00")]},
             "invalid_input"),
            ("memory_add", {"event_id": "u-1", "memories": [draft(
                subject="user\n" + MARKER, fact_key="drink")]}, "invalid_input"),
            ("memory_add", {"event_id": "u-1", "memories": [draft(gist=MARKER + "\nmore")]},
             "invalid_input"),
            # an empty scope name is refused, never taken for the default
            ("event_submit", {"text": MARKER, "role": "user", "persona": ""}, "invalid_input"),
            ("memory_recall", {"query": MARKER, "project": ""}, "invalid_input"),
            ("persona_get", {"persona": ""}, "invalid_input"),
            # the quote must occur verbatim in the event
            ("memory_add", {"event_id": "u-1", "memories": [draft(MARKER, MARKER)]},
             "quote_mismatch"),
            ("memory_add", {"event_id": "u-1", "memories": [draft(quote="喜欢喝咖啡")]},
             "quote_mismatch"),
            ("memory_add", {"event_id": "u-1", "memories": [draft(), draft(quote=MARKER)]},
             "quote_mismatch"),
            # role rules
            ("memory_add", {"event_id": "u-1", "memories": [
                draft(MARKER, basis="assistant_expression")]}, "role_violation"),
            ("memory_add", {"event_id": "a-1", "memories": [draft(MARKER, "记下了")]},
             "role_violation"),
            ("memory_add", {"event_id": "u-1", "memories": [
                draft(MARKER, basis="inference", subject="user", fact_key="drink")]},
             "role_violation"),
            # unknown IDs
            ("memory_add", {"event_id": MARKER, "memories": [draft()]}, "not_found"),
            ("memory_read", {"id": MARKER}, "not_found"),
            ("memory_correct", {"memory_id": MARKER, "text": "x"}, "not_found"),
            ("memory_delete", {"event_id": MARKER}, "not_found"),
            ("memory_delete", {"memory_id": MARKER}, "not_found"),
            ("memory_relate", {"from_id": mine, "to_id": MARKER}, "not_found"),
            ("memory_relate", {"from_id": MARKER, "to_id": mine}, "not_found"),
            ("persona_get", {"version": 99}, "not_found"),
            # IDs of another scope read as absent
            ("memory_read", {"id": "u-1", **away}, "not_found"),
            ("memory_read", {"id": mine, **away}, "not_found"),
            ("memory_read", {"id": "x-1"}, "not_found"),
            ("memory_read", {"id": foreign}, "not_found"),
            ("memory_add", {"event_id": "x-1", "memories": [draft("别人", "别人的茶")]},
             "not_found"),
            ("memory_correct", {"memory_id": foreign, "text": MARKER}, "not_found"),
            ("memory_delete", {"event_id": "x-1"}, "not_found"),
            ("memory_delete", {"memory_id": foreign}, "not_found"),
            ("memory_relate", {"from_id": mine, "to_id": foreign}, "not_found"),
            ("memory_relate", {"from_id": mine, "to_id": foreign, **away}, "not_found"),
            ("checkpoint_save", {"session": "s-1", "goal": MARKER,
                                 "covered_seq": foreign_ev["seq"]}, "invalid_input"),
            # one event ID, two payloads (or two scopes)
            ("event_submit", {"text": MARKER, "role": "user", "event_id": "u-1",
                              "session": "s-1"}, "duplicate_conflict"),
            ("event_submit", {"text": "我喜欢喝茶 I like tea", "role": "assistant",
                              "event_id": "u-1", "session": "s-1"}, "duplicate_conflict"),
            ("event_submit", {"text": "我喜欢喝茶 I like tea", "role": "user", "event_id": "u-1",
                              "session": "s-1", **away}, "duplicate_conflict"),
            # no extraction endpoint
            ("extraction_retry", {"event_id": MARKER}, "not_configured"),
        ]  # fmt: skip
        failures = []
        for tool, args, expected in cases:
            code = await refused(s, tool, args)
            if code != expected:
                failures.append((tool, args, expected, code))
        assert failures == []

        # refused calls wrote nothing
        assert await ok(s, "memory_status") == before
        page = await ok(s, "memory_read", id="u-1")
        assert page["text"] == "我喜欢喝茶 I like tea"
        assert [m["id"] for m in page["memories"]] == [mine]
        same = await ok(s, "event_submit", text="我喜欢喝茶 I like tea", role="user",
                        event_id="u-1", session="s-1")  # fmt: skip
        assert same["duplicate"] is True
    assert "Traceback" not in log.read_text()


# --- 4. stdout is the wire ------------------------------------------------------------------


async def test_stdout_carries_only_jsonrpc(
    anyio_backend: str, server_backend: str, tmp_path: Path
) -> None:
    port = unused_port()  # model endpoints that refuse: failures, warnings and logs
    env = {
        "XDG_CACHE_HOME": str(tmp_path / "fresh-cache"),  # jieba builds its cache anew
        "AMEM_EXTRACT_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "AMEM_EXTRACT_MODEL": "no-such-model",
        "AMEM_EMBED_BASE_URL": f"http://127.0.0.1:{port}/v1",
        "AMEM_EMBED_MODEL": "no-such-embedder",
    }
    log = tmp_path / "server.log"
    db = tmp_path / "m.db"
    async with amem.open(db, settings=amem.Settings()) as mem:  # something to find
        scope = mem.scope(PERSONA, PROJECT)
        await scope.submit_event("The bookshop sold me a book.", role="user", event_id="seed")
    async with raw_server(
        db, server_backend, log, env=env, extra_args=("--log-level", "DEBUG")
    ) as wire:
        # initialize, then at once the first recall (a Chinese query: it needs jieba) and a
        # ping, in one write
        init_id, init = initialize(wire)
        recall_id, recall = wire.call("memory_recall", query="一本书 book")
        ping_id, ping = wire.request("ping")
        await wire.send(init, INITIALIZED, recall, ping)
        init_response = await wire.response(init_id)
        assert init_response["result"]["serverInfo"]["name"] == "amem"
        is_error, text = tool_result(await wire.response(recall_id))
        assert not is_error
        assert [item["source_event_id"] for item in json.loads(text)["items"]] == ["seed"]
        await wire.response(ping_id)
        # initialize is answered before the first recall (which needs jieba) returns,
        # and the loop keeps answering while jieba loads in a worker thread
        assert wire.order.index(init_id) < wire.order.index(recall_id)
        assert wire.order.index(ping_id) < wire.order.index(recall_id)

        list_id, list_tools = wire.request("tools/list")
        unknown_method_id, unknown_method = wire.request("no/such_method", {"x": MARKER})
        unknown_tool_id, unknown_tool = wire.call("no_such_tool_" + MARKER)
        submit_id, submit = wire.call(
            "event_submit", text="我搬到杭州了，I moved to Hangzhou", role="user", event_id="w-1"
        )
        bad_id, bad = wire.call("event_submit", text=MARKER, role="robot")
        quote_id, quote = wire.call(
            "memory_add",
            event_id="w-1",
            memories=[{"text": "x", "quote": MARKER, "kind": "fact", "basis": "user_statement"}],
        )
        semantic_id, semantic = wire.call("memory_recall", query="杭州", mode="semantic")
        retry_id, retry = wire.call("extraction_retry")
        status_id, status = wire.call("memory_status")
        string_id = "ping-" + "字"
        await wire.send(
            list_tools,
            b"this is not JSON " + MARKER.encode() + b"\n",
            b'{"jsonrpc": "2.0", "id": 999, "method": 42}\n',
            unknown_method,
            unknown_tool,
            submit,
            bad,
            quote,
            semantic,
            line({"jsonrpc": "2.0", "id": string_id, "method": "ping"}),
        )
        assert len((await wire.response(list_id))["result"]["tools"]) == len(SPEC_ARGS)
        assert "error" in await wire.response(unknown_method_id)
        assert tool_result(await wire.response(unknown_tool_id))[0] is True
        assert tool_result(await wire.response(submit_id))[0] is False
        assert tool_result(await wire.response(bad_id))[0] is True
        assert tool_result(await wire.response(quote_id))[0] is True
        is_error, text = tool_result(await wire.response(semantic_id))
        assert not is_error
        assert json.loads(text)["warnings"]
        await wire.response(string_id)
        await wire.send(retry)  # extraction against the refusing endpoint: it fails
        is_error, text = tool_result(await wire.response(retry_id))
        assert not is_error
        assert "w-1" in json.loads(text)["failed"]
        await wire.send(status)
        is_error, text = tool_result(await wire.response(status_id))
        assert not is_error
        assert json.loads(text)["events"]["failed"] == 1

        await wire.close_stdin()
        assert await wire.exit_status() == 0
    wire.assert_only_jsonrpc()
    for response in wire.responses.values():
        assert MARKER not in json.dumps(response, ensure_ascii=False)
    assert len(wire.order) == len(set(wire.order))  # one answer per request
    assert log.read_text().strip()  # the logs went to stderr


# --- 5. two servers, one file ---------------------------------------------------------------

EVENTS_EACH = 100
IN_FLIGHT = 8


def shared_text(event_id: str) -> str:
    return f"{event_id} 的消息：两个服务器共享一个数据库。Two servers share one file, {event_id}."


async def test_two_servers_write_one_file(anyio_backend: str, tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    seqs: dict[str, int] = {}

    async def submit_all(session: ClientSession, prefix: str) -> None:
        limiter = anyio.CapacityLimiter(IN_FLIGHT)

        async def one(n: int) -> None:
            event_id = f"{prefix}-{n:03d}"
            async with limiter:
                receipt = await ok(
                    session, "event_submit", text=shared_text(event_id), role="user",
                    event_id=event_id, session=prefix,
                )  # fmt: skip
            assert receipt["duplicate"] is False
            seqs[event_id] = receipt["seq"]

        async with anyio.create_task_group() as tg:
            for n in range(EVENTS_EACH):
                tg.start_soon(one, n)

    async with (
        connect(db, "asyncio", logs[0]) as a,
        connect(db, "trio", logs[1]) as b,
    ):
        async with anyio.create_task_group() as tg:
            tg.start_soon(submit_all, a, "a")
            tg.start_soon(submit_all, b, "b")

        assert len(seqs) == 2 * EVENTS_EACH
        assert len(set(seqs.values())) == len(seqs), "two acknowledged events share a seq"
        for reader, writer in ((a, "b"), (b, "a")):  # each server reads the other's writes
            status = await ok(reader, "memory_status")
            assert sum(status["events"].values()) == 2 * EVENTS_EACH
            for n in range(EVENTS_EACH):
                event_id = f"{writer}-{n:03d}"
                page = await ok(reader, "memory_read", id=event_id)
                assert page["text"] == shared_text(event_id)
                assert page["event"]["seq"] == seqs[event_id]
            for n in range(0, EVENTS_EACH, 25):
                event_id = f"{writer}-{n:03d}"
                hits = await ok(reader, "memory_recall", query=event_id, limit=3)
                assert event_id in [item["source_event_id"] for item in hits["items"]]
    for log in logs:
        text = log.read_text().lower()
        assert "locked" not in text, text[:2000]
        assert "traceback" not in text, text[:2000]
    assert integrity(db) == [("ok",)]


# --- 6. stdin EOF ends the server -----------------------------------------------------------

BURST = 200


def burst_text(n: int) -> str:
    return f"burst {n}: 写入风暴中的第{n}条消息。" + "记忆" * (n % 50) + " payload" * (n % 30)


async def test_stdin_eof_mid_burst_exits_cleanly(
    anyio_backend: str, server_backend: str, tmp_path: Path
) -> None:
    db = tmp_path / "m.db"
    async with raw_server(db, server_backend, tmp_path / "server.log") as wire:
        await handshake(wire)
        requests = {wire.call("event_submit", text=burst_text(n), role="user",
                              event_id=f"burst-{n:03d}", session="burst"): n
                    for n in range(BURST)}  # fmt: skip
        await wire.send(*(request for _, request in requests))
        ids = [id_ for id_, _ in requests]
        for id_ in ids[:5]:  # some are acknowledged, more are in flight
            await wire.response(id_)
        await wire.close_stdin()
        assert await wire.exit_status() == 0

    wire.assert_only_jsonrpc()
    acked: dict[str, int] = {}
    for (id_, _), n in requests.items():
        is_error, text = tool_result(wire.responses[id_])  # EOF waits for every answer
        assert not is_error, text
        receipt = json.loads(text)
        acked[receipt["event_id"]] = receipt["seq"]
        assert receipt["event_id"] == f"burst-{n:03d}"
    assert len(acked) == BURST

    assert integrity(db) == [("ok",)]
    async with amem.open(db, settings=amem.Settings()) as mem:
        scope = mem.scope(PERSONA, PROJECT)
        for event_id, seq in acked.items():
            page = await scope.read(event_id, limit=100_000)
            assert page.event.seq == seq
            assert page.text == burst_text(int(event_id.removeprefix("burst-")))
        status = await scope.status()
        assert sum(status.events.values()) == BURST
    assert integrity(db) == [("ok",)]


# --- 7. large results stay bounded ----------------------------------------------------------


async def test_large_results_stay_bounded(anyio_backend: str, tmp_path: Path) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        for n in range(60):
            body = f"第{n}次说起长城。" + "长城很长，the Great Wall is long. " * 100
            await ok(s, "event_submit", text=body, role="user", event_id=f"wall-{n}")
            await ok(s, "memory_add", event_id=f"wall-{n}", memories=[{
                "text": (f"长城 memory {n}: " + "用户多次谈到长城。" * 300)[:2000],
                "quote": body[:1500], "kind": "observation", "basis": "user_statement",
            }])  # fmt: skip
        result = await s.call_tool("memory_recall", {"query": "长城", "limit": 50})
        text = text_of(result)
        assert not result.isError
        assert len(text) <= MCP_MAX_RESULT_CHARS
        hits = json.loads(text)
        assert hits["truncated_to_fit"] is True
        assert 0 < len(hits["items"]) < 50
        best = await ok(s, "memory_recall", query="长城", limit=5)
        assert [item["id"] for item in hits["items"][:5]] == [
            item["id"] for item in best["items"]
        ]  # the weakest items were dropped, not the best
        small = await ok(s, "memory_recall", query="长城", limit=3)
        assert "truncated_to_fit" not in small
        assert len(small["items"]) == 3

        huge = ("瀑布的水声很响 and loud. " * 6000)[:100_000]
        await ok(s, "event_submit", text=huge, role="user", event_id="huge")
        assert await refused(s, "memory_read", {"id": "huge", "limit": 20_001}) == "invalid_input"
        result = await s.call_tool("memory_read", {"id": "huge", "limit": 20_000})
        text = text_of(result)
        assert not result.isError
        assert len(text) <= MCP_MAX_RESULT_CHARS
        page = json.loads(text)
        assert page["text"] == huge[:20_000]
        assert page["next_offset"] == 20_000
        hits = await ok(s, "memory_recall", query="瀑布", limit=50)
        raw = next(item for item in hits["items"] if item["source_event_id"] == "huge")
        assert raw["raw_fallback"] is True
        assert raw["truncated"] is True
        assert len(raw["text"]) <= 2000


# --- known gaps (amem bugs found by these tests; strict: a fix makes them fail loudly) ------


async def test_results_quoting_a_huge_event_stay_bounded(
    anyio_backend: str, tmp_path: Path
) -> None:
    big = "长城很长。" * 14_000  # 70,000 characters
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        await ok(s, "event_submit", text=big, role="user", event_id="big")
        result = await s.call_tool("memory_add", {"event_id": "big", "memories": [
            {"text": "用户说长城很长", "quote": big, "kind": "fact", "basis": "user_statement"},
        ]})  # fmt: skip
        assert not result.isError
        [memory_id] = json.loads(text_of(result))["memory_ids"]
        read = await s.call_tool("memory_read", {"id": memory_id, "limit": 100})
        assert not read.isError
    assert len(text_of(read)) <= MCP_MAX_RESULT_CHARS
    assert len(text_of(result)) <= MCP_MAX_RESULT_CHARS


async def test_a_full_budget_resume_stays_bounded(anyio_backend: str, tmp_path: Path) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        for n in range(12):
            said = '"' * 1990 + f" agree {n}"  # every quote is escaped twice on the way out
            await ok(s, "event_submit", text=said, role="user", event_id=f"q-{n}")
            await ok(s, "memory_add", event_id=f"q-{n}", memories=[
                {"text": said, "quote": said, "kind": "agreement", "basis": "user_statement"}
            ])  # fmt: skip
        result = await s.call_tool("session_resume", {"session": "s", "budget_tokens": 50_000})
    assert not result.isError
    pack = json.loads(text_of(result))
    # Escaped once more in the result, the agreements (about 48 kB of context) cannot fit
    # 60,000 characters: the budget is lowered until the pack fits, omitting them whole.
    assert len(text_of(result)) <= MCP_MAX_RESULT_CHARS
    assert len(pack["context"].encode()) <= pack["budget"] < 50_000
    assert pack["omitted"] == ["agreements"]
    assert "agreements" not in json.loads(pack["context"])


async def test_recall_keeps_its_only_match_when_the_quote_is_huge(
    anyio_backend: str, tmp_path: Path
) -> None:
    big = "长城很长。" * 14_000
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        await ok(s, "event_submit", text=big, role="user", event_id="big")
        await ok(s, "memory_add", event_id="big", memories=[
            {"text": "用户说长城很长", "quote": big, "kind": "fact", "basis": "user_statement"},
        ])  # fmt: skip
        hits = await ok(s, "memory_recall", query="长城")
        [memory_id] = [item["id"] for item in hits["items"]]
        page = await ok(s, "memory_read", id=memory_id, offset=69_990, limit=100)
    assert [item["text"] for item in hits["items"]] == ["用户说长城很长"]
    assert hits["clipped"] == ["items.0.quote"]
    assert big.startswith(hits["items"][0]["quote"])
    assert page["text"] == big[69_990:]  # the clipped quote stays readable in full


async def test_a_missing_persona_version_is_not_found(anyio_backend: str, tmp_path: Path) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        code = await refused(s, "persona_get", {"persona": "bob", "version": 3})
    assert code == "not_found"


def test_requests_from_a_file_are_answered_too(tmp_path: Path) -> None:
    """Requests in a file (stdin and stdout regular files, not pipes) are all answered,
    those still running at end of input included."""
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(HELLO + SUBMIT_HANGZHOU)
    answers = tmp_path / "answers.jsonl"
    with requests.open("rb") as stdin, answers.open("wb") as stdout:
        subprocess.run(
            [sys.executable, *serve_args(tmp_path / "m.db", "asyncio")],
            stdin=stdin, stdout=stdout, stderr=subprocess.DEVNULL, timeout=60, check=True,
        )  # fmt: skip
    requests.write_bytes(HELLO + RECALL_HANGZHOU)
    with requests.open("rb") as stdin, answers.open("ab") as stdout:
        subprocess.run(
            [sys.executable, *serve_args(tmp_path / "m.db", "asyncio")],
            stdin=stdin, stdout=stdout, stderr=subprocess.DEVNULL, timeout=60, check=True,
        )  # fmt: skip
    replies = {m["id"]: m for m in map(json.loads, answers.read_text().splitlines())}
    assert sorted(replies) == [1, 2, 3]
    assert_hangzhou_stored_and_found(replies)


HELLO = line({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": types.LATEST_PROTOCOL_VERSION, "capabilities": {},
    "clientInfo": {"name": "line-test", "version": "0"},
}}) + INITIALIZED  # fmt: skip
SUBMIT_HANGZHOU = line({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
    "name": "event_submit", "arguments": {"text": "我住在杭州", "role": "user"},
}})  # fmt: skip
RECALL_HANGZHOU = line({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
    "name": "memory_recall", "arguments": {"query": "杭州"},
}})  # fmt: skip


def assert_hangzhou_stored_and_found(replies: dict[Any, dict[str, Any]]) -> None:
    """Answers 2 and 3 to ``SUBMIT_HANGZHOU`` and ``RECALL_HANGZHOU``: stored, then found."""
    assert tool_result(replies[2])[0] is False
    is_error, text = tool_result(replies[3])
    assert not is_error
    assert [item["text"] for item in json.loads(text)["items"]] == ["我住在杭州"]


# --- 9. the JSON-RPC session ------------------------------------------------------------------


async def test_protocol_edges_are_answered_by_the_book(
    anyio_backend: str, server_backend: str, tmp_path: Path
) -> None:
    """Requests before initialize, version negotiation, and every kind of bad message: each
    request gets exactly one answer with the JSON-RPC error code for what was wrong, and the
    server keeps serving."""
    async with raw_server(tmp_path / "m.db", server_backend, tmp_path / "server.log") as wire:
        early_id, early = wire.request("tools/list")  # before initialize: answered anyway
        await wire.send(early)
        assert len((await wire.response(early_id))["result"]["tools"]) == len(SPEC_ARGS)

        old_id, old = wire.request("initialize", {
            "protocolVersion": "2024-11-05", "capabilities": {},
            "clientInfo": {"name": "old", "version": "0"},
        })  # fmt: skip
        future_id, future = wire.request("initialize", {
            "protocolVersion": "2099-01-01", "capabilities": {},
            "clientInfo": {"name": "future", "version": "0"},
        })  # fmt: skip
        await wire.send(old, future, INITIALIZED)
        answer = (await wire.response(old_id))["result"]
        assert answer["protocolVersion"] == "2024-11-05"  # a version both sides speak
        assert answer["serverInfo"] == {"name": "amem", "version": amem.__version__}
        assert answer["capabilities"]["tools"] == {"listChanged": False}
        assert "memory_recall" in answer["instructions"]
        latest = (await wire.response(future_id))["result"]["protocolVersion"]
        assert latest == types.LATEST_PROTOCOL_VERSION

        unknown_id, unknown = wire.request("resources/list")
        params_id = wire.request("ping")[0]
        no_name_id, no_name = wire.request("tools/call", {"arguments": {}})
        bad_args_id, bad_args = wire.request("tools/call", {"name": "memory_status",
                                                            "arguments": [MARKER]})  # fmt: skip
        last_id, last = wire.request("ping")
        await wire.send(
            b"{not json " + MARKER.encode() + b"\n",
            b"[1, 2]\n",  # a batch: not supported by MCP's 2025 revisions
            b'{"jsonrpc": "2.0", "id": 999, "method": 42}\n',
            b'{"jsonrpc": "1.0", "id": 998, "method": "ping"}\n',
            line({"jsonrpc": "2.0", "id": params_id, "method": "ping", "params": [1]}),
            line({"jsonrpc": "2.0", "id": 77, "result": {}}),  # a response: nothing to answer
            line({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}),
            unknown, no_name, bad_args, last,
        )  # fmt: skip
        await wire.response(last_id)
        codes = {id_: wire.responses[id_]["error"]["code"]
                 for id_ in (999, params_id, unknown_id, no_name_id, bad_args_id)}  # fmt: skip
        assert codes == {
            999: types.INVALID_REQUEST, params_id: types.INVALID_PARAMS,
            unknown_id: types.METHOD_NOT_FOUND, no_name_id: types.INVALID_PARAMS,
            bad_args_id: types.INVALID_PARAMS,
        }  # fmt: skip
        await wire.close_stdin()
        assert await wire.exit_status() == 0
    wire.assert_only_jsonrpc()
    anonymous = [json.loads(raw) for raw in wire.lines if json.loads(raw).get("id") is None]
    assert sorted(m["error"]["code"] for m in anonymous) == sorted(
        [types.PARSE_ERROR, types.INVALID_REQUEST, types.INVALID_REQUEST]
    )  # the bad line, the batch, and the wrong jsonrpc version (its id is not trusted)
    assert 77 not in wire.responses
    answered = [id_ for id_ in wire.order if id_ is not None]
    assert len(answered) == len(set(answered))  # one answer per request
    assert MARKER not in b"".join(wire.lines).decode()


async def test_a_cancelled_request_gets_no_answer_and_its_write_still_commits(
    anyio_backend: str, tmp_path: Path
) -> None:
    db = tmp_path / "m.db"
    async with raw_server(db, other(anyio_backend), tmp_path / "server.log") as wire:
        await handshake(wire)
        write_id, write = wire.call("event_submit", text="我养了一只猫 I have a cat",
                                    role="user", event_id="cat")  # fmt: skip
        read_id, read = wire.call("memory_recall", query="猫")
        ping_id, ping = wire.request("ping")

        def cancel(id_: int) -> bytes:
            params = {"requestId": id_, "reason": "the user moved on"}
            return line({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params})

        # each request and its cancellation arrive together: cancelled before it runs
        await wire.send(write, cancel(write_id), read, cancel(read_id), ping)
        await wire.response(ping_id)
        with anyio.fail_after(30):  # the write commits although nobody waits for it
            while True:
                check_id, check = wire.call("memory_read", id="cat")
                await wire.send(check)
                is_error, text = tool_result(await wire.response(check_id))
                if not is_error:
                    break
                assert text.startswith("not_found:"), text
                await anyio.sleep(0.05)
        assert json.loads(text)["text"] == "我养了一只猫 I have a cat"
        await wire.close_stdin()
        assert await wire.exit_status() == 0
    assert write_id not in wire.responses
    assert read_id not in wire.responses


def open_terminal() -> tuple[int, int]:
    """(controller, terminal) of a new pseudo-terminal that neither echoes input nor
    turns "\n" into "\r\n" on output."""
    import pty
    import termios

    controller, terminal = pty.openpty()
    attrs = termios.tcgetattr(terminal)
    attrs[1] &= ~termios.OPOST
    attrs[3] &= ~termios.ECHO
    termios.tcsetattr(terminal, termios.TCSANOW, attrs)
    return controller, terminal


@pytest.mark.parametrize("ending", ["ctrl-d", "hang-up"])
def test_serve_on_a_terminal(tmp_path: Path, ending: str) -> None:
    """stdin and stdout on a terminal (a person trying amem by hand) are read and written
    in a worker thread; Ctrl-D, or closing the terminal, ends the session."""
    controller, terminal = open_terminal()
    with (tmp_path / "server.log").open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, *serve_args(tmp_path / "m.db", "asyncio")],
            stdin=terminal, stdout=terminal, stderr=log,
        )  # fmt: skip
    os.close(terminal)
    try:
        os.write(controller, HELLO + SUBMIT_HANGZHOU)
        replies = read_replies(controller, {1, 2})
        os.write(controller, RECALL_HANGZHOU)
        replies |= read_replies(controller, {3})
        if ending == "ctrl-d":
            os.write(controller, b"\x04")  # at the start of a line: end of input
        else:
            os.close(controller)
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
        if ending == "ctrl-d":
            os.close(controller)
    assert "Traceback" not in (tmp_path / "server.log").read_text()
    assert_hangzhou_stored_and_found(replies)


def read_replies(fd: int, ids: set[int]) -> dict[int, dict[str, Any]]:
    """Answers read from ``fd`` until every one of ``ids`` came (a generous bound)."""
    import select

    replies: dict[int, dict[str, Any]] = {}
    pending = b""
    deadline = time.monotonic() + 60
    while not ids <= replies.keys():
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"no answer to {sorted(ids - replies.keys())}"
        *lines, pending = (pending + os.read(fd, 1 << 16)).split(b"\n")
        for raw in lines:
            message = json.loads(raw)
            replies[message["id"]] = message
    return replies


async def test_a_client_that_stops_reading_does_not_crash_the_server(
    anyio_backend: str, tmp_path: Path
) -> None:
    """The host closes its end of stdout and then stdin: answers are dropped, writes that
    were acknowledged or not stay whole, and the server exits cleanly."""
    db = tmp_path / "m.db"
    log = tmp_path / "server.log"
    async with raw_server(db, other(anyio_backend), log) as wire:
        await handshake(wire)
        assert wire.process.stdout is not None
        await wire.process.stdout.aclose()  # nobody reads the answers any more
        await wire.send(*(wire.call("event_submit", text=f"note {n}", role="user",
                                    event_id=f"n-{n}")[1] for n in range(50)))  # fmt: skip
        await wire.close_stdin()
        assert await wire.exit_status() == 0
    assert "Traceback" not in log.read_text()
    assert integrity(db) == [("ok",)]
    async with amem.open(db, settings=amem.Settings()) as mem:
        status = await mem.scope(PERSONA, PROJECT).status()
    assert sum(status.events.values()) == 50  # every request read was carried out


async def test_a_message_too_large_is_refused_and_the_server_goes_on(
    anyio_backend: str, tmp_path: Path
) -> None:
    from amem.server.stdio import MAX_LINE_BYTES

    async with raw_server(tmp_path / "m.db", other(anyio_backend), tmp_path / "s.log") as wire:
        huge = b'{"jsonrpc": "2.0", "id": 4242, "method": "ping", "params": {"x": "'
        huge += b"y" * MAX_LINE_BYTES + b'"}}\n'
        ping_id, ping = wire.request("ping")
        await wire.send(huge, ping)
        await wire.response(ping_id)
        await wire.close_stdin()
        assert await wire.exit_status() == 0
    assert 4242 not in wire.responses  # its id was never read
    [refusal] = [json.loads(raw) for raw in wire.lines if json.loads(raw)["id"] is None]
    assert refusal["error"]["code"] == types.INVALID_REQUEST


async def test_thousands_of_pipelined_requests_are_all_answered(
    anyio_backend: str, tmp_path: Path
) -> None:
    """More requests at once than the server runs at once: it reads on as calls finish."""
    db = tmp_path / "m.db"
    async with raw_server(db, other(anyio_backend), tmp_path / "server.log") as wire:
        await handshake(wire)
        calls = [wire.call("event_submit", text=f"第{n}条 note {n}", role="user",
                           event_id=f"p-{n}") for n in range(2000)]  # fmt: skip
        await wire.send(*(request for _, request in calls))
        for id_, _ in calls:
            assert tool_result(await wire.response(id_))[0] is False
        await wire.close_stdin()
        assert await wire.exit_status() == 0
    async with amem.open(db, settings=amem.Settings()) as mem:
        status = await mem.scope(PERSONA, PROJECT).status()
    assert sum(status.events.values()) == 2000
