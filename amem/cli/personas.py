"""``persona show|set|history|rollback``: personas are edited on the command line only."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InvalidInput
from .common import (
    Command,
    answer,
    command_adder,
    handler,
    inherited_options,
    read_text,
    settings_for,
)

if TYPE_CHECKING:
    from ..memory import Memory, Scope
    from ..models import Persona


async def run_persona_help(args: argparse.Namespace) -> int:
    args.help_parser.print_help()
    return 2


def persona_name(args: argparse.Namespace) -> str:
    return str(args.name or args.persona or settings_for(args).default_persona)


async def show_persona(args: argparse.Namespace, memory: Memory, _: Scope) -> Persona:
    return await memory.persona(persona_name(args), version=args.persona_version)


async def run_persona_set(args: argparse.Namespace) -> int:
    name, text = persona_set_input(args)

    async def set_persona(args: argparse.Namespace, memory: Memory, _: Scope) -> Persona:
        return await memory.set_persona(name, text, note=args.note)

    await answer(args, set_persona, lambda p: f"{p.persona} is now v{p.version}")
    return 0


def persona_set_input(args: argparse.Namespace) -> tuple[str, str]:
    """The persona and text ``persona set`` was given: ``TEXT``, ``NAME TEXT`` or
    ``[NAME] --file PATH``. One word alone is the text (so ``persona set "You are..."``
    does what it says), unless ``--file`` gives the text; no text or ``-`` reads stdin."""
    words = [word for word in (args.name, args.text) if word is not None]
    if args.file is not None:
        if len(words) > 1:
            raise InvalidInput("give TEXT or --file, not both")
        name, text = (words[0] if words else None), read_text(None, args.file)
    else:
        name = words[0] if len(words) == 2 else None
        text = read_text(words[-1] if words else None)
    return str(name or args.persona or settings_for(args).default_persona), text


async def persona_history(
    args: argparse.Namespace, memory: Memory, _: Scope
) -> dict[str, list[Persona]]:
    return {"versions": await memory.persona_history(persona_name(args))}


def history_lines(history: dict[str, list[Persona]]) -> str:
    lines = [
        f"v{p.version}  {p.created_at.isoformat()}  {p.note or ''}\n    {p.text}"
        for p in history["versions"]
    ]
    return "\n".join(lines) or "(no versions yet)"


async def rollback_persona(args: argparse.Namespace, memory: Memory, _: Scope) -> Persona:
    return await memory.rollback_persona(persona_name(args), args.persona_version)


def add_commands(command: Command) -> None:
    persona = command(
        "persona",
        run_persona_help,
        "show and edit personas (CLI only)",
        (
            "Persona versions are immutable; 'set' and 'rollback' append a version. MCP hosts "
            "can only read personas."
        ),
    )
    actions = persona.add_subparsers(dest="action", metavar="ACTION")
    action = command_adder(actions, inherited_options())
    for name, run, summary in (
        (
            "show",
            handler(show_persona, lambda p: f"{p.persona} v{p.version}: {p.text}"),
            "print a persona (latest or --version)",
        ),
        ("set", run_persona_set, "append a version with new text"),
        ("history", handler(persona_history, history_lines), "list every version"),
        (
            "rollback",
            handler(rollback_persona, lambda p: f"{p.persona} is now v{p.version} ({p.note})"),
            "append a version equal to an old one",
        ),
    ):
        sub = action(name, run, summary, summary)
        sub.add_argument("name", metavar="NAME", nargs="?", help="persona ID (default: --persona)")
        if name == "show":
            sub.add_argument("--version", type=int, dest="persona_version")
        if name == "set":
            sub.add_argument(
                "text", metavar="TEXT", nargs="?", help="new text ('-' or none: stdin)"
            )
            sub.description = (
                "Append a version with new text: 'set TEXT' (to the --persona persona), "
                "'set NAME TEXT' or 'set [NAME] --file PATH'. One word alone is TEXT, "
                "unless --file gives the text; no TEXT, or '-', reads stdin."
            )
            sub.add_argument("--file", type=Path, help="read the text from a file")
            sub.add_argument("--note")
        if name == "rollback":
            sub.add_argument("persona_version", metavar="VERSION", type=int)
