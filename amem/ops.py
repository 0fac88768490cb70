"""Operations: export, import, backup, restore, and rebuilding the search index.

Files amem writes (archives, backups) appear atomically and never replace anything: the
data goes to a private temporary file in the target directory, is fsynced, then linked
to the target name, which fails if the name exists (``target_exists``). A path with a
``..`` component is refused, and a symlink at the target is never followed
(``path_not_allowed``). Imports and restores require an empty destination and validate
the whole archive before committing anything (``archive_invalid``).
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import uuid
from collections.abc import Callable
from contextlib import closing, suppress
from pathlib import Path
from typing import Any

from . import archive, search
from .archive import Archive
from .db.drivers import open_sqlite
from .db.schema import SCHEMA_VERSION
from .db.writer import storage_error
from .errors import InvalidInput, StorageError
from .facts import FADING_KINDS, topic_cue
from .inputs import db_time, utc_now

Progress = Callable[[int, int], None]


def private_temp(target: Path) -> Path:
    return target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")


def checked_target(path: str | os.PathLike[str], root: str | os.PathLike[str] | None) -> Path:
    """The absolute target path, refused if it climbs with ``..``, leaves ``root``, is a
    symlink, or exists."""
    path = Path(path)
    if ".." in path.parts:
        raise InvalidInput("the path must not contain '..'", code="path_not_allowed")
    try:
        parent = path.expanduser().absolute().parent.resolve(strict=True)
    except (FileNotFoundError, NotADirectoryError):
        raise InvalidInput("the target directory does not exist", code="path_not_allowed") from None
    if root is not None and not parent.is_relative_to(Path(root).resolve()):
        raise InvalidInput("the path leads outside the allowed directory", code="path_not_allowed")
    target = parent / path.name
    if target.is_symlink():
        raise InvalidInput(
            "the target is a symlink; amem does not follow it", code="path_not_allowed"
        )
    if target.exists():
        raise StorageError("the target file exists; amem never overwrites", code="target_exists")
    return target


def os_error(what: str, exc: OSError) -> StorageError:
    """A failed file write; the partial file is always removed by the caller."""
    code = (
        "storage_full"
        if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
        else "storage_error"
    )
    return StorageError(
        f"{what} ({exc.strerror or 'I/O error'}); no partial file is left", code=code
    )


def publish(temp: Path, target: Path) -> None:
    """fsync ``temp`` and give it the ``target`` name, which must not exist yet."""
    with open(temp, "rb+") as handle:
        os.fsync(handle.fileno())
    try:
        os.link(temp, target)  # unlike rename, never replaces an existing file
    except FileExistsError:
        raise StorageError(
            "the target file exists; amem never overwrites", code="target_exists"
        ) from None
    finally:
        temp.unlink(missing_ok=True)
    directory = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def write_archive(
    conn: sqlite3.Connection, target: Path, progress: Progress | None
) -> dict[str, int]:
    """Run on a reader connection inside one read transaction: a consistent snapshot."""
    temp = private_temp(target)
    counts: dict[str, int] = dict.fromkeys(archive.TABLES, 0)
    total = sum(
        conn.execute(f"select count(*) from {table}").fetchone()[0] for table in archive.TABLES
    )
    try:
        with open(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w",
                  encoding="utf-8") as out:  # fmt: skip
            version = conn.execute("pragma user_version").fetchone()[0]
            out.write(archive.line(archive.header(version, db_time(utc_now()))))
            for table, row in archive.dump_rows(conn):
                out.write(archive.line({"table": table, "row": row}))
                counts[table] += 1
                done = sum(counts.values())
                if progress and (done % 1000 == 0 or done == total):
                    progress(done, total)
            out.write(archive.line({"end": True, "rows": sum(counts.values())}))
        publish(temp, target)
    except OSError as exc:
        raise os_error("writing the archive failed", exc) from None
    finally:
        with suppress(OSError):
            temp.unlink(missing_ok=True)
    return counts


def read_archive(path: str | os.PathLike[str]) -> Archive:
    try:
        with open(path, encoding="utf-8") as handle:
            return archive.parse(handle)
    except UnicodeDecodeError:
        raise archive.invalid("the file is not UTF-8 text") from None
    except FileNotFoundError:
        raise InvalidInput("the archive file does not exist") from None


def read_backup(path: str | os.PathLike[str]) -> Archive:
    """A SQLite backup, read without writing to it, as a validated archive."""
    source = Path(path)
    if not source.is_file():
        raise InvalidInput("the backup file does not exist")
    try:
        conn = open_sqlite(str(source), readonly=True)
    except sqlite3.Error:
        raise archive.invalid("the backup cannot be opened as SQLite") from None
    with closing(conn):
        try:
            version = conn.execute("pragma user_version").fetchone()[0]
            if not 1 <= version <= SCHEMA_VERSION:
                raise archive.invalid("the backup's schema version is not one this amem reads")
            lines = [archive.line(archive.header(version, db_time(utc_now())))]
            lines += [archive.line({"table": t, "row": r}) for t, r in archive.dump_rows(conn)]
        except sqlite3.DatabaseError:
            raise archive.invalid("the backup is not a readable amem database") from None
    lines.append(archive.line({"end": True, "rows": len(lines) - 1}))
    return archive.parse(lines)


def backup_file(db_path: Path, target: Path) -> None:
    """Copy the database with SQLite's backup API (consistent while writers run)."""
    temp = private_temp(target)
    try:
        with closing(open_sqlite(str(db_path), readonly=True)) as source, closing(
            sqlite3.connect(temp)
        ) as copy:  # fmt: skip
            source.backup(copy)
            copy.execute("pragma journal_mode = delete")  # one self-contained file
        os.chmod(temp, 0o600)
        publish(temp, target)
    except OSError as exc:
        raise os_error("writing the backup failed", exc) from None
    except sqlite3.Error as exc:
        raise storage_error(exc) from None
    finally:
        with suppress(OSError):
            temp.unlink(missing_ok=True)


