"""``amem serve``: the MCP stdio server. One ``Memory`` per process, opened by
``tools.open_tools`` once ``initialize`` is answered; every tool of ``tools.table`` is
listed and called through the JSON-RPC session (``session``). stdout is the JSON-RPC wire
and nothing else: ``serve`` points file descriptor 1 at stderr before anything can print,
and gives the transport a private copy of the real stdout.

This module and the session import neither pydantic, numpy nor the database: a client's
``initialize`` is answered while they load.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ..limits import STALL_SECONDS
from ..tools.instructions import INSTRUCTIONS
from ..version import __version__
from . import session
from .logs import StderrHandler

if TYPE_CHECKING:
    from ..config import Settings

SERVER = session.ServerInfo("amem", __version__, INSTRUCTIONS)

Configure = Callable[[], tuple[Path | str, "Settings"]]
"""Gives the database (a file's path or a PostgreSQL URL) and the settings (reading them
loads pydantic)."""


async def serve(configure: Configure, stall_seconds: float = STALL_SECONDS) -> None:
    """Speak MCP on stdin/stdout until stdin closes; stdout carries JSON-RPC only. A
    failure to configure or open the database is raised as itself."""
    wire = protect_stdout()
    backend = partial(tools, configure)
    try:
        await session.serve(SERVER, backend, sys.stdin.fileno(), wire.fileno(), stall_seconds)
    except BaseExceptionGroup as group:  # task groups' (nested): one failure, as itself
        error: BaseException = group
        while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
            error = error.exceptions[0]
        if isinstance(error, BaseExceptionGroup):
            raise
        raise error from None


@asynccontextmanager
async def tools(configure: Configure) -> AsyncIterator[session.Tools]:
    from .tools import open_tools  # the database, pydantic and numpy load here

    async with open_tools(*configure()) as ready:
        yield ready


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
