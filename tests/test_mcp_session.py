"""The MCP session answers before its tools are ready: ``amem serve`` answers
``initialize`` while the database and the tool table load, and the requests that come
meanwhile are answered once they have."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import clean_env

from amem.server import session
from amem.server.session import Tools

pytestmark = pytest.mark.anyio

SERVER = session.ServerInfo("amem", "0.0-test", "how to use the tools")


def request(id_: int, method: str, **params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}).encode()


def cancelled(id_: int) -> bytes:
    note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id_}}
    return json.dumps(note).encode()


class Pipes:
    """The session's stdin and stdout as real pipes, read and written as a client does."""

    def __init__(self) -> None:
        self.stdin_read, self.stdin_write = os.pipe()
        self.wire_read, self.wire_write = os.pipe()
        self._buffer = b""

    def send(self, *lines: bytes) -> None:
        os.write(self.stdin_write, b"".join(line + b"\n" for line in lines))

    def close_stdin(self) -> None:
        os.close(self.stdin_write)

    async def answer(self) -> dict[str, Any]:
        while b"\n" not in self._buffer:
            await anyio.wait_readable(self.wire_read)
            chunk = os.read(self.wire_read, 1 << 16)
            assert chunk, "the session closed its output"
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        return answer


async def test_initialize_and_ping_are_answered_before_the_tools_are_ready_and_the_rest_after(
    anyio_backend: str,
) -> None:
    release, opened, closed = anyio.Event(), [], []
    calls: list[tuple[str, Any]] = []

    async def call(name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
        calls.append((name, arguments))
        return {"content": [{"type": "text", "text": "done"}], "isError": False}

    @asynccontextmanager
    async def backend() -> AsyncIterator[Tools]:
        await release.wait()  # a database that takes its time to open
        opened.append(True)
        try:
            yield Tools([{"name": "event_submit"}], call, lambda: None)
        finally:
            closed.append(True)

    pipes = Pipes()
    async with anyio.create_task_group() as tg:
        tg.start_soon(session.serve, SERVER, backend, pipes.stdin_read, pipes.wire_write)
        pipes.send(
            request(1, "initialize", protocolVersion="2025-06-18"),
            request(2, "tools/list"),
            request(3, "tools/call", name="event_submit", arguments={"text": "hi"}),
            request(4, "tools/call", name="event_submit", arguments={"text": "cancelled"}),
            cancelled(4),
            request(5, "tools/call", name="no_such_tool"),
            request(6, "ping"),
        )
        greeting = await pipes.answer()
        assert greeting["id"] == 1
        assert greeting["result"]["instructions"] == "how to use the tools"
        assert greeting["result"]["protocolVersion"] == "2025-06-18"
        assert (await pipes.answer())["id"] == 6  # ping: the tools are still loading
        assert not opened
        release.set()
        answers = {a["id"]: a for a in [await pipes.answer() for _ in range(3)]}
        assert answers[2]["result"] == {"tools": [{"name": "event_submit"}]}
        assert answers[3]["result"]["content"][0]["text"] == "done"
        assert answers[5]["error"]["code"] == -32602
        pipes.close_stdin()
    assert closed == [True]
    # the cancelled call ran all the same (unanswered): a write it makes still commits
    assert sorted(arguments["text"] for _, arguments in calls) == ["cancelled", "hi"]
    os.close(pipes.wire_read)
    os.close(pipes.stdin_read)


async def test_a_backend_that_fails_to_open_ends_the_session_with_its_error(
    anyio_backend: str,
) -> None:
    @asynccontextmanager
    async def backend() -> AsyncIterator[Tools]:
        raise PermissionError("the database cannot be opened")
        yield  # pragma: no cover

    pipes = Pipes()
    pipes.send(request(1, "initialize", protocolVersion="2025-06-18"))
    with pytest.raises(BaseExceptionGroup) as raised:
        await session.serve(SERVER, backend, pipes.stdin_read, pipes.wire_write)
    assert raised.group_contains(PermissionError)
    assert (await pipes.answer())["id"] == 1
    for fd in (pipes.wire_read, pipes.wire_write, pipes.stdin_read, pipes.stdin_write):
        os.close(fd)


@pytest.mark.parametrize("greeted", [False, True])
def test_serve_with_bad_settings_says_why_and_exits_1_before_or_after_initialize(
    tmp_path: Path, greeted: bool
) -> None:
    """The settings are read once initialize is answered: their error is still the
    command's one line, whether the client got that far or not."""
    stdin = request(1, "initialize", protocolVersion="2025-06-18") + b"\n" if greeted else b""
    result = subprocess.run(
        [sys.executable, "-m", "amem", "serve", "--db", str(tmp_path / "m.db")],
        input=stdin,
        capture_output=True,
        env=clean_env({"AMEM_READERS": "many"}),
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.decode().startswith("amem: error: invalid_config: AMEM_* settings: ")
    assert b"Traceback" not in result.stderr
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [answer["id"] for answer in answers] == ([1] if greeted else [])
    assert not (tmp_path / "m.db").exists()
