"""What command-line options mean before the API sees them: which database a command opens
(a SQLite file or a PostgreSQL URL), whether it may create it, and which commands run on
a file only. Time options go to the API as written: it takes plain dates as every surface
does (``inputs.parse_time``)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from ..errors import InvalidInput, StorageError

if TYPE_CHECKING:
    from ..config import Settings

READ_ONLY_COMMANDS: Final = frozenset(
    {
        "backup",
        "doctor",
        "export",
        "list",
        "people",
        "people find",
        "people list",
        "persona history",
        "persona show",
        "read",
        "recall",
        "status",
    }
)
"""Commands that only read the database. ``only_reads`` adds the read-only forms of
commands that can also write: any ``--dry-run`` (``compact-working``), ``delete``,
``erase`` and ``consolidate`` without ``--yes`` (their previews) and ``limits`` without a
change."""


def only_reads(args: argparse.Namespace) -> bool:
    """Whether this command line only reads the database: then a database file that does
    not exist is refused rather than created empty (a mistyped ``--db`` must not look
    like an empty memory)."""
    action = getattr(args, "action", None)  # persona's and people's
    command = f"{args.command} {action}" if action else args.command
    if getattr(args, "dry_run", False):
        return True
    if command == "limits":
        return not (args.clear or args.max_events is not None or args.max_text_bytes is not None)
    if command in ("delete", "erase", "evict", "consolidate"):
        return not args.yes
    return command in READ_ONLY_COMMANDS


def add_confirmation(parser: argparse.ArgumentParser, verb: str) -> None:
    """``--yes`` to {verb}; without it the command is a preview that changes nothing
    (``only_reads``). ``--dry-run`` asks for the preview by name, for scripts."""
    how = parser.add_mutually_exclusive_group()
    how.add_argument("--yes", action="store_true", help=f"{verb} (default: a preview)")
    how.add_argument(
        "--dry-run", action="store_true", help="a preview, as without --yes (kept for scripts)"
    )


def seconds(least: float, most: float, *, above: bool = False) -> Callable[[str], float]:
    """An argparse type: a number of seconds from ``least`` (or ``above`` it) to ``most``."""
    lowest = f"above {least:g}" if above else f"from {least:g}"

    def parse(value: str) -> float:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not ((number > least if above else number >= least) and number <= most):
            raise argparse.ArgumentTypeError(f"must be a number of seconds {lowest} to {most:g}")
        return number

    return parse


def add_people_option(parser: argparse.ArgumentParser, speakers: str) -> None:
    """``--person SPEAKER=PERSON``, repeated: a capture's ``people`` (``people_of``);
    ``speakers`` says what a speaker is for this command."""
    parser.add_argument(
        "--person",
        metavar="SPEAKER=PERSON",
        action="append",
        type=speaker_person,
        help=f"the new events SPEAKER ({speakers}) said belong to PERSON, a person of the "
        "scope's registry: their ID, or a name or alias only one of them goes by; repeat "
        "for each speaker",
    )


def speaker_person(value: str) -> tuple[str, str]:
    """An argparse type: ``SPEAKER=PERSON``, split at the first ``=`` (as ``KEY=VALUE``
    options are)."""
    speaker, equals, person = value.partition("=")
    if not equals or not speaker.strip() or not person.strip():
        raise argparse.ArgumentTypeError("must be SPEAKER=PERSON")
    return speaker, person


def people_of(pairs: list[tuple[str, str]] | None) -> dict[str, str] | None:
    """The ``--person`` options as speaker to person (as given: an ID or a name); None
    without any. One speaker given two people is refused."""
    if not pairs:
        return None
    people: dict[str, str] = {}
    for speaker, person in pairs:
        if people.setdefault(speaker, person) != person:
            raise InvalidInput("--person gives one speaker two different people")
    return people


SQLITE_ONLY: Final = {
    "inspect": "browse it with 'amem list' and 'amem status'",
    "demo": "leave out --db, or give it a new file's path: the demo builds a SQLite file",
}
"""The commands that run on a SQLite file only, each with what to do on PostgreSQL instead:
``inspect`` reads the file itself and ``demo`` builds one."""


def refuse_sqlite_only(command: str) -> None:
    """Refuse ``command`` on PostgreSQL if it runs on a SQLite file only (``SQLITE_ONLY``)."""
    if command in SQLITE_ONLY:
        raise InvalidInput(
            f"amem {command} runs on a SQLite file only, not on PostgreSQL; {SQLITE_ONLY[command]}",
            code="unsupported_database",
        )


def database_of(args: argparse.Namespace, settings: Settings) -> Path | str:
    """``--db``, else ``$AMEM_DB``, else the platform default: a PostgreSQL URL as given
    (text: a ``Path`` would fold its ``//``), a file's path with ``~`` expanded (a quoted
    ``--db=~/memory.db`` reaches amem unexpanded)."""
    from ..config import default_db_path, is_postgres_url
    from ..db.database import refuse_url

    given = args.db if args.db is not None else default_db_path(settings)
    if is_postgres_url(given):
        return str(given)
    refuse_url(given)
    try:
        return Path(given).expanduser()
    except RuntimeError:  # ~name of a user without a home directory
        raise InvalidInput(
            "the database path starts with a home directory ('~') that cannot be found",
            code="path_not_allowed",
        ) from None


async def require_database(
    database: Path | str, args: argparse.Namespace, settings: Settings
) -> None:
    """Refuse a database file that does not exist, or a PostgreSQL database without amem's
    tables, saying where it came from (what the user gave is not echoed; the platform
    default is)."""
    if isinstance(database, str):
        from ..db.database import stored_schema_version

        if await stored_schema_version(database):
            return
        raise StorageError(
            f"no amem tables in the PostgreSQL database {given_as(args, 'URL')}; this command "
            "only reads, so it never creates them (check the URL; 'amem submit' or 'amem "
            "serve' creates them)",
            code="no_database",
        )
    import anyio

    if await anyio.Path(database).exists():
        return
    if args.db is None and settings.db is None:
        where = f"at the default path {database}"
    else:
        where = given_as(args, "path")
    raise StorageError(
        f"no database file {where}; this command only reads, so it never creates one "
        "(check the path; 'amem submit' or 'amem serve' creates a database)",
        code="no_database",
    )


def given_as(args: argparse.Namespace, what: str) -> str:
    """Where the database the user named came from: ``--db`` or ``$AMEM_DB``."""
    return f"at the {'--db' if args.db is not None else '$AMEM_DB'} {what}"
