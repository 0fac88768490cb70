"""``amem serve`` stays up, answers and stays bounded whatever its client does on the pipes
(issue 13): a line nested too deep to parse, a client that sends without reading stdout,
a host that never reads stderr.

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

from amem.server.stdio import MAX_WAITING_BYTES

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


async def wait_for_events(db: Path, count: int) -> None:
    """Return once ``count`` events are committed (the server read every line before them)."""
    with anyio.fail_after(LIVENESS_SECONDS):
        while count_events(db) < count:
            await anyio.sleep(0.05)


def peak_rss(pid: int) -> int:
    """The process's peak resident memory so far, in bytes (Linux: VmHWM)."""
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmHWM:"):
            return int(row.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc")


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


# --- 4. a client that does not read stdout ----------------------------------------------------

LIST_ANSWER_BYTES = 16_000
"""About what one ``tools/list`` answer takes (a 50-byte request): the cheapest flood."""


async def test_a_client_that_sends_without_reading_is_slowed_not_fed_memory(
    anyio_backend: str, db_path: Path, tmp_path: Path
) -> None:
    """20,000 ``tools/list`` (over 300 MB of answers) and 20 writes from a client that never
    reads stdout: the server reads on only as answers leave, so its memory stays near
    ``MAX_WAITING_BYTES``; a client that takes nothing for a while has its answers dropped,
    every request is still carried out, and the server exits when stdin closes."""
    log = tmp_path / "server.log"
    async with raw_server(db_path, other(anyio_backend), log, read_stdout=False) as wire:
        warm_up = wire.call("event_submit", text="热身", role="user", event_id="w")[1]
        await wire.send(warm_up)  # stored once jieba is loaded (70 MB): part of the baseline
        await wait_for_events(db_path, 1)
        baseline = peak_rss(wire.process.pid)
        flood: list[bytes] = []
        for n in range(20):
            flood += [wire.request("tools/list")[1] for _ in range(1_000)]
            flood.append(wire.call("event_submit", text=f"n {n}", role="user", event_id=f"{n}")[1])
        with anyio.fail_after(LIVENESS_SECONDS):
            await wire.send(*flood)  # slowed down while the server holds reading back
        await wait_for_events(db_path, 21)  # the last line is read: the flood has passed
        growth = peak_rss(wire.process.pid) - baseline
        assert growth < 16 * MAX_WAITING_BYTES, f"the server grew by {growth >> 20} MiB"
        await wire.close_stdin()
        with anyio.fail_after(LIVENESS_SECONDS):
            assert await wire.process.wait() == 0
    assert count_events(db_path) == 21
    assert "the client read no answers" in log.read_text()  # it was waited for, then dropped


async def test_a_client_that_never_reads_does_not_keep_the_server_alive_after_stdin_closes(
    anyio_backend: str, db_path: Path, tmp_path: Path
) -> None:
    """More answers than a pipe holds, never read, then stdin closes: the server waits a
    bounded time for the client, drops the answers and exits; the writes stay committed."""
    log = tmp_path / "server.log"
    async with raw_server(db_path, other(anyio_backend), log, read_stdout=False) as wire:
        requests = [wire.request("tools/list")[1] for _ in range(100)]
        requests += [wire.call("event_submit", text=f"note {n}", role="user", event_id=f"{n}")[1]
                     for n in range(50)]  # fmt: skip
        await wire.send(*requests)
        await wire.close_stdin()
        with anyio.fail_after(LIVENESS_SECONDS):
            assert await wire.process.wait() == 0
    assert "Traceback" not in log.read_text()
    assert count_events(db_path) == 50


async def test_a_client_that_pauses_reading_still_gets_every_answer(
    anyio_backend: str, db_path: Path, tmp_path: Path
) -> None:
    """Answers past ``MAX_WAITING_BYTES``, read only after a pause: the server held reading
    back meanwhile, and nothing is lost."""
    async with raw_server(
        db_path, other(anyio_backend), tmp_path / "server.log", read_stdout=False
    ) as wire:
        lists = [
            wire.request("tools/list") for _ in range(3 * MAX_WAITING_BYTES // LIST_ANSWER_BYTES)
        ]
        first = len(lists) // 4  # answered within the limit; then the marker is read
        marker = wire.call("event_submit", text="read so far", role="user", event_id="m")[1]
        requests = [request for _, request in lists]
        async with anyio.create_task_group() as tg:
            tg.start_soon(wire.send, *requests[:first], marker, *requests[first:])
            await wait_for_events(db_path, 1)
            await anyio.sleep(0.5)  # a short pause in reading: the server reaches its limit
            tg.start_soon(wire.read_all)
            with anyio.fail_after(LIVENESS_SECONDS):
                for id_, _ in lists:
                    assert "result" in await wire.response(id_)
            await wire.close_stdin()
            assert await wire.exit_status() == 0
    wire.assert_only_jsonrpc()


# --- 5. a host that does not read stderr ------------------------------------------------------


async def read_into(stream: anyio.abc.ByteReceiveStream, into: bytearray) -> None:
    async for chunk in stream:
        into += chunk


async def test_a_host_that_never_reads_stderr_still_gets_answers(
    anyio_backend: str, db_path: Path
) -> None:
    """5,000 malformed lines log a warning each, far more than a stderr pipe holds: the log
    drops what does not fit rather than block the server, and says how much it dropped
    once stderr is read again."""
    async with raw_server(db_path, other(anyio_backend), None) as wire:
        await handshake(wire)
        ping_id, ping = wire.request("ping")
        submit_id, submit = wire.call("event_submit", text="still here", role="user")
        await wire.send(*(b"not json %d\n" % n for n in range(5_000)), ping, submit)
        with anyio.fail_after(LIVENESS_SECONDS):
            await wire.response(ping_id)
            assert tool_result(await wire.response(submit_id))[0] is False
        stderr = bytearray()
        assert wire.process.stderr is not None
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_into, wire.process.stderr, stderr)  # the host reads at last
            await wire.send(b"not json either\n")
            await wire.close_stdin()
            with anyio.fail_after(LIVENESS_SECONDS):
                assert await wire.process.wait() == 0
    wire.assert_only_jsonrpc()
    assert null_id_errors(wire.lines) == [PARSE_ERROR] * 5_001
    assert b"log lines dropped" in stderr, bytes(stderr[-2000:])
