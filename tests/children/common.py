"""Shared by the child scripts and the tests that start them.

The children import this module as a sibling (their directory is on ``sys.path``); the
tests load it by path (``_children_common`` in each test). Everything an event carries is a
pure function of its ID, so a parent can check any stored row against exactly what a child
would have written.

Child protocol (stdout, one line each, flushed at once):

- ``ready``: imports done; the child then waits for ``go`` on stdin before opening the file
  (an empty stdin makes it exit without touching the database);
- ``ack ID SEQ DUP``: ``submit_event`` for ID returned, with receipt seq and duplicate flag;
- ``error CODE MESSAGE``: an exception raised by ``submit_event`` (counted, then carried on);
- ``mark NAME ARGS...``: the child reached a named point (``Child.marked`` waits for it),
  e.g. a batch of a reindex stored;
- ``summary JSON``: the last line of a child that runs to completion.

The parent side (``spawner``, ``Child``) starts children with ``sys.executable``, parses that
protocol as it arrives, and kills and reaps whatever is still running when its block ends.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from subprocess import PIPE
from typing import IO, Any

import anyio
from anyio.abc import Process, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream

PERSONA = "assistant"
PROJECT = "durability"


def payload(event_id: str) -> str:
    """The exact text stored for ``event_id``: repeated, sometimes Chinese, sometimes long."""
    h = zlib.crc32(event_id.encode())
    repeat = 1 + h % 40
    if h % 61 == 0:  # now and then a long event, tens of kilobytes
        repeat *= 40
    if h % 3 == 0:
        unit = f"{event_id} 的记忆：我搬到杭州了，明天去西湖。"
    else:
        unit = f"payload of {event_id} "
    return unit * repeat


def brief(event_id: str) -> str:
    """A short text for ``event_id``: one embedding chunk, so one request per batch."""
    return f"{event_id}：我住在杭州，喜欢喝龙井茶。"


def entry_of(event_id: str) -> dict[str, str]:
    """``event_id`` as ``host_ingest`` takes it: ``brief`` text, role and session."""
    entry = {"event_id": event_id, "text": brief(event_id), "role": role(event_id)}
    return entry | {"session": session(event_id)}


def memory_of(event_id: str) -> dict[str, str]:
    """A memory draft quoting ``event_id`` (the ID is in ``brief``'s text), with the basis
    its role allows."""
    user = role(event_id) == "user"
    return {
        "text": f"memory of {event_id}",
        "quote": event_id,
        "kind": "episode" if user else "observation",
        "basis": "user_statement" if user else "assistant_expression",
    }


def role(event_id: str) -> str:
    return "assistant" if zlib.crc32(event_id.encode()) % 4 == 0 else "user"


def session(event_id: str) -> str:
    """Events of one child task share a session: the ID up to its last ``-``."""
    return event_id.rsplit("-", 1)[0]


def emit(line: str) -> None:
    """Write one protocol line to stdout and flush it (one write: lines never interleave)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def wait_for_go() -> bool:
    """Announce readiness and block until the parent says ``go`` (False on EOF)."""
    emit("ready")
    return sys.stdin.readline().strip() == "go"


def child_args(argv: list[str]) -> tuple[str, str, list[str]]:
    """``BACKEND DB_PATH REST...``: the anyio backend, the database file, the rest."""
    if len(argv) < 3 or argv[1] not in ("asyncio", "trio"):
        raise SystemExit(f"usage: {argv[0]} asyncio|trio DB_PATH ...")
    return argv[1], argv[2], argv[3:]


# --- parent side: used by the tests that start the children ---------------------------------

CHILDREN = Path(__file__).resolve().parent


class Child:
    """One child script, started by a ``Spawner``; its stdout is parsed as it arrives."""

    def __init__(self, name: str, process: Process, stderr_path: Path) -> None:
        self.name = name
        self.process = process
        self.stderr_path = stderr_path
        self.ready = anyio.Event()
        self.acked_or_gone = anyio.Event()
        """Set at the first ``ack`` line, or when stdout closes without one."""
        self.eof = anyio.Event()
        self.acks: list[tuple[str, int, bool]] = []
        self.marks: list[list[str]] = []
        """``[NAME, ARGS...]`` of every ``mark`` line, in order."""
        self._news = anyio.Event()
        """Set (and replaced) at every ``mark`` line, and when stdout closes."""
        self.errors: list[str] = []
        self.summary: dict[str, Any] | None = None
        self.unexpected: list[str] = []
        self.torn_tail = b""
        """Bytes after the last newline when stdout closed (a line cut by the kill)."""
        self.returncode: int | None = None

    async def go(self) -> None:
        """Wait until the child has imported everything, then let it open the database."""
        await self.ready.wait()
        await self.send("go")

    async def send(self, line: str) -> None:
        """One line to the child's stdin."""
        assert self.process.stdin is not None
        await self.process.stdin.send(f"{line}\n".encode())

    async def marked(self, name: str, times: int = 1) -> list[str] | None:
        """Wait for the ``times``-th ``mark NAME`` line and return its arguments; None if
        stdout closed before it."""
        while True:
            found = [args for mark, *args in self.marks if mark == name]
            if len(found) >= times:
                return found[times - 1]
            if self.eof.is_set():
                return None
            await self._news.wait()

    def kill(self) -> None:
        """SIGKILL: no cleanup, no atexit, no flush; exactly a crash."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)

    async def finish(self) -> int:
        """Read stdout to its end, reap the process and return its exit status."""
        await self.eof.wait()
        self.returncode = await self.process.wait()
        await self.process.aclose()
        return self.returncode

    def describe(self) -> str:
        stderr = self.stderr_path.read_text(errors="replace")[-4000:]
        return (
            f"child {self.name}: exit {self.returncode}, {len(self.acks)} acks, "
            f"errors {self.errors[:5]}, unexpected lines {self.unexpected[:5]}, "
            f"stderr tail:\n{stderr}"
        )

    async def _pump(self) -> None:
        assert self.process.stdout is not None
        stream = BufferedByteReceiveStream(self.process.stdout)
        try:
            while True:
                try:
                    line = await stream.receive_until(b"\n", 1 << 20)
                except anyio.IncompleteRead:
                    self.torn_tail = bytes(stream.buffer)
                    return
                self._take(line.decode())
        finally:
            self.acked_or_gone.set()
            self.eof.set()
            self._news.set()

    def _take(self, line: str) -> None:
        kind, _, rest = line.partition(" ")
        if kind == "ack":
            event_id, seq, duplicate = rest.split(" ")
            self.acks.append((event_id, int(seq), duplicate == "1"))
            self.acked_or_gone.set()
        elif kind == "error":
            self.errors.append(rest)
        elif kind == "mark":
            self.marks.append(rest.split(" "))
            self._news.set()
            self._news = anyio.Event()
        elif kind == "summary":
            self.summary = json.loads(rest)
        elif kind == "ready":
            self.ready.set()
        else:
            self.unexpected.append(line)


class Spawner:
    """Starts child scripts under one backend; ``spawner`` kills and reaps what is left."""

    def __init__(self, tg: TaskGroup, backend: str, log_dir: Path) -> None:
        self._tg = tg
        self._backend = backend
        self._log_dir = log_dir
        self._children: list[Child] = []

    async def start(self, script: str, db_path: Path | str, *args: object) -> Child:
        name = f"{len(self._children)}-{Path(script).stem}"
        stderr_path = self._log_dir / f"child-{name}.stderr"
        env = {k: v for k, v in os.environ.items() if not k.startswith("AMEM_")}
        command = [sys.executable, str(CHILDREN / script), self._backend, str(db_path)]
        with _open_log(stderr_path) as stderr:
            process = await anyio.open_process(
                [*command, *map(str, args)], stdin=PIPE, stdout=PIPE, stderr=stderr, env=env
            )
        child = Child(name, process, stderr_path)
        self._children.append(child)
        self._tg.start_soon(child._pump)
        return child

    async def reap(self) -> None:
        for child in self._children:
            if child.returncode is None:
                child.kill()
                await child.finish()


@asynccontextmanager
async def spawner(backend: str, log_dir: Path) -> AsyncIterator[Spawner]:
    """A ``Spawner`` whose children are all dead and reaped when the block is left."""
    async with anyio.create_task_group() as tg:
        spawn = Spawner(tg, backend, log_dir)
        try:
            yield spawn
        finally:
            with anyio.CancelScope(shield=True):
                await spawn.reap()


def _open_log(path: Path) -> IO[bytes]:
    return path.open("wb")
