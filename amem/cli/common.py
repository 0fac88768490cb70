"""What the commands share: their settings and database, how they print a result, read
input and report progress.

Nothing heavy is imported at module level (the API, pydantic, anyio): a command's module
declares its parser beside its handlers, and building the parser (``--help``,
``--version``) must stay fast. What a handler needs it imports when it runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import InvalidInput
from ..limits import VECTOR_WAIT_SECONDS
from .options import database_of, only_reads, refuse_sqlite_only, require_database

if TYPE_CHECKING:
    from ..config import Settings
    from ..memory import Memory, Scope

T = TypeVar("T")

BACKENDS = ("asyncio", "trio")

Command = Callable[..., argparse.ArgumentParser]
"""``command(name, run, summary, text)``: adds the subcommand ``name``, which the async
``run(args)`` handles, with the options every command takes (``command_adder``)."""


def common_options() -> argparse.ArgumentParser:
    """The options every command takes (a parent parser)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        help=(
            "database: a SQLite file's path or a postgresql:// URL (default: $AMEM_DB, else "
            "the platform data directory's amem/memory.db)"
        ),
    )
    common.add_argument(
        "--persona", help="scope persona (default: $AMEM_DEFAULT_PERSONA or 'default')"
    )
    common.add_argument(
        "--project", help="scope project (default: $AMEM_DEFAULT_PROJECT or 'default')"
    )
    common.add_argument("--backend", choices=BACKENDS, default="asyncio", help="event loop")
    common.add_argument("--json", action="store_true", help="print results as JSON")
    return common


def command_adder(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
) -> Command:
    """The ``command`` that adds a subcommand to ``subparsers``, taking the options of
    ``common`` (``common_options``, or ``inherited_options`` for an ACTION)."""

    def command(
        name: str, run: Callable[[argparse.Namespace], Awaitable[int]], summary: str, text: str
    ) -> argparse.ArgumentParser:
        sub = subparsers.add_parser(name, help=summary, description=text, parents=[common])
        sub.set_defaults(run=run, help_parser=sub)
        return sub

    return command


def inherited_options() -> argparse.ArgumentParser:
    """The options every command takes, for an ACTION's parser: given after the ACTION
    they count, and otherwise what the command read before it stands. (argparse would
    set every option the ACTION's parser did not see to its default, so ``amem persona
    --db FILE set TEXT`` would write to the default database instead of FILE.)"""
    common = common_options()
    for option in common._actions:
        option.default = argparse.SUPPRESS
    return common


def keywords(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The options ``names`` as keyword arguments of the API call they are for: each such
    option's ``dest`` is the name of the parameter it sets, as a tool's arguments are
    (``tools.table.Args.keywords``)."""
    return {name: getattr(args, name) for name in names}


def settings_for(args: argparse.Namespace) -> Settings:
    from ..config import Settings

    overrides = {
        key: value
        for key, value in (("default_persona", args.persona), ("default_project", args.project))
        if value
    }
    return Settings(**overrides)


@asynccontextmanager
async def opened(args: argparse.Namespace) -> AsyncIterator[tuple[Memory, Scope]]:
    from ..memory import open as open_memory

    settings = settings_for(args)
    database = database_of(args, settings)
    if isinstance(database, str):  # a PostgreSQL URL
        refuse_sqlite_only(args.command)
    if only_reads(args):
        await require_database(database, args, settings)
    async with open_memory(database, settings=settings) as memory:
        yield memory, memory.scope()


def on_postgres(args: argparse.Namespace) -> bool:
    """Whether the command's database is PostgreSQL (``--db``, else ``$AMEM_DB``)."""
    from ..config import is_postgres_url

    return is_postgres_url(args.db if args.db is not None else settings_for(args).db)


Call = Callable[[argparse.Namespace, "Memory", "Scope"], Awaitable[T]]
"""What a command does with the open database: ``call(args, memory, scope)``."""


def handler(
    call: Call[T],
    describe: Callable[[T], str],
    *,
    wait: bool = False,
    status: Callable[[T], int] | None = None,
) -> Callable[[argparse.Namespace], Awaitable[int]]:
    """The handler of a command of the usual shape (``answer``): ``call`` does the work,
    ``describe`` says what it did, ``status`` gives the exit status (default 0)."""

    async def run(args: argparse.Namespace) -> int:
        result = await answer(args, call, describe, wait=wait)
        return 0 if status is None else status(result)

    return run


async def answer(
    args: argparse.Namespace, call: Call[T], describe: Callable[[T], str], *, wait: bool = False
) -> T:
    """Open the database, await ``call(args, memory, scope)`` (``wait``: then wait for the
    vectors of what it wrote), close it, and print the result: ``describe(result)``, or
    the result as JSON with ``--json``. Returns the result."""
    async with opened(args) as (memory, scope):
        result = await call(args, memory, scope)
        if wait:
            await wait_for_vectors(memory)
    show(args, result, describe(result))
    return result


async def wait_for_vectors(memory: Memory, seconds: float = VECTOR_WAIT_SECONDS) -> None:
    """Before a one-shot write exits: wait a bounded time for its vectors (embedded in the
    background), and say on stderr what is left for the next process that opens the file."""
    left = await memory.wait_for_vectors(seconds=seconds)
    if left:
        print(
            f"amem: note: {left} of the new memories and events have no vector yet; the next "
            "process that opens this database with embeddings configured embeds them (or run "
            "`amem reindex`)",
            file=sys.stderr,
        )


def show(args: argparse.Namespace, result: Any, text: str) -> None:
    """Print ``text``, or with ``--json`` the result as JSON (models in it as they dump)."""
    if args.json:
        print(json.dumps(result, default=model_json, ensure_ascii=False, indent=2))
    else:
        print(text)


def model_json(value: object) -> Any:
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON")


def dry_run_note(dry_run: bool, hint: str = "") -> list[str]:
    """The line that ends a dry run's report (none after a real run)."""
    return [f"(dry run: nothing was changed{hint})"] if dry_run else []


def progress(label: str) -> Callable[[int, int], None]:
    """Progress on stderr: one updating line on a terminal, a line per step otherwise."""

    def report(done: int, total: int) -> None:
        end = "\r" if sys.stderr.isatty() and done < total else "\n"
        print(f"{label}: {done}/{total}", end=end, file=sys.stderr, flush=True)

    return report


def read_text(value: str | None, file: Path | None = None) -> str:
    """``value``, else the UTF-8 text of ``file``, else stdin (for ``None`` or ``-``).

    A file that cannot be read is ``invalid_input``; the message names the problem, not
    the path or the content.
    """
    try:
        if file is not None:
            return file.read_text(encoding="utf-8")
        if value is None or value == "-":
            return sys.stdin.read()
    except FileNotFoundError:
        raise InvalidInput("the input file does not exist") from None
    except UnicodeDecodeError:
        raise InvalidInput("the input is not UTF-8 text") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InvalidInput(f"the input file cannot be read ({reason})") from None
    return value
