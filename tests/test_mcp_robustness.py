"""``amem serve`` stays up, answers and stays bounded whatever its client does on the pipes
(issue 13): a line nested too deep to parse.

The server is a real subprocess driven with raw JSON-RPC lines (the helpers of
``test_mcp.py``). Each test runs on both backends of the test, with the server on the
other one, so both server backends are covered. Timeouts here bound liveness only.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import anyio
import pytest
from mcp.types import PARSE_ERROR
from test_mcp import handshake, other, raw_server, tool_result

pytestmark = pytest.mark.anyio

LIVENESS_SECONDS = 60
"""Generous: how long a test waits for an answer or an exit before it calls the server hung
(under the per-test timeout, so a hung server fails its test, not the run)."""


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def null_id_errors(lines: list[bytes]) -> list[int]:
    """The error codes of the answers with id null (a line that could not be read as a request)."""
    return [message["error"]["code"] for message in map(json.loads, lines) if message["id"] is None]


def count_events(db: Path) -> int:
    """Events committed so far (0 while the server has yet to create the database)."""
    if not db.exists():
        return 0
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        try:
            return int(conn.execute("select count(*) from events").fetchone()[0])
        except sqlite3.OperationalError:  # no schema yet
            return 0


# --- 3. a line nested too deep ---------------------------------------------------------------


async def test_a_line_nested_too_deep_is_a_parse_error_and_every_other_request_is_answered(
    anyio_backend: str, db_path: Path, tmp_path: Path
) -> None:
    async with raw_server(db_path, other(anyio_backend), tmp_path / "server.log") as wire:
        await handshake(wire)
        writes = [wire.call("event_submit", text=f"note {n}", role="user", event_id=f"d-{n}")
                  for n in range(300)]  # fmt: skip
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
    assert null_id_errors(wire.lines) == [PARSE_ERROR, PARSE_ERROR]
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
    async with raw_server(db_path, other(anyio_backend), tmp_path / "server.log") as wire:
        await handshake(wire)
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
    parse_errors = null_id_errors(wire.lines)
    assert len(answered) + len(parse_errors) == len(calls)  # one answer per line
    assert set(parse_errors) == {PARSE_ERROR}  # the deepest lines
    assert len(answered) >= 4 * (DEPTHS.index(900) + 1)  # those up to 900 deep were read
    for id_ in answered:
        is_error, text = tool_result(wire.responses[id_])
        assert is_error
        assert text.startswith("invalid_input: bad arguments"), text
