"""The portable archive: every authoritative table as JSON lines, and its validation.

Format (``format_version`` 1)::

    {"format": "amem-archive", "format_version": 1, "schema_version": 3, "exported_at": ...}
    {"table": "events", "row": {...}}            one line per row, tables in TABLES order
    ...
    {"end": true, "rows": 1234}                  a missing end line means a truncated file

Archives hold events, personas, memories, relations, checkpoints and (schema 3) capture
cursors: no configuration, no vector or search caches (imports rebuild the index). Rows
come in primary-key order, so exporting the same data twice gives the same lines.

``validate`` checks a whole archive before anything is written: shape, timestamps,
quotes, roles, scope links and checkpoint coverage. Archives written at schema versions
1 and 2 (no gists or cue keys, no cursors) are read too.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .db.schema import SCHEMA_VERSION
from .errors import StorageError
from .inputs import db_time, parse_time, validation_problems
from .models import Basis, Category, EventStatus, MemoryKind, Role

FORMAT = "amem-archive"
FORMAT_VERSION = 1
TABLES = ("events", "personas", "memories", "relations", "checkpoints", "capture_cursors")
ORDER = {
    "events": "seq", "personas": "persona, version", "memories": "num",
    "relations": "from_id, to_id, kind", "checkpoints": "num",
    "capture_cursors": "persona, project, instance",
}  # fmt: skip
JSON_COLUMNS = ("completed", "pending", "constraints")
"""Checkpoint columns stored as JSON text, archived as lists."""


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


def stored_time(value: object) -> str:
    return db_time(parse_time(value, "time"))


class Times(Row):
    @field_validator(
        "occurred_at", "ingested_at", "created_at", "valid_at", "invalid_at", "revoked_at",
        "invalidated_at", "updated_at", mode="before", check_fields=False,
    )  # fmt: skip
    @classmethod
    def aware_time(cls, value: object) -> object:
        if value is None:
            return None
        try:
            return stored_time(value)
        except Exception:
            raise ValueError("not an ISO-8601 time with a UTC offset") from None


class EventRow(Times):
    seq: int = Field(ge=1)
    id: str = Field(min_length=1)
    persona: str = Field(min_length=1)
    project: str = Field(min_length=1)
    session: str | None
    role: Role
    category: Category
    source: str | None
    text: str
    occurred_at: str
    ingested_at: str
    status: EventStatus
    error: str | None = None
    attempts: int = Field(default=0, ge=0)


class PersonaRow(Times):
    persona: str = Field(min_length=1)
    version: int = Field(ge=1)
    text: str
    note: str | None
    created_at: str


class MemoryRow(Times):
    num: int = Field(ge=1)
    id: str = Field(min_length=1)
    persona: str
    project: str
    event_id: str
    text: str = Field(min_length=1)
    quote: str = Field(min_length=1)
    quote_start: int = Field(ge=0)
    quote_end: int = Field(ge=0)
    kind: MemoryKind
    basis: Basis
    confidence: float = Field(ge=0, le=1, allow_inf_nan=False)
    subject: str | None
    fact_key: str | None
    valid_at: str
    invalid_at: str | None
    chain_order: int | None = None
    revoked_at: str | None
    emotion: str | None
    valence: float | None = Field(default=None, ge=-1, le=1, allow_inf_nan=False)
    arousal: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    created_at: str
    gist: str | None = None
    cue_key: str | None = None


class RelationRow(Times):
    from_id: str
    to_id: str
    kind: Literal["related", "corrects"]
    persona: str
    project: str
    note: str | None
    created_at: str


class CheckpointRow(Times):
    num: int = Field(ge=1)
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
    position: int = Field(ge=0)
    last_event_id: str | None
    updated_at: str


MODELS: dict[str, type[Row]] = {
    "events": EventRow, "personas": PersonaRow, "memories": MemoryRow,
    "relations": RelationRow, "checkpoints": CheckpointRow, "capture_cursors": CursorRow,
}  # fmt: skip


class Archive(BaseModel):
    """A validated archive, ready to load."""

    schema_version: int
    rows: dict[str, list[Any]]

    def count(self) -> dict[str, int]:
        return {table: len(rows) for table, rows in self.rows.items()}


def invalid(message: str) -> StorageError:
    return StorageError(f"the archive is invalid: {message}", code="archive_invalid")


# --- writing -------------------------------------------------------------------------


def header(schema_version: int, exported_at: str) -> dict[str, Any]:
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "schema_version": schema_version, "exported_at": exported_at,
    }  # fmt: skip


def dump_rows(conn: sqlite3.Connection) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every authoritative row of the database, table by table, in primary-key order.

    Works on files of schema version 1 to 3 (absent tables and columns are skipped)."""
    present = {row[0] for row in conn.execute("select name from sqlite_master")}
    for table in TABLES:
        if table not in present:
            continue
        cursor = conn.execute(f"select * from {table} order by {ORDER[table]}")
        names = [column[0] for column in cursor.description]
        for values in cursor:
            row = dict(zip(names, values, strict=True))
            for column in JSON_COLUMNS:
                if table == "checkpoints":
                    row[column] = json.loads(row[column])
            yield table, row


