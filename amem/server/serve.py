"""``amem serve``: the MCP stdio server. One ``Memory`` per process, owned by ``serve``;
every tool of ``tools.table`` is listed and called through the JSON-RPC session
(``session``), each call answered as MCP's ``CallToolResult``. stdout is the JSON-RPC wire
and nothing else: ``serve`` points file descriptor 1 at stderr before anything can print,
and gives the transport a private copy of the real stdout.
"""

from __future__ import annotations

import logging
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from ..config import Settings
from ..errors import AmemError
from ..memory import open as open_memory
from ..tools.table import INSTRUCTIONS, TOOLS, Served, encode, run, tool_schema
from ..version import __version__
from . import session
from .logs import StderrHandler
from .session import ServerInfo


async def call(served: Served, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """One call of the tool ``name`` (the session answers unknown names itself), answered
    as a ``CallToolResult`` in JSON."""
    try:
        result = await run(served, TOOLS[name], arguments)
    except AmemError as error:
        return tool_error(error)
    return tool_result(encode(result))


def tool_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def tool_error(error: AmemError) -> dict[str, Any]:
    return tool_result(f"{error.code}: {error.message}", is_error=True)


async def serve(path: Path, settings: Settings) -> None:
    """Speak MCP on stdin/stdout until stdin closes; stdout carries JSON-RPC only."""
    wire = protect_stdout()
    async with open_memory(path, settings=settings) as memory:
        served = Served(memory, settings.default_persona, settings.default_project)
        tools = [tool_schema(tool) for tool in TOOLS.values()]
        server = ServerInfo(
            "amem", __version__, INSTRUCTIONS, tools, partial(call, served), memory.stop_reads
        )
        await session.serve(server, sys.stdin.fileno(), wire.fileno())


def protect_stdout() -> BinaryIO:
    """Keep a private handle on the real stdout for the wire, and send fd 1 to stderr, so
    a stray print from any library (or C code) can never corrupt the JSON-RPC stream."""
    sys.stdout.flush()
    wire = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return wire


def configure_logging(level: int = logging.WARNING) -> None:
    """Bounded logs on stderr: warnings and errors, each message cut at 2,000 characters,
    written so that a host that never reads stderr cannot block the server."""
    handler = StderrHandler()
    handler.setFormatter(logging.Formatter("amem %(levelname)s %(name)s: %(message).2000s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpcore", "mcp", "jieba"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
