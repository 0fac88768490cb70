"""Archives and backups under adversarial use (issue 13).

- Erasing an event a checkpoint covers leaves exports and backups restorable; files
  written before that was so import too; doctor says when a database's export would not
  import, using import's own validation.
- Temporary files of backups and exports are private from the moment they exist, a failed
  write leaves nothing (not even SQLite's journal), and what a killed process left is
  removed by the next write into the directory, while a live process's file never is.
- Text that does not decode is named (table and key) by doctor and by export.
- Crafted backups and archives are refused with ``archive_invalid``: never a crash, never
  unbounded memory. Imports stream: peak memory does not grow with the archive.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest
from helpers import amem_cli
from test_ops import PERSONA, PROJECT, dump, populate
from test_ops import good_archive as good_archive  # a fixture, shared

import amem
from amem.ops.files import HOST

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]  # see tests/conftest.py

ROOT = Path(__file__).resolve().parent.parent
BULK_EVENTS = 80_000
"""Rows of about 1 kB: a backup or export of them takes long enough to be caught at it."""


def settings() -> amem.Settings:
    return amem.Settings()


def temp_files(directory: Path) -> list[str]:
    """amem's temporary files and SQLite's companions of them (all hidden)."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def sql(path: Path, *statements: str) -> None:
    with closing(sqlite3.connect(path)) as conn:
        for statement in statements:
            conn.execute(statement)
        conn.commit()


@pytest.fixture(scope="module")
def sample(good_archive: Path) -> Path:
    """A directory holding ``populate``'s database (source.db), an archive of it
    (good.jsonl) and a backup of it (backup.db)."""
    result = amem_cli(
        "backup", "--db", good_archive.parent / "source.db", good_archive.parent / "backup.db"
    )
    assert result.returncode == 0, result.stderr
    return good_archive.parent


