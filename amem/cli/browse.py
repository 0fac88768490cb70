"""``list``, ``status`` and ``limits``: see what is stored, and how much."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..errors import InvalidInput
from ..limits import DEFAULT_LIST_LIMIT
from .common import Command, answer, keywords, on_postgres
from .people import add_person_option, optional_person
from .show import capacity_lines, listing_lines, scope_lines, status_lines

if TYPE_CHECKING:
    from ..memory import Memory, Scope
    from ..models import Capacity, Listing, ScopeSummary, Status

LIST_FILTERS = ("kinds", "roles", "session", "since", "until", "tier")
"""The filters ``list`` passes on to ``Scope.list`` as given (``--person`` is resolved to a
person ID first)."""


async def run_list(args: argparse.Namespace) -> int:
    if args.what not in ("memories", "events", "scopes"):  # checked here: argparse echoes it
        raise InvalidInput("WHAT must be memories, events or scopes")
    if args.what != "scopes":
        await answer(args, list_page, listing_lines)
        return 0
    filters = [*keywords(args, *LIST_FILTERS, "cursor").values(), args.person]
    if any(value is not None for value in filters) or args.revoked or args.expired:
        raise InvalidInput("'amem list scopes' takes no filters and no cursor")
    await answer(args, list_scopes, lambda listed: scope_lines(listed["scopes"]))
    return 0


async def list_page(args: argparse.Namespace, _: Memory, scope: Scope) -> Listing:
    return await scope.list(
        args.what,
        **keywords(args, *LIST_FILTERS, "cursor", "limit"),
        include_revoked=args.revoked,
        include_expired=args.expired,
        person=await optional_person(scope, args.person),
    )


async def list_scopes(
    args: argparse.Namespace, memory: Memory, _: Scope
) -> dict[str, list[ScopeSummary]]:
    return {"scopes": await memory.scopes()}


async def run_status(args: argparse.Namespace) -> int:
    postgres = on_postgres(args)
    await answer(args, status, lambda result: status_lines(result, postgres=postgres))
    return 0


async def status(args: argparse.Namespace, _: Memory, scope: Scope) -> Status:
    return await scope.status()


async def run_limits(args: argparse.Namespace) -> int:
    given = {
        name: limit_value(value, option)
        for name, value, option in (
            ("max_events", args.max_events, "--max-events"),
            ("max_text_bytes", args.max_text_bytes, "--max-text-bytes"),
        )
        if value is not None
    }
    if args.clear and given:
        raise InvalidInput("--clear removes both limits; give it alone")

    async def limits(args: argparse.Namespace, _: Memory, scope: Scope) -> Capacity:
        now = (await scope.status()).capacity
        if not (args.clear or given):
            return now
        merged = {"max_events": now.max_events, "max_text_bytes": now.max_text_bytes}
        return await scope.set_limits(**({} if args.clear else merged | given))

    postgres = on_postgres(args)
    await answer(args, limits, lambda result: capacity_lines(result, postgres=postgres))
    return 0


def limit_value(value: str, option: str) -> int | None:
    """A limit as the command line gives it: a positive integer, or ``none``."""
    if value.strip().lower() == "none":
        return None
    try:
        number = int(value)
    except ValueError:
        raise InvalidInput(f"{option} must be a positive integer or 'none'") from None
    if number < 1:
        raise InvalidInput(f"{option} must be a positive integer or 'none'")
    return number


def add_commands(command: Command) -> None:
    browse = command(
        "list",
        run_list,
        "list stored memories, events or scopes, newest first",
        (
            "List what the scope stores, a page at a time, newest stored first: its current "
            "memories (WHAT memories, the default), its original events (WHAT events), or "
            "every scope of the database with its counts (WHAT scopes). Filters narrow the "
            "list; the first line gives the total of every page and its breakdown (by kind, "
            "or by role for events). When more pages follow, the last line gives the "
            "--cursor for the next one (ask with the same filters). Event texts longer than "
            "500 characters are cut; 'amem read ID' prints the whole text. --json prints "
            "the page as JSON."
        ),
    )
    browse.add_argument(
        "what", metavar="WHAT", nargs="?", default="memories", help="memories, events or scopes"
    )
    browse.add_argument(
        "--kind", action="append", dest="kinds", help="only memories of this kind (repeatable)"
    )
    browse.add_argument(
        "--role",
        action="append",
        dest="roles",
        help=(
            "only what this role said: user, assistant, system or tool (a memory: its source "
            "event's role; repeatable)"
        ),
    )
    browse.add_argument("--session", help="only this session")
    browse.add_argument(
        "--since",
        metavar="TIME",
        help="valid_at (memories) or occurred_at (events) at or after this ISO-8601 time",
    )
    browse.add_argument("--until", metavar="TIME", help="the same time before this ISO-8601 time")
    browse.add_argument(
        "--revoked", action="store_true", help="include revoked (corrected or retracted) memories"
    )
    browse.add_argument("--expired", action="store_true", help="include memories no longer true")
    browse.add_argument("--tier", help="only memories of this tier: working, episodic or profile")
    browse.add_argument("--cursor", help="continue after the page that printed this cursor")
    browse.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_LIST_LIMIT,
        help="items per page, 1 to 500 (default 50)",
    )
    add_person_option(browse, "only the events of, or the memories belonging to or about")

    command(
        "status",
        run_status,
        "show the scope's counts and capacity",
        (
            "Print the scope's status: events by status (pending and failed extractions "
            "included), current memories by kind and revoked ones, vector coverage, schema "
            "version; and its capacity: events, memories, UTF-8 bytes of text, estimated index "
            "bytes and vector bytes, its limits (see 'amem limits'), and the database file's "
            "size, its WAL and its free pages (on PostgreSQL: the whole database's size)."
        ),
    )

    limits = command(
        "limits",
        run_limits,
        "show or set the scope's capacity limits",
        (
            "Show the scope's capacity limits next to what it holds, or set them: "
            "--max-events bounds the events it stores, --max-text-bytes the UTF-8 bytes of "
            "its events' and memories' text. A write that would pass a limit is refused "
            "(capacity_exceeded) and writes nothing. An option not given keeps its limit; "
            "'none' removes one; --clear removes both. 'amem doctor' warns at 90% of a limit."
        ),
    )
    limits.add_argument("--max-events", metavar="N", help="a number of events, or 'none'")
    limits.add_argument("--max-text-bytes", metavar="N", help="a number of bytes, or 'none'")
    limits.add_argument("--clear", action="store_true", help="remove both limits")
