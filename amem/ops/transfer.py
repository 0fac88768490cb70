"""Operations: export, import, backup and restore, each a plain function of a connection.

Exports and backups write new files the way ``files`` describes. Imports and restores
stream rows into an empty destination inside the writer's ONE transaction: each row is
validated as it comes (``archive.checked_row``: shape, then its links, looked up among
the rows already inserted) and inserted with its search-index entry; the first problem
raises and the writer rolls everything back. So memory stays flat however large the
archive is, and nothing is committed unless the whole archive is valid
(``archive_invalid``). Tombstones come first; an event one of them names is left out,
with its memories, their relations and its assignments (``Erased``), so a file that holds
both never brings the event back. People come before the events and memories that belong
to them: each row is inserted with its person already set, so its search document carries
its people's tokens, and each person's folded names (``person_names``) are written anew.

The same on SQLite and PostgreSQL, and the same archive from either. Rows keep their
numbers (``events.seq``, ``memories.num``, ...); on PostgreSQL a load then moves the
identity sequences past them (``catalog.advance_row_numbers``). A PostgreSQL database
backs up into a SQLite file (``copy_to_sqlite``), which restores into either.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from ..db.database import read_only_storage
from ..db.drivers import open_sqlite
from ..db.postgres import is_postgres
from ..db.schema import SCHEMA_VERSION, migrate, stored_version
from ..db.times import db_now, db_time, utc_now
from ..db.writer import immediate, storage_error
from ..errors import InvalidInput, StorageError
from ..limits import MAX_ARCHIVE_CELL_BYTES
from ..models import Progress
from ..search import index, pg_postings
from ..search.text import segment
from ..store import people, runs
from ..store.capacity import recount_usage
from ..store.facts import FADING_KINDS, topic_cue
from ..store.tombstones import is_erased
from . import archive, catalog, files
from .archive import BadRow, Row, Source

Loaded = tuple[dict[str, int], dict[str, int]]
"""Rows per table inserted, and rows per table left out because a tombstone erased their
event (``load``)."""
Load = Callable[..., Loaded]
"""``import_archive`` or ``restore_backup``: ``fn(conn, path=..., progress=...)``."""
PROGRESS_EVERY = 1000


# --- export and backup -----------------------------------------------------------------


def write_archive(
    conn: sqlite3.Connection, target: Path, temp: Path, progress: Progress | None
) -> dict[str, int]:
    """Run on a reader connection inside one read transaction: a consistent snapshot.
    The archive is written to ``temp`` (a ``files.temp_name``), then published."""
    counts: dict[str, int] = dict.fromkeys(archive.TABLES, 0)
    try:
        total = archive.count_rows(conn)
        with files.private_temp(temp):
            with (
                open(os.open(temp, os.O_WRONLY | os.O_NOFOLLOW), "w", encoding="utf-8") as out,
                closing(archive.dump_rows(conn)) as rows,
            ):
                version = stored_version(conn)
                out.write(archive.line(archive.header(version, db_time(utc_now()))))
                for table, row, where in rows:
                    out.write(row_line(table, row, where))
                    counts[table] += 1
                    report(progress, sum(counts.values()), total)
                out.write(archive.line({"end": True, "rows": sum(counts.values())}))
            report(progress, sum(counts.values()), total, final=True)
            files.publish(temp, target)
    except OSError as exc:
        raise files.os_error("writing the archive failed", exc) from None
    except BadRow as exc:
        raise StorageError(f"{exc}; nothing was exported") from None
    return counts


def row_line(table: str, row: dict[str, Any], where: str) -> str:
    try:
        return archive.line({"table": table, "row": row})
    except ValueError:
        raise BadRow(f"{where}: it holds NaN or an infinity") from None


def report(progress: Progress | None, done: int, total: int, *, final: bool = False) -> None:
    """Every ``PROGRESS_EVERY`` rows, and once at the end (``total`` may be an estimate)."""
    if progress and (final or (done % PROGRESS_EVERY == 0 and done < total)):
        progress(done, done if final else total)


def backup_file(db_path: Path | str, target: Path, temp: Path) -> None:
    """Copy the database with SQLite's backup API (consistent while writers run), through
    ``temp`` (a ``files.temp_name``)."""
    try:
        with files.private_temp(temp):  # 0600 before SQLite opens it
            with (
                closing(open_sqlite(str(db_path), readonly=True)) as source,
                closing(sqlite3.connect(temp)) as copy,
            ):
                source.backup(copy)
                copy.execute("pragma journal_mode = delete")  # one self-contained file
            files.publish(temp, target)
    except OSError as exc:
        raise files.os_error("writing the backup failed", exc) from None
    except sqlite3.Error as exc:
        raise storage_error(exc) from None


def copy_to_sqlite(conn: sqlite3.Connection, target: Path, temp: Path) -> dict[str, int]:
    """``backup`` of a PostgreSQL database: a new SQLite file holding the same data, read
    on one snapshot (``conn``, a reader's) and written through import's own load (every
    row validated, the search index built), through ``temp`` (a ``files.temp_name``).

    A file, as ``backup`` writes on SQLite, because a user who backs up expects a file that
    ``restore`` takes back, on either database, and that amem opens as it is; refusing
    would leave only ``pg_dump``, whose dump amem cannot restore or check. A backup of the
    whole server (roles, other databases, point-in-time recovery) stays ``pg_dump``'s or
    the server's own work."""
    try:
        with files.private_temp(temp):
            with (
                closing(open_sqlite(str(temp), readonly=False)) as copy,
                closing(archive.dump_rows(conn)) as rows,
            ):
                migrate(copy)
                with immediate(copy):
                    counts, _ = load(copy, rows, 0, None)
            files.publish(temp, target)
    except OSError as exc:
        raise files.os_error("writing the backup failed", exc) from None
    except BadRow as exc:
        raise StorageError(f"{exc}; nothing was backed up") from None
    except sqlite3.Error as exc:
        raise storage_error(exc) from None
    return counts


# --- import and restore ------------------------------------------------------------------


def import_archive(
    conn: sqlite3.Connection, path: str | os.PathLike[str], progress: Progress | None
) -> Loaded:
    """Run by the writer: load the archive at ``path`` into this empty database."""
    require_empty(conn)
    with reading_archive():
        total = max(0, count_lines(path) - 2)  # less the header and the end line
        with open(path, encoding="utf-8") as handle:
            return load(conn, archive.read_lines(handle), total, progress)


@contextmanager
def reading_archive() -> Iterator[None]:
    """Errors reading an archive file, as amem's errors (naming no stored text)."""
    try:
        yield
    except FileNotFoundError:
        raise InvalidInput("the archive file does not exist") from None
    except UnicodeDecodeError:
        raise archive.invalid("the file is not UTF-8 text") from None
    except BadRow as exc:
        raise archive.invalid(str(exc)) from None
    except OSError as exc:
        raise StorageError(f"the archive cannot be read ({exc.strerror or 'I/O error'})") from None


def read_tombstones(path: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """The ``(digest, erased_at)`` tombstones of the archive at ``path``, in a worker
    thread. The whole file is read and its structure checked (a truncated or malformed
    archive is ``archive_invalid``); rows of other tables are passed over unvalidated."""
    found: list[tuple[str, str]] = []
    with reading_archive(), open(path, encoding="utf-8") as handle:
        for table, values, where in archive.read_lines(handle):
            if table == "erased_events":
                row = archive.shaped_row(table, values, where)
                assert isinstance(row, archive.TombstoneRow)
                found.append((row.digest, row.erased_at))
    return found


def count_lines(path: str | os.PathLike[str]) -> int:
    with open(path, "rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(partial(handle.read, 1 << 20), b""))


def restore_backup(
    conn: sqlite3.Connection, path: str | os.PathLike[str], progress: Progress | None
) -> Loaded:
    """Run by the writer: load the SQLite backup at ``path`` (read, never written) into
    this empty database, through the same validation as an archive."""
    require_empty(conn)
    if not Path(path).is_file():
        raise InvalidInput("the backup file does not exist")
    immutable = read_only_storage(Path(path))
    if immutable and has_log(Path(path)):
        raise StorageError(
            "the backup's write-ahead log (-wal) is on read-only storage, where SQLite "
            "cannot read it; copy the file and its -wal to writable storage first",
            code="read_only",
        )
    try:
        source = open_sqlite(str(path), readonly=True, immutable=immutable)
    except sqlite3.Error:
        raise archive.invalid("the backup cannot be opened as SQLite") from None
    with closing(source):
        source.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_ARCHIVE_CELL_BYTES)
        try:
            with unreadable_backup():
                version = source.execute("pragma user_version").fetchone()[0]
                if not 1 <= version <= SCHEMA_VERSION:
                    raise BadRow("the backup's schema version is not one this amem reads")
                total = archive.count_rows(source)
            return load(conn, backup_rows(source), total, progress)
        except BadRow as exc:
            raise archive.invalid(str(exc)) from None


def has_log(path: Path) -> bool:
    """True when ``path`` has a ``-wal`` file holding frames (past its 32-byte header)."""
    try:
        return Path(f"{path}-wal").stat().st_size > 32
    except FileNotFoundError:
        return False


def backup_rows(source: sqlite3.Connection) -> Source:
    with unreadable_backup(), closing(archive.dump_rows(source)) as rows:
        yield from rows


@contextmanager
def unreadable_backup() -> Iterator[None]:
    """The backup's own SQLite errors (not the destination's) refuse it."""
    try:
        yield
    except sqlite3.Error as exc:
        name = getattr(exc, "sqlite_errorname", type(exc).__name__)
        raise BadRow(f"the backup is not a readable amem database ({name})") from None


IS_EMPTY = """
select not exists (select 1 from events) and not exists (select 1 from personas)
   and not exists (select 1 from memories) and not exists (select 1 from checkpoints)
   and not exists (select 1 from capture_cursors) and not exists (select 1 from people)
   and not exists (select 1 from states)
"""


def require_empty(conn: sqlite3.Connection) -> None:
    if not conn.execute(IS_EMPTY).fetchone()[0]:
        raise StorageError(
            "the destination already holds data; import into a new file", code="target_exists"
        )


def load(conn: sqlite3.Connection, rows: Source, total: int, progress: Progress | None) -> Loaded:
    """Validate, insert and index ``rows`` in the caller's transaction; rows per table
    inserted, and rows per table left out because a tombstone erased their event."""
    counts: dict[str, int] = dict.fromkeys(archive.TABLES, 0)
    erased = Erased()
    with counted_at_the_end(conn):
        done = load_rows(conn, rows, total, progress, counts, erased)
    # a run that froze an event a tombstone left out keeps no copy of its text
    runs.forget_events(conn, erased.events, db_now())
    catalog.advance_row_numbers(conn)
    if is_postgres(conn):
        # PostgreSQL plans from statistics that only ANALYZE (or autovacuum, minutes
        # later) gathers: recall over 100,000 memories just loaded took 59 ms at p50
        # instead of 6.6 (bench/recall.py --db)
        conn.execute("analyze")
    report(progress, done, total, final=True)
    return counts, erased.skipped


def load_rows(
    conn: sqlite3.Connection,
    rows: Source,
    total: int,
    progress: Progress | None,
    counts: dict[str, int],
    erased: Erased,
) -> int:
    """Insert the rows ``erased`` does not leave out, counting them in ``counts``; returns
    how many were read."""
    done = 0
    for table, values, where in rows:
        done += 1
        report(progress, done, total)
        if erased.leaves_out(table, values):
            continue
        row = archive.checked_row(conn, table, values, where)
        if erased.leaves_out_event(conn, row):
            continue
        insert(conn, table, row, where)
        counts[table] += 1
    return done


COUNTED_TABLES = ("events", "memories", "search_docs")
"""The tables whose ``<table>_usage_added`` trigger counts each row into its scope's one
row of ``scope_usage`` (``db.schema``)."""


@contextmanager
def counted_at_the_end(conn: sqlite3.Connection) -> Iterator[None]:
    """On PostgreSQL, count the scopes' usage and the index totals once after the load,
    not once per row: PostgreSQL keeps every update of a row as a new version until the
    transaction ends, and each update passes over the earlier ones, so a counter row
    updated per loaded row made a load of 200,000 rows take 40 minutes. Its counting
    triggers are off meanwhile (in the load's transaction: a failed load leaves them on).
    On SQLite a row updated in place costs the same each time: nothing changes."""
    if not is_postgres(conn):
        yield
        return
    for table in COUNTED_TABLES:
        conn.execute(f"alter table {table} disable trigger {table}_usage_added")
    loading = pg_postings.LOADING.set(True)
    try:
        yield
    finally:
        pg_postings.LOADING.reset(loading)
    recount_usage(conn)
    pg_postings.PgPostings(conn).recount_totals()
    for table in COUNTED_TABLES:
        conn.execute(f"alter table {table} enable trigger {table}_usage_added")


class Erased:
    """What a load leaves out because the tombstones already loaded (the file's own, and
    any the destination holds) erased it: events, then the memories derived from those
    events, then relations touching those memories, and the events' assignments."""

    def __init__(self) -> None:
        self.events: set[str] = set()
        self.memories: set[str] = set()
        self.skipped: dict[str, int] = {}

    def leaves_out_event(self, conn: sqlite3.Connection, row: Row) -> bool:
        """A validated event row whose tombstone is loaded."""
        if not isinstance(row, archive.EventRow):
            return False
        if not is_erased(conn, row.persona, row.project, row.id):
            return False
        self.events.add(row.id)
        return self.skip("events")

    def leaves_out(self, table: str, values: dict[str, Any]) -> bool:
        """A memory, relation or assignment row (not validated yet) that hangs on what was
        left out."""
        if table == "assignments" and names(values.get("event_id"), self.events):
            return self.skip(table)
        if table == "memories" and names(values.get("event_id"), self.events):
            if isinstance(values.get("id"), str):
                self.memories.add(values["id"])
            return self.skip(table)
        if table == "relations" and (
            names(values.get("from_id"), self.memories) or names(values.get("to_id"), self.memories)
        ):
            return self.skip(table)
        return False

    def skip(self, table: str) -> bool:
        self.skipped[table] = self.skipped.get(table, 0) + 1
        return True


def names(value: object, ids: set[str]) -> bool:
    return isinstance(value, str) and value in ids


INSERTS = {
    "erased_events": """insert into erased_events (digest, erased_at) values
        (:digest, :erased_at) on conflict (digest) do nothing""",
    "people": """insert into people (persona, project, id, display_name, aliases, locale,
        timezone, notes, version, created_at, updated_at)
        values (:persona, :project, :id, :display_name, :aliases, :locale, :timezone,
        :notes, :version, :created_at, :updated_at)""",
    "events": """insert into events (seq, id, persona, project, session, role, category,
        source, text, occurred_at, ingested_at, status, error, attempts, person, evicted_at)
        values (:seq, :id, :persona, :project, :session, :role, :category, :source, :text,
        :occurred_at, :ingested_at, :status, :error, :attempts, :person, :evicted_at)""",
    "personas": """insert into personas (persona, version, text, note, created_at)
        values (:persona, :version, :text, :note, :created_at)""",
    "memories": """insert into memories (num, id, persona, project, event_id, text, quote,
        quote_start, quote_end, kind, basis, confidence, subject, fact_key, valid_at,
        invalid_at, chain_order, revoked_at, revoke_reason, emotion, valence, arousal,
        created_at, gist, cue_key, tier, pinned, expires_at, person, about)
        values (:num, :id, :persona, :project, :event_id, :text, :quote, :quote_start,
        :quote_end, :kind, :basis, :confidence, :subject, :fact_key, :valid_at, :invalid_at,
        :chain_order, :revoked_at, :revoke_reason, :emotion, :valence, :arousal, :created_at,
        :gist, :cue_key, :tier, :pinned, :expires_at, :person, :about)""",
    "relations": """insert into relations (from_id, to_id, kind, persona, project, note,
        created_at) values (:from_id, :to_id, :kind, :persona, :project, :note, :created_at)""",
    "checkpoints": """insert into checkpoints (num, persona, project, session, goal,
        completed, pending, constraints, next_action, covered_seq, created_at, invalidated_at)
        values (:num, :persona, :project, :session, :goal, :completed, :pending,
        :constraints, :next_action, :covered_seq, :created_at, :invalidated_at)""",
    "capture_cursors": """insert into capture_cursors (persona, project, instance, position,
        last_event_id, updated_at) values (:persona, :project, :instance, :position,
        :last_event_id, :updated_at)""",
    "assignments": """insert into assignments (num, persona, project, event_id, from_person,
        to_person, reason, assigned_at) values (:num, :persona, :project, :event_id,
        :from_person, :to_person, :reason, :assigned_at)""",
    "states": """insert into states (persona, project, person, data, version, updated_at)
        values (:persona, :project, :person, :data, :version, :updated_at)""",
    "consolidation_runs": """insert into consolidation_runs (num, id, persona, project,
        session, status, input, candidate, error, result, digest, next_seq, next_offset,
        created_at, updated_at) values (:num, :id, :persona, :project, :session, :status,
        :input, :candidate, :error, :result, :digest, :next_seq, :next_offset, :created_at,
        :updated_at)""",
    "consolidation_sources": """insert into consolidation_sources (run_id, event_id)
        values (:run_id, :event_id)""",
}
DOC_KINDS = {"events": "event", "memories": "memory"}


def insert(conn: sqlite3.Connection, table: str, row: Row, where: str) -> None:
    """Insert one validated row and its search-index entry.

    The text is segmented (jieba) right here, on the writer's thread inside the load's
    transaction: the destination is empty and this transaction holds its write lock for
    the whole load anyway, so nothing waits that would not wait regardless, and the
    event loop never runs it."""
    values = row.model_dump()
    tokens = segment(values["text"]) if indexed(table, values) else None
    stored_json(table, values)
    if table == "memories" and tokens is not None and needs_cue(values):
        values["cue_key"] = topic_cue(values["text"], tokens)
    try:
        conn.execute(INSERTS[table], values)
    except sqlite3.IntegrityError:
        raise BadRow(f"{where}: its id or key appears twice") from None
    if isinstance(row, archive.PersonRow):
        people.write_names(conn, row.persona, row.project, row.id, row.display_name, row.aliases)
    if tokens is not None:  # after the row, with its people: index_doc reads them from it
        persona, project, ref = values["persona"], values["project"], values["id"]
        index.index_doc(conn, persona, project, DOC_KINDS[table], ref, tokens)


def stored_json(table: str, values: dict[str, Any]) -> None:
    """Turn the row's JSON cells (``archive.JSON_CELLS``) into the text the store keeps,
    written the way the store writes it (a memory's empty ``about`` is NULL)."""
    if table == "states":
        values["data"] = people.state_json(values["data"])
    elif table == "memories":
        about = values["about"]
        values["about"] = json.dumps(about, ensure_ascii=False) if about else None
    else:
        for column in archive.JSON_CELLS.get(table, ()):
            if values[column] is not None:  # NULL stays NULL (a run with no candidate)
                values[column] = json.dumps(values[column], ensure_ascii=False)


def indexed(table: str, row: dict[str, Any]) -> bool:
    if table == "events":
        return index.indexes_event(row["category"], row["evicted_at"])
    return table == "memories" and index.indexes_memory(row["revoked_at"])


def needs_cue(memory: dict[str, Any]) -> bool:
    """Older archives carry no cue keys: compute them for current fading memories."""
    return (
        memory["cue_key"] is None
        and memory["gist"] is None
        and memory["kind"] in FADING_KINDS
        and memory["revoked_at"] is None
    )
