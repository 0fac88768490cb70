"""The ``amem`` command line. Results go to stdout; errors, logs and progress to stderr.

Every command takes ``--db`` (a SQLite file's path or a PostgreSQL URL; else ``$AMEM_DB``,
else the platform data directory), ``--persona``/``--project`` (else the configured
defaults) and ``--backend``. ``--json`` prints results as JSON instead of text.

Each module of this package declares its commands' parsers beside their handlers
(``add_commands``); this one builds the parser from them and runs the handler a command
line names. Building the parser imports nothing heavy, so ``--help`` and ``--version``
answer at once; a handler imports the API when it runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence

from ..errors import AmemError
from ..version import __version__
from . import (
    archive,
    browse,
    claude_code,
    demo,
    events,
    ingest,
    inspect,
    people,
    personas,
    serve,
    tiers,
)
from .common import Command, command_adder, common_options

COMMANDS: tuple[Callable[[Command], None], ...] = (
    serve.add_commands,  # serve
    demo.add_commands,  # demo
    events.add_commands,  # submit, remember, recall, read, correct, retract, delete, erase, evict
    personas.add_commands,  # persona show|set|history|rollback
    people.add_commands,  # people [list|add|find|assign|remove]
    ingest.add_commands,  # reindex, retry, host-ingest
    archive.add_commands,  # export, import, backup, restore, doctor
    browse.add_commands,  # list, status, limits
    claude_code.add_commands,  # claude-code-hook, claude-code-capture
    inspect.add_commands,  # inspect
    tiers.add_commands,  # pin, consolidate, compact-working
)
"""What adds each group of commands, in the order ``amem --help`` lists them."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``amem`` and ``python -m amem``; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        if exc.code == 2:
            return usage_error(argv)
        raise
    if args.command is None or not hasattr(args, "run"):
        (args.help_parser if hasattr(args, "help_parser") else parser).print_help()
        return 2
    if args.backend == "trio" and importlib.util.find_spec("trio") is None:
        print(
            "amem: error: --backend trio needs trio installed (pip install trio)", file=sys.stderr
        )
        return usage_error(argv)
    return run(args)


def run(args: argparse.Namespace) -> int:
    """Run the command's handler on its event loop; every failure is a message on stderr
    and an exit status, never a traceback."""
    import anyio
    from pydantic import ValidationError

    try:
        result: int = anyio.run(args.run, args, backend=args.backend)
    except AmemError as exc:
        print(f"amem: error: {exc}", file=sys.stderr)
        return 1
    except ValidationError as exc:  # only Settings are validated by pydantic here
        from ..config import Settings
        from ..inputs import validation_problems

        problems = validation_problems(exc, Settings.model_fields)
        print(f"amem: error: invalid_config: AMEM_* settings: {problems}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `amem recall x | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # what no command turned into an amem error: never a traceback
        from ..ops.files import os_failure

        print(f"amem: error: {os_failure(exc)}", file=sys.stderr)
        return 1
    return result


def usage_error(argv: Sequence[str] | None) -> int:
    """The exit status of a usage error: 2, except for ``claude-code-hook``, to which
    Claude Code would read 2 as "block" (compaction, stopping): 1 shows the error only."""
    words = sys.argv[1:] if argv is None else argv
    return 1 if list(words[:1]) == ["claude-code-hook"] else 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="amem",
        description="Long-term memory for LLM agents, in a local SQLite file or in PostgreSQL.",
        epilog="Run 'amem COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"amem {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    command = command_adder(commands, common_options())
    for add_commands in COMMANDS:
        add_commands(command)
    return parser
