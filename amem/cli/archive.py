"""``export``, ``import``, ``backup``, ``restore`` and ``doctor``: the database as a whole."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .common import Command, handler, opened, progress, show

if TYPE_CHECKING:
    from ..memory import Memory, Scope
    from ..models import ArchiveResult, DoctorReport


def add_commands(command: Command) -> None:
    for name, run, summary, text in (
        (
            "export",
            handler(
                export,
                lambda r: f"exported {sum(r.counts.values())} rows to {r.path}: {per_table(r)}",
            ),
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
            handler(
                import_archive,
                lambda r: f"imported {sum(r.counts.values())} rows: {per_table(r)}",
            ),
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
            handler(backup, lambda r: f"backed up to {r.path}"),
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


async def export(args: argparse.Namespace, memory: Memory, _: Scope) -> ArchiveResult:
    return await memory.export(args.path, progress=progress("export"))


async def import_archive(args: argparse.Namespace, memory: Memory, _: Scope) -> ArchiveResult:
    return await memory.import_archive(args.path, progress=progress("import"))


async def backup(args: argparse.Namespace, memory: Memory, _: Scope) -> ArchiveResult:
    return await memory.backup(args.path)


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
