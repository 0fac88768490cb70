"""The portable archive: every authoritative table as JSON lines, and its validation.

Format (``format_version`` 1)::

    {"format": "amem-archive", "format_version": 1, "schema_version": 4, "exported_at": ...}
    {"table": "events", "row": {...}}            one line per row, tables in TABLES order
    ...
    {"end": true, "rows": 1234}                  a missing end line means a truncated file

Archives hold (schema 6) tombstones of erased events, (schema 11) people, events,
personas, memories, relations, checkpoints, (schema 3) capture cursors and (schema 11)
assignments and states, and (schema 12) consolidation runs with their sources: no
configuration, no vector or search caches and no folded
person names (imports rebuild them). Rows come in primary-key order, so exporting the same
data twice gives the same lines. Tombstones come first, so an import knows which events
they erased before it meets them (and leaves them out); people come next, so an event or
memory can be checked against its scope's registry.

Rows come from two sources, both read as streams: the lines of an archive
(``read_lines``) and the tables of a database (``dump_rows``: the database itself, SQLite
or PostgreSQL, for export, backup and doctor; a SQLite backup for restore), the same rows
in the same order from either. Neither trusts its input: lines and cells are
capped, text must decode, JSON must parse, and only plain tables with amem's columns
are read (a view or virtual table named ``events`` could compute rows forever).

``checked_row`` validates one row: its shape, then the rules that link it to other rows
(quotes, roles, scope links, checkpoint coverage, ownership: every person an event, a
memory or a state names is in its scope's registry, and a memory belongs to its event's
person), looked up in the database it is being loaded into, which holds every earlier
row. A problem is a ``BadRow`` naming the row and the rule, never the stored text.
Archives written at schema versions 1 to 3 (no gists or cue keys, no cursors), before 8
(no tiers: a memory takes its kind's), before 11 (no people: nothing belongs to
anyone) and before 12 (nothing evicted) are read too; a missing table means no rows. An
evicted event travels as it is stored: no text, ``evicted_at`` set, its memories' quotes
checked against nothing (they are all that is left of its words).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Generator, Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Annotated, Any, TextIO

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ..db.postgres import is_postgres
from ..db.schema import SCHEMA_VERSION
from ..db.times import db_time
from ..errors import InvalidInput, StorageError
from ..inputs import parse_time, validation_problems
from ..json_input import NestedTooDeep, parse_json
from ..limits import MAX_ARCHIVE_LINE_CHARS, MAX_EVENT_CHARS
from ..models import (
    DEFAULT_TIERS,
    Basis,
    Category,
    ConsolidationResult,
    MemoryKind,
    MemoryTier,
    RelationKind,
    Role,
    RunInput,
    RunStatus,
    StoredStatus,
)
from ..store import people
from ..store.checkpoints import JSON_COLUMNS
from ..store.eviction import DERIVED_STATUSES
from . import catalog

FORMAT = "amem-archive"
FORMAT_VERSION = 1
TABLES = (
    "erased_events",
    "people",
    "events",
    "personas",
    "memories",
    "relations",
    "checkpoints",
    "capture_cursors",
    "assignments",
    "states",
    "consolidation_runs",
    "consolidation_sources",
)
ORDER = {
    "erased_events": "digest",
    "people": "persona, project, id",
    "events": "seq",
    "personas": "persona, version",
    "memories": "num",
    "relations": "from_id, to_id, kind",
    "checkpoints": "num",
    "capture_cursors": "persona, project, instance",
    "assignments": "num",
    "states": "persona, project, person",
    "consolidation_runs": "num",
    "consolidation_sources": "run_id, event_id",
}
KEYS = {
    "events": "seq",
    "memories": "num",
    "checkpoints": "num",
    "assignments": "num",
    "consolidation_runs": "num",
    "search_docs": "num",
}
"""Integer keys that name a row in messages (other rows are named by position)."""
Source = Generator[tuple[str, dict[str, Any], str], None, None]
"""``(table, row, where)`` of each row, in order; ``where`` names the row in messages."""


class BadRow(Exception):
    """A row (or line) that cannot be carried; the message names it and the rule broken,
    never its stored text."""


NonEmpty = Annotated[str, Field(min_length=1)]
"""An ID, a name or a memory's words: never empty."""
Counted = Annotated[int, Field(ge=1)]
"""A row number, sequence number or version: they count from 1."""
Offset = Annotated[int, Field(ge=0)]
"""A position or count: from 0."""


class Row(BaseModel):
    # No text cell is longer than the longest text amem accepts (an event's).
    model_config = ConfigDict(extra="forbid", strict=False, str_max_length=MAX_EVENT_CHARS)


