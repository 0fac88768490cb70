"""The ``amem`` command line. Output for people goes to stdout; logs and progress to stderr."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import anyio

from . import __version__
from .config import Settings
from .errors import AmemError
from .memory import open as open_memory
from .sample import SAMPLE_CONVERSATION, SAMPLE_PERSONA, SAMPLE_PROJECT, SAMPLE_SESSION

BACKENDS = ("asyncio", "trio")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``amem`` and ``python -m amem``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if args.backend == "trio" and importlib.util.find_spec("trio") is None:
        print(
            "amem: error: --backend trio needs trio installed (pip install trio)", file=sys.stderr
        )
        return 2
    try:
        result: int = anyio.run(args.run, args, backend=args.backend)
    except AmemError as exc:
        print(f"amem: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `amem demo | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="amem",
        description="Long-term memory for LLM agents, in one local SQLite file.",
    )
    parser.add_argument("--version", action="version", version=f"amem {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="store a small bilingual sample conversation in a new database and show it back",
        description=(
            "Store a small bilingual sample conversation in a fresh local database (no API "
            "key needed) and print what was stored. The database is kept so you can explore it."
        ),
    )
    demo.add_argument(
        "--db",
        type=Path,
        help="new database file to create (default: a new file in a temporary directory)",
    )
    demo.set_defaults(run=run_demo)

    for sub in commands.choices.values():
        sub.add_argument(
            "--backend", choices=BACKENDS, default="asyncio", help="event loop (default: asyncio)"
        )
    return parser


async def run_demo(args: argparse.Namespace) -> int:
    path: Path = args.db or Path(tempfile.mkdtemp(prefix="amem-demo-")) / "demo.db"
    if await anyio.Path(path).exists():
        print(
            f"amem: error: target_exists: {path} already exists; choose a new file", file=sys.stderr
        )
        return 1
    async with open_memory(path, settings=Settings()) as mem:
        scope = mem.scope(persona=SAMPLE_PERSONA, project=SAMPLE_PROJECT)
        for event_id, role, occurred_at, text in SAMPLE_CONVERSATION:
            await scope.submit_event(
                text, role=role, event_id=event_id, session=SAMPLE_SESSION, occurred_at=occurred_at
            )
        persona = await mem.persona(SAMPLE_PERSONA)
        print(f"Stored {len(SAMPLE_CONVERSATION)} events in {path}")
        print(f"scope: persona={scope.persona} project={scope.project} session={SAMPLE_SESSION}")
        print(f"persona v{persona.version}: {persona.text}\n")
        for event_id, *_ in SAMPLE_CONVERSATION:
            page = await scope.read(event_id)
            event = page.event
            when = event.occurred_at.strftime("%Y-%m-%d %H:%M UTC")
            print(f"#{event.seq:<3} {when}  {event.role:<9} {page.text}")
    return 0
