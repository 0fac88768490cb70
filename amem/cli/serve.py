"""``serve``: the MCP server on stdin/stdout (``amem.server``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..limits import STALL_SECONDS
from .common import Command, settings_for
from .options import database_of, seconds

if TYPE_CHECKING:
    from ..config import Settings


async def run_serve(args: argparse.Namespace) -> int:
    import logging

    from ..server import serve

    serve.configure_logging(getattr(logging, args.log_level))

    def configure() -> tuple[Path | str, Settings]:  # once initialize is answered: pydantic loads
        settings = settings_for(args)
        return database_of(args, settings), settings

    await serve.serve(configure, args.stall_seconds)
    return 0


def add_commands(command: Command) -> None:
    serve = command(
        "serve",
        run_serve,
        "run the MCP server on stdin/stdout",
        (
            "Speak MCP over stdio for one host (Claude Desktop, Claude Code, Cursor, any MCP "
            "client). stdout carries JSON-RPC only; logs go to stderr. --persona and --project "
            "set the scope tools use when a call gives none."
        ),
    )
    serve.add_argument(
        "--log-level",
        default="WARNING",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="stderr log level",
    )
    serve.add_argument(
        "--stall-seconds",
        type=seconds(0, STALL_SECONDS, above=True),
        default=STALL_SECONDS,
        metavar="S",
        help=(
            f"drop the answers of a host that reads none for S seconds (0 < S <= "
            f"{STALL_SECONDS:g}, the default)"
        ),
    )