def stored_time(value: object) -> str:
    return db_time(parse_time(value, "time"))


TIME_COLUMNS = (
    "occurred_at",
    "ingested_at",
    "created_at",
    "valid_at",
    "invalid_at",
    "revoked_at",
    "invalidated_at",
    "updated_at",
    "erased_at",
    "expires_at",
    "assigned_at",
    "evicted_at",
)


class Times(Row):
    @field_validator(*TIME_COLUMNS, mode="before", check_fields=False)
    @classmethod
    def aware_time(cls, value: object) -> object:
        if value is None:
            return None
        try:
            return stored_time(value)
        except Exception:
            raise ValueError("not an ISO-8601 time with a UTC offset") from None


class TombstoneRow(Times):
    digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    erased_at: str


class PersonRow(Times):
    persona: NonEmpty
    project: NonEmpty
    id: NonEmpty
    display_name: NonEmpty
    aliases: list[str]
    locale: str | None
    timezone: str | None
    notes: str | None
    version: Counted
    created_at: str
    updated_at: str


class EventRow(Times):
    seq: Counted
    id: NonEmpty
    persona: NonEmpty
    project: NonEmpty
    session: str | None
    role: Role
    category: Category
    source: str | None
    text: str
    occurred_at: str
    ingested_at: str
    status: StoredStatus
    error: str | None = None
    attempts: int = Field(default=0, ge=0)
    person: str | None = None
    """Absent from archives before schema 11: no one's."""
    evicted_at: str | None = None
    """Absent from archives before schema 12: not evicted."""

    @model_validator(mode="after")
    def evicted(self) -> EventRow:
        """An evicted event was derived, and holds no text (``store.eviction``)."""
        if self.evicted_at is not None and (self.text or self.status not in DERIVED_STATUSES):
            raise ValueError("an evicted event must be derived and hold no text")
        return self


class PersonaRow(Times):
    persona: NonEmpty
    version: Counted
    text: str
    note: str | None
    created_at: str


class MemoryRow(Times):
    num: Counted
    id: NonEmpty
    persona: str
    project: str
    event_id: str
    text: NonEmpty
    quote: NonEmpty
    quote_start: Offset
    quote_end: Offset
    kind: MemoryKind
    basis: Basis
    confidence: float = Field(ge=0, le=1, allow_inf_nan=False)
    subject: str | None
    fact_key: str | None
    valid_at: str
    invalid_at: str | None
    chain_order: int | None = None
    revoked_at: str | None
    revoke_reason: str | None = None
    emotion: str | None
    valence: float | None = Field(default=None, ge=-1, le=1, allow_inf_nan=False)
    arousal: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    created_at: str
    gist: str | None = None
    cue_key: str | None = None
    tier: MemoryTier | None = None
    """Absent from archives before schema 8: the kind's default then."""
    pinned: bool = False
    expires_at: str | None = None
    person: str | None = None
    """Absent from archives before schema 11 (then no one's): its event's person."""
    about: list[str] | None = None
    """The people it is about; None (stored as NULL) for no one."""

    @model_validator(mode="after")
    def placed(self) -> MemoryRow:
        """An older row takes its kind's tier; only a working note expires; an empty
        ``about`` is stored as none."""
        if self.tier is None:
            self.tier = DEFAULT_TIERS[self.kind]
        if self.tier != "working" and self.expires_at is not None:
            raise ValueError("only a working memory expires")
        if not self.about:
            self.about = None
        return self


class RelationRow(Times):
    from_id: str
    to_id: str
    kind: RelationKind
    persona: str
    project: str
    note: str | None
    created_at: str


class CheckpointRow(Times):
    num: Counted
    persona: str
    project: str
    session: str
    goal: str
    completed: list[str]
    pending: list[str]
    constraints: list[str]
    next_action: str | None
    covered_seq: int | None
    created_at: str
    invalidated_at: str | None


class CursorRow(Times):
    persona: str
    project: str
    instance: str
    position: Offset
    last_event_id: str | None
    updated_at: str


class AssignmentRow(Times):
    num: Counted
    persona: str
    project: str
    event_id: str
    from_person: str | None
    to_person: str | None
    reason: str | None
    assigned_at: str


class StateRow(Times):
    persona: str
    project: str
    person: str
    """``''``: the scope's own state (``store.people.SCOPE_STATE``)."""
    data: dict[str, Any]
    version: Counted
    updated_at: str