@pytest.fixture(scope="module")
def big_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An amem database of about 90 MB (reference events, written with plain SQL)."""
    path = tmp_path_factory.mktemp("big") / "big.db"
    anyio.run(populate_path, path)
    sql(
        path,
        f"""
        with recursive n(i) as (select 1 union all select i + 1 from n where i < {BULK_EVENTS})
        insert into events (id, persona, project, role, category, text, occurred_at,
                            ingested_at, status)
        select 'bulk-' || i, 'bulk', 'bulk', 'user', 'reference', hex(randomblob(500)),
               '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z', 'stored' from n
    """,
    )
    return path


async def populate_path(path: Path) -> None:
    async with amem.open(path, settings=settings()) as mem:
        await populate(mem)


# --- erasure and checkpoints ----------------------------------------------------------


async def test_erasing_a_covered_event_keeps_exports_and_backups_restorable(
    tmp_path: Path,
) -> None:
    async with amem.open(tmp_path / "a.db", settings=settings()) as mem:
        s = mem.scope(persona=PERSONA, project=PROJECT)
        covered = await s.submit_event("step one done", role="user", event_id="x1", session="t")
        await s.submit_event("step two", role="user", event_id="x2", session="t")
        await s.save_checkpoint("t", goal="finish", covered_seq=covered.seq)
        await s.delete(event_id="x1")
        await mem.export(tmp_path / "a.jsonl")
        await mem.backup(tmp_path / "a.backup")
        report = await mem.doctor()
        assert report.ok, report.checks
    with closing(sqlite3.connect(tmp_path / "a.db")) as conn:
        assert conn.execute("select covered_seq from checkpoints").fetchall() == [(None,)]
    for name, load in (("b.db", "import_archive"), ("c.db", "restore")):
        async with amem.open(tmp_path / name, settings=settings()) as mem:
            source = tmp_path / ("a.jsonl" if load == "import_archive" else "a.backup")
            result = await getattr(mem, load)(source)
            assert result.counts["checkpoints"] == 1
            assert (await mem.doctor()).ok


async def test_files_written_before_erasure_cleared_coverage_import(
    tmp_path: Path, sample: Path
) -> None:
    """Today's files hold checkpoints covering erased events; they load, covering
    nothing (a later event could be given the erased seq)."""
    archive = tmp_path / "old.jsonl"
    lines = (sample / "good.jsonl").read_text(encoding="utf-8").splitlines()
    lines = [line.replace('"covered_seq":2,', '"covered_seq":999,') for line in lines]
    archive.write_text("\n".join(lines) + "\n", encoding="utf-8")
    backup = tmp_path / "old.backup"
    shutil.copy(sample / "backup.db", backup)
    sql(backup, "update checkpoints set covered_seq = 999")

    for name, load, source in (("b.db", "import_archive", archive), ("c.db", "restore", backup)):
        async with amem.open(tmp_path / name, settings=settings()) as mem:
            await getattr(mem, load)(source)
            assert (await mem.doctor()).ok
        with closing(sqlite3.connect(tmp_path / name)) as conn:
            assert conn.execute("select covered_seq from checkpoints").fetchall() == [(None,)]


DOCTOR_SPOILS = {
    "a quote moved out of its event": (
        "update memories set quote = '我搬到苏州了' where quote = '我搬到杭州了'",
        "memories num 1: its quote does not occur in its event",
    ),
    "a checkpoint covering another session": (
        "update checkpoints set session = 'elsewhere'",
        "checkpoints num 1: it covers an event outside its session",
    ),
    "a naive timestamp": (
        "update events set occurred_at = '2026-01-01T09:00:00' where id = 'e1'",
        "events seq 1: occurred_at",
    ),
}


@pytest.mark.parametrize("spoil", list(DOCTOR_SPOILS))
async def test_doctor_flags_a_database_whose_export_would_not_import(
    tmp_path: Path, sample: Path, spoil: str
) -> None:
    statement, named = DOCTOR_SPOILS[spoil]
    db = tmp_path / "a.db"
    shutil.copy(sample / "source.db", db)
    sql(db, statement)
    async with amem.open(db, settings=settings()) as mem:
        report = await mem.doctor()
        await mem.export(tmp_path / "a.jsonl")  # export carries what it can read
    failed = {check.name: check for check in report.checks if not check.ok}
    assert not report.ok
    assert list(failed) == ["archive"]
    assert named in failed["archive"].detail
    assert "amem restore" in str(failed["archive"].fix)
    async with amem.open(tmp_path / "b.db", settings=settings()) as mem:
        with pytest.raises(amem.StorageError, match="archive_invalid"):
            await mem.import_archive(tmp_path / "a.jsonl")  # doctor was right


# --- text that does not decode -------------------------------------------------------


async def test_undecodable_text_is_named_by_doctor_and_export(tmp_path: Path, sample: Path) -> None:
    db = tmp_path / "a.db"
    shutil.copy(sample / "source.db", db)
    sql(db, "update events set text = cast(x'41ff42fe' as text) where id = 'e3'")
    async with amem.open(db, settings=settings()) as mem:
        report = await mem.doctor()
        with pytest.raises(amem.StorageError) as caught:
            await mem.export(tmp_path / "a.jsonl")
    failed = {check.name: check.detail for check in report.checks if not check.ok}
    assert failed == {
        "text encoding": "events seq 3: a text cell is not valid UTF-8",
        "archive": "an export would not import: events seq 3: its text is not valid UTF-8 text",
    }
    assert caught.value.code == "storage_error"
    assert "events seq 3: its text is not valid UTF-8 text" in caught.value.message
    assert "with text" not in caught.value.message  # sqlite3's own error quotes the bytes
    assert temp_files(tmp_path) == []


# --- temporary files -----------------------------------------------------------------


def amem_child(*args: str | Path, prelude: str = "", **options: Any) -> subprocess.Popen[str]:
    """``amem ARGS`` in a child process, ``prelude`` run first, without ``AMEM_*`` settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMEM_")}
    code = f"{prelude}\nimport sys\nfrom amem.cli import main\nsys.exit(main(sys.argv[1:]))"
    command = [sys.executable, "-c", code, *map(str, args)]
    return subprocess.Popen(command, env=env, text=True, **options)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """An empty directory to write archives and backups into."""
    (tmp_path / "out").mkdir()
    return tmp_path / "out"


