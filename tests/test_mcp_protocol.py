"""The MCP session over JSON-RPC: initialize and version negotiation, every kind of bad
message answered by the book, lines nested too deep to parse, cancellation, and thousands
of pipelined requests. The clients and backends: ``mcp_client``."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp import types
from mcp.shared.exceptions import McpError
from mcp.shared.version import SUPPORTED_PROTOCOL_VERSIONS
from mcp_client import (
    INITIALIZED,
    LIVENESS_SECONDS,
    MARKER,
    PERSONA,
    SPEC_ARGS,
    TOOLS_LIST_MAX_BYTES,
    connect,
    count_events,
    default_scope,
    line,
    ok,
    other,
    raw_server,
    raw_session,
    server_backends,
    tool_result,
)

import amem
from amem.server.session import PROTOCOL_VERSIONS

pytestmark = pytest.mark.anyio


# --- 1. the protocol revisions amem speaks ------------------------------------------------


def test_every_revision_the_sdk_knows_was_reviewed() -> None:
    """amem speaks the revisions in its own reviewed list, not whatever the installed SDK
    lists: once a lock upgrade brings an SDK that knows a newer revision, this fails until
    that revision is reviewed and added to ``PROTOCOL_VERSIONS`` (its docstring says how)."""
    known = {*SUPPORTED_PROTOCOL_VERSIONS, types.LATEST_PROTOCOL_VERSION}
    unreviewed = sorted(version for version in known if version > PROTOCOL_VERSIONS[-1])
    assert unreviewed == [], f"the mcp SDK knows {unreviewed}: review them for amem"
    assert list(PROTOCOL_VERSIONS) == sorted(PROTOCOL_VERSIONS)  # the last is the latest


# --- 2. the JSON-RPC session ------------------------------------------------------------------


@server_backends
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

        old_id, old = wire.request(
            "initialize",
            {
                "protocolVersion": "2024-11-05",
                "capabilities": {},
                "clientInfo": {"name": "old", "version": "0"},
            },
        )
        future_id, future = wire.request(
            "initialize",
            {
                "protocolVersion": "2099-01-01",
                "capabilities": {},
                "clientInfo": {"name": "future", "version": "0"},
            },
        )
        await wire.send(old, future, INITIALIZED)
        answer = (await wire.response(old_id))["result"]
        assert answer["protocolVersion"] == "2024-11-05"  # a version both sides speak
        assert answer["serverInfo"] == {"name": "amem", "version": amem.__version__}
        assert answer["capabilities"]["tools"] == {"listChanged": False}
        assert "memory_recall" in answer["instructions"]
        latest = (await wire.response(future_id))["result"]["protocolVersion"]
        assert latest == PROTOCOL_VERSIONS[-1]  # amem's latest, not the SDK's

        unknown_id, unknown = wire.request("resources/list")
        params_id = wire.request("ping")[0]
        no_name_id, no_name = wire.request("tools/call", {"arguments": {}})
        bad_args_id, bad_args = wire.request(
            "tools/call", {"name": "memory_status", "arguments": [MARKER]}
        )
        no_tool_id, no_tool = wire.call("no_such_tool_" + MARKER)  # Invalid params, as MCP shows
        last_id, last = wire.request("ping")
        await wire.send(
            b"{not json " + MARKER.encode() + b"\n",
            b"[1, 2]\n",  # a batch: not supported by MCP's 2025 revisions
            b'{"jsonrpc": "2.0", "id": 999, "method": 42}\n',
            b'{"jsonrpc": "1.0", "id": 998, "method": "ping"}\n',  # answered with its id
            b'{"id": 997, "method": "ping"}\n',  # no jsonrpc member: answered with its id
            b'{"jsonrpc": "2.0", "params": {}}\n',  # neither method nor id
            line({"jsonrpc": "2.0", "id": params_id, "method": "ping", "params": [1]}),
            line({"jsonrpc": "2.0", "id": 77, "result": {}}),  # a response: nothing to answer
            line({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}),
            unknown,
            no_name,
            bad_args,
            no_tool,
            last,
        )
        await wire.response(last_id)
        codes = {
            id_: wire.responses[id_]["error"]["code"]
            for id_ in (999, 998, 997, params_id, unknown_id, no_name_id, bad_args_id, no_tool_id)
        }
        assert codes == {
            999: types.INVALID_REQUEST,
            998: types.INVALID_REQUEST,
            997: types.INVALID_REQUEST,
            params_id: types.INVALID_PARAMS,
            unknown_id: types.METHOD_NOT_FOUND,
            no_name_id: types.INVALID_PARAMS,
            bad_args_id: types.INVALID_PARAMS,
            no_tool_id: types.INVALID_PARAMS,
        }
        await wire.close_stdin()
        assert await wire.exit_status() == 0
    wire.assert_only_jsonrpc()
    assert sorted(wire.null_id_errors()) == sorted(
        [types.PARSE_ERROR, types.INVALID_REQUEST, types.INVALID_REQUEST]
    )  # the bad line, the batch, and the message with neither method nor id
    assert 77 not in wire.responses
    answered = [id_ for id_ in wire.order if id_ is not None]
    assert len(answered) == len(set(answered))  # one answer per request
    assert MARKER not in b"".join(wire.lines).decode()


async def test_an_unknown_tool_is_invalid_params_and_echoes_nothing(
    anyio_backend: str, tmp_path: Path
) -> None:
    """Calling a tool amem does not have is a JSON-RPC error -32602 (Invalid params), as the
    tools page of every MCP revision shows, not a tool result; the session goes on."""
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        for name, args in (("no_such_tool_" + MARKER, {}), ("no_such_tool", {"text": MARKER})):
            with pytest.raises(McpError) as refusal:
                await s.call_tool(name, args)
            assert refusal.value.error.code == types.INVALID_PARAMS
            assert MARKER not in f"{refusal.value.error.message} {refusal.value.error.data}"
        status = await ok(s, "memory_status")
    assert status["persona"] == PERSONA


async def test_the_tool_list_fits_in_8_kib(anyio_backend: str, tmp_path: Path) -> None:
    """A host puts the ``tools/list`` answer into every conversation: as the server writes
    it, the whole line is at most ``TOOLS_LIST_MAX_BYTES`` (issue 18; 22.6 kB before), for
    every tool there is, so a tool added later must fit too."""
    async with raw_session(
        tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log"
    ) as wire:
        list_id, list_tools = wire.request("tools/list")
        await wire.send(list_tools)
        tools = (await wire.response(list_id))["result"]["tools"]
        [sent] = [raw for raw in wire.lines if json.loads(raw).get("id") == list_id]
    assert len(tools) == len(SPEC_ARGS)
    assert len(sent) + 1 <= TOOLS_LIST_MAX_BYTES  # with its newline


# --- 3. lines nested too deep -------------------------------------------------------------


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


async def test_a_line_nested_too_deep_is_a_parse_error_and_every_other_request_is_answered(
    anyio_backend: str, db_path: Path, tmp_path: Path
) -> None:
    async with raw_session(db_path, other(anyio_backend), tmp_path / "server.log") as wire:
        writes = [
            wire.call("event_submit", text=f"note {n}", role="user", event_id=f"d-{n}")
            for n in range(300)
        ]
        ping_id, ping = wire.request("ping")
        deep_request = b'{"jsonrpc": "2.0", "id": 4242, "method": "ping", "params": {"x": '
        deep_request += nested(1_000) + b"}}\n"
        await wire.send(
            *(request for _, request in writes[:150]),
            nested(1_000) + b"\n",
            deep_request,
            ping,
            *(request for _, request in writes[150:]),
        )
        with anyio.fail_after(LIVENESS_SECONDS):
            await wire.response(ping_id)
            for id_, _ in writes:  # the writes in flight around it are all answered
                assert tool_result(await wire.response(id_))[0] is False
        await wire.close_stdin()
        assert await wire.exit_status() == 0
    wire.assert_only_jsonrpc()
    assert wire.null_id_errors() == [types.PARSE_ERROR, types.PARSE_ERROR]
    assert 4242 not in wire.responses  # its id was never read
    assert wire.order.index(None) < wire.order.index(ping_id)  # answered in order, at once
    assert count_events(db_path) == 300


DEPTHS = (10, 100, 500, 900, 950, 970, 980, 990, 1_000, 5_000, 100_000)
"""Around the depth the server can parse (near Python's recursion limit) and far past it."""


async def test_arguments_nested_deep_are_refused_or_a_parse_error_never_a_crash(
    anyio_backend: str, db_path: Path, tmp_path: Path
) -> None:
    """A message nested just shallow enough to parse reaches argument validation; every
    line gets one answer: a tool error for bad arguments, or a parse error."""
    async with raw_session(db_path, other(anyio_backend), tmp_path / "server.log") as wire:
        calls: list[tuple[int, bytes]] = []
        for depth in DEPTHS:
            for tool, arguments in (
                ("event_submit", {"text": "X", "role": "user"}),
                ("memory_recall", {"query": "q", "kinds": "X"}),
                ("memory_add", {"event_id": "e", "memories": [{"text": "t", "quote": "X"}]}),
                ("memory_status", {"unknown": "X"}),
            ):
                id_, request = wire.call(tool, **arguments)
                calls.append((id_, request.replace(b'"X"', nested(depth))))
        ping_id, ping = wire.request("ping")
        await wire.send(*(request for _, request in calls), ping)
        with anyio.fail_after(LIVENESS_SECONDS):
            await wire.response(ping_id)
        await wire.close_stdin()
        assert await wire.exit_status() == 0
    wire.assert_only_jsonrpc()
    answered = [id_ for id_, _ in calls if id_ in wire.responses]
    parse_errors = wire.null_id_errors()
    assert len(answered) + len(parse_errors) == len(calls)  # one answer per line
    assert set(parse_errors) == {types.PARSE_ERROR}  # the deepest lines
    assert len(answered) >= 4 * (DEPTHS.index(900) + 1)  # those up to 900 deep were read
    for id_ in answered:
        is_error, text = tool_result(wire.responses[id_])
        assert is_error
        assert text.startswith("invalid_input: bad arguments"), text


# --- 4. cancellation and pipelining -------------------------------------------------------


async def test_a_cancelled_request_gets_no_answer_and_its_write_still_commits(
    anyio_backend: str, tmp_path: Path
) -> None:
    db = tmp_path / "m.db"
    async with raw_session(db, other(anyio_backend), tmp_path / "server.log") as wire:
        write_id, write = wire.call(
            "event_submit", text="我养了一只猫 I have a cat", role="user", event_id="cat"
        )
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


async def test_thousands_of_pipelined_requests_are_all_answered(
    anyio_backend: str, tmp_path: Path
) -> None:
    """More requests at once than the server runs at once: it reads on as calls finish."""
    db = tmp_path / "m.db"
    async with raw_session(db, other(anyio_backend), tmp_path / "server.log") as wire:
        calls = [
            wire.call("event_submit", text=f"第{n}条 note {n}", role="user", event_id=f"p-{n}")
            for n in range(2000)
        ]
        await wire.send(*(request for _, request in calls))
        for id_, _ in calls:
            assert tool_result(await wire.response(id_))[0] is False
        await wire.close_stdin()
        assert await wire.exit_status() == 0
    async with default_scope(db) as scope:
        status = await scope.status()
    assert sum(status.events.values()) == 2000