class RunRow(Times):
    num: Counted
    id: NonEmpty
    persona: str
    project: str
    session: str | None
    status: RunStatus
    input: dict[str, Any]
    candidate: Any = None
    error: Any = None
    result: dict[str, Any] | None = None
    digest: str | None = None
    next_seq: Offset
    next_offset: Offset
    created_at: str
    updated_at: str

    @model_validator(mode="after")
    def readable(self) -> RunRow:
        """Its input and result are what ``Scope.consolidation_run`` reads back."""
        RunInput.model_validate(self.input)
        if self.result is not None:
            ConsolidationResult.model_validate(self.result)
        return self


class RunSourceRow(Row):
    run_id: str
    event_id: str


MODELS: dict[str, type[Row]] = {
    "erased_events": TombstoneRow,
    "people": PersonRow,
    "events": EventRow,
    "personas": PersonaRow,
    "memories": MemoryRow,
    "relations": RelationRow,
    "checkpoints": CheckpointRow,
    "capture_cursors": CursorRow,
    "assignments": AssignmentRow,
    "states": StateRow,
    "consolidation_runs": RunRow,
    "consolidation_sources": RunSourceRow,
}
JSON_CELLS: dict[str, tuple[str, ...]] = {
    "checkpoints": JSON_COLUMNS,
    "people": ("aliases",),
    "memories": ("about",),
    "states": ("data",),
    "consolidation_runs": ("input", "candidate", "error", "result"),
}
"""Cells stored as JSON text, carried in archives as the JSON they hold (NULL as null)."""
JSON_KINDS = {"states": "a JSON object", "consolidation_runs": "valid JSON"}
"""What a table's JSON cells hold, named in messages (others: ``a JSON list``)."""


def invalid(message: str) -> StorageError:
    return StorageError(f"the archive is invalid: {message}", code="archive_invalid")


# --- writing -------------------------------------------------------------------------


def header(schema_version: int, exported_at: str) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "schema_version": schema_version,
        "exported_at": exported_at,
    }