def caught_writing(directory: Path, child: subprocess.Popen[str]) -> Path:
    """The temporary file ``child`` writes in ``directory``; the child is stopped there."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = [p for p in directory.iterdir() if p.name.endswith(".tmp")]
        if found:
            os.kill(child.pid, signal.SIGSTOP)
            return found[0]
        assert child.poll() is None, "the child finished before its file was seen"
        time.sleep(0.001)
    raise AssertionError("no temporary file appeared")


@pytest.mark.parametrize("operation", ["backup", "export"])
def test_a_temporary_file_is_private_at_once_and_swept_after_a_kill(
    out: Path, big_db: Path, operation: str
) -> None:
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    child = amem_child(operation, "--db", big_db, out / "first", **quiet)
    try:
        temp = caught_writing(out, child)
        assert temp.stat().st_mode & 0o777 == 0o600  # while the copy is being written
    finally:
        child.kill()
        child.wait()
    assert f".{child.pid}.{HOST}.tmp" in temp.name
    assert temp.exists()  # a killed process cannot clean up after itself

    result = amem_cli(operation, "--db", big_db, out / "second")
    assert result.returncode == 0, result.stderr
    assert temp_files(out) == []  # the next write into the directory removed it
    assert sorted(p.name for p in out.iterdir()) == ["second"]


@pytest.mark.parametrize(("operation", "command"), [("export", "status"), ("backup", "doctor")])
def test_the_next_command_on_the_database_removes_a_killed_copy(
    out: Path, big_db: Path, operation: str, command: str
) -> None:
    """The killed copy is a full copy of the database beside its target, where nothing
    else of amem may ever write again: the database records it, and the next command of
    any kind on the database removes it."""
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    child = amem_child(operation, "--db", big_db, out / "first", **quiet)
    try:
        temp = caught_writing(out, child)
    finally:
        child.kill()
        child.wait()
    assert temp.exists()
    result = amem_cli(command, "--db", big_db)
    assert result.returncode == 0, result.stderr
    assert temp_files(out) == []
    assert list(out.iterdir()) == []
    with closing(sqlite3.connect(big_db)) as conn:
        assert conn.execute("select count(*) from temp_files").fetchone() == (0,)


@pytest.mark.anyio
@pytest.mark.both_backends
async def test_an_erasure_removes_a_copy_killed_while_the_database_was_open(
    tmp_path: Path, out: Path, big_db: Path
) -> None:
    """An erasure cannot reach inside a copy, so it removes the copies that killed
    processes left, even those killed after this process opened the database."""
    db = shutil.copy(big_db, tmp_path / "mine.db")  # the erasure changes it
    async with amem.open(db) as mem:
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        child = amem_child("export", "--db", db, out / "first", **quiet)
        try:
            temp = await anyio.to_thread.run_sync(caught_writing, out, child)
        finally:
            child.kill()
            child.wait()
        assert temp.exists()
        scope = (await mem.scopes())[0]
        listed = await mem.scope(scope.persona, scope.project).list("events", limit=1)
        await mem.scope(scope.persona, scope.project).delete(event_id=listed.items[0].id)
        with anyio.fail_after(30):
            while temp_files(out):
                await anyio.sleep(0.1)


def test_only_stale_temporary_files_of_this_machine_are_swept(tmp_path: Path, out: Path) -> None:
    db = tmp_path / "a.db"
    anyio.run(populate_path, db)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process now
    living = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    uid = "0123456789abcdef0123456789abcdef"
    stale = f".old.db.{uid}.{gone.pid}.{HOST}.tmp"
    kept = [
        f".live.db.{uid}.{living.pid}.{HOST}.tmp",  # its process still runs
        f".remote.db.{uid}.{gone.pid}.0badc0de.tmp",  # made on another machine
        f".mine.db.{uid}.tmp",  # not amem's current naming: never guessed at
        ".notes.tmp",
        "notes.txt",
    ]
    try:
        for name in (stale, f"{stale}-journal", *kept):
            (out / name).write_text("x")
        result = amem_cli("backup", "--db", db, out / "copy.db")
        assert result.returncode == 0, result.stderr
    finally:
        living.kill()
        living.wait()
    assert sorted(p.name for p in out.iterdir()) == sorted([*kept, "copy.db"])


FILE_LIMIT = """
import resource
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))  # a write past 1 MiB: EFBIG
"""


@pytest.mark.parametrize("operation", ["backup", "export"])
def test_a_write_that_runs_out_of_space_leaves_no_file(
    out: Path, big_db: Path, operation: str
) -> None:
    """The kernel refuses the write itself (a file-size limit: no root, no tmpfs needed)."""
    child = amem_child(
        operation,
        "--db",
        big_db,
        out / "copy",
        prelude=FILE_LIMIT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 1
    assert "amem: error: storage_" in stderr
    assert list(out.iterdir()) == []  # no temporary file, no -journal


# --- crafted backups and archives --------------------------------------------------------

EVENT_COLUMNS = """
'assistant' as persona, 'support' as project, null as session, 'user' as role,
'reference' as category, null as source, '2026-01-01T00:00:00.000000Z' as occurred_at,
'2026-01-01T00:00:00.000000Z' as ingested_at, 'stored' as status, null as error,
0 as attempts
"""
CRAFTED_BACKUPS: dict[str, tuple[tuple[str, ...], str]] = {
    "a checkpoint list that is not JSON": (
        ("update checkpoints set completed = 'not json'",),
        "checkpoints num 1: its completed is not a JSON list",
    ),
    "a checkpoint list nested 100,000 deep": (
        ("update checkpoints set pending = printf('%.*c%.*c', 100000, '[', 100000, ']')",),
        "checkpoints num 1: its pending is not a JSON list",
    ),
    "a BLOB where text belongs": (
        ("update events set text = x'e68891ff' where id = 'e1'",),
        "events seq 1: its text holds a BLOB",
    ),
    "events as a view over an endless recursive CTE": (
        (
            "drop table events",
            f"""create view events as
            with recursive n(i) as (select 1 union all select i + 1 from n)
            select i as seq, 'v' || i as id, 'x' as text, {EVENT_COLUMNS} from n""",
        ),
        "events is not a plain table",
    ),
    "events as a view of an 800 MB text": (
        (
            "drop table events",
            f"""create view events as select 1 as seq, 'v' as id,
            hex(randomblob(400000000)) as text, {EVENT_COLUMNS}""",
        ),
        "events is not a plain table",
    ),
    "a cell larger than any amem writes": (
        ("update events set text = printf('%.*c', 20000000, 'x') where id = 'e3'",),
        "the backup is not a readable amem database (SQLITE_TOOBIG)",
    ),
    "an event longer than amem accepts": (
        ("update events set text = printf('%.*c', 100001, 'x') where id = 'e3'",),
        "events seq 3: text: String should have at most 100000 characters",
    ),
    "a column amem does not know": (
        ("alter table personas add column secret text",),
        "personas does not have amem's columns",
    ),
    "a required column missing": (
        ("alter table memories drop column quote",),
        "memories does not have amem's columns",
    ),
}


async def refused(tmp_path: Path, load: str, source: Path) -> amem.StorageError:
    """What loading ``source`` into a new file raised; the file is left as it was."""
    db = tmp_path / "new.db"
    async with amem.open(db, settings=settings()) as mem:
        before = dump(db)
        with pytest.raises(amem.StorageError) as caught:
            await getattr(mem, load)(source)
        assert dump(db) == before
    assert caught.value.code == "archive_invalid"
    return caught.value


@pytest.mark.parametrize("case", list(CRAFTED_BACKUPS))
async def test_a_crafted_backup_is_refused(tmp_path: Path, sample: Path, case: str) -> None:
    statements, expected = CRAFTED_BACKUPS[case]
    backup = tmp_path / "crafted.db"
    shutil.copy(sample / "backup.db", backup)
    sql(backup, *statements)
    assert expected in (await refused(tmp_path, "restore", backup)).message


def nested_row(lines: list[str]) -> list[str]:
    depth = 100_000
    return [lines[0], '{"table":"events","row":' + "[" * depth + "]" * depth + "}", *lines[1:]]


def overlong_row(lines: list[str]) -> list[str]:
    """The reference event (no memory quotes it) made 17 MiB long."""
    at = next(n for n, line in enumerate(lines) if '"id":"e3"' in line)
    row = json.loads(lines[at])
    row["row"]["text"] = "x" * (17 << 20)
    return [*lines[:at], json.dumps(row), *lines[at + 1 :]]


def an_event_last(lines: list[str]) -> list[str]:
    """Another scope's event (nothing points at it) moved behind every other table."""
    moved = next(n for n, line in enumerate(lines) if '"id":"o1"' in line)
    return [*lines[:moved], *lines[moved + 1 : -1], lines[moved], lines[-1]]