# --- loading an archive ----------------------------------------------------------------

IS_EMPTY = """
select not exists (select 1 from events) and not exists (select 1 from personas)
   and not exists (select 1 from memories) and not exists (select 1 from checkpoints)
   and not exists (select 1 from capture_cursors)
"""
INSERTS = {
    "events": """insert into events (seq, id, persona, project, session, role, category,
        source, text, occurred_at, ingested_at, status, error, attempts)
        values (:seq, :id, :persona, :project, :session, :role, :category, :source, :text,
        :occurred_at, :ingested_at, :status, :error, :attempts)""",
    "personas": """insert into personas (persona, version, text, note, created_at)
        values (:persona, :version, :text, :note, :created_at)""",
    "memories": """insert into memories (num, id, persona, project, event_id, text, quote,
        quote_start, quote_end, kind, basis, confidence, subject, fact_key, valid_at,
        invalid_at, chain_order, revoked_at, emotion, valence, arousal, created_at, gist,
        cue_key)
        values (:num, :id, :persona, :project, :event_id, :text, :quote, :quote_start,
        :quote_end, :kind, :basis, :confidence, :subject, :fact_key, :valid_at, :invalid_at,
        :chain_order, :revoked_at, :emotion, :valence, :arousal, :created_at, :gist,
        :cue_key)""",
    "relations": """insert into relations (from_id, to_id, kind, persona, project, note,
        created_at) values (:from_id, :to_id, :kind, :persona, :project, :note, :created_at)""",
    "checkpoints": """insert into checkpoints (num, persona, project, session, goal,
        completed, pending, constraints, next_action, covered_seq, created_at, invalidated_at)
        values (:num, :persona, :project, :session, :goal, :completed, :pending,
        :constraints, :next_action, :covered_seq, :created_at, :invalidated_at)""",
    "capture_cursors": """insert into capture_cursors (persona, project, instance, position,
        last_event_id, updated_at) values (:persona, :project, :instance, :position,
        :last_event_id, :updated_at)""",
}


Doc = tuple[str, str, str, str, str]
"""``(doc_kind, ref, persona, project, text or tokens)`` of one search document."""


def index_plan(data: Archive) -> list[Doc]:
    """What the search index holds for an archive: indexed events, current memories."""
    docs = [
        ("event", e.id, e.persona, e.project, e.text)
        for e in data.rows["events"]
        if e.category in search.INDEXED_CATEGORIES
    ]
    docs += [
        ("memory", m.id, m.persona, m.project, m.text)
        for m in data.rows["memories"]
        if m.revoked_at is None
    ]
    return docs


def load(conn: sqlite3.Connection, data: Archive, docs: list[Doc]) -> dict[str, int]:
    """Insert a validated archive into an empty database and index it, in one transaction.

    ``docs`` is ``index_plan(data)`` with each text replaced by its segmented tokens.
    """
    if not conn.execute(IS_EMPTY).fetchone()[0]:
        raise StorageError(
            "the destination already holds data; import into a new file", code="target_exists"
        )
    tokens = {(kind, ref): segmented for kind, ref, _, _, segmented in docs}
    for table in archive.TABLES:
        for row in data.rows[table]:
            values = row.model_dump()
            if table == "checkpoints":
                for column in archive.JSON_COLUMNS:
                    values[column] = json.dumps(values[column], ensure_ascii=False)
            if table == "memories" and needs_cue(values):
                values["cue_key"] = topic_cue(tokens[("memory", values["id"])])
            conn.execute(INSERTS[table], values)
    for kind, ref, persona, project, segmented in docs:
        search.index_doc(conn, persona, project, kind, ref, segmented)
    return data.count()


def needs_cue(memory: dict[str, Any]) -> bool:
    """Older archives carry no cue keys: compute them for current fading memories."""
    return (
        memory["cue_key"] is None
        and memory["gist"] is None
        and memory["kind"] in FADING_KINDS
        and memory["revoked_at"] is None
    )