def line(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"


# --- reading -------------------------------------------------------------------------


def reject_constant(name: str) -> float:
    raise ValueError("NaN and Infinity are not allowed")


def parse(lines: Iterable[str]) -> Archive:
    """Parse and validate a whole archive; ``StorageError(archive_invalid)`` names what is
    wrong and where, without echoing stored text."""
    rows: dict[str, list[Any]] = {table: [] for table in TABLES}
    meta: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    count = 0
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        if end is not None:
            raise invalid(f"line {number} follows the end line")
        try:
            data = json.loads(text, parse_constant=reject_constant)
        except ValueError:
            raise invalid(f"line {number} is not valid JSON (or holds NaN)") from None
        if not isinstance(data, dict):
            raise invalid(f"line {number} is not a JSON object")
        if meta is None:
            meta = check_header(data)
        elif data.get("end") is True:
            end = data
        else:
            table, row = data.get("table"), data.get("row")
            if table not in MODELS or not isinstance(row, dict):
                raise invalid(f"line {number} is not a row of a known table")
            try:
                rows[table].append(MODELS[table].model_validate(row))
            except ValidationError as exc:
                fields = MODELS[table].model_fields.keys()
                raise invalid(
                    f"line {number} ({table}): {validation_problems(exc, fields)}"
                ) from None
            count += 1
    if meta is None:
        raise invalid("the file is empty")
    if end is None or end.get("rows") != count:
        raise invalid("the end line is missing or its row count differs: the file is truncated")
    archive = Archive(schema_version=meta["schema_version"], rows=rows)
    check_links(archive)
    return archive


def check_header(data: dict[str, Any]) -> dict[str, Any]:
    if data.get("format") != FORMAT:
        raise invalid("the first line is not an amem archive header")
    version = data.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise invalid("the archive format version is newer than this amem reads")
    schema = data.get("schema_version")
    if not isinstance(schema, int) or not 1 <= schema <= SCHEMA_VERSION:
        raise invalid("the archive's schema version is newer than this amem reads")
    return data


def check_links(archive: Archive) -> None:
    """Cross-row rules: unique keys, quotes, roles, scope links, checkpoint coverage."""
    events: dict[str, EventRow] = {}
    by_seq: dict[int, EventRow] = {}
    for event in archive.rows["events"]:
        if event.id in events or event.seq in by_seq:
            raise invalid(f"event seq {event.seq}: its id or seq appears twice")
        events[event.id] = by_seq[event.seq] = event
    versions = {(p.persona, p.version) for p in archive.rows["personas"]}
    if len(versions) != len(archive.rows["personas"]):
        raise invalid("a persona version appears twice")
    memories: dict[str, MemoryRow] = {}
    for memory in archive.rows["memories"]:
        check_memory(memory, events, memories)
        memories[memory.id] = memory
    for relation in archive.rows["relations"]:
        ends = [memories.get(relation.from_id), memories.get(relation.to_id)]
        if any(end is None or (end.persona, end.project) != (relation.persona, relation.project)
               for end in ends):  # fmt: skip
            raise invalid("a relation links a missing memory or crosses scopes")
    for checkpoint in archive.rows["checkpoints"]:
        covered = by_seq.get(checkpoint.covered_seq or 0)
        if checkpoint.covered_seq is not None and (
            covered is None
            or (covered.persona, covered.project, covered.session)
            != (checkpoint.persona, checkpoint.project, checkpoint.session)
        ):
            raise invalid(f"checkpoint {checkpoint.num} covers an event outside its session")


def check_memory(
    memory: MemoryRow, events: dict[str, EventRow], seen: dict[str, MemoryRow]
) -> None:
    where = f"memory {memory.num}"
    if memory.id in seen:
        raise invalid(f"{where}: its id appears twice")
    event = events.get(memory.event_id)
    if event is None or (event.persona, event.project) != (memory.persona, memory.project):
        raise invalid(f"{where}: its source event is missing or in another scope")
    if event.text[memory.quote_start : memory.quote_end] != memory.quote:
        raise invalid(f"{where}: its quote does not occur in its event at the stored span")
    if event.category in ("reference", "persona"):
        raise invalid(f"{where}: derived from an archived reference or persona event")
    role = {"user_statement": "user", "assistant_expression": "assistant"}.get(memory.basis)
    if role is not None and event.role != role:
        raise invalid(f"{where}: its basis does not fit its event's role")
    if memory.basis == "inference" and (memory.fact_key is not None or memory.kind == "growth"):
        raise invalid(f"{where}: an inference with a fact key or as growth")
    if memory.emotion is not None and memory.basis != "assistant_expression":
        raise invalid(f"{where}: an emotion not expressed by the assistant")
    values = (memory.valence, memory.arousal)
    if any(v is not None and not math.isfinite(v) for v in values):
        raise invalid(f"{where}: an emotion value is not finite")