def line(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"


# --- reading a SQLite file -----------------------------------------------------------


class Undecodable:
    """Stands in for a text cell that is not UTF-8, so the row it is in can be named."""


UNDECODABLE = Undecodable()


def decode(data: bytes) -> str | Undecodable:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return UNDECODABLE


@contextmanager
def decoding(conn: sqlite3.Connection) -> Iterator[None]:
    """Within the block, text that is not UTF-8 reads as ``UNDECODABLE`` instead of
    failing the whole query (sqlite3's error would not say which row, and would quote it).
    PostgreSQL checks text against the database's encoding as it stores it: nothing to do."""
    if is_postgres(conn):
        yield
        return
    previous = conn.text_factory
    conn.text_factory = decode
    try:
        yield
    finally:
        conn.text_factory = previous


def row_name(table: str, row: dict[str, Any], number: int) -> str:
    key = KEYS.get(table)
    value = row.get(key) if key else None
    return f"{table} {key} {value}" if isinstance(value, int) else f"{table} row {number}"


def dump_rows(conn: sqlite3.Connection) -> Source:
    """Every authoritative row of a database, table by table, in primary-key order.

    Reads files of schema versions 1 to 4 (absent tables and columns are skipped).
    Close it (``contextlib.closing``) if you stop early: it changes ``conn`` while open."""
    with decoding(conn):
        for table, columns in table_columns(conn).items():
            cursor = conn.execute(
                f"select {', '.join(columns)} from {table} order by {ORDER[table]}"
            )
            for number, values in enumerate(cursor, start=1):
                row = dict(zip(columns, values, strict=True))
                where = row_name(table, row, number)
                yield table, plain_row(table, row, where), where


def count_rows(conn: sqlite3.Connection) -> int:
    return sum(
        conn.execute(f"select count(*) from {table}").fetchone()[0] for table in table_columns(conn)
    )


def table_columns(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """The authoritative tables present, in ``TABLES`` order, with their columns.

    Each must be a plain table (not a view or a virtual table) whose columns are amem's:
    none unknown, none required missing."""
    found: dict[str, list[str]] = {}
    for name, plain in catalog.plain_tables(conn, TABLES).items():
        if not plain:
            raise BadRow(f"{name} is not a plain table")
        columns = [column.name for column in catalog.columns(conn, name)]
        fields = MODELS[name].model_fields
        required = {field for field, info in fields.items() if info.is_required()}
        if not required <= set(columns) <= fields.keys():
            raise BadRow(f"{name} does not have amem's columns")
        found[name] = columns
    return {table: found[table] for table in TABLES if table in found}


def plain_row(table: str, row: dict[str, Any], where: str) -> dict[str, Any]:
    """The row with its JSON cells (``JSON_CELLS``) parsed; refused if a cell is not what
    amem stores (undecodable text, a BLOB)."""
    for column, value in row.items():
        if value is UNDECODABLE:
            raise BadRow(f"{where}: its {column} is not valid UTF-8 text")
        if isinstance(value, bytes):
            raise BadRow(f"{where}: its {column} holds a BLOB, not text or a number")
    for column in JSON_CELLS.get(table, ()):
        if row.get(column) is not None:
            kind = JSON_KINDS.get(table, "a JSON list")
            row[column] = json_cell(row[column], f"{where}: its {column} is not {kind}")
    return row


def json_cell(text: object, problem: str) -> Any:
    try:
        return parse_json(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise BadRow(problem) from None


# --- reading archive lines -----------------------------------------------------------


def reject_constant(name: str) -> float:
    raise ValueError("NaN and Infinity are not allowed")


def read_lines(handle: TextIO) -> Source:
    """The rows of an archive, line by line, after its header and before its end line.

    The end line (and its row count) is checked when the stream is exhausted: a consumer
    must read to the end before it trusts what it read."""
    meta: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    rows = position = 0
    lines = iter(partial(handle.readline, MAX_ARCHIVE_LINE_CHARS + 1), "")
    for number, text in enumerate(lines, start=1):
        if len(text) > MAX_ARCHIVE_LINE_CHARS:
            raise BadRow(f"line {number} is longer than any line amem writes")
        if not text.strip():
            continue
        if end is not None:
            raise BadRow(f"line {number} follows the end line")
        data = parse_line(text, number)
        if meta is None:
            meta = check_header(data)
        elif data.get("end") is True:
            end = data
        else:
            table, row = data.get("table"), data.get("row")
            if table not in MODELS or not isinstance(row, dict):
                raise BadRow(f"line {number} is not a row of a known table")
            if TABLES.index(table) < position:
                raise BadRow(f"line {number}: tables must come in the order {', '.join(TABLES)}")
            position = TABLES.index(table)
            rows += 1
            yield table, row, f"line {number} ({table})"
    if meta is None:
        raise BadRow("the file is empty")
    if end is None or end.get("rows") != rows:
        raise BadRow("the end line is missing or its row count differs: the file is truncated")


def parse_line(text: str, number: int) -> dict[str, Any]:
    try:
        data = parse_json(text, parse_constant=reject_constant)
    except NestedTooDeep:
        raise BadRow(f"line {number} nests deeper than any line amem writes") from None
    except ValueError:
        raise BadRow(f"line {number} is not valid JSON (or holds NaN)") from None
    if not isinstance(data, dict):
        raise BadRow(f"line {number} is not a JSON object")
    return data


def check_header(data: dict[str, Any]) -> dict[str, Any]:
    if data.get("format") != FORMAT:
        raise BadRow("the first line is not an amem archive header")
    version = data.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise BadRow("the archive format version is newer than this amem reads")
    schema = data.get("schema_version")
    if not isinstance(schema, int) or not 1 <= schema <= SCHEMA_VERSION:
        raise BadRow("the archive's schema version is newer than this amem reads")
    return data


# --- validating a row ----------------------------------------------------------------

EVENT_BY_ID = """
select persona, project, text, category, role, person, evicted_at from events where id = ?
"""
EVENT_BY_SEQ = "select persona, project, session from events where seq = ?"
EVENT_SCOPE = "select persona, project from events where id = ?"
MEMORY_SCOPE = "select persona, project from memories where id = ?"
IS_PERSON = "select 1 from people where persona = ? and project = ? and id = ?"


def checked_row(conn: sqlite3.Connection, table: str, values: dict[str, Any], where: str) -> Row:
    """The row validated: its shape, then its links to the rows ``conn`` already holds
    (tables load in ``TABLES`` order, so everything a row points at comes first).

    Returns the row as it is stored: a checkpoint whose covered event is absent (it was
    erased) covers nothing. Unique keys are left to the database's own constraints."""
    row = shaped_row(table, values, where)
    if isinstance(row, EventRow):
        check_people(conn, row.persona, row.project, [row.person], where)
    elif isinstance(row, MemoryRow):
        check_memory(conn, row, where)
    elif isinstance(row, RelationRow):
        check_relation(conn, row, where)
    elif isinstance(row, CheckpointRow):
        return covered(conn, row, where)
    elif isinstance(row, AssignmentRow):
        check_assignment(conn, row, where)
    elif isinstance(row, RunSourceRow):
        check_run_source(conn, row, where)
    elif isinstance(row, StateRow):
        check_state(row, where)
        check_people(conn, row.persona, row.project, [row.person or None], where)
    return row


def shaped_row(table: str, values: dict[str, Any], where: str) -> Row:
    """The row validated against its table's fields alone."""
    try:
        return MODELS[table].model_validate(values)
    except ValidationError as exc:
        problems = validation_problems(exc, MODELS[table].model_fields.keys())
        raise BadRow(f"{where}: {problems}") from None


def check_memory(conn: sqlite3.Connection, memory: MemoryRow, where: str) -> None:
    event = conn.execute(EVENT_BY_ID, (memory.event_id,)).fetchone()
    if event is None or tuple(event[:2]) != (memory.persona, memory.project):
        raise BadRow(f"{where}: its source event is missing or in another scope")
    _, _, text, category, role, person, evicted_at = event
    if memory.person != person:
        raise BadRow(f"{where}: it belongs to another person than its source event")
    check_people(conn, memory.persona, memory.project, memory.about or (), where)
    # an evicted event's text is gone: its memories' quotes are all that is left of it
    if evicted_at is None and text[memory.quote_start : memory.quote_end] != memory.quote:
        raise BadRow(f"{where}: its quote does not occur in its event at the stored span")
    if category in ("reference", "persona"):
        raise BadRow(f"{where}: derived from an archived reference or persona event")
    expected = {"user_statement": "user", "assistant_expression": "assistant"}.get(memory.basis)
    # a correction's event is the host's (role system, or the speaker's in older files): its
    # memory keeps the basis of the memory it corrects, checked when that one was derived
    if expected is not None and role != expected and category != "correction":
        raise BadRow(f"{where}: its basis does not fit its event's role")
    if memory.basis == "inference" and (memory.fact_key is not None or memory.kind == "growth"):
        raise BadRow(f"{where}: an inference with a fact key or as growth")
    if memory.emotion is not None and memory.basis != "assistant_expression":
        raise BadRow(f"{where}: an emotion not expressed by the assistant")


def check_relation(conn: sqlite3.Connection, relation: RelationRow, where: str) -> None:
    scope = (relation.persona, relation.project)
    for end in (relation.from_id, relation.to_id):
        found = conn.execute(MEMORY_SCOPE, (end,)).fetchone()
        if found is None or tuple(found) != scope:
            raise BadRow(f"{where}: a relation links a missing memory or crosses scopes")


def check_people(
    conn: sqlite3.Connection, persona: str, project: str, people: Iterable[str | None], where: str
) -> None:
    """Every person named (None: no one) is in the registry of the row's scope."""
    for person in people:
        if person is None:
            continue
        if conn.execute(IS_PERSON, (persona, project, person)).fetchone() is None:
            raise BadRow(f"{where}: it names a person not in its scope's registry")


def check_assignment(conn: sqlite3.Connection, assignment: AssignmentRow, where: str) -> None:
    """An assignment records a move of an event of its scope. The people it names are
    history: one may have left the registry since."""
    found = conn.execute(EVENT_SCOPE, (assignment.event_id,)).fetchone()
    if found is None or tuple(found) != (assignment.persona, assignment.project):
        raise BadRow(f"{where}: an assignment of a missing event or of another scope's")


def check_state(state: StateRow, where: str) -> None:
    """A state's data is what ``store.people`` stores: a JSON object, at most
    ``MAX_STATE_BYTES``."""
    try:
        people.state_json(state.data)
    except InvalidInput as exc:
        raise BadRow(f"{where}: its data is not a state amem stores ({exc.message})") from None


def covered(conn: sqlite3.Connection, checkpoint: CheckpointRow, where: str) -> CheckpointRow:
    if checkpoint.covered_seq is None:
        return checkpoint
    owner = conn.execute(EVENT_BY_SEQ, (checkpoint.covered_seq,)).fetchone()
    if owner is None:  # erased after the checkpoint was saved
        return checkpoint.model_copy(update={"covered_seq": None})
    if tuple(owner) != (checkpoint.persona, checkpoint.project, checkpoint.session):
        raise BadRow(f"{where}: it covers an event outside its session")
    return checkpoint


RUN_SCOPE = "select 1 from consolidation_runs where id = ?"


def check_run_source(conn: sqlite3.Connection, source: RunSourceRow, where: str) -> None:
    """A run's source names a run loaded before it (its event may be gone: erased)."""
    if conn.execute(RUN_SCOPE, (source.run_id,)).fetchone() is None:
        raise BadRow(f"{where}: the source of a missing consolidation run")
