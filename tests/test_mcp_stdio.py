"""``amem serve``'s stdio: stdout carries JSON-RPC and nothing else, end of input ends the
server once its requests are answered, stdin and stdout may be pipes, files or a terminal,
and whatever its client does on the pipes (a message too large, sending without reading
stdout, never reading stderr) the server stays up, answers and stays bounded. The clients
and backends: ``mcp_client``."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from mcp import types
from mcp_client import (
    INITIALIZED,
    LIVENESS_SECONDS,
    MARKER,
    PERSONA,
    PROJECT,
    SPEC_ARGS,
    TOOLS_LIST_MAX_BYTES,
    count_events,
    default_scope,
    handshake,
    initialize,
    integrity,
    line,
    other,
    raw_server,
    raw_session,
    serve_args,
    server_backends,
    tool_result,
    wait_for_events,
)

import amem
from amem.search.text import STOP_WORDS
from amem.server.session import EXIT_SECONDS
from amem.server.stdio import MAX_LINE_BYTES, MAX_WAITING_BYTES

pytestmark = pytest.mark.anyio


def unused_port() -> int:
    """A local port nothing listens on (connections to it are refused)."""
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def peak_rss(pid: int) -> int:
    """The process's peak resident memory so far, in bytes (Linux: VmHWM)."""
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmHWM:"):
            return int(row.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc")


# --- 1. stdout is the wire ----------------------------------------------------------------


@server_backends
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
    async with default_scope(db) as scope:  # something to find
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
        assert [item["id"] for item in json.loads(text)["items"]] == ["seed"]  # a raw message
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
        assert (await wire.response(unknown_tool_id))["error"]["code"] == types.INVALID_PARAMS
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


# --- 2. stdin EOF ends the server ---------------------------------------------------------

BURST = 200


def burst_text(n: int) -> str:
    return f"burst {n}: 写入风暴中的第{n}条消息。" + "记忆" * (n % 50) + " payload" * (n % 30)


@server_backends
async def test_stdin_eof_mid_burst_exits_cleanly(
    anyio_backend: str, server_backend: str, tmp_path: Path
) -> None:
    db = tmp_path / "m.db"
    async with raw_session(db, server_backend, tmp_path / "server.log") as wire:
        requests = {
            wire.call(
                "event_submit",
                text=burst_text(n),
                role="user",
                event_id=f"burst-{n:03d}",
                session="burst",
            ): n
            for n in range(BURST)
        }
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
    async with default_scope(db) as scope:
        for event_id, seq in acked.items():
            page = await scope.read(event_id, limit=100_000)
            assert page.event.seq == seq
            assert page.text == burst_text(int(event_id.removeprefix("burst-")))
        status = await scope.status()
        assert sum(status.events.values()) == BURST
    assert integrity(db) == [("ok",)]


LONG_EVENTS = 200
LONG_CHARS = 99_000
SLOW_RECALLS = 240
"""Recalls in flight at end of input, each over every long event: minutes of work for one
reader at 2 seconds a recall (amem before issue 27)."""
VOCABULARY = [f"{a}{b}" for a in "bcdfghklmnprstvz" for b in "aeiou" if f"{a}{b}" not in STOP_WORDS]
"""Short words, so that a long event holds many tokens, and each of them many times."""


def words(n: int) -> str:
    """The ``n``-th query: four words of the vocabulary, held by every long event."""
    return " ".join(VOCABULARY[(7 * n + k) % len(VOCABULARY)] for k in range(4))


@pytest.fixture(scope="session")
def long_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed database whose server scope holds ``LONG_EVENTS`` events of ``LONG_CHARS``
    characters (built once; each test copies it)."""
    path = tmp_path_factory.mktemp("long") / "long.db"
    rng = random.Random(27)

    async def build() -> None:
        async with amem.open(path, settings=amem.Settings()) as memory:
            scope = memory.scope(PERSONA, PROJECT)
            for n in range(LONG_EVENTS):
                words = " ".join(rng.choices(VOCABULARY, k=LONG_CHARS // 3))
                await scope.submit_event(words[:LONG_CHARS], role="user", event_id=f"long-{n}")

    anyio.run(build)
    return path


async def test_serve_exits_within_its_bound_with_slow_reads_in_flight(
    anyio_backend: str, long_store: Path, tmp_path: Path
) -> None:
    """Stdin closes with minutes of recalls queued for one reader and writes among them: the
    server exits within ``EXIT_SECONDS``, every request answered (a recall it stopped with
    ``closed``), every acknowledged write in an intact file."""
    db = tmp_path / "m.db"
    shutil.copy(long_store, db)
    env = {"AMEM_READERS": "1"}
    async with raw_server(db, other(anyio_backend), tmp_path / "server.log", env=env) as wire:
        await handshake(wire)
        writes = [
            wire.call(
                "event_submit", text=f"written among the reads {n}", role="user", event_id=f"w-{n}"
            )
            for n in range(SLOW_RECALLS // 10)
        ]
        reads = [wire.call("memory_recall", query=words(n)) for n in range(SLOW_RECALLS)]
        await wire.send(
            *(
                request
                for pair in zip(reads[::10], writes, strict=True)
                for request in (pair[0][1], pair[1][1])
            )
        )
        await wire.send(*(request for n, (_, request) in enumerate(reads) if n % 10))
        await wire.response(writes[0][0])
        await wire.close_stdin()
        with anyio.fail_after(EXIT_SECONDS):  # the documented bound; slow reads or not
            assert await wire.process.wait() == 0
    wire.assert_only_jsonrpc()
    for id_, _ in reads:
        is_error, text = tool_result(wire.responses[id_])  # every one answered
        assert not is_error or text.startswith("closed: "), text
    acked = []
    for id_, _ in writes:
        is_error, text = tool_result(wire.responses[id_])
        assert not is_error, text
        acked.append(json.loads(text)["event_id"])
    assert integrity(db) == [("ok",)]
    async with default_scope(db) as scope:
        for event_id in acked:
            assert (await scope.read(event_id)).text.startswith("written among the reads")


# --- 3. files and terminals ---------------------------------------------------------------


def test_requests_from_a_file_are_answered_too(tmp_path: Path) -> None:
    """Requests in a file (stdin and stdout regular files, not pipes) are all answered,
    those still running at end of input included."""
    requests = tmp_path / "requests.jsonl"
    answers = tmp_path / "answers.jsonl"
    for lines, mode in ((HELLO + SUBMIT_HANGZHOU, "wb"), (HELLO + RECALL_HANGZHOU, "ab")):
        requests.write_bytes(lines)
        with requests.open("rb") as stdin, answers.open(mode) as stdout:
            command = [sys.executable, *serve_args(tmp_path / "m.db", "asyncio")]
            run = {"stdin": stdin, "stdout": stdout, "stderr": subprocess.DEVNULL}
            subprocess.run(command, **run, timeout=60, check=True)
    replies = {m["id"]: m for m in map(json.loads, answers.read_text().splitlines())}
    assert sorted(replies) == [1, 2, 3]
    assert_hangzhou_stored_and_found(replies)


HELLO = (
    line(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": types.LATEST_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "line-test", "version": "0"},
            },
        }
    )
    + INITIALIZED
)
SUBMIT_HANGZHOU = line(
    {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": "event_submit",
            "arguments": {"text": "我住在杭州", "role": "user"},
        },
    }
)
RECALL_HANGZHOU = line(
    {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {
            "name": "memory_recall",
            "arguments": {"query": "杭州"},
        },
    }
)


def assert_hangzhou_stored_and_found(replies: dict[Any, dict[str, Any]]) -> None:
    """Answers 2 and 3 to ``SUBMIT_HANGZHOU`` and ``RECALL_HANGZHOU``: stored, then found."""
    assert tool_result(replies[2])[0] is False
    is_error, text = tool_result(replies[3])
    assert not is_error
    assert [item["text"] for item in json.loads(text)["items"]] == ["我住在杭州"]


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
            stdin=terminal,
            stdout=terminal,
            stderr=log,
        )
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


# --- 4. a message too large ---------------------------------------------------------------


async def test_a_message_too_large_is_refused_and_the_server_goes_on(
    anyio_backend: str, tmp_path: Path
) -> None:
    async with raw_server(tmp_path / "m.db", other(anyio_backend), tmp_path / "s.log") as wire:
        huge = b'{"jsonrpc": "2.0", "id": 4242, "method": "ping", "params": {"x": "'
        huge += b"y" * MAX_LINE_BYTES + b'"}}\n'
        ping_id, ping = wire.request("ping")
        await wire.send(huge, ping)
        await wire.response(ping_id)
        await wire.close_stdin()
        assert await wire.exit_status() == 0
    assert 4242 not in wire.responses  # its id was never read
    assert wire.null_id_errors() == [types.INVALID_REQUEST]


# --- 5. a client that does not read -------------------------------------------------------


async def test_a_client_that_stops_reading_does_not_crash_the_server(
    anyio_backend: str, tmp_path: Path
) -> None:
    """The host closes its end of stdout and then stdin: answers are dropped, writes that
    were acknowledged or not stay whole, and the server exits cleanly."""
    db = tmp_path / "m.db"
    log = tmp_path / "server.log"
    async with raw_session(db, other(anyio_backend), log) as wire:
        assert wire.process.stdout is not None
        await wire.process.stdout.aclose()  # nobody reads the answers any more
        await wire.send(
            *(
                wire.call("event_submit", text=f"note {n}", role="user", event_id=f"n-{n}")[1]
                for n in range(50)
            )
        )
        await wire.close_stdin()
        assert await wire.exit_status() == 0
    assert "Traceback" not in log.read_text()
    assert integrity(db) == [("ok",)]
    async with default_scope(db) as scope:
        status = await scope.status()
    assert sum(status.events.values()) == 50  # every request read was carried out


LIST_ANSWER_BYTES = TOOLS_LIST_MAX_BYTES
"""At most what one ``tools/list`` answer takes (a 50-byte request): the cheapest flood."""


QUICK_STALL = ("--stall-seconds", "1")
"""A client that reads nothing is given up on after 1 s instead of 10: the same waiting and
dropping, sooner."""


async def test_a_client_that_sends_without_reading_is_slowed_not_fed_memory(
    anyio_backend: str, db_path: Path, tmp_path: Path
) -> None:
    """20,000 ``tools/list`` (over 100 MB of answers) and 20 writes from a client that never
    reads stdout: the server reads on only as answers leave, so its memory stays near
    ``MAX_WAITING_BYTES``; a client that takes nothing for a while has its answers dropped,
    every request is still carried out, and the server exits when stdin closes."""
    log = tmp_path / "server.log"
    async with raw_server(
        db_path, other(anyio_backend), log, read_stdout=False, extra_args=QUICK_STALL
    ) as wire:
        warm_up = wire.call("event_submit", text="热身", role="user", event_id="w")[1]
        await wire.send(warm_up)  # jieba and the database open: part of the baseline
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
    async with raw_server(
        db_path, other(anyio_backend), log, read_stdout=False, extra_args=QUICK_STALL
    ) as wire:
        requests = [wire.request("tools/list")[1] for _ in range(100)]
        requests += [
            wire.call("event_submit", text=f"note {n}", role="user", event_id=f"{n}")[1]
            for n in range(50)
        ]
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


# --- 6. a host that does not read stderr --------------------------------------------------


async def read_into(stream: anyio.abc.ByteReceiveStream, into: bytearray) -> None:
    async for chunk in stream:
        into += chunk


async def test_a_host_that_never_reads_stderr_still_gets_answers(
    anyio_backend: str, db_path: Path
) -> None:
    """5,000 malformed lines log a warning each, far more than a stderr pipe holds: the log
    drops what does not fit rather than block the server, and says how much it dropped
    once stderr is read again."""
    async with raw_session(db_path, other(anyio_backend), None) as wire:
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
    assert wire.null_id_errors() == [types.PARSE_ERROR] * 5_001
    assert b"log lines dropped" in stderr, bytes(stderr[-2000:])
