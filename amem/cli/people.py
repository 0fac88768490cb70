"""``people``: the scope's registry of people (list, add, find, assign, remove), and how
the other commands' ``--person`` names one of them (``chosen_person``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TypedDict

from ..errors import InvalidInput, NotFound
from .common import Command, command_adder, handler, inherited_options

if TYPE_CHECKING:
    from ..memory import Memory, Scope
    from ..models import Assignment, Person

PERSON_HELP = (
    "a person of the scope's registry: their ID, or a name or alias only one of them goes "
    "by ('amem people' lists them)"
)
"""What every ``PERSON`` argument and ``--person`` option takes."""
NO_PEOPLE = "(no people yet; add one with 'amem people add NAME')"


class People(TypedDict):
    """What ``amem people`` and ``amem people find`` print (``--json``: this object)."""

    people: list[Person]


async def chosen_person(scope: Scope, given: str) -> str:
    """The person ID a command line means by ``given``: a person of the registry with this
    ID, else the one person whose display name or alias it is (case and full-width forms
    aside, as ``Scope.find_person`` compares). Several such people are ``invalid_input``,
    none ``not_found``: the command never guesses."""
    if any(person.id == given for person in await scope.people()):
        return given
    try:
        named = await scope.find_person(given)
    except InvalidInput:  # not a name either (too long, say): no one goes by it
        named = []
    if len(named) == 1:
        return named[0].id
    if named:
        raise InvalidInput(
            f"{len(named)} people go by that name; give one's ID ('amem people find NAME' "
            "lists them)"
        )
    raise NotFound("no person with that ID or name in this scope's registry ('amem people')")


async def optional_person(scope: Scope, given: str | None) -> str | None:
    """``--person`` as a person ID (``chosen_person``), or None when it was not given."""
    return None if given is None else await chosen_person(scope, given)


def person_line(person: Person) -> str:
    """One person: ID and name, then what else is set; notes on an indented line."""
    extras = [
        *([f"aka {', '.join(person.aliases)}"] if person.aliases else []),
        *([f"locale {person.locale}"] if person.locale else []),
        *([f"timezone {person.timezone}"] if person.timezone else []),
        f"v{person.version}",
    ]
    line = f"{person.id}  {person.display_name}  ({'; '.join(extras)})"
    return line + (f"\n    notes: {person.notes}" if person.notes else "")


def people_lines(found: People, empty: str) -> str:
    return "\n".join(person_line(person) for person in found["people"]) or empty


async def list_people(args: argparse.Namespace, _: Memory, scope: Scope) -> People:
    return People(people=await scope.people())


async def find_people(args: argparse.Namespace, _: Memory, scope: Scope) -> People:
    return People(people=await scope.find_person(args.name))


async def add_person(args: argparse.Namespace, _: Memory, scope: Scope) -> Person:
    return await scope.upsert_person(
        args.person_id,
        display_name=args.display_name,
        aliases=args.aliases or [],
        locale=args.locale,
        timezone=args.timezone,
        notes=args.notes,
    )


async def assign_event(args: argparse.Namespace, _: Memory, scope: Scope) -> Assignment:
    if (args.person is None) == (not args.nobody):
        raise InvalidInput("give PERSON or --nobody (one of them)")
    person = None if args.nobody else await chosen_person(scope, args.person)
    return await scope.assign(args.event_id, person, reason=args.reason)


def assignment_line(done: Assignment) -> str:
    whose = f"belongs to {done.person}" if done.person else "belongs to no one"
    if done.previous == done.person:
        return f"event {done.event_id} already {whose}; nothing changed"
    moved = len(done.memory_ids)
    return (
        f"event {done.event_id} now {whose} (before: {done.previous or 'no one'}); "
        f"{moved} {'memory' if moved == 1 else 'memories'} moved with it"
    )


async def remove_person(args: argparse.Namespace, _: Memory, scope: Scope) -> Person:
    return await scope.remove_person(await chosen_person(scope, args.person))


def add_commands(command: Command) -> None:
    people = command(
        "people",
        handler(list_people, lambda found: people_lines(found, NO_PEOPLE)),
        "list and edit the scope's people (default: list them)",
        (
            "The scope's registry of people: whom the persona talks with or about. Without "
            "an ACTION it lists them, oldest first: ID, display name, aliases, locale, "
            "timezone, version, notes. An event (with every memory derived from it) can "
            "belong to one person: 'amem submit --person', 'amem people assign'; "
            "'amem recall --person' and 'amem list --person' then read only theirs. "
            "Wherever a command takes a PERSON, it takes their ID, or a name or alias only "
            "one person goes by."
        ),
    )
    actions = people.add_subparsers(dest="action", metavar="ACTION")
    action = command_adder(actions, inherited_options())
    action(
        "list",
        handler(list_people, lambda found: people_lines(found, NO_PEOPLE)),
        "list the scope's people (the default)",
        "List the scope's people, oldest first, as 'amem people' does.",
    )

    add = action(
        "add",
        handler(add_person, lambda p: f"saved {p.id}: {p.display_name} (v{p.version})"),
        "add a person, or replace one (--id)",
        (
            "Add NAME to the scope's registry as a new person, with a new ID (printed), or "
            "with --id: the ID to give them, or of a person already there, who then becomes "
            "exactly this: every option not given is cleared (give their aliases again to "
            "keep them). A change adds one to the person's version; the same fields again "
            "change nothing. Names need not be unique."
        ),
    )
    add.add_argument("display_name", metavar="NAME", help="the name to show")
    add.add_argument(
        "--id", dest="person_id", metavar="ID", help="the person's ID (default: a new one)"
    )
    add.add_argument(
        "--alias",
        action="append",
        dest="aliases",
        metavar="NAME",
        help="another name they go by (repeatable; 'find' matches these too)",
    )
    add.add_argument("--locale", help="e.g. zh-CN")
    add.add_argument("--timezone", help="e.g. Asia/Shanghai")
    add.add_argument("--notes", help="free text about them")

    find = action(
        "find",
        handler(find_people, lambda found: people_lines(found, "(no one goes by that name)")),
        "find people by name or alias",
        (
            "List every person whose display name or alias is NAME (case, full- and "
            "half-width forms and runs of spaces aside; Chinese names as written), oldest "
            "first: several when several match."
        ),
    )
    find.add_argument("name", metavar="NAME")

    assign = action(
        "assign",
        handler(assign_event, assignment_line),
        "make an event (and its memories) a person's",
        (
            "Make the event EVENT_ID, with every memory derived from it, belong to PERSON "
            "(--nobody: to no one). Its text, role and times stay as they were; the move is "
            "recorded with --reason. Assigning it where it already is changes nothing."
        ),
    )
    assign.add_argument("event_id", metavar="EVENT_ID")
    assign.add_argument("person", metavar="PERSON", nargs="?", help=PERSON_HELP)
    assign.add_argument("--nobody", action="store_true", help="make it belong to no one")
    assign.add_argument("--reason", help="why (recorded with the move)")

    remove = action(
        "remove",
        handler(remove_person, lambda p: f"removed {p.id}: {p.display_name}"),
        "take a person out of the registry",
        (
            "Take PERSON out of the scope's registry. Refused (person_in_use) while an "
            "event or memory belongs to them or is about them, or they have a state: "
            "assign their events to someone else ('amem people assign') or erase them "
            "first. Nothing else is removed."
        ),
    )
    remove.add_argument("person", metavar="PERSON", help=PERSON_HELP)


def add_person_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--person`` on another command: ``what`` it does with the person."""
    parser.add_argument("--person", metavar="PERSON", help=f"{what}: {PERSON_HELP}")
