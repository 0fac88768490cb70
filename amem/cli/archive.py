"""``export``, ``import``, ``backup``, ``restore`` and ``doctor``: the database as a whole.

``export -`` and ``backup -`` write to stdout: through a private temporary file, copied to
stdout once it is complete; what they say goes to stderr then, so stdout holds the archive
or the database file alone."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ..errors import InvalidInput
from .common import Command, answer, handler, opened, progress, show

if TYPE_CHECKING:
    from ..memory import Memory, Scope
    from ..models import ArchiveResult, DoctorReport

STDOUT = "-"
"""The PATH of ``export`` and ``backup`` that means stdout."""

Write = Callable[["Memory", str], Awaitable["ArchiveResult"]]
"""What ``export`` or ``backup`` does: ``write(memory, path)``."""


def add_commands(command: Command) -> None:
    for name, run, summary, text in (
        (
            "export",
            writing(
                export,
                lambda r: f"exported {sum(r.counts.values())} rows to {where(r)}: {per_table(r)}",
            ),
            "write every authoritative table to a JSONL archive",
            (
                "Write events, personas, memories, relations, checkpoints and capture cursors "
                "from one consistent snapshot to a new JSONL archive at PATH. Never overwrites; "
                "the file appears atomically. PATH '-' writes the archive to stdout (once it "
                "is complete; the summary then goes to stderr). Vectors and the search index "
                "are left out (they are rebuilt). Progress goes to stderr."
            ),
        ),
        (
            "import",
            handler(
                import_archive,
                lambda r: f"imported {sum(r.counts.values())} rows: {per_table(r)}",
            ),
            "load an archive into an empty database",
            (
                "Load the archive at PATH into the database, which must be empty, and rebuild "
                "the search index, in one transaction that validates every row as it streams "
                "in (shape, times, quotes, roles, scope links, checkpoint coverage). A bad "
                "archive is refused (archive_invalid) and nothing is written. PATH '-' reads "
                "the archive from stdin ('amem export - | amem import --db NEW.db -'). "
                "Progress goes to stderr. Run reindex afterwards for vectors."
            ),
        ),
        (
            "backup",
            writing(backup, lambda r: f"backed up to {where(r)}"),
            "copy the database to a new file (safe while in use)",
            (
                "Copy the database to a new file at PATH with SQLite's backup API, consistent "
                "even while other processes write. Never overwrites; the copy is readable by "
                "its owner only. PATH '-' writes the copy (one self-contained SQLite file) to "
                "stdout, which must not be a terminal: 'amem backup - | gzip > copy.db.gz'; "
                "the summary then goes to stderr."
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

    checks = command(
        "doctor",
        handler(doctor, doctor_lines, status=lambda report: 0 if report.ok else 1),
        "check the database and say how to fix problems",
        (
            "Check integrity, foreign keys, the search index against its content (FTS5), "
            "search coverage, text encoding, whether an export would import, orphans (a "
            "correction event without its memory and the like), pending and failed "
            "extractions, vector coverage and the schema version; print counts. Exits 1 "
            "when it finds a problem, with what to run."
        ),
    )
    checks.add_argument(
        "--rebuild-index", action="store_true", help="first rebuild the search index from the data"
    )


def writing(
    write: Write, describe: Callable[[ArchiveResult], str]
) -> Callable[[argparse.Namespace], Awaitable[int]]:
    """The handler of ``export`` or ``backup``: ``write`` to PATH and say so; PATH ``-``:
    to a private temporary file, then copied to stdout, the summary on stderr."""

    async def run(args: argparse.Namespace) -> int:
        if args.path != STDOUT:
            await answer(args, lambda _, memory, __: write(memory, args.path), describe)
            return 0
        import tempfile
        from contextlib import redirect_stdout

        out = stdout_bytes(terminal=write is export)
        with tempfile.TemporaryDirectory(prefix="amem-") as folder:
            async with opened(args) as (memory, _):
                result = await write(memory, str(Path(folder) / "out"))
            copy_out(Path(result.path), out)
        result = result.model_copy(update={"path": STDOUT})
        with redirect_stdout(sys.stderr):
            show(args, result, describe(result))
        return 0

    return run


def stdout_bytes(*, terminal: bool) -> BinaryIO:
    """Where a file goes for ``-``: stdout's bytes (a terminal only if ``terminal``)."""
    out: BinaryIO | None = getattr(sys.stdout, "buffer", None)
    if out is None:
        raise InvalidInput("stdout takes no bytes here: give a file PATH instead of '-'")
    if not terminal and sys.stdout.isatty():
        raise InvalidInput(
            "stdout is a terminal: redirect it to a file or a pipe, or give a file PATH "
            "instead of '-'"
        )
    return out


def copy_out(path: Path, out: BinaryIO) -> None:
    """The file at ``path`` to ``out`` (stdout's bytes), after what was printed before."""
    import shutil

    sys.stdout.flush()
    with path.open("rb") as source:
        shutil.copyfileobj(source, out)
    out.flush()


def where(result: ArchiveResult) -> str:
    return "stdout" if result.path == STDOUT else result.path


async def export(memory: Memory, path: str) -> ArchiveResult:
    return await memory.export(path, progress=progress("export"))


async def import_archive(args: argparse.Namespace, memory: Memory, _: Scope) -> ArchiveResult:
    """PATH ``-``: stdin, first copied whole to a private temporary file (the archive is
    read twice: once to count its rows for the progress, once to load them)."""
    if args.path != STDOUT:
        return await memory.import_archive(args.path, progress=progress("import"))
    import tempfile

    import anyio.to_thread

    with tempfile.TemporaryDirectory(prefix="amem-") as folder:
        spooled = Path(folder) / "archive.jsonl"
        await anyio.to_thread.run_sync(copy_stdin, spooled)
        result = await memory.import_archive(spooled, progress=progress("import"))
    return result.model_copy(update={"path": STDOUT})


def copy_stdin(path: Path) -> None:
    """stdin's bytes to a new file at ``path``."""
    import shutil

    source: BinaryIO | None = getattr(sys.stdin, "buffer", None)
    if source is None:
        raise InvalidInput("stdin gives no bytes here: give the archive's PATH instead of '-'")
    if sys.stdin.isatty():
        raise InvalidInput("stdin is a terminal: pipe the archive in, or give its PATH")
    with path.open("xb") as out:
        shutil.copyfileobj(source, out)


async def backup(memory: Memory, path: str) -> ArchiveResult:
    return await memory.backup(path)


async def run_restore(args: argparse.Namespace) -> int:
    async with opened(args) as (memory, _):
        result = await memory.restore(args.path, progress=progress("restore"))
    show(args, result, f"restored {sum(result.counts.values())} rows into {memory.path}")
    return 0


def per_table(result: ArchiveResult) -> str:
    """``5 events, 1 personas, ...``"""
    return ", ".join(f"{n} {table}" for table, n in result.counts.items())


async def doctor(args: argparse.Namespace, memory: Memory, _: Scope) -> DoctorReport:
    return await memory.doctor(rebuild_index=args.rebuild_index)


def doctor_lines(report: DoctorReport) -> str:
    lines = [f"schema version {report.schema_version}"]
    for check in report.checks:
        mark = "ok  " if check.ok else ("FAIL" if check.severity == "error" else "warn")
        lines.append(f"{mark}  {check.name}: {check.detail}")
        if check.fix and not check.ok:
            lines.append(f"      fix: {check.fix}")
    lines.append("counts: " + ", ".join(f"{n} {t}" for t, n in report.counts.items()))
    return "\n".join(lines)