CRAFTED_ARCHIVES: dict[str, tuple[Callable[[list[str]], list[str]], str]] = {
    "a line nested 100,000 deep": (nested_row, "line 2 nests deeper than any line amem writes"),
    "a line of 17 MiB": (overlong_row, "line 4 is longer than any line amem writes"),
    "tables out of order": (
        an_event_last,
        ": tables must come in the order erased_events, people, events",
    ),
}


@pytest.mark.parametrize("case", list(CRAFTED_ARCHIVES))
async def test_a_crafted_archive_is_refused(tmp_path: Path, sample: Path, case: str) -> None:
    spoil, expected = CRAFTED_ARCHIVES[case]
    crafted = tmp_path / "crafted.jsonl"
    crafted.write_text("\n".join(spoil((sample / "good.jsonl").read_text().splitlines())) + "\n")
    assert expected in (await refused(tmp_path, "import_archive", crafted)).message


# --- streaming -------------------------------------------------------------------------


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """bench/import_rss.py: its archive generator and its child-process RSS measure."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # it imports its sibling ingest.py
    return importlib.import_module("import_rss")


def test_import_memory_does_not_grow_with_the_archive(tmp_path: Path, bench: ModuleType) -> None:
    peaks = []
    for events in (5_000, 60_000):
        archive = tmp_path / f"{events}.jsonl"
        bench.write_archive(archive, events)
        measured = bench.measure(archive, tmp_path / f"{events}.db", ROOT)
        assert measured["rows"] > events
        peaks.append(measured["peak_rss_mb"])
    assert peaks[1] - peaks[0] < 40, peaks  # holding the archive: about 140 MB more


@pytest.mark.both_backends
async def test_import_reports_progress_from_off_the_event_loop(
    tmp_path: Path, bench: ModuleType
) -> None:
    archive = tmp_path / "a.jsonl"
    rows = bench.write_archive(archive, 3_000)
    calls: list[tuple[int, int, bool]] = []
    loop_thread = threading.get_ident()

    def progress(done: int, total: int) -> None:
        calls.append((done, total, threading.get_ident() == loop_thread))

    async with amem.open(tmp_path / "a.db", settings=settings()) as mem:
        result = await mem.import_archive(archive, progress=progress)
    assert sum(result.counts.values()) == rows
    assert [call[:2] for call in calls] == [
        *((done, rows) for done in range(1000, rows, 1000)),
        (rows, rows),
    ]
    assert not any(on_loop for *_, on_loop in calls)  # rows load (and segment) elsewhere
