"""Helpers the test files share (each lives here once, never rewritten per file)."""

from __future__ import annotations

import contextlib
import hashlib
import html
import io
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import anyio
import anyio.lowlevel
import pytest

import amem
from amem.cli import main
from amem.db.schema import V1

if TYPE_CHECKING:
    import httpx
    from playwright.sync_api import Page

T = TypeVar("T")

JAN = "2026-01-01T00:00:00Z"


# --- the amem command ----------------------------------------------------------------------


@dataclass(frozen=True)
class Ran:
    """What a run of the ``amem`` command left: its exit status and what it printed."""

    returncode: int
    stdout: str
    stderr: str
    raw: bytes = b""
    """stdout's bytes (``stdout`` decodes them, what is not UTF-8 replaced): what
    ``export -`` and ``backup -`` write."""


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment without the user's ``AMEM_*`` settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMEM_")}
    return {**env, **(extra or {})}


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """``os.environ`` is ``env`` inside the block, and what it was again after it."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def amem_cli(
    *args: str | Path,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    input: str | None = None,
) -> Ran:
    """``amem ARGS`` in this process: ``amem.cli.main(argv)`` with stdin holding ``input``
    (a real file: commands read its descriptor), stdout (text and bytes, as a process's)
    and stderr captured, in ``cwd``, with ``clean_env(env)`` as the environment.
    ``--help`` exits through ``SystemExit`` like the installed script."""
    raw, err = io.BytesIO(), io.StringIO()
    out = io.TextIOWrapper(raw, encoding="utf-8", newline="", write_through=True)
    with (
        io.TextIOWrapper(tempfile.TemporaryFile(), encoding="utf-8") as text_in,
        environment(clean_env(env)),
        contextlib.chdir(cwd) if cwd else contextlib.nullcontext(),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        text_in.buffer.write((input or "").encode())
        text_in.buffer.seek(0)
        saved_stdin, sys.stdin = sys.stdin, text_in
        try:
            status = main([str(arg) for arg in args])
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
        finally:
            sys.stdin = saved_stdin
    out.flush()
    printed = raw.getvalue()
    return Ran(status, printed.decode("utf-8", errors="replace"), err.getvalue(), printed)


def amem_process(*args: str | Path, **options: Any) -> subprocess.CompletedProcess[str]:
    """``python -m amem ARGS`` as a real process (for what only a process shows: the
    installed entry point, signals, exit, a kill), with ``clean_env(env)`` as its
    environment; ``options`` go to ``subprocess.run``."""
    env = clean_env(options.pop("env", None))
    command = [sys.executable, "-m", "amem", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, **options)


def cli_ok(*args: str | Path, **options: Any) -> str:
    """Run a command that must succeed (``amem_cli``); return its stdout (stderr carries
    no error)."""
    result = amem_cli(*args, **options)
    assert result.returncode == 0, result.stderr
    assert "error" not in result.stderr
    return result.stdout


def help_text(*command: str) -> str:
    """What ``amem COMMAND --help`` prints (it must succeed), its white space folded into
    single spaces: argparse wraps lines where the terminal's width says."""
    result = amem_cli(*command, "--help")
    assert result.returncode == 0, result.stderr
    return " ".join(result.stdout.split())


# --- writing through the API ---------------------------------------------------------------


def memory_draft(
    text: str, quote: str, kind: str = "fact", basis: str = "user_statement", **fields: Any
) -> dict[str, Any]:
    """A memory as ``Scope.add_memories`` and the ``memory_add`` tool take it."""
    return {"text": text, "quote": quote, "kind": kind, "basis": basis, **fields}


async def derive(
    scope: amem.Scope,
    event: str,
    text: str | None = None,
    quote: str | None = None,
    *,
    event_id: str | None = None,
    role: str = "user",
    session: str | None = None,
    at: str = JAN,
    kind: str = "fact",
    basis: str | None = None,
    person: str | None = None,
    **draft: object,
) -> amem.MemoryRecord:
    """An event saying ``event`` (of ``person``'s relationship) and one memory derived from
    it: ``text`` (default ``Memory of <event>``) quoting ``quote`` (default: all of it), on
    the basis of what the event's role says (a user statement, else an assistant
    expression) unless ``basis`` names another."""
    receipt = await scope.submit_event(
        event, role=role, event_id=event_id, session=session, occurred_at=at, person=person
    )
    basis = basis or ("user_statement" if role == "user" else "assistant_expression")
    fields = {
        "text": text or f"Memory of {event}",
        "quote": event if quote is None else quote,
        "kind": kind,
        "basis": basis,
        **draft,
    }
    [memory] = await scope.add_memories(receipt.event_id, [fields])
    return memory


async def remember(
    scope: amem.Scope, event_id: str, text: str, quote: str, *, at: str = JAN, **draft: object
) -> amem.MemoryRecord:
    """A user event ``text`` in session ``s`` and one fact quoting ``quote`` from it."""
    return await derive(
        scope, text, f"User said: {quote}", quote, event_id=event_id, session="s", at=at, **draft
    )


async def remember_each(
    scope: amem.Scope, *texts: str, at: str = "2026-03-01T10:00:00+08:00"
) -> list[str]:
    """One user event per text, each with one fact saying exactly it; the facts' IDs."""
    return [(await derive(scope, text, text, at=at)).id for text in texts]


# --- the inspector's pages -----------------------------------------------------------------


def text_of(page: str) -> str:
    """A page's text as a reader sees it: tags gone, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def linked_ids(page: str, path: str) -> list[str]:
    """The ``id`` of each link of ``page`` to the inspector's ``path``, in order."""
    return re.findall(rf'href="{path}\?[^"]*?&amp;id=([^"&]+)"', page)


def next_page(page: str) -> str | None:
    found = re.search(r'<a href="([^"]+)">next page »</a>', page)
    return None if found is None else html.unescape(found.group(1))


async def every_page(client: httpx.AsyncClient, url: str, params: dict[str, str]) -> list[str]:
    """Every page of ``url``, following each "next page" link from the first."""
    pages = [(await client.get(url, params=params)).text]
    while (following := next_page(pages[-1])) is not None:
        response = await client.get(following)
        assert response.status_code == 200
        pages.append(response.text)
    return pages


@contextlib.asynccontextmanager
async def inspector_client(path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of the inspector's app over ``path``, in process."""
    import httpx

    from amem.inspector.app import create_app
    from amem.inspector.source import readable_file

    app = create_app(readable_file(path), amem.Settings())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        yield client


def inspect_process(*args: str, sigint: Any = signal.SIG_DFL) -> subprocess.Popen[str]:
    """``amem inspect ARGS`` as a real process: it serves until a signal stops it. It starts
    with SIGINT handled as ``sigint`` says, whatever this process does with it (a pytest
    worker may ignore it, and a child inherits that)."""
    return subprocess.Popen(
        [sys.executable, "-m", "amem", "inspect", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, sigint),
    )


def announced_url(process: subprocess.Popen[str]) -> str:
    assert process.stderr is not None
    line = process.stderr.readline()
    found = re.search(r"(http://127\.0\.0\.1:\d+/\S*)", line)
    assert found, line
    return found.group(1)


INSTALL_CHROMIUM = (
    "the browser test needs Debian's chromium: apt-get install -y --no-install-recommends "
    "chromium (.ci/run does this on a fresh machine)"
)


def chromium() -> str:
    found = shutil.which("chromium") or (
        "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
    )
    if found is None:
        pytest.fail(INSTALL_CHROMIUM)
    return found


@contextlib.contextmanager
def inspector_in_chromium(*args: str) -> Iterator[tuple[Page, str]]:
    """``amem inspect ARGS`` as a real process, read by Debian's chromium (headless, through
    Playwright's sync API: its async API is asyncio-only): a 1280x900 page, and the URL the
    inspector announced. After the block the inspector is interrupted, and no page may have
    opened a dialog (a script ran)."""
    from playwright.sync_api import sync_playwright

    executable = chromium()
    process = inspect_process(*args)
    dialogs: list[str] = []
    try:
        start = announced_url(process)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=executable, headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
            yield page, start
            browser.close()
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)
    assert dialogs == []  # no script ran


def fingerprint(path: Path) -> dict[str, str]:
    """The database file's bytes and its WAL's (missing and empty alike: SQLite may leave
    an empty WAL beside a file read in WAL mode)."""
    wal = Path(f"{path}-wal")
    content = {"db": path.read_bytes(), "wal": wal.read_bytes() if wal.exists() else b""}
    return {name: hashlib.sha256(data).hexdigest() for name, data in content.items()}


# --- reading a database file outside amem --------------------------------------------------


def rows(path: Path, sql: str, *params: object) -> list[tuple[Any, ...]]:
    """What ``sql`` returns from the file at ``path``, read with plain sqlite3 on a
    read-only connection (it never changes the file, not even by a checkpoint)."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return conn.execute(sql, params).fetchall()


def value(path: Path, sql: str, *params: object) -> Any:
    """The first column of the first row ``sql`` returns from the file at ``path``."""
    return rows(path, sql, *params)[0][0]


class EventRow(NamedTuple):
    seq: int
    persona: str
    project: str
    session: str | None
    role: str
    category: str
    text: str


@dataclass(frozen=True)
class FileReport:
    """A database file as plain sqlite3 sees it, with amem closed (or killed)."""

    user_version: int
    integrity: list[tuple[str]]
    events: dict[str, EventRow]
    """Every event row, by ID."""


SELECT_EVENT_ROWS = "select id, seq, persona, project, session, role, category, text from events"


def inspect_file(db_path: Path | str) -> FileReport:
    """The file's schema version, its integrity check and every event row. The connection
    may write: it recovers what a killed process left (a hot journal, a WAL). A PostgreSQL
    URL is read with psycopg itself: its version row, and ``ok`` for the integrity of a
    server that recovers on its own."""
    if str(db_path).startswith("postgresql://"):
        import psycopg

        with psycopg.connect(str(db_path)) as pg:
            [(version,)] = pg.execute("select max(version) from amem_schema").fetchall()
            found = pg.execute(SELECT_EVENT_ROWS).fetchall()
        return FileReport(version, [("ok",)], {id_: EventRow(*row) for id_, *row in found})
    with closing(sqlite3.connect(db_path)) as conn:
        user_version = conn.execute("pragma user_version").fetchone()[0]
        integrity = conn.execute("pragma integrity_check").fetchall()
        found = conn.execute(SELECT_EVENT_ROWS)
        events = {event_id: EventRow(*row) for event_id, *row in found}
    return FileReport(user_version, integrity, events)


INDEX_LAYOUT = ("search_fts_data", "search_fts_idx", "search_fts_config")
"""FTS5's own tables: how its segments lie, which the writer's idle upkeep rearranges."""


def dump(path: Path) -> list[str]:
    """Everything in a database file as SQL text, the search index as what it holds (every
    token of every document, with its position) rather than how FTS5 lays it out."""
    with closing(sqlite3.connect(path)) as conn:
        lines = [
            line for line in conn.iterdump() if not line.startswith(INDEX_LAYOUT, 13)
        ]  # 'INSERT INTO "' is 13 characters, then the table's name
        conn.execute("create virtual table temp.vocab using fts5vocab(main, search_fts, instance)")
        postings = conn.execute("select term, doc, col, offset from temp.vocab order by 1, 2, 3, 4")
        return lines + [repr(row) for row in postings]


def file_bytes(db_path: Path) -> bytes:
    """The database file and its companions (-wal, -shm), as one byte string to scan."""
    return b"".join(p.read_bytes() for p in db_path.parent.glob(db_path.name + "*"))


def cancel_ticks(every: int = 2000, cap: int = 2_000_000) -> Iterator[int]:
    """When to cancel an operation, in scheduler ticks: each of the first ``every`` ticks,
    then 5% more each time. How many ticks an uncancelled write needs depends on the disk
    (fsync) and the machine's load, not on amem; the growing tail keeps a loaded machine
    from running out of ticks before the write can finish, without skipping an early one."""
    yield from range(every)
    ticks = every
    while ticks < cap:
        ticks = int(ticks * 1.05)
        yield ticks


async def cancelled_after(ticks: int, call: Callable[[], Awaitable[T]]) -> list[T]:
    """Start ``call()`` in a task and cancel it after ``ticks`` scheduler checkpoints (0:
    before it runs at all). Returns ``[its result]`` if it finished first, else ``[]``."""
    finished: list[T] = []
    cancel_scope = anyio.CancelScope()

    async def run() -> None:
        with cancel_scope:
            finished.append(await call())

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        for _ in range(ticks):
            await anyio.lowlevel.checkpoint()
        cancel_scope.cancel()
    return finished


def undo_v12(conn: sqlite3.Connection) -> None:
    """Take back schema v12: the consolidation tables and ``events.evicted_at`` go, and
    ``relations`` keeps its two first kinds."""
    for table in ("consolidation_sources", "consolidation_runs"):
        conn.execute(f"drop table {table}")
    conn.execute("alter table events drop column evicted_at")
    conn.execute("delete from relations where kind not in ('related', 'corrects')")
    conn.execute("alter table relations rename to relations_v12")
    conn.execute(
        "create table relations (from_id text not null references memories (id)"
        " on delete cascade, to_id text not null references memories (id) on delete cascade,"
        " kind text not null check (kind in ('related', 'corrects')), persona text not null,"
        " project text not null, note text, created_at text not null,"
        " primary key (from_id, to_id, kind)) without rowid"
    )
    conn.execute("insert into relations select * from relations_v12")
    conn.execute("drop table relations_v12")
    conn.execute("create index relations_by_target on relations (to_id)")


def undo_v11(conn: sqlite3.Connection) -> None:
    """Take back schema v11, and v12 after it: the people tables, and the person columns
    with their indexes, go."""
    undo_v12(conn)
    for table in ("states", "assignments", "person_names", "people"):
        conn.execute(f"drop table {table}")
    for name in ("events_by_person", "memories_by_person"):
        conn.execute(f"drop index {name}")
    conn.execute("alter table events drop column person")
    for column in ("person", "about"):
        conn.execute(f"alter table memories drop column {column}")


def undo_v10(conn: sqlite3.Connection) -> None:
    """Take back schema v10, and v11 after it: ``temp_files``, ``scrubs`` and its triggers
    go."""
    undo_v11(conn)
    for name in ("events_erased", "memories_erased"):
        conn.execute(f"drop trigger {name}")
    conn.execute("drop table scrubs")
    conn.execute("drop table temp_files")


def undo_v9(conn: sqlite3.Connection) -> None:
    """Take back schema v9, and v10 after it: ``index_removals`` and its triggers go."""
    undo_v10(conn)
    for name in ("search_docs_removed", "search_docs_changed"):
        conn.execute(f"drop trigger {name}")
    conn.execute("drop table index_removals")


def undo_v8(conn: sqlite3.Connection) -> None:
    """Take back schema v8, and v9 after it: the tier columns and their indexes go."""
    undo_v9(conn)
    for name in ("memories_by_tier", "memories_by_expiry", "memories_pinned"):
        conn.execute(f"drop index {name}")
    for column in ("tier", "pinned", "expires_at"):
        conn.execute(f"alter table memories drop column {column}")


def undo_v7(conn: sqlite3.Connection) -> None:
    """Take back schema v7, and v8 after it: ``scope_usage`` and the triggers that keep
    it go."""
    undo_v8(conn)
    triggers = "select name from sqlite_master where type = 'trigger' and name like '%_usage_%'"
    for (name,) in conn.execute(triggers).fetchall():
        conn.execute(f"drop trigger {name}")
    conn.execute("drop table scope_usage")


def undo_v6(conn: sqlite3.Connection) -> None:
    """Take back schema v6 (it came after stemming), and v7 after it: their tables go,
    ``embeddings`` is back."""
    undo_v7(conn)
    for table in ("vectors", "vector_epochs", "erased_events", "scope_limits"):
        conn.execute(f"drop table {table}")
    conn.execute("alter table memories drop column revoke_reason")
    [embeddings] = [sql for sql in V1 if "create table embeddings" in sql]
    conn.execute(embeddings)
