"""The ``amem`` command line. Results go to stdout; errors, logs and progress to stderr.

Every command takes ``--db`` (else ``$AMEM_DB``, else the platform data directory),
``--persona``/``--project`` (else the configured defaults) and ``--backend``. ``--json``
prints results as JSON instead of text.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio
from pydantic import BaseModel, ValidationError

from ..config import Settings
from ..errors import AmemError, InvalidInput
from ..hosts import claude_code
from ..inputs import validation_problems
from ..json_input import parse_json
from ..limits import (
    CAPTURE_SECONDS,
    DEFAULT_KEEP_NOTES,
    DEFAULT_LIST_LIMIT,
    DEFAULT_READ_CHARS,
    DEFAULT_RECALL_LIMIT,
    MAX_RECALL_LIMIT,
    MAX_TRANSCRIPT_LINE_BYTES,
    VECTOR_WAIT_SECONDS,
)
from ..memory import Memory, Scope
from ..memory import open as open_memory
from ..models import (
    RECALL_MODES,
    ROLES,
    SUBMITTABLE_CATEGORIES,
    ArchiveResult,
    Erasure,
)
from ..ops.files import os_failure
from ..version import __version__
from .demo import SAMPLE_PERSONA, SAMPLE_PROJECT, demo
from .options import cli_time, database_path, only_reads, require_database
from .show import capacity_lines, listing_lines, recall_line, scope_lines, status_lines

BACKENDS = ("asyncio", "trio")


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
    try:
        result: int = anyio.run(args.run, args, backend=args.backend)
    except AmemError as exc:
        print(f"amem: error: {exc}", file=sys.stderr)
        return 1
    except ValidationError as exc:  # only Settings are validated by pydantic here
        problems = validation_problems(exc, Settings.model_fields)
        print(f"amem: error: invalid_config: AMEM_* settings: {problems}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `amem recall x | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # what no command turned into an amem error: never a traceback
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
        description="Long-term memory for LLM agents, in one local SQLite file.",
        epilog="Run 'amem COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"amem {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = common_options()

    def command(
        name: str, run: Callable[..., Any], summary: str, text: str
    ) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=summary, description=text, parents=[common])
        sub.set_defaults(run=run, help_parser=sub)
        return sub

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

    command(
        "demo",
        run_demo,
        "show the whole job on a small bilingual sample",
        (
            "Build a small bilingual sample conversation in a fresh local database (no API key "
            "needed): a fact that changes twice, a correction, a deletion and a Chinese query "
            "only per-character indexing can answer; then print recall results, an as_of "
            "answer and a session_resume pack under a small budget. The database is kept: "
            "--db names the new file (default: a new file in a temporary directory)."
        ),
    )

    submit = command(
        "submit",
        run_submit,
        "store one original event",
        ("Store one original message. TEXT '-' reads it from stdin. Prints the receipt."),
    )
    submit.add_argument("text", metavar="TEXT")
    submit.add_argument("--role", default="user", choices=ROLES)
    submit.add_argument("--event-id", help="stable ID (resubmitting is safe)")
    submit.add_argument("--session")
    submit.add_argument("--source")
    submit.add_argument("--category", default="conversation", choices=SUBMITTABLE_CATEGORIES)
    submit.add_argument(
        "--occurred-at", type=cli_time, help="ISO-8601 with a UTC offset, or a date (default: now)"
    )

    recall = command(
        "recall",
        run_recall,
        "search memories",
        ("Search the scope's memories (and raw events without memories) for QUERY."),
    )
    recall.add_argument("query", metavar="QUERY")
    recall.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_RECALL_LIMIT,
        help=f"1 to {MAX_RECALL_LIMIT} (default {DEFAULT_RECALL_LIMIT})",
    )
    recall.add_argument(
        "--mode",
        default="auto",
        choices=RECALL_MODES,
        help="auto (default): hybrid when the scope's vectors cover it, else fast (words only)",
    )
    recall.add_argument(
        "--as-of",
        type=cli_time,
        help="what was true at this ISO-8601 time (a plain date: its start, 00:00 UTC)",
    )
    recall.add_argument("--history", action="store_true", help="include facts that expired")
    recall.add_argument("--kind", action="append", dest="kinds", help="only this kind (repeatable)")
    recall.add_argument(
        "--exclude-event",
        action="append",
        dest="exclude_event_ids",
        metavar="ID",
        help="leave out this event and its memories (repeatable)",
    )
    recall.add_argument(
        "--exclude-from-seq",
        type=int,
        metavar="N",
        help="leave out events with seq >= N and their memories",
    )

    read = command(
        "read",
        run_read,
        "page through the original evidence of an ID",
        ("Print the original event behind a memory or event ID, unaltered."),
    )
    read.add_argument("id", metavar="ID")
    read.add_argument("--offset", type=int, default=0)
    read.add_argument("--limit", type=int, default=DEFAULT_READ_CHARS)

    # --- forgetting: correct, retract one memory, delete one message, erase many ---------

    correct = command(
        "correct",
        run_correct,
        "replace a mistaken memory",
        (
            "Replace the memory MEMORY_ID, which is wrong (misheard, misread), with TEXT ('-' "
            "reads stdin): the mistaken memory is revoked, the corrected one keeps its start "
            "unless --valid-at is given, the original event is marked amended and the "
            "scope's checkpoints are invalidated. For a fact that changed, submit the new "
            "message instead."
        ),
    )
    correct.add_argument("memory_id", metavar="MEMORY_ID")
    correct.add_argument("text", metavar="TEXT")
    correct.add_argument("--reason", help="why (kept with the correction)")
    correct.add_argument(
        "--valid-at", type=cli_time, help="ISO-8601 start of the corrected fact, or a date"
    )

    retract = command(
        "retract",
        run_retract,
        "forget one memory (its message and other memories stay)",
        (
            "Forget the memory MEMORY_ID alone: it leaves recall and context packs for good "
            "(kept, with --reason, for audit), its source event is marked amended so its raw "
            "text never comes back as raw fallback, and other memories of the same event "
            "stay. To erase the words themselves, use 'amem delete'."
        ),
    )
    retract.add_argument("memory_id", metavar="MEMORY_ID")
    retract.add_argument("--reason", help="why (kept with the memory)")

    delete = command(
        "delete",
        run_delete,
        "erase one message and everything derived from it",
        (
            "Permanently erase an event (--event), or the event a memory came from "
            "(--memory), with every memory derived from it and its correction lineage; "
            "the event ID can never be stored again. --dry-run prints what would go and "
            "changes nothing. To forget one memory and keep its message, use 'amem retract'."
        ),
    )
    target = delete.add_mutually_exclusive_group(required=True)
    target.add_argument("--event", dest="event_id", metavar="ID", help="the event to erase")
    target.add_argument(
        "--memory", dest="memory_id", metavar="ID", help="erase the event this memory came from"
    )
    delete.add_argument("--dry-run", action="store_true", help="only show what would go")

    erase = command(
        "erase",
        run_erase,
        "erase many events (a dry run unless --yes)",
        (
            "Permanently erase the scope's events that match every selector given, each with "
            "everything 'amem delete' would take with it, in batches (each its own "
            "transaction; an interrupted erase can be run again). Without --yes it is a dry "
            "run: it prints what would go and changes nothing. --tombstones-from applies "
            "the tombstones of an archive (a newer export) to the whole database instead: "
            "events they name are erased in every scope, and can never be stored again."
        ),
    )
    erase.add_argument("--session", help="events of this session")
    erase.add_argument(
        "--since", metavar="TIME", type=cli_time, help="events that occurred at or after TIME"
    )
    erase.add_argument(
        "--until", metavar="TIME", type=cli_time, help="events that occurred before TIME"
    )
    erase.add_argument("--subject", help="events with a memory about this subject")
    erase.add_argument("--fact-key", metavar="KEY", help="with --subject: and this fact key")
    erase.add_argument("--everything", action="store_true", help="every event of the scope")
    erase.add_argument(
        "--tombstones-from", metavar="ARCHIVE", type=Path, help="apply an archive's tombstones"
    )
    erase.add_argument("--yes", action="store_true", help="erase (default: a dry run)")

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
    for name, run, summary in (
        ("show", run_persona_show, "print a persona (latest or --version)"),
        ("set", run_persona_set, "append a version with new text"),
        ("history", run_persona_history, "list every version"),
        ("rollback", run_persona_rollback, "append a version equal to an old one"),
    ):
        sub = actions.add_parser(name, help=summary, description=summary, parents=[common])
        sub.set_defaults(run=run, help_parser=sub)
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

    command(
        "reindex",
        run_reindex,
        "rebuild the scope's vector index",
        (
            "Embed every memory of the scope with the configured embedding endpoint "
            "(AMEM_EMBED_*) and swap the new index in only after every batch succeeded. "
            "Progress goes to stderr."
        ),
    )

    retry = command(
        "retry",
        run_retry,
        "run pending and failed extractions now",
        (
            "Extract the scope's pending and failed events now with the configured extraction "
            "endpoint (AMEM_EXTRACT_*), and wait for them. Progress goes to stderr."
        ),
    )
    retry.add_argument("--event-id", help="only this event")

    ingest = command(
        "host-ingest",
        run_host_ingest,
        "capture a host transcript (JSONL)",
        (
            "Capture a host's transcript: FILE holds one JSON object per line with event_id, "
            "text, role and optionally session, source, category, occurred_at, in transcript "
            "order ('-' reads stdin). Entries this instance already captured are skipped; the "
            "rest are stored idempotently, an optional checkpoint is saved, and only then does "
            "the instance's cursor advance. A competing writer is detected (version_conflict)."
        ),
    )
    ingest.add_argument("file", metavar="FILE")
    ingest.add_argument("--instance", required=True, help="this host installation's ID")
    ingest.add_argument("--session", help="session for the checkpoint")
    ingest.add_argument("--goal", help="save a checkpoint with this goal (needs --session)")
    ingest.add_argument("--next-action")
    for name, run, summary, text in (
        (
            "export",
            run_export,
            "write every authoritative table to a JSONL archive",
            (
                "Write events, personas, memories, relations, checkpoints and capture cursors "
                "from one consistent snapshot to a new JSONL archive at PATH. Never overwrites; "
                "the file appears atomically. Vectors and the search index are left out "
                "(they are rebuilt). Progress goes to stderr."
            ),
        ),
        (
            "import",
            run_import,
            "load an archive into an empty database",
            (
                "Load the archive at PATH into the database, which must be empty, and rebuild "
                "the search index, in one transaction that validates every row as it streams "
                "in (shape, times, quotes, roles, scope links, checkpoint coverage). A bad "
                "archive is refused (archive_invalid) and nothing is written. Progress goes to "
                "stderr. Run reindex afterwards for vectors."
            ),
        ),
        (
            "backup",
            run_backup,
            "copy the database to a new file (safe while in use)",
            (
                "Copy the database to a new file at PATH with SQLite's backup API, consistent "
                "even while other processes write. Never overwrites; the copy is readable by "
                "its owner only."
            ),
        ),
        (
            "restore",
            run_restore,
            "load a backup file into an empty database",
            (
                "Read the backup file at PATH without changing it, validate it like an archive, "
                "load it into the database (which must be empty) and rebuild the search index. "
                "Progress goes to stderr."
            ),
        ),
    ):
        sub = command(name, run, summary, text)
        sub.add_argument("path", metavar="PATH")

    doctor = command(
        "doctor",
        run_doctor,
        "check the database and say how to fix problems",
        (
            "Check integrity, foreign keys, the search index against its content (FTS5), "
            "search coverage, text encoding, whether an export would import, orphans (a "
            "correction event without its memory and the like), pending and failed "
            "extractions, vector coverage and the schema version; print counts. Exits 1 "
            "when it finds a problem, with what to run."
        ),
    )
    doctor.add_argument(
        "--rebuild-index", action="store_true", help="first rebuild the search index from the data"
    )
    add_browse_commands(command)
    add_claude_code_commands(command)
    add_inspect_command(command)
    add_tier_commands(command)
    return parser


def add_tier_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """``pin``, ``consolidate`` and ``compact-working``: tiers, TTLs and working notes."""
    pin = command(
        "pin",
        run_pin,
        "pin a memory (or --unpin it)",
        (
            "Pin the memory MEMORY_ID: it enters context packs first, and a pinned working "
            "note never expires (consolidate promotes it to episodic once its TTL passed). "
            "--unpin takes the pin away. Pinning twice changes nothing."
        ),
    )
    pin.add_argument("memory_id", metavar="MEMORY_ID")
    pin.add_argument("--unpin", action="store_true", help="take the pin away")

    consolidate = command(
        "consolidate",
        run_consolidate,
        "apply working-note TTLs and promotions now",
        (
            "Delete the scope's expired, unpinned working notes for good (their source events "
            "stay; a corrected note goes with the versions it corrected), promote pinned "
            "expired ones to episodic, and move often restated memories up a tier "
            "(AMEM_PROMOTE_AFTER distinct events), in one transaction. Nothing does this in "
            "the background. --dry-run prints what it would do."
        ),
    )
    consolidate.add_argument("--dry-run", action="store_true", help="only show what would change")

    compact = command(
        "compact-working",
        run_compact_working,
        "fold a session's older working notes into one episodic memory",
        (
            "Keep the pinned working notes of SESSION and the newest --keep others; fold the "
            "older ones into one episodic memory that quotes them word for word (a new "
            "system event of the session lists them) and links to each. The folded notes "
            "are revoked, kept for audit. No model is called. --dry-run prints what it would "
            "fold."
        ),
    )
    compact.add_argument("session", metavar="SESSION")
    compact.add_argument(
        "--keep",
        type=int,
        default=DEFAULT_KEEP_NOTES,
        help=f"newest notes kept (default {DEFAULT_KEEP_NOTES})",
    )
    compact.add_argument("--dry-run", action="store_true", help="only show what would be folded")


def add_browse_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """``list``, ``status`` and ``limits``: see what is stored, and how much."""
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
        type=cli_time,
        help="valid_at (memories) or occurred_at (events) at or after this ISO-8601 time",
    )
    browse.add_argument(
        "--until", metavar="TIME", type=cli_time, help="the same time before this ISO-8601 time"
    )
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

    command(
        "status",
        run_status,
        "show the scope's counts and capacity",
        (
            "Print the scope's status: events by status (pending and failed extractions "
            "included), current memories by kind and revoked ones, vector coverage, schema "
            "version; and its capacity: events, memories, UTF-8 bytes of text, estimated index "
            "bytes and vector bytes, its limits (see 'amem limits'), and the database file's "
            "size, its WAL and its free pages."
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


def add_inspect_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """``inspect``: the read-only web page (``amem.inspector``)."""
    inspect = command(
        "inspect",
        run_inspect,
        "browse the database in a local web page (read-only)",
        (
            "Serve a read-only web page on 127.0.0.1 (never on another address) over the "
            "database: scopes with their counts, each scope's memories with their validity "
            "intervals (and an as_of control), its timeline of events, search with score "
            "components, and each memory's corrections and relations drawn as a small graph. "
            "The file is opened read-only: never created, never migrated, never written. "
            "The URL goes to stderr (with --persona/--project: that scope's page); Ctrl-C "
            "stops. Runs on asyncio."
        ),
    )
    inspect.add_argument(
        "--port", type=int, default=0, help="TCP port on 127.0.0.1 (default 0: a free one)"
    )
    inspect.add_argument("--open", action="store_true", help="open the page in a web browser")


async def run_inspect(args: argparse.Namespace) -> int:
    # imported here: only this command needs starlette and uvicorn loaded
    from ..inspector.app import create_app
    from ..inspector.server import serve
    from ..inspector.source import readable_file

    if args.backend != "asyncio":  # uvicorn serves on asyncio only
        raise InvalidInput("amem inspect runs on asyncio; leave out --backend trio")
    if not 0 <= args.port <= 65535:
        raise InvalidInput("--port must be between 0 and 65535")
    settings = settings_for(args)
    path = await anyio.to_thread.run_sync(readable_file, database_path(args, settings))
    scope = {"persona": settings.default_persona, "project": settings.default_project}
    start = "/scope?" + urlencode(scope) if args.persona or args.project else "/"

    def announce(url: str) -> None:
        print(f"amem inspect: serving {path} read-only at {url} (Ctrl-C stops)", file=sys.stderr)

    await serve(
        create_app(path, settings),
        port=args.port,
        path=start,
        announce=announce,
        open_browser=args.open,
    )
    return 0


def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db",
        type=Path,
        help="database file (default: $AMEM_DB, else the platform data directory's amem/memory.db)",
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


def settings_for(args: argparse.Namespace) -> Settings:
    overrides = {
        key: value
        for key, value in (("default_persona", args.persona), ("default_project", args.project))
        if value
    }
    return Settings(**overrides)


@asynccontextmanager
async def opened(args: argparse.Namespace) -> AsyncIterator[tuple[Memory, Scope]]:
    settings = settings_for(args)
    path = database_path(args, settings)
    if only_reads(args):
        require_database(path, args, settings)
    async with open_memory(path, settings=settings) as memory:
        yield memory, memory.scope()


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
    if args.json:
        data = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
        print(json.dumps(data, ensure_ascii=False, indent=2))
    else:
        print(text)


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


async def run_serve(args: argparse.Namespace) -> int:
    from ..server import serve  # the MCP SDK is only imported by the server

    serve.configure_logging(getattr(__import__("logging"), args.log_level))

    def configure() -> tuple[Path, Settings]:
        settings = settings_for(args)
        return database_path(args, settings), settings

    await serve.serve(configure)
    return 0


async def run_submit(args: argparse.Namespace) -> int:
    async with opened(args) as (memory, scope):
        r = await scope.submit_event(
            read_text(args.text),
            role=args.role,
            event_id=args.event_id,
            session=args.session,
            source=args.source,
            category=args.category,
            occurred_at=args.occurred_at,
        )
        await wait_for_vectors(memory)
    show(
        args,
        r,
        f"{'already stored' if r.duplicate else 'stored'} {r.event_id} "
        f"(seq {r.seq}, {r.status}) in {r.persona}/{r.project}",
    )
    return 0


async def run_recall(args: argparse.Namespace) -> int:
    async with opened(args) as (_, scope):
        result = await scope.recall(
            args.query,
            limit=args.limit,
            mode=args.mode,
            as_of=args.as_of,
            include_history=args.history,
            kinds=args.kinds,
            exclude_event_ids=args.exclude_event_ids,
            exclude_from_seq=args.exclude_from_seq,
        )
    lines = [recall_line(item) for item in result.items] or ["(no evidence found)"]
    show(args, result, "\n".join([*lines, *(f"warning: {w}" for w in result.warnings)]))
    return 0


async def run_read(args: argparse.Namespace) -> int:
    async with opened(args) as (_, scope):
        page = await scope.read(args.id, offset=args.offset, limit=args.limit)
    more = f", next page: --offset {page.next_offset}" if page.next_offset is not None else ""
    header = (
        f"event {page.event.id} ({page.event.role}, {page.event.occurred_at.isoformat()}, "
        f"{page.event.status}) chars {page.offset}-{page.offset + len(page.text)} of "
        f"{page.total_chars}{more}"
    )
    failure = [f"error: {page.event.error}"] if page.event.error else []  # why it failed
    show(args, page, "\n".join([header, *failure, page.text]))
    return 0


async def run_correct(args: argparse.Namespace) -> int:
    async with opened(args) as (memory, scope):
        done = await scope.correct(
            args.memory_id, read_text(args.text), valid_at=args.valid_at, reason=args.reason
        )
        await wait_for_vectors(memory)
    show(
        args,
        done,
        f"corrected: {done.revoked_id} revoked, now {done.memory.id}: {done.memory.text} "
        f"(event {done.amended_event_id} amended)",
    )
    return 0


async def run_retract(args: argparse.Namespace) -> int:
    async with opened(args) as (_, scope):
        done = await scope.retract(args.memory_id, reason=args.reason)
    what = "was already revoked" if done.already_revoked else "retracted"
    show(
        args,
        done,
        f"{done.memory_id} {what}; event {done.event_id} is amended; "
        f"{len(done.sibling_ids)} other memories of it stay",
    )
    return 0


async def run_delete(args: argparse.Namespace) -> int:
    async with opened(args) as (_, scope):
        done = await scope.delete(
            event_id=args.event_id, memory_id=args.memory_id, dry_run=args.dry_run
        )
    verb = "would erase" if done.dry_run else "erased"
    lines = [
        f"{verb} {len(done.event_ids)} events, {len(done.memory_ids)} memories, "
        f"{done.relations} relations, {done.vectors} vectors, {done.search_rows} search rows; "
        f"{done.checkpoints_invalidated} checkpoints invalidated, "
        f"{done.checkpoints_cleared} cleared",
        *(f"  event  {event_id}" for event_id in done.event_ids),
        *(f"  memory {memory_id}" for memory_id in done.memory_ids),
    ]
    if done.dry_run:
        lines.append("(dry run: nothing was changed)")
    show(args, done, "\n".join(lines))
    return 0


async def run_erase(args: argparse.Namespace) -> int:
    selectors = (args.session, args.since, args.until, args.subject, args.fact_key)
    if args.tombstones_from is not None:
        if args.everything or any(value is not None for value in selectors):
            raise InvalidInput("--tombstones-from takes no other selector")
        async with opened(args) as (memory, _):
            applied = await memory.import_tombstones(args.tombstones_from, dry_run=not args.yes)
        lines = [
            f"{applied.tombstones} tombstones in the archive, {applied.new} new here",
            *(erasure_line(e) for e in applied.erasures),
        ]
        show(args, applied, "\n".join([*lines, *dry_run_note(applied.dry_run)]))
        return 0
    async with opened(args) as (_, scope):
        erased = await scope.erase(
            session=args.session,
            since=args.since,
            until=args.until,
            subject=args.subject,
            fact_key=args.fact_key,
            everything=args.everything,
            dry_run=not args.yes,
            progress=progress("erase"),
        )
    show(args, erased, "\n".join([erasure_line(erased), *dry_run_note(erased.dry_run)]))
    return 0


def erasure_line(e: Erasure) -> str:
    verb = "would erase" if e.dry_run else "erased"
    return (
        f"{e.persona}/{e.project}: {verb} {e.events} events, {e.memories} memories, "
        f"{e.relations} relations, {e.vectors} vectors, {e.search_rows} search rows; "
        f"{e.checkpoints_invalidated} checkpoints invalidated, {e.checkpoints_cleared} cleared"
    )


def dry_run_note(dry_run: bool) -> list[str]:
    return ["(dry run: nothing was changed; add --yes to erase)"] if dry_run else []


async def run_persona_help(args: argparse.Namespace) -> int:
    args.help_parser.print_help()
    return 2


def persona_name(args: argparse.Namespace) -> str:
    return str(args.name or args.persona or settings_for(args).default_persona)


async def run_persona_show(args: argparse.Namespace) -> int:
    async with opened(args) as (memory, _):
        persona = await memory.persona(persona_name(args), version=args.persona_version)
    show(args, persona, f"{persona.persona} v{persona.version}: {persona.text}")
    return 0


async def run_persona_set(args: argparse.Namespace) -> int:
    name, text = persona_set_input(args)
    async with opened(args) as (memory, _):
        persona = await memory.set_persona(name, text, note=args.note)
    show(args, persona, f"{persona.persona} is now v{persona.version}")
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


async def run_persona_history(args: argparse.Namespace) -> int:
    async with opened(args) as (memory, _):
        versions = await memory.persona_history(persona_name(args))
    lines = [
        f"v{p.version}  {p.created_at.isoformat()}  {p.note or ''}\n    {p.text}" for p in versions
    ]
    show(
        args,
        {"versions": [p.model_dump(mode="json") for p in versions]},
        "\n".join(lines) or "(no versions yet)",
    )
    return 0


async def run_persona_rollback(args: argparse.Namespace) -> int:
    async with opened(args) as (memory, _):
        persona = await memory.rollback_persona(persona_name(args), args.persona_version)
    show(args, persona, f"{persona.persona} is now v{persona.version} ({persona.note})")
    return 0


async def run_reindex(args: argparse.Namespace) -> int:
    async with opened(args) as (_, scope):
        result = await scope.reindex(progress=progress("reindex"))
    show(
        args,
        result,
        f"embedded {result.embedded} of {result.memories + result.events} "
        f"({result.memories} memories, {result.events} events; {result.fingerprint})",
    )
    return 0


async def run_retry(args: argparse.Namespace) -> int:
    async with opened(args) as (_, scope):
        result = await scope.retry(args.event_id, progress=progress("retry"))
    show(
        args,
        result,
        f"extracted {len(result.extracted)} events, {len(result.failed)} failed, "
        f"{len(result.memory_ids)} new memories",
    )
    return 0 if not result.failed else 1


async def run_host_ingest(args: argparse.Namespace) -> int:
    raw = read_text("-") if args.file == "-" else read_text(None, Path(args.file))
    entries = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if line.strip():
            try:
                entries.append(parse_json(line))
            except ValueError:
                raise InvalidInput(f"line {number} of the transcript is not JSON") from None
    checkpoint = None
    if args.goal:
        if not args.session:
            raise InvalidInput("--goal needs --session")
        checkpoint = {"session": args.session, "goal": args.goal, "next_action": args.next_action}
    elif args.session or args.next_action:
        raise InvalidInput("--session and --next-action only go with --goal (a checkpoint)")
    async with opened(args) as (memory, scope):
        result = await scope.capture_transcript(
            args.instance, entries, checkpoint=checkpoint, progress=progress("host-ingest")
        )
        await wait_for_vectors(memory)
    show(
        args,
        result,
        f"cursor {result.cursor}: stored {len(result.stored)}, "
        f"{len(result.duplicates)} already stored, {result.skipped} skipped",
    )
    return 0


async def run_demo(args: argparse.Namespace) -> int:
    path: Path = args.db or Path(tempfile.mkdtemp(prefix="amem-demo-")) / "demo.db"
    if await anyio.Path(path).exists():
        raise AmemError(f"{path} already exists; choose a new file", code="target_exists")
    settings = Settings(default_persona=SAMPLE_PERSONA, default_project=SAMPLE_PROJECT)
    async with open_memory(path, settings=settings) as memory:
        await demo(memory, path)
    return 0


async def run_export(args: argparse.Namespace) -> int:
    async with opened(args) as (memory, _):
        result = await memory.export(args.path, progress=progress("export"))
    rows = sum(result.counts.values())
    show(args, result, f"exported {rows} rows to {result.path}: {per_table(result)}")
    return 0


async def run_import(args: argparse.Namespace) -> int:
    async with opened(args) as (memory, _):
        result = await memory.import_archive(args.path, progress=progress("import"))
    show(args, result, f"imported {sum(result.counts.values())} rows: {per_table(result)}")
    return 0


def per_table(result: ArchiveResult) -> str:
    """``5 events, 1 personas, ...``"""
    return ", ".join(f"{n} {table}" for table, n in result.counts.items())


async def run_backup(args: argparse.Namespace) -> int:
    async with opened(args) as (memory, _):
        result = await memory.backup(args.path)
    show(args, result, f"backed up to {result.path}")
    return 0


async def run_restore(args: argparse.Namespace) -> int:
    async with opened(args) as (memory, _):
        result = await memory.restore(args.path, progress=progress("restore"))
    show(args, result, f"restored {sum(result.counts.values())} rows into {memory.path}")
    return 0


async def run_doctor(args: argparse.Namespace) -> int:
    async with opened(args) as (memory, _):
        report = await memory.doctor(rebuild_index=args.rebuild_index)
    lines = [f"schema version {report.schema_version}"]
    for check in report.checks:
        mark = "ok  " if check.ok else ("FAIL" if check.severity == "error" else "warn")
        lines.append(f"{mark}  {check.name}: {check.detail}")
        if check.fix and not check.ok:
            lines.append(f"      fix: {check.fix}")
    lines.append("counts: " + ", ".join(f"{n} {t}" for t, n in report.counts.items()))
    show(args, report, "\n".join(lines))
    return 0 if report.ok else 1


async def run_list(args: argparse.Namespace) -> int:
    if args.what not in ("memories", "events", "scopes"):  # checked here: argparse echoes it
        raise InvalidInput("WHAT must be memories, events or scopes")
    if args.what == "scopes":
        filters = (
            args.kinds,
            args.roles,
            args.session,
            args.since,
            args.until,
            args.cursor,
            args.tier,
        )
        if any(value is not None for value in filters) or args.revoked or args.expired:
            raise InvalidInput("'amem list scopes' takes no filters and no cursor")
        async with opened(args) as (memory, _):
            scopes = await memory.scopes()
        show(args, {"scopes": [s.model_dump(mode="json") for s in scopes]}, scope_lines(scopes))
        return 0
    async with opened(args) as (_, scope):
        page = await scope.list(
            args.what,
            kinds=args.kinds,
            roles=args.roles,
            session=args.session,
            since=args.since,
            until=args.until,
            include_revoked=args.revoked,
            include_expired=args.expired,
            tier=args.tier,
            cursor=args.cursor,
            limit=args.limit,
        )
    show(args, page, listing_lines(page))
    return 0


async def run_status(args: argparse.Namespace) -> int:
    async with opened(args) as (_, scope):
        status = await scope.status()
    show(args, status, status_lines(status))
    return 0


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
    async with opened(args) as (_, scope):
        status = await scope.status()
        if args.clear or given:
            now = status.capacity
            merged = {"max_events": now.max_events, "max_text_bytes": now.max_text_bytes}
            capacity = await scope.set_limits(**({} if args.clear else merged | given))
        else:
            capacity = status.capacity
    show(args, capacity, capacity_lines(capacity))
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


# --- Claude Code: its session transcripts, captured from a hook or afterwards ------------


def add_claude_code_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """``claude-code-hook`` and ``claude-code-capture`` (see docs/host-capture.md)."""
    hook = command(
        "claude-code-hook",
        run_claude_code_hook,
        "capture a Claude Code session, as its hook (JSON on stdin)",
        (
            "Run as a Claude Code command hook (PreCompact, SessionEnd, Stop, ...): read the "
            "hook's JSON from stdin (session_id, transcript_path) and capture the session's "
            "transcript into the scope, its user and assistant text, each line once: only "
            "the lines past the session's cursor are stored, so running it again stores "
            "nothing twice. Prints nothing on stdout (Claude Code reads it); a summary goes "
            "to stderr. Exits 0 on success and 1 on any error, never 2 (which Claude Code "
            "reads as 'block compaction' or 'do not stop'). A long transcript is captured "
            "for --time-limit seconds at most; what was captured stays and the next run goes "
            "on from the cursor. With embeddings configured, what the time limit leaves "
            f"(at most {VECTOR_WAIT_SECONDS:g} s) is spent waiting for the new vectors; "
            "those still missing are embedded by the next process that opens the file."
        ),
    )
    hook.add_argument(
        "--time-limit",
        metavar="SECONDS",
        type=time_limit,
        default=CAPTURE_SECONDS,
        help=f"stop capturing after this long (default {CAPTURE_SECONDS:g}; keep it well "
        "under the hook's timeout)",
    )
    capture = command(
        "claude-code-capture",
        run_claude_code_capture,
        "capture Claude Code transcript files (a backfill)",
        (
            "Capture Claude Code transcript files (~/.claude/projects/PROJECT/SESSION.jsonl) "
            "the way claude-code-hook does, e.g. sessions that ended before the hook was "
            "set up. Each file is its session, named by the file (SESSION.jsonl), and shares "
            "that session's cursor with the hook: nothing is stored twice."
        ),
    )
    capture.add_argument("files", metavar="TRANSCRIPT", nargs="+", type=Path)
    capture.add_argument(
        "--session", help="the session ID (one TRANSCRIPT only; default: its file name)"
    )


async def run_claude_code_hook(args: argparse.Namespace) -> int:
    # stdout is Claude Code's (it parses JSON there): this command writes only to stderr
    hook = await anyio.to_thread.run_sync(claude_code.read_hook_input, sys.stdin.fileno())
    started = anyio.current_time()
    with closing(await open_transcript(hook.transcript_path, hook.session_id)) as transcript:
        async with opened(args) as (memory, scope):
            done = await claude_code.capture(scope, transcript, time_limit=args.time_limit)
            left = args.time_limit - (anyio.current_time() - started)  # the wait is in it
            await wait_for_vectors(memory, min(VECTOR_WAIT_SECONDS, max(left, 0.0)))
    warn_left_out(hook.session_id, done.left_out)
    line = capture_line(hook.session_id, done, args.time_limit)
    print(f"amem: {hook.event or 'hook'}: {line}", file=sys.stderr)
    return 0


async def run_claude_code_capture(args: argparse.Namespace) -> int:
    if args.session is not None and len(args.files) > 1:
        raise InvalidInput("--session names the session of one TRANSCRIPT; give one file")
    named = [(path, args.session or path.stem) for path in args.files]
    for path, session in named:  # all checked before the database opens: a bad one changes nothing
        (await open_transcript(path, session)).close()
    captures = []
    async with opened(args) as (memory, scope):
        for path, session in named:
            with closing(await open_transcript(path, session)) as transcript:
                report = progress(f"claude-code-capture {session} (bytes)")
                done = await claude_code.capture(scope, transcript, progress=report)
            warn_left_out(session, done.left_out)
            captures.append((session, done))
        await wait_for_vectors(memory)
    data = {"captures": [capture_record(done) for _, done in captures]}
    show(args, data, "\n".join(capture_line(session, done, None) for session, done in captures))
    return 0


async def open_transcript(path: Path, session: str) -> claude_code.Transcript:
    return await anyio.to_thread.run_sync(claude_code.open_transcript, path, session)


def capture_record(done: claude_code.Captured) -> dict[str, Any]:
    """A capture, as ``--json`` shows it: the ``CaptureResult`` and the lines left out."""
    return done.result.model_dump(mode="json") | {
        "malformed_lines": done.left_out.malformed,
        "too_long_lines": done.left_out.too_long,
        "finished": done.finished,
    }


def capture_line(session: str, done: claude_code.Captured, time_limit: float | None) -> str:
    result = done.result
    line = (
        f"session {session}: cursor {result.cursor}: stored {len(result.stored)}, "
        f"{len(result.duplicates)} already stored, {result.skipped} skipped"
    )
    if not done.finished:
        line += f"; stopped at the time limit ({time_limit:g} s): the next run goes on from there"
    return line


def time_limit(value: str) -> float:
    """``--time-limit``: seconds, 0 or more (0: one slice)."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 3_600:
        raise argparse.ArgumentTypeError("must be a number of seconds from 0 to 3600")
    return seconds


def warn_left_out(session: str, left_out: claude_code.LeftOut) -> None:
    """On stderr: the transcript's lines left out because they cannot be read."""
    for numbers, why in (
        (left_out.malformed, "not JSON objects (not JSON, not UTF-8 or nested too deep)"),
        (left_out.too_long, f"longer than {MAX_TRANSCRIPT_LINE_BYTES >> 20} MiB"),
    ):
        if numbers:
            shown = ", ".join(map(str, numbers[:10])) + (", ..." if len(numbers) > 10 else "")
            print(
                f"amem: warning: session {session}: left out {len(numbers)} transcript "
                f"lines {why}: lines {shown}",
                file=sys.stderr,
            )


async def run_pin(args: argparse.Namespace) -> int:
    async with opened(args) as (_, scope):
        memory = await scope.pin(args.memory_id, pinned=not args.unpin)
    state = "pinned" if memory.pinned else "not pinned"
    show(args, memory, f"{memory.id} is {state} ({memory.tier}): {memory.text}")
    return 0


async def run_consolidate(args: argparse.Namespace) -> int:
    async with opened(args) as (_, scope):
        done = await scope.consolidate(dry_run=args.dry_run)
    verb = ("would delete", "would promote") if done.dry_run else ("deleted", "promoted")
    lines = [
        f"{verb[0]} {len(done.deleted)} expired working notes, {verb[1]} "
        f"{len(done.promotions)} memories",
        *(f"  deleted  {memory_id}" for memory_id in done.deleted),
        *(f"  promoted {p.id} {p.from_tier} -> {p.to_tier}" for p in done.promotions),
    ]
    if done.dry_run:
        lines.append("(dry run: nothing was changed)")
    show(args, done, "\n".join(lines))
    return 0


async def run_compact_working(args: argparse.Namespace) -> int:
    async with opened(args) as (memory, scope):
        done = await scope.compact_working(args.session, keep=args.keep, dry_run=args.dry_run)
        await wait_for_vectors(memory)
    if not done.folded:
        text = f"nothing to fold: {len(done.kept)} working notes of {done.session} stay"
    elif done.memory is None:
        text = f"would fold {len(done.folded)} working notes; {len(done.kept)} stay"
        text += "\n(dry run: nothing was changed)"
    else:
        text = (
            f"folded {len(done.folded)} working notes into {done.memory.id} "
            f"(event {done.event_id}); {len(done.kept)} stay"
        )
    show(args, done, text)
    return 0
