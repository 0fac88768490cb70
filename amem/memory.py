"""The async API: ``open`` gives a ``Memory``; ``Memory.scope`` gives a ``Scope``.

One anyio task group, opened by ``open``, owns everything a ``Memory`` runs: the writer
actor, the model pipeline, the jieba warm-up. Nothing is global: two ``Memory`` objects on
two files share nothing, and two on one file (or two processes) coordinate through
SQLite's own locks.

``Memory`` and ``Scope`` validate what callers pass (``inputs``) and hand the work to
plain functions of a connection (``store``, ``search``, ``ops``) through a ``Runtime``:
``read(fn, /, *args, **kwargs)`` and ``write(fn, /, *args, **kwargs)``, typed with the
function's own parameters. A scope adds its persona and project to every call.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, Literal, ParamSpec, TypeVar

import anyio

from .config import Settings, default_db_path
from .db.database import Database
from .db.times import db_now, db_time
from .errors import Closed, Conflict, InvalidInput, UpstreamError
from .inputs import (
    SubmittedEvent,
    captured_entry,
    checkpoint_fields,
    checkpoint_from,
    json_value,
    optional_name,
    parse_drafts,
    parse_time,
    require_bool,
    require_choice,
    require_choices,
    require_int,
    require_name,
    require_names,
    require_text,
    speaker_people,
    submitted_event,
    when_or_now,
)
from .limits import (
    DEFAULT_BUDGET,
    DEFAULT_GRAPH_DEPTH,
    DEFAULT_GRAPH_EDGES,
    DEFAULT_GRAPH_NODES,
    DEFAULT_KEEP_NOTES,
    DEFAULT_LIST_LIMIT,
    DEFAULT_READ_CHARS,
    DEFAULT_RECALL_LIMIT,
    DEFAULT_RUN_CHARS,
    MAX_ALIASES,
    MAX_BUDGET,
    MAX_CAPTURE_ENTRIES,
    MAX_EVENT_CHARS,
    MAX_EVICTED_IDS,
    MAX_EXCLUDED_EVENTS,
    MAX_GRAPH_DEPTH,
    MAX_GRAPH_EDGES,
    MAX_GRAPH_NODES,
    MAX_INTEGER,
    MAX_KEEP_NOTES,
    MAX_KEY_CHARS,
    MAX_LIST_LIMIT,
    MAX_MEMORY_CHARS,
    MAX_NAME_CHARS,
    MAX_NOTE_CHARS,
    MAX_PERSONA_CHARS,
    MAX_QUERY_CHARS,
    MAX_READ_CHARS,
    MAX_RECALL_LIMIT,
    MAX_RUN_CHARS,
    MAX_SCOPE_LIMIT,
    MAX_WAIT_SECONDS,
    MIN_RUN_CHARS,
    VECTOR_WAIT_SECONDS,
)
from .llm import embeddings, local
from .llm.embeddings import Vector
from .models import (
    LIST_TARGETS,
    MEMORY_KINDS,
    MEMORY_TIERS,
    RECALL_MODES,
    ROLES,
    RUN_STATUSES,
    ArchiveResult,
    Assignment,
    Capacity,
    CaptureResult,
    Checkpoint,
    Compaction,
    Consolidation,
    ConsolidationResult,
    ConsolidationRun,
    ContextPack,
    Correction,
    CurrentEmotion,
    Deletion,
    DoctorReport,
    Erasure,
    EventReceipt,
    Eviction,
    Evidence,
    Listing,
    MemoryDraft,
    MemoryGraph,
    MemoryRecord,
    Person,
    Persona,
    Progress,
    RecallItem,
    RecallMode,
    RecallResult,
    ReindexResult,
    Relation,
    Retraction,
    RetryResult,
    ScopeSummary,
    State,
    Status,
    TombstoneImport,
)
from .ops import doctor, files, transfer
from .pipeline import Pipeline
from .reads import Read, Reads
from .recall import Recalled, recall_memories, recalled_refs
from .recall.lexical import TermCounts
from .recall.query import RecallQuery, aging
from .search import index
from .search.text import segment_off_loop
from .store import (
    capacity,
    capture,
    checkpoints,
    compaction,
    consolidation,
    corrections,
    emotions,
    erasure,
    events,
    eviction,
    extraction,
    facts,
    graph,
    listing,
    packs,
    pages,
    people,
    personas,
    relations,
    retraction,
    status,
    tiers,
    tombstones,
)
from .tokens import TokenCounter, checked_counter, counter_name, estimate_tokens

if TYPE_CHECKING:
    import httpx

    from .search.vectors import Matrices

P = ParamSpec("P")
T = TypeVar("T")
Item = TypeVar("Item")

QUERY_VECTORS = 256
"""Query embeddings kept per ``Memory`` (an agent often asks the same thing again)."""
TOMBSTONE_BATCH = 5_000
"""Tombstones ``import_tombstones`` records per write transaction."""
COMPACTION_ATTEMPTS = 3
"""Plans ``compact_working`` makes when other writers keep changing the session's notes
between its plan and its transaction."""
LEXICAL_RECHECK = 30.0
"""Seconds ``auto`` recall ranks a scope it found too little embedded lexically, without
embedding the query, before it looks at the scope's vectors again."""


def thinly_embedded(settings: Settings) -> str:
    """The warning of an ``auto`` recall ranked lexically because vectors cover too little."""
    return (
        f"ranked by words only: vectors cover less than {settings.auto_min_coverage:.0%} "
        "of this scope's memories and events (those without one are embedded in the "
        "background; `amem reindex` embeds them now)"
    )


@asynccontextmanager
async def open(
    path: str | os.PathLike[str] | None = None,
    *,
    settings: Settings | None = None,
    http_client: httpx.AsyncClient | None = None,
    progress: Progress | None = None,
) -> AsyncIterator[Memory]:
    """Open (creating and migrating if needed) the memory database at ``path``: by default
    the file the ``amem`` command uses (``AMEM_DB``, else ``amem/memory.db`` in the
    platform's user-data directory).

    Works under asyncio and trio. Settings come from ``AMEM_*`` environment variables
    unless ``settings`` is given. Extraction and embedding calls go through
    ``http_client`` when given (amem does not close it), else through a client of its own.
    With ``embed="local"`` (``AMEM_EMBED=local``) the local embedder's process is started
    here, without waiting for its model, and stopped when the block ends. With embeddings
    configured, the memories and events of the file that have no vector of the model are
    embedded in the background, starting a second after open (``Pipeline._backfill``).
    A migration that rebuilds the search index (an older file) logs how far it has come
    and calls ``progress(done, total)`` after each batch of documents, from the thread
    that migrates the file.
    Leaving the block cancels in-flight model calls, lets queued writes commit, then closes.
    """
    settings = settings or Settings()
    if path is None:
        path = default_db_path(settings)
    error: BaseException | None = None
    database = Database.open(
        path,
        readers=settings.readers,
        wal_limit=settings.wal_limit_mb << 20,
        reindex=lambda conn: doctor.reindex_for_migration(conn, progress),
    )
    async with (
        database as db,
        local.embedder(settings) as settings,  # pointed at the local embedder, if asked
        model_client(settings, http_client) as client,
        anyio.create_task_group() as tg,
    ):
        with anyio.CancelScope(shield=True):  # once started, these must be closed below
            if not db.postgres:  # FTS5 segments to merge, SQLite pages to scrub
                db.writer.keep_up(index.merge_step)
            await tg.start(db.writer.serve)
            db.writer.when_idle(files.sweep_recorded)  # copies killed exports left behind
            if not db.postgres and await db.read(erasure.scrub_due):  # killed before a scrub
                db.writer.when_idle(erasure.scrub)
            pipeline = None if client is None else Pipeline(db, settings, client)
            if pipeline is not None:
                await tg.start(pipeline.serve)
        memory = Memory(Runtime(db, settings, pipeline))
        try:
            yield memory
        except BaseException as exc:  # re-raised below, outside the task group
            error = exc
        finally:
            await memory.aclose()
    if error is not None:
        raise error


@asynccontextmanager
async def model_client(
    settings: Settings, given: httpx.AsyncClient | None
) -> AsyncIterator[httpx.AsyncClient | None]:
    """The caller's client, a new one when a model endpoint is configured, else None."""
    if given is not None:
        yield given
    elif settings.extraction_enabled or settings.embedding_enabled:
        import httpx  # only a process that calls a model loads it

        async with httpx.AsyncClient() as client:
            yield client
    else:
        yield None


class Runtime:
    """What a ``Memory`` runs on, shared with every ``Scope`` it hands out: the database,
    the settings and the model pipeline (None without a model endpoint)."""

    def __init__(self, db: Database, settings: Settings, pipeline: Pipeline | None) -> None:
        self.db = db
        self.settings = settings
        self.pipeline = pipeline
        self.closed = False
        self.term_counts = TermCounts()
        self.query_vectors: OrderedDict[str, Vector] = OrderedDict()
        """The latest queries' embeddings (``QUERY_VECTORS`` of them), newest last."""
        self.lexical_scopes: dict[tuple[str, str], float] = {}
        """When ``auto`` recall last found a scope too little embedded (monotonic time)."""
        self.reads = Reads()

    @functools.cached_property
    def matrices(self) -> Matrices:
        """The scopes' vectors held for search, made on the first recall that ranks by
        meaning: numpy loads only then, so a process that never does starts faster."""
        from .search.vectors import Matrices

        return Matrices(self.settings.vector_memory_mb << 20)

    def matrices_for(self, request: RecallQuery) -> Matrices | None:
        """The held vectors if ``request`` ranks by meaning (it has a vector), else None."""
        return None if request.vector is None else self.matrices

    async def read(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``fn(conn, *args, **kwargs)`` on one read snapshot; interrupted once its caller
        is cancelled or the reads are stopped (``reads``)."""
        if self.closed:
            raise Closed("this Memory is closed")
        read = Read(self.reads)
        try:
            return await self.db.read(lambda conn: read.run(conn, lambda c: fn(c, *args, **kwargs)))
        finally:
            read.abandon()  # still running only if the caller was cancelled: stop it

    async def write(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``fn(conn, *args, **kwargs)`` in a write transaction; returns after COMMIT."""
        return await self.db.write(fn, *args, **kwargs)

    async def write_together(
        self, run_many: Callable[[sqlite3.Connection, list[Item]], list[T]], item: Item
    ) -> T:
        """``run_many(conn, [item])[0]`` in a write transaction, with the same writes of other
        callers in the same batch (``Database.write_together``); returns after COMMIT."""
        return await self.db.write_together(run_many, item)

    def model_work(self, what: Literal["extraction", "embedding"]) -> Pipeline:
        """The pipeline, if an endpoint for ``what`` is configured (else ``not_configured``)."""
        configured = (
            self.settings.extraction_enabled
            if what == "extraction"
            else self.settings.embedding_enabled
        )
        if not configured or self.pipeline is None:
            prefix = "AMEM_EXTRACT" if what == "extraction" else "AMEM_EMBED"
            raise InvalidInput(
                f"no {what} endpoint is configured ({prefix}_BASE_URL, {prefix}_MODEL)",
                code="not_configured",
            )
        return self.pipeline

    def after_commit(
        self, receipts: Sequence[EventReceipt], memory_ids: Sequence[str] = ()
    ) -> None:
        """Queue the ``pending`` events for extraction, and new events and memories for
        embedding (after COMMIT, never awaited)."""
        if self.pipeline is not None:
            for receipt in receipts:
                if receipt.status == "pending":
                    self.pipeline.enqueue(receipt.event_id)
            fresh = [("event", r.event_id) for r in receipts if not r.duplicate]
            self.pipeline.embed_later(fresh + [("memory", m) for m in memory_ids])

    async def aclose(self) -> None:
        self.closed = True
        self.reads.stop()  # closing waits for no read: each still running raises ``Closed``
        if self.pipeline is not None:
            self.pipeline.close()
        await self.db.writer.close()


def checked_persona(persona: str, version: int | None) -> tuple[str, int | None]:
    name = require_name(persona, "persona", max_chars=MAX_NAME_CHARS)
    if version is not None:
        require_int(version, "version", low=1, high=MAX_INTEGER)
    return name, version


class Memory:
    """An open memory database. Get one from ``amem.open``; use it through scopes."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    @property
    def settings(self) -> Settings:
        """The settings this database was opened with."""
        return self._runtime.settings

    @property
    def path(self) -> str:
        """The database file, or the PostgreSQL database's URL without its password."""
        return str(self._runtime.db.path)

    def scope(self, persona: str | None = None, project: str | None = None) -> Scope:
        """The persona + project partition every event and memory operation runs in.

        Omitted names fall back to the configured defaults (``default``/``default``).
        """
        return Scope(
            self,
            self._runtime,
            scope_name(persona, "persona", self.settings.default_persona),
            scope_name(project, "project", self.settings.default_project),
        )

    async def persona(self, persona: str, version: int | None = None) -> Persona:
        """A persona version (the latest by default); a new persona starts neutral."""
        name, version = checked_persona(persona, version)
        found = await self._runtime.read(personas.get_persona, name, version)
        if found is not None:
            return found
        return await self._runtime.write(personas.ensure_persona, name, now=db_now())

    async def _shown_persona(self, persona: str, version: int | None = None) -> Persona:
        """``persona`` for the read-only tools: a new persona shows the neutral default
        without storing it."""
        name, version = checked_persona(persona, version)
        return await self._runtime.read(personas.read_persona, name, version)

    async def set_persona(self, persona: str, text: str, *, note: str | None = None) -> Persona:
        """Append a new persona version with ``text``; returns it."""
        name = require_name(persona, "persona", max_chars=MAX_NAME_CHARS)
        text = require_text(text, "text", max_chars=MAX_PERSONA_CHARS)
        if note is not None:
            note = require_text(note, "note", max_chars=MAX_NOTE_CHARS)
        return await self._runtime.write(
            personas.append_version, name, text=text, note=note, now=db_now()
        )

    async def rollback_persona(self, persona: str, version: int) -> Persona:
        """Append a new version equal to ``version``; history is never erased."""
        name = require_name(persona, "persona", max_chars=MAX_NAME_CHARS)
        require_int(version, "version", low=1, high=MAX_INTEGER)
        return await self._runtime.write(personas.rollback_to, name, version, now=db_now())

    async def persona_history(self, persona: str) -> list[Persona]:
        """Every version of ``persona``, oldest first (empty for a persona never read)."""
        name = require_name(persona, "persona", max_chars=MAX_NAME_CHARS)
        return await self._runtime.read(personas.persona_history, name)

    async def export(
        self,
        path: str | os.PathLike[str],
        *,
        root: str | os.PathLike[str] | None = None,
        progress: Progress | None = None,
    ) -> ArchiveResult:
        """Write every authoritative table, from one consistent snapshot, to a new JSONL
        archive at ``path`` (never overwritten; appears atomically): events, memories and
        what links them, personas, checkpoints, capture cursors, tombstones, and each
        scope's people with whom every event and memory belongs to, the assignments that
        moved them and the states. ``root`` confines the path to a directory.
        ``progress(done, total)`` is called from a worker thread.
        """
        target = await anyio.to_thread.run_sync(files.checked_target, path, root)
        async with self._recorded_temp(target) as temp:
            counts = await self._runtime.read(transfer.write_archive, target, temp, progress)
        return ArchiveResult(path=str(target), counts=counts)

    @asynccontextmanager
    async def _recorded_temp(self, target: Path) -> AsyncIterator[Path]:
        """A temporary file name beside ``target``, recorded in the database while the
        file is written, so that a killed process's copy is found and removed later
        (``files.sweep_recorded``)."""
        temp = files.temp_name(target)
        await self._runtime.write(files.record, temp)
        try:
            yield temp
        finally:
            with anyio.CancelScope(shield=True), suppress(Closed):  # else swept next time
                await self._runtime.write(files.forget, temp)

    async def import_archive(
        self, path: str | os.PathLike[str], *, progress: Progress | None = None
    ) -> ArchiveResult:
        """Load an archive into this (empty) database and rebuild the search index (each
        document with its people's tokens) and the people's folded names.

        The archive is read as a stream, in one write transaction: every row is validated
        (ownership too: every person a row names is in its scope's registry) before it is
        inserted, and nothing is committed unless the whole archive is valid. An archive
        older than people (schema 11) has none: nothing belongs to anyone.
        An event whose tombstone the archive holds is left out, with its memories and
        their relations (``skipped`` counts them). ``progress(done, total)`` counts rows,
        from the writer's thread. Vectors come from the next open with embeddings
        configured (its background backfill), or ``reindex``.
        """
        counts, skipped = await self._runtime.write(transfer.import_archive, path, progress)
        return ArchiveResult(path=str(path), counts=counts, skipped=skipped)

    async def backup(
        self, path: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None
    ) -> ArchiveResult:
        """Copy the database to a new SQLite file while writers run: a SQLite database
        with SQLite's backup API (an erasure's scrub still waiting for an idle writer runs
        first, so the copy holds no byte of erased text); a PostgreSQL database from one
        read snapshot, each row validated as ``import_archive`` validates it (``counts``:
        rows per table). ``restore`` loads either backup into an empty database of
        either kind."""
        target = await anyio.to_thread.run_sync(files.checked_target, path, root)
        if self._runtime.db.postgres:
            async with self._recorded_temp(target) as temp:
                counts = await self._runtime.read(transfer.copy_to_sqlite, target, temp)
            return ArchiveResult(path=str(target), counts=counts)
        await self._runtime.db.writer.settle()
        async with self._recorded_temp(target) as temp:
            await anyio.to_thread.run_sync(
                transfer.backup_file, self._runtime.db.path, target, temp
            )
        return ArchiveResult(path=str(target), counts={})

    async def restore(
        self, path: str | os.PathLike[str], *, progress: Progress | None = None
    ) -> ArchiveResult:
        """Load a backup file (a SQLite file, whichever database ``backup`` copied) into
        this (empty) database, through the same validation as an archive (and the same
        single transaction), and rebuild the search index and the people's folded names."""
        counts, skipped = await self._runtime.write(transfer.restore_backup, path, progress)
        return ArchiveResult(path=str(path), counts=counts, skipped=skipped)

    async def import_tombstones(
        self, path: str | os.PathLike[str], *, dry_run: bool = False
    ) -> TombstoneImport:
        """Apply the tombstones of an archive (a newer export) to this database, which
        need not be empty: record them, so the events they name are never stored again,
        and erase those events where this database still holds them (an older backup
        brings them back), with everything derived, scope by scope in batches.

        The whole archive is read and checked first (``archive_invalid``; nothing is
        written then). ``dry_run=True`` says what would happen and writes nothing.
        """
        dry_run = require_bool(dry_run, "dry_run")
        buried = await anyio.to_thread.run_sync(transfer.read_tombstones, path)
        digests = frozenset(digest for digest, _ in buried)
        if dry_run:
            new = await self._runtime.read(tombstones.count_new, digests)
        else:
            new = 0
            for start in range(0, len(buried), TOMBSTONE_BATCH):
                batch = buried[start : start + TOMBSTONE_BATCH]
                new += await self._runtime.write(tombstones.add, batch)
        found = await self._runtime.read(tombstones.find_events, digests)
        erasures = []
        for (persona, project), ids in sorted(found.items()):
            scope = self.scope(persona, project)
            if dry_run:
                erasures.append(await scope._read(erasure.preview, event_ids=ids))
            else:
                erasures.append(await scope._erase_ids(ids))
        return TombstoneImport(
            path=str(path), dry_run=dry_run, tombstones=len(digests), new=new, erasures=erasures
        )

    async def wait_for_vectors(self, *, seconds: float = VECTOR_WAIT_SECONDS) -> int:
        """Wait up to ``seconds`` for the vectors of what this ``Memory`` wrote (embedded
        in the background after commit, never awaited by the writes); returns how many of
        those memories and events are still without one: the next process that opens the
        file with embeddings configured embeds them. 0 without an embedding endpoint.
        For a process about to exit (the CLI's writes)."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise InvalidInput("seconds must be a number")
        if not 0 <= seconds <= MAX_WAIT_SECONDS:
            raise InvalidInput(f"seconds must be from 0 to {MAX_WAIT_SECONDS:g}")
        pipeline = self._runtime.pipeline
        if pipeline is None or not self.settings.embedding_enabled:
            return 0
        return await pipeline.settle(seconds)

    async def doctor(self, *, rebuild_index: bool = False) -> DoctorReport:
        """Check the database's health (see docs/operations.md); ``rebuild_index`` first
        rebuilds the search index and the capacity counters from the data. The checks
        that read every row run on a read snapshot; the others hold the write lock while
        they check."""
        if rebuild_index:
            sources = await self._runtime.read(doctor.index_sources)
            segmented = await segment_off_loop([source.text for source in sources])
            docs = [s._replace(text=t) for s, t in zip(sources, segmented, strict=True)]
            await self._runtime.write(doctor.rebuild, docs)
        row_checks = await self._runtime.read(doctor.row_checks)
        return await self._runtime.write(doctor.examine, self.settings, row_checks)

    async def scopes(self) -> list[ScopeSummary]:
        """Every scope that stores an event or a memory, by persona then project, with its
        counts of events and current memories."""
        return await self._runtime.read(capacity.scopes)

    def stop_reads(self) -> None:
        """Interrupt every read running now and refuse new ones: each raises ``Closed``.
        Writes go on. For a host that shuts down and will not wait for its reads
        (``amem serve`` once its drain time is up); closing does it too."""
        self._runtime.reads.stop()

    async def aclose(self) -> None:
        """Stop reads still running (they raise ``Closed``), cancel model calls, let queued
        writes commit, refuse new work. ``open`` calls it."""
        await self._runtime.aclose()


class Scope:
    """Event and memory operations inside one persona + project partition.

    IDs that belong to another scope read as absent (``not_found``). Scopes organise one
    trusted user's data; they are not a security boundary between tenants.
    """

    def __init__(self, memory: Memory, runtime: Runtime, persona: str, project: str) -> None:
        self._memory = memory
        self._runtime = runtime
        self.persona = persona
        self.project = project

    def __repr__(self) -> str:
        return f"Scope(persona={self.persona!r}, project={self.project!r})"

    async def _read(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, str, str, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``fn(conn, persona, project, *args, **kwargs)`` for this scope, on a snapshot."""
        return await self._runtime.read(fn, self.persona, self.project, *args, **kwargs)

    async def _write(
        self,
        fn: Callable[Concatenate[sqlite3.Connection, str, str, P], T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """``fn(conn, persona, project, *args, **kwargs)`` for this scope, committed."""
        return await self._runtime.write(fn, self.persona, self.project, *args, **kwargs)

    async def submit_event(
        self,
        text: str,
        *,
        role: str,
        event_id: str | None = None,
        session: str | None = None,
        source: str | None = None,
        category: str = "conversation",
        occurred_at: str | datetime | None = None,
        person: str | None = None,
    ) -> EventReceipt:
        """Persist an original event; returns after it is committed.

        Resubmitting an ``event_id`` with the same payload returns the stored receipt with
        ``duplicate=True`` (an omitted ``occurred_at`` reuses the stored time); a different
        payload or scope raises ``Conflict`` (``duplicate_conflict``). Never waits for a model.
        ``person`` (a registry ID, ``upsert_person``) puts the event in that person's
        relationship, with every memory derived from it; it is not part of the payload a
        resubmission is compared by (``assign`` moves an event later).
        """
        item = {
            "text": text,
            "role": role,
            "event_id": event_id,
            "session": session,
            "source": source,
            "category": category,
            "occurred_at": occurred_at,
            "person": person,
        }
        [receipt] = await self._submit_events([item])
        return receipt

    async def _submit_events(
        self, items: Sequence[Mapping[str, Any]], *, field: str = "events"
    ) -> list[EventReceipt]:
        """Persist events of this scope as ``submit_event`` does one, in one transaction:
        every item is validated first, and one refused event stores none (``field`` names
        the list in errors)."""
        made = await self._new_events(items, field=field)
        receipts = await self._runtime.write_together(events.insert_requests, made)
        self._runtime.after_commit(receipts)
        return receipts

    async def read(self, id: str, *, offset: int = 0, limit: int = DEFAULT_READ_CHARS) -> Evidence:
        """Page through the original event behind an event or memory ID, unaltered.

        For a memory ID, ``memory`` holds the memory and the page is its source event.
        """
        id = require_name(id, "id")
        offset = require_int(offset, "offset", low=0, high=MAX_EVENT_CHARS)
        limit = require_int(limit, "limit", low=1, high=MAX_READ_CHARS)
        return await self._read(pages.read_evidence, id=id, offset=offset, limit=limit)

    async def add_memories(
        self, event_id: str, memories: Sequence[MemoryDraft | Mapping[str, Any]]
    ) -> list[MemoryRecord]:
        """Derive memories from an event, the host's own model acting as extractor.

        Every draft is validated exactly like extraction output (its quote must occur
        verbatim in the event; its basis must fit the event's role; only user-stated facts
        and preferences take a ``fact_key``). One violation refuses the whole batch
        (``quote_mismatch``, ``role_violation``, ``invalid_input``) and nothing is written.
        A draft identical to an existing memory of the event returns that memory.
        """
        event_id = require_name(event_id, "event_id")
        drafts = parse_drafts(memories)
        segmented = await segment_off_loop([draft.text for draft in drafts])
        records = await self._write(
            facts.derive_memories,
            event_id=event_id,
            drafts=drafts,
            segmented=segmented,
            now=db_now(),
            working_ttl=self._runtime.settings.working_ttl,
        )
        self._runtime.after_commit([], [record.id for record in records])
        return records

    async def recall(
        self,
        query: str,
        *,
        limit: int = DEFAULT_RECALL_LIMIT,
        as_of: str | datetime | None = None,
        include_history: bool = False,
        mode: str = "auto",
        kinds: Collection[str] | None = None,
        exclude_event_ids: Collection[str] | None = None,
        exclude_from_seq: int | None = None,
        person: str | None = None,
        explain: bool = False,
    ) -> RecallResult:
        """Memories of this scope that match ``query`` and were valid at ``as_of`` (now).

        ``include_history`` adds facts that had expired by ``as_of``, marked ``expired``.
        Revoked memories never appear. A query with no matching evidence returns no items.
        ``exclude_event_ids`` (at most 100) and ``exclude_from_seq`` (every event whose
        ``seq`` is at least this) leave events out, with every memory derived from them:
        the turn being answered. Candidates showing the same text are one item, with
        ``occurrences`` and ``merged_ids``; ``limit`` counts distinct texts.

        ``person`` (a registry ID) recalls only that person's: the events of their
        relationship and the memories derived from them or about them, ranked as if the
        scope held nothing else. Without it, items carry their ``person``, and a query
        naming people of the registry puts what belongs only to others after the rest.

        Each item says what brought it in (``via``); ``explain=True`` also lists the
        query's terms its words or its source event's hold (``matched``).
        """
        request, checked_mode = self._recall_query(
            query,
            limit=limit,
            as_of=as_of,
            include_history=include_history,
            mode=mode,
            kinds=kinds,
            exclude_event_ids=exclude_event_ids,
            exclude_from_seq=exclude_from_seq,
            person=person,
        )
        request = replace(request, explain=require_bool(explain, "explain"))
        if request.person is not None:
            await self._read(people.load_person, request.person)  # not_found for a stranger
        request, warnings = await self._with_query_vector(request, checked_mode)
        runtime = self._runtime
        matrices = runtime.matrices_for(request)
        found = await runtime.read(recall_memories, request, matrices, runtime.term_counts)
        warnings += self._after_recall(request, found)
        return RecallResult(
            query=request.query,
            persona=self.persona,
            project=self.project,
            as_of=request.as_of,
            mode=checked_mode,
            ranking="hybrid" if found.hybrid else "lexical",
            include_history=include_history,
            items=found.items,
            warnings=warnings + found.warnings,
        )

    def _recall_query(
        self,
        query: str,
        *,
        limit: int,
        as_of: str | datetime | None,
        include_history: bool = False,
        mode: str = "auto",
        kinds: Collection[str] | None = None,
        exclude_event_ids: Collection[str] | None = None,
        exclude_from_seq: int | None = None,
        person: str | None = None,
    ) -> tuple[RecallQuery, RecallMode]:
        """``recall``'s arguments checked: the request it reads (without the query's
        embedding: ``_with_query_vector``) and its mode."""
        query = require_text(query, "query", max_chars=MAX_QUERY_CHARS)
        limit = require_int(limit, "limit", low=1, high=MAX_RECALL_LIMIT)
        mode = require_choice(mode, "mode", RECALL_MODES)
        when = when_or_now(as_of, "as_of")
        include_history = require_bool(include_history, "include_history")
        wanted = (
            None if kinds is None else {require_choice(k, "kinds", MEMORY_KINDS) for k in kinds}
        )
        excluded = (
            frozenset()
            if exclude_event_ids is None
            else require_names(exclude_event_ids, "exclude_event_ids", most=MAX_EXCLUDED_EVENTS)
        )
        if exclude_from_seq is not None:
            require_int(exclude_from_seq, "exclude_from_seq", low=1, high=MAX_INTEGER)
        settings = self._runtime.settings
        request = RecallQuery(
            persona=self.persona,
            project=self.project,
            query=query,
            limit=limit,
            as_of=when,
            include_history=include_history,
            kinds=None if wanted is None else frozenset(wanted),
            exclude_event_ids=excluded,
            exclude_from_seq=exclude_from_seq,
            **aging(settings),
            person=optional_name(person, "person"),
        )
        return request, mode

    def _after_recall(self, request: RecallQuery, found: Recalled) -> list[str]:
        """Warnings of a recall that has run: in ``auto`` mode, a scope found too little
        embedded is noted (``_with_query_vector`` skips its embedding for a while)."""
        if request.auto_coverage is None or found.hybrid:
            return []
        self._runtime.lexical_scopes[(self.persona, self.project)] = time.monotonic()
        return [thinly_embedded(self._runtime.settings)]

    async def _with_query_vector(
        self, request: RecallQuery, mode: str
    ) -> tuple[RecallQuery, list[str]]:
        """The request with its query's embedding (made outside any transaction) where the
        mode and the scope call for one, and warnings when it cannot be made.

        ``auto`` asks for no embedding without an embedding endpoint, nor for
        ``LEXICAL_RECHECK`` seconds after it last found this scope too little embedded
        (and warns that it ranked by words only).
        """
        settings, runtime = self._runtime.settings, self._runtime
        if mode == "fast":
            return request, []
        if mode == "auto":
            since = runtime.lexical_scopes.get((self.persona, self.project))
            if not settings.embedding_enabled:
                return request, []
            if since is not None and time.monotonic() - since < LEXICAL_RECHECK:
                return request, [thinly_embedded(settings)]
        if not settings.embedding_enabled or runtime.pipeline is None:
            return request, [f"{mode} mode needs an embedding endpoint; ranked lexically"]
        vector = runtime.query_vectors.get(request.query)
        if vector is None:
            try:
                with anyio.fail_after(settings.embed_query_timeout):
                    [vector] = await embeddings.embed(
                        runtime.pipeline.client, settings, [request.query], query=True
                    )
            except TimeoutError:
                return request, ["the query's embedding took too long; ranked lexically"]
            except UpstreamError as exc:
                return request, [
                    f"the query could not be embedded ({exc.message}); ranked lexically"
                ]
            runtime.query_vectors[request.query] = vector
            while len(runtime.query_vectors) > QUERY_VECTORS:
                runtime.query_vectors.popitem(last=False)
        runtime.query_vectors.move_to_end(request.query)
        with_vector = replace(
            request,
            vector=vector,
            fingerprint=settings.embed_fingerprint,
            scan=None if mode == "deep" else settings.semantic_scan,
            min_similarity=settings.embed_min_similarity,
            auto_coverage=settings.auto_min_coverage if mode == "auto" else None,
        )
        return with_vector, []

    async def retry(
        self, event_id: str | None = None, *, progress: Progress | None = None
    ) -> RetryResult:
        """Extract this scope's ``pending`` and ``failed`` events now, and wait for them.

        With ``event_id``, only that conversation event (also a ``stored`` one, e.g. from
        before extraction was configured). ``progress(done, total)`` is called as events
        finish. Needs an extraction endpoint (``not_configured`` otherwise).
        """
        pipeline = self._runtime.model_work("extraction")
        if event_id is not None:
            event_id = require_name(event_id, "event_id")
            await self.read(event_id, limit=1)  # not_found for unknown and foreign IDs
            ids = [event_id]
        else:
            ids = await self._read(extraction.retryable)
        outcomes = await pipeline.extract_many(ids, (self.persona, self.project), progress)
        return RetryResult(
            persona=self.persona,
            project=self.project,
            extracted=[o.event_id for o in outcomes if o.status == "extracted"],
            failed=[o.event_id for o in outcomes if o.status == "failed"],
            memory_ids=[m for o in outcomes if o.new for m in o.memory_ids],
        )

    async def reindex(self, *, progress: Progress | None = None) -> ReindexResult:
        """Rebuild this scope's vector index with the configured embedding endpoint.

        Runs outside any transaction and swaps the new index in only after every batch
        succeeded (an ``UpstreamError`` leaves the old index as it was).
        ``progress(done, total)`` is called after each batch.
        """
        pipeline = self._runtime.model_work("embedding")
        memories, events, stored = await pipeline.reindex(self.persona, self.project, progress)
        fingerprint = self._runtime.settings.embed_fingerprint
        assert fingerprint is not None
        return ReindexResult(
            persona=self.persona,
            project=self.project,
            fingerprint=fingerprint,
            memories=memories,
            events=events,
            embedded=stored,
        )

    async def status(self) -> Status:
        """Counts, pending and failed extractions, vector coverage, schema version, and
        capacity: what the scope stores, its limits and the file's size."""
        return await self._read(status.scope_status, self._runtime.settings)

    async def current_emotion(
        self, *, as_of: str | datetime | None = None
    ) -> CurrentEmotion | None:
        """The latest emotion the assistant expressed, decayed toward zero (6-hour
        half-life by default); None when there is none or it has faded below the floor."""
        return await self._read(
            emotions.current_emotion, as_of=when_or_now(as_of, "as_of"), decay=self._decay()
        )

    def _decay(self) -> emotions.Decay:
        settings = self._runtime.settings
        return emotions.Decay(settings.emotion_half_life_hours, settings.emotion_floor)

    async def resume(
        self,
        session: str,
        *,
        query: str | None = None,
        budget: int = DEFAULT_BUDGET,
        model: str | None = None,
        as_of: str | datetime | None = None,
        counter: TokenCounter = estimate_tokens,
        exclude_event_ids: Collection[str] | None = None,
        person: str | None = None,
    ) -> ContextPack:
        """A context pack for resuming ``session`` within ``budget`` tokens under ``counter``.

        Components in order: persona, checkpoint, recent agreements and growth, memories
        recalled for ``query`` (else for the checkpoint's goal and pending steps), current
        emotion, the session's last events. List components take items one by one while
        they fit (the item that does not fit is truncated with a marker when enough of it
        fits); whole components left out are named in ``omitted``, items left out counted
        in ``partial``. If even the persona does not fit, the context is empty and
        ``insufficient_budget`` is set. ``counter`` counts the tokens of a text (default
        ``amem.estimate_tokens``); ``model`` is validated and does not change counting.
        ``exclude_event_ids`` leaves those events and their memories out of the recalled
        memories (the turn the pack is built for: the host's prompt holds it already).
        ``person`` (a registry ID) makes it that person's pack: after the persona, who they
        are (names, state) and their profile memories; memories are recalled from theirs
        only. The same inputs give the same pack.
        """
        session = require_name(session, "session")
        budget = require_int(budget, "budget", low=1, high=MAX_BUDGET)
        if query is not None:
            query = require_text(query, "query", max_chars=MAX_QUERY_CHARS)
        if model is not None:
            require_name(model, "model")
        if not callable(counter):
            raise InvalidInput("counter must be a function from text to a token count")
        when = when_or_now(as_of, "as_of")
        person = optional_name(person, "person")
        most = packs.memory_limit(budget)
        runtime = self._runtime

        def recall_request(text: str) -> RecallQuery:
            request, _ = self._recall_query(
                text, limit=most, as_of=when, exclude_event_ids=exclude_event_ids, person=person
            )
            return request

        # Memories are recalled for the host's query, else for the checkpoint's goal and
        # steps: that checkpoint is read first only to embed its text outside any
        # transaction (one saved meanwhile is recalled by its words, in the snapshot).
        about = query
        if about is None:
            about = packs.recall_query(None, await self.checkpoint(session))
        embedded = None
        if about is not None:
            embedded, _ = await self._with_query_vector(recall_request(about), "auto")
        ran: list[tuple[RecallQuery, Recalled]] = []

        def recall(conn: sqlite3.Connection, text: str, agreements: int) -> list[RecallItem]:
            request = embedded
            if request is None or request.query != text:
                request = recall_request(text)
            request = replace(request, limit=min(MAX_RECALL_LIMIT, most + agreements))
            found = recall_memories(
                conn, request, runtime.matrices_for(request), runtime.term_counts
            )
            ran.append((request, found))
            return found.items

        shown = await self._read(
            packs.read_sources,
            session=session,
            query=query,
            as_of=when,
            recall=recall,
            decay=self._decay(),
            person=person,
        )
        for request, found in ran:
            self._after_recall(request, found)
        framing = {
            "amem_context": 1,
            "notice": packs.NOTICE,
            "scope": {"persona": self.persona, "project": self.project},
            "session": session,
            "as_of": when.isoformat(),
        }
        skip = {a["id"] for a in shown.agreements} | {p["id"] for p in shown.profile}
        components = [
            ("persona", packs.persona_component(shown.persona)),
            ("person", shown.person),
            ("profile", shown.profile),
            ("checkpoint", packs.checkpoint_component(shown.checkpoint)),
            ("agreements", shown.agreements),
            ("memories", packs.memories_component(shown.pinned, shown.recalled, skip, most)),
            ("emotion", packs.emotion_component(shown.emotion)),
            ("recent_events", shown.recent),
        ]
        packed = packs.pack(framing, components, budget, checked_counter(counter))
        return ContextPack(
            persona=self.persona,
            project=self.project,
            session=session,
            context=packed.context,
            included=packed.included,
            omitted=packed.omitted,
            partial=packed.partial,
            tokens_used=packed.tokens_used,
            budget=budget,
            counter=counter_name(counter),
            insufficient_budget=packed.insufficient_budget,
            budget_needed=packed.budget_needed,
            as_of=when,
        )

    async def correct(
        self,
        memory_id: str,
        text: str,
        *,
        valid_at: str | datetime | None = None,
        reason: str | None = None,
    ) -> Correction:
        """Replace a mistaken memory with ``text`` (for errors; submit changes as events).

        Creates a correction event (role ``system``: the host amends the record), revokes
        the mistaken memory for good (the old message stays findable as history), derives the
        corrected one (keeping the old start unless ``valid_at`` is given), links them with
        a ``corrects`` relation carrying ``reason``, marks the old source event ``amended``
        and invalidates the scope's checkpoints.
        """
        memory_id = require_name(memory_id, "memory_id")
        text = require_text(text, "text", max_chars=MAX_MEMORY_CHARS)
        start = None if valid_at is None else db_time(parse_time(valid_at, "valid_at"))
        if reason is not None:
            reason = require_text(reason, "reason", max_chars=MAX_NOTE_CHARS)
        [segmented] = await segment_off_loop([text])
        done = await self._write(
            corrections.correct,
            memory_id=memory_id,
            text=text,
            segmented=segmented,
            valid_at=start,
            reason=reason,
            correction_event_id=new_event_id(),
            now=db_now(),
            working_ttl=self._runtime.settings.working_ttl,
        )
        if self._runtime.pipeline is not None:
            keys = [("event", done.correction_event_id), ("memory", done.memory.id)]
            self._runtime.pipeline.embed_later(keys)
        return done

    async def delete(
        self,
        *,
        event_id: str | None = None,
        memory_id: str | None = None,
        dry_run: bool = False,
        include_copies: bool = False,
    ) -> Deletion:
        """Permanently erase a whole message: an event (or a memory's source event) with
        every memory derived from it and its correction lineage, leaving a tombstone so
        the event ID is never stored again. To forget one memory alone, use ``retract``.

        Give exactly one of ``event_id`` and ``memory_id``. Returns what was removed;
        ``dry_run=True`` returns what would be, computed the same way, and writes nothing.
        ``copies`` lists later events of the scope that repeat the erased text (an
        assistant echoing it, a tool output quoting it); ``include_copies=True`` erases
        them too, in the same transaction, else they stay.
        """
        if (event_id is None) == (memory_id is None):
            raise InvalidInput("give exactly one of event_id and memory_id")
        event_id = optional_name(event_id, "event_id")
        memory_id = optional_name(memory_id, "memory_id")
        dry_run = require_bool(dry_run, "dry_run")
        include_copies = require_bool(include_copies, "include_copies")
        if dry_run:
            return await self._read(
                erasure.delete,
                event_id=event_id,
                memory_id=memory_id,
                now=db_now(),
                dry_run=True,
                include_copies=include_copies,
            )
        removed = await self._write(
            erasure.delete,
            event_id=event_id,
            memory_id=memory_id,
            now=db_now(),
            include_copies=include_copies,
        )
        # the index's copies of deleted terms, stale copies of deleted cells in pages and
        # the WAL's copies of deleted pages go when the writer is next idle (a merge, a
        # VACUUM and a WAL truncation: ``erasure.scrub``), never on this await
        self._scrub_when_idle()
        return removed

    # --- forgetting: one memory, many events ------------------------------------------

    async def retract(self, memory_id: str, reason: str | None = None) -> Retraction:
        """Forget one memory alone: revoke it (out of recall and context packs for good,
        its row kept for audit with ``reason``), mark its source event ``amended`` so the
        event's raw text never comes back as raw fallback, and invalidate the scope's
        checkpoints. Sibling memories of the same event stay. Retracting a memory already
        revoked changes nothing (``already_revoked``). To erase the words, ``delete``.
        """
        memory_id = require_name(memory_id, "memory_id")
        if reason is not None:
            reason = require_text(reason, "reason", max_chars=MAX_NOTE_CHARS)
        return await self._write(
            retraction.retract, memory_id=memory_id, reason=reason, now=db_now()
        )

    async def erase(
        self,
        *,
        session: str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        subject: str | None = None,
        fact_key: str | None = None,
        person: str | None = None,
        everything: bool = False,
        dry_run: bool = False,
        progress: Progress | None = None,
        include_copies: bool = False,
    ) -> Erasure:
        """Permanently erase many events of this scope, each with everything ``delete``
        would take with it, and leave their tombstones.

        Selectors, combined (every given one must hold): ``session``; ``since`` and
        ``until`` (``since <= occurred_at < until``); ``subject`` with an optional
        ``fact_key`` (events with a memory about it: the whole event goes, siblings too);
        ``person``, a person of the registry (the events of their relationship, with the
        memories derived from them). ``everything=True`` selects the whole scope and goes
        alone. At least one is required. ``dry_run=True`` returns what would go and writes
        nothing.

        ``person`` alone erases the person's whole relationship and, after the last
        batch, their state (``states`` counts it). Then ``remove_person`` takes them out
        of the registry, unless memories derived from other people's events are still
        about them (``person_in_use``): those belong to the others and stay.

        Runs in batches of a few hundred events, each its own transaction, so other writers
        are never held up for long; an interrupted erase leaves whole events erased and the
        rest untouched, and running it again erases the rest. ``progress(done, total)``
        counts selected events.

        ``copies`` lists later events of the scope, not selected, that repeat the erased
        text (none for ``everything=True``); ``include_copies=True`` erases them too, after
        the selected events, each the way ``delete`` would (``events`` counts them).
        """
        selector = erase_selector(session, since, until, subject, fact_key, everything, person)
        dry_run = require_bool(dry_run, "dry_run")
        include_copies = require_bool(include_copies, "include_copies")
        if selector.person is not None:
            await self._read(people.load_person, selector.person)  # not_found for a stranger
        if dry_run:
            return await self._read(erasure.preview, selector, include_copies=include_copies)
        copies = await self._read(erasure.copies_of, selector)  # before the text goes
        total = await self._read(erasure.count_selected, selector)
        erased, done, after = erasure.nothing(self.persona, self.project), 0, 0
        while True:  # a read picks each batch, so the write lock is held only to erase
            starts, after = await self._read(erasure.select_events, selector, after)
            if not starts:
                break
            erased = await self._erase_batch(erased, starts)
            done += len(starts)
            if progress is not None:
                progress(min(done, total), total)
        if include_copies:
            ids = [copy.event_id for copy in copies]
            for start in range(0, len(ids), erasure.BATCH_EVENTS):
                erased = await self._erase_batch(erased, ids[start : start + erasure.BATCH_EVENTS])
        if selector.whole_person:
            states = await self._write(erasure.erase_person_state, selector)
            erased = erased.model_copy(update={"states": states})
        return erased.model_copy(update={"copies": copies})

    async def _erase_ids(self, event_ids: Sequence[str]) -> Erasure:
        """Erase these events of the scope (those still there), in batches."""
        erased = erasure.nothing(self.persona, self.project)
        for start in range(0, len(event_ids), erasure.BATCH_EVENTS):
            batch = event_ids[start : start + erasure.BATCH_EVENTS]
            erased = await self._erase_batch(erased, batch)
        return erased

    async def _erase_batch(self, erased: Erasure, event_ids: Sequence[str]) -> Erasure:
        """One write transaction of a bulk erase, added to the receipt so far."""
        batch = await self._write(erasure.erase_events, event_ids, now=db_now())
        if batch.events:  # as after ``delete``: the erased text leaves the file when idle
            self._scrub_when_idle()
        return erasure.combine(erased, batch)

    def _scrub_when_idle(self) -> None:
        """After an erasure, once the writer is idle: the erased text leaves the file and
        its WAL (``erasure.scrub``), and copies killed exports left go too."""
        if not self._runtime.db.postgres:  # PostgreSQL frees erased rows' space with VACUUM
            self._runtime.db.writer.when_idle(erasure.scrub)
        self._runtime.db.writer.when_idle(files.sweep_recorded)

    async def evict(
        self,
        event_ids: Sequence[str] | None = None,
        *,
        before: str | datetime | None = None,
        dry_run: bool = False,
    ) -> Eviction:
        """Let go of the raw text of derived events, keeping what was learned from them.

        An event is derived once its memories are (status ``extracted``, or ``amended``
        after a correction or retraction). Evicting it empties its text and marks it
        ``evicted`` (``read`` shows the status and no text); its memories and their quotes
        stay, so ``recall`` and context packs keep working on them, but its words are no
        longer searched, embedded or shown as raw fallback. Resubmitting its ID is a
        duplicate that brings nothing back. The scope's text bytes drop at once, and the
        words leave the database file and its WAL when the writer is next idle, as an
        erasure's do. An event not derived yet (stored, pending, failed) is never evicted.

        ``event_ids`` names events (named ones left as they were are listed in ``skipped``
        with the reason); ``before`` (a time) selects the derived events that occurred
        before it. Given both, both must hold; at least one is required. ``dry_run=True``
        returns what would go, computed the same way, and writes nothing. Runs in batches
        of a few hundred events, each its own transaction: an interrupted eviction leaves
        whole events evicted, and running it again evicts the rest.
        """
        if event_ids is None and before is None:
            raise InvalidInput("say what to evict: event_ids, before, or both")
        ids = None if event_ids is None else evicted_ids(event_ids)
        cutoff = None if before is None else db_time(parse_time(before, "before"))
        dry_run = require_bool(dry_run, "dry_run")
        if dry_run:
            return await self._read(eviction.preview, ids, before=cutoff, now=db_now())
        done = eviction.nothing(self.persona, self.project)
        if ids is not None:
            for start in range(0, len(ids), erasure.BATCH_EVENTS):
                batch = ids[start : start + erasure.BATCH_EVENTS]
                done = await self._evict_batch(done, batch, cutoff)
            return done
        assert cutoff is not None
        after = 0
        while True:  # a read picks each batch, so the write lock is held only to evict
            batch, after = await self._read(
                eviction.select_derived, cutoff, after, erasure.BATCH_EVENTS
            )
            if not batch:
                return done
            done = await self._evict_batch(done, batch, cutoff)

    async def _evict_batch(
        self, done: Eviction, event_ids: Sequence[str], before: str | None
    ) -> Eviction:
        """One write transaction of an eviction, added to the receipt so far."""
        batch = await self._write(eviction.evict_events, event_ids, now=db_now(), before=before)
        if batch.evicted:  # as after an erasure: the evicted text leaves the file when idle
            self._scrub_when_idle()
        return eviction.combine(done, batch)

    async def relate(self, from_id: str, to_id: str) -> Relation:
        """Link two memories of this scope with an explicit ``related`` link (idempotent)."""
        from_id = require_name(from_id, "from_id")
        to_id = require_name(to_id, "to_id")
        return await self._write(relations.relate, from_id=from_id, to_id=to_id, now=db_now())

    async def graph(
        self,
        *,
        seed: str | None = None,
        depth: int = DEFAULT_GRAPH_DEPTH,
        max_nodes: int = DEFAULT_GRAPH_NODES,
        max_edges: int = DEFAULT_GRAPH_EDGES,
    ) -> MemoryGraph:
        """The memories, events, people and sessions around ``seed``, with the links
        between them, from one snapshot; no model is called.

        ``seed`` is a memory, event or person ID of this scope, a name ``find_person``
        finds exactly one person by, or else a query: the best items of fast recall. With
        no seed, the scope's pinned and newest current memories. The walk goes ``depth``
        links out (0 to 3), breadth first, newest first within a hop, and shows at most
        ``max_nodes`` nodes (1 to 500) and ``max_edges`` edges (0 to 1,000); ``coverage``
        says what it left out. Revoked and ended memories are shown, marked. A seed that
        finds nothing gives an empty graph."""
        depth = require_int(depth, "depth", low=0, high=MAX_GRAPH_DEPTH)
        max_nodes = require_int(max_nodes, "max_nodes", low=1, high=MAX_GRAPH_NODES)
        max_edges = require_int(max_edges, "max_edges", low=0, high=MAX_GRAPH_EDGES)
        query = None
        if seed is not None:
            seed = require_text(seed, "seed", max_chars=MAX_QUERY_CHARS)
            request, _ = self._recall_query(seed, limit=graph.SEED_ITEMS, as_of=None, mode="fast")
            query = functools.partial(recalled_refs, q=request)
        return await self._read(
            graph.memory_graph,
            seed=seed,
            query=query,
            depth=depth,
            max_nodes=max_nodes,
            max_edges=max_edges,
            now=db_now(),
        )

    # --- tiers: pins, consolidation, compaction -----------------------------------------

    async def pin(self, memory_id: str, pinned: bool = True) -> MemoryRecord:
        """Pin a current memory of this scope (``pinned=False`` unpins it); returns it.

        A pinned memory enters a context pack first, and a pinned working note never
        expires: ``consolidate`` promotes it to ``episodic`` once its TTL has passed.
        Idempotent; an unknown or revoked ID is ``not_found``."""
        memory_id = require_name(memory_id, "memory_id")
        pinned = require_bool(pinned, "pinned")
        return await self._write(tiers.pin, memory_id=memory_id, pinned=pinned)

    async def consolidate(
        self, *, as_of: str | datetime | None = None, dry_run: bool = False
    ) -> Consolidation:
        """Apply TTLs and promotions now (never in the background), in one transaction.

        Working notes pinned past their TTL, or stated in ``Settings.promote_after``
        distinct events, move to ``episodic``; user-stated episodic facts and preferences
        stated in that many events move to ``profile``; expired unpinned working notes
        are deleted completely (their source events stay). TTLs are judged at ``as_of``
        (default now). Returns what it did; a second call does nothing more.
        ``dry_run=True`` returns what it would do and writes nothing."""
        when = when_or_now(as_of, "as_of")
        dry_run = require_bool(dry_run, "dry_run")
        promote_after = self._runtime.settings.promote_after
        if dry_run:
            return await self._read(
                tiers.consolidate, as_of=when, promote_after=promote_after, dry_run=True
            )
        done = await self._write(tiers.consolidate, as_of=when, promote_after=promote_after)
        if done.deleted:  # as after ``delete``: their text leaves the file when idle
            self._scrub_when_idle()
        return done

    async def compact_working(
        self, session: str, *, keep: int = DEFAULT_KEEP_NOTES, dry_run: bool = False
    ) -> Compaction:
        """Fold the older working notes of ``session`` into one episodic memory, offline.

        Pinned notes and the newest ``keep`` others stay. The older ones are listed word
        for word in a new ``system`` event of the session; one episodic memory quotes that
        event and is linked to each of them; they are revoked (``compacted into <id>``),
        kept for audit. One transaction; with nothing to fold it writes nothing
        (``folded`` is empty). ``dry_run=True`` says what would be folded."""
        session = require_name(session, "session")
        keep = require_int(keep, "keep", low=0, high=MAX_KEEP_NOTES)
        dry_run = require_bool(dry_run, "dry_run")
        for _ in range(COMPACTION_ATTEMPTS):
            planned = await self._read(compaction.plan, session, keep)
            if dry_run or not planned.folded:
                return compaction.receipt(
                    self.persona, self.project, session, planned, dry_run=dry_run
                )
            now = db_now()
            text, summary = planned.event_text(session), planned.summary(session)
            segmented, summary_tokens = await segment_off_loop([text, summary])
            event = compaction.new_event(
                self.persona, self.project, session, new_event_id(), text, segmented, now
            )
            done = await self._write(
                compaction.compact,
                keep=keep,
                expected=[note.id for note in planned.folded],
                event=event,
                summary=summary,
                segmented=summary_tokens,
                now=now,
                working_ttl=self._runtime.settings.working_ttl,
            )
            if done is not None:
                assert done.memory is not None
                if self._runtime.pipeline is not None:
                    keys = [("event", event.id), ("memory", done.memory.id)]
                    self._runtime.pipeline.embed_later(keys)
                return done
        raise Conflict(
            "the session's working notes kept changing; compact again", code="version_conflict"
        )

    # --- consolidation runs: the host's model tidies what is known ----------------------

    async def prepare_consolidation(
        self, *, session: str | None = None, max_chars: int = DEFAULT_RUN_CHARS
    ) -> ConsolidationRun:
        """Freeze a consolidation run for the host's model to answer with a patch.

        The run holds the events of ``session`` (default: the whole scope) since its last
        applied run, at most ``max_chars`` of their text (an oversized event is paged:
        each event carries ``offset``, ``end`` and ``total``), and the current memories
        they touch: derived from them, on the same subject and fact key, or found by recall
        from their words and vectors, each with its ``version``. With no new events, the
        run holds the most recent memories, so they can still be tidied.

        A session has one prepared run at a time: until it is applied (or fails or is
        invalidated), preparing again returns it, so a host that crashed finds its run.
        Runs are durable: ``consolidation_runs`` and ``consolidation_run`` read them after
        a restart. Apply a patch with ``apply_consolidation``."""
        session = optional_name(session, "session")
        max_chars = require_int(max_chars, "max_chars", low=MIN_RUN_CHARS, high=MAX_RUN_CHARS)
        waiting = await self._read(consolidation.open_run, session)
        if waiting is not None:
            return waiting
        sources = await self._read(consolidation.select_sources, session, max_chars)
        neighbours: dict[str, None] = {}
        for event in sources.events[-consolidation.NEIGHBOUR_QUERIES :]:
            words = (event.text or "")[:MAX_QUERY_CHARS]
            if not words.strip():
                continue  # nothing to look for (a page of white space)
            found = await self.recall(words, limit=consolidation.NEIGHBOURS)
            neighbours.update(dict.fromkeys(i.id for i in found.items if not i.raw_fallback))
        return await self._write(
            consolidation.prepare,
            session=session,
            max_chars=max_chars,
            neighbours=list(neighbours),
            run_id=consolidation.new_run_id(),
            now=db_now(),
        )

    async def consolidation_runs(
        self, status: str | None = None, *, limit: int = DEFAULT_LIST_LIMIT
    ) -> list[ConsolidationRun]:
        """This scope's consolidation runs, newest first (``status``: only those)."""
        if status is not None:
            status = require_choice(status, "status", RUN_STATUSES)
        limit = require_int(limit, "limit", low=1, high=MAX_LIST_LIMIT)
        return await self._read(consolidation.list_runs, status=status, limit=limit)

    async def consolidation_run(self, run_id: str) -> ConsolidationRun:
        """One consolidation run of this scope, with its frozen input (``not_found``)."""
        run_id = require_name(run_id, "run_id")
        return await self._read(consolidation.load_run, run_id)

    async def record_attempt(
        self, run_id: str, candidate: object, error: object = None
    ) -> ConsolidationRun:
        """Keep a patch the host rejected (or amem refused) and its error on a prepared
        run, for an explicit retry: the run shows them as ``candidate`` and ``error``
        until the next attempt or the apply. Both must be JSON values."""
        run_id = require_name(run_id, "run_id")
        return await self._write(
            consolidation.record_attempt,
            run_id=run_id,
            candidate=json_value(candidate, "candidate"),
            error=None if error is None else json_value(error, "error"),
            now=db_now(),
        )

    async def apply_consolidation(
        self, run_id: str, patch: Mapping[str, Any]
    ) -> ConsolidationResult:
        """Apply the host model's patch to a prepared run, all of it or nothing.

        ``patch`` is ``{"entries": [...], "evict": [event IDs]}``; each entry one of
        ``{"op": "add", "source": EVENT_ID, "text", "quote", "kind", "basis", ...}`` (a
        memory draft whose quote is in the run's text of that source), ``{"op":
        "summarise", "source", "text", "quote"}`` (an episodic memory), ``{"op": "merge",
        "ids": [...], "text"?}`` (the first survives, or a new memory with ``text`` takes
        its source; the others are revoked, linked ``merged_into`` it), ``{"op":
        "supersede", "id": OLD, "by": NEW}`` (NEW's start closes OLD's interval; OLD
        stays as history), ``{"op": "relate", "from", "to"}`` and ``{"op": "retract",
        "id", "reason"?}``. A later entry names what an earlier add or summarise made as
        ``new:N`` (N its index). ``evict`` lets the raw text of sources go (``evict``).

        Every memory named must be in the run's input with its frozen version: one that
        changed meanwhile refuses the patch (``version_conflict``), and the run fails
        (prepare again). The whole patch is validated before anything is written, in one
        transaction. Applying the same patch again returns the first result with
        ``duplicate=True``."""
        run_id = require_name(run_id, "run_id")
        parsed = consolidation.parse_patch(patch)
        segmented = await segment_off_loop(parsed.texts)
        try:
            done = await self._write(
                consolidation.apply,
                run_id=run_id,
                patch=parsed,
                segmented=segmented,
                now=db_now(),
                working_ttl=self._runtime.settings.working_ttl,
            )
        except Conflict as exc:
            if exc.code == "version_conflict":
                error = json.dumps({"code": exc.code, "message": exc.message})
                await self._write(
                    consolidation.mark_failed, run_id=run_id, error=error, now=db_now()
                )
            raise
        made = [entry.memory_id for entry in done.entries if entry.memory_id is not None]
        if not done.duplicate:
            self._runtime.after_commit([], made)
            if done.evicted:
                self._scrub_when_idle()
        return done

    async def save_checkpoint(
        self,
        session: str,
        *,
        goal: str,
        completed: Sequence[str] = (),
        pending: Sequence[str] = (),
        constraints: Sequence[str] = (),
        next_action: str | None = None,
        covered_seq: int | None = None,
    ) -> Checkpoint:
        """Record the host's task state for ``session``; ``covered_seq`` must be the seq of
        an event of this scope and session. amem records it; it cannot verify it."""
        fields = checkpoint_fields(
            session=session,
            goal=goal,
            completed=completed,
            pending=pending,
            constraints=constraints,
            next_action=next_action,
            covered_seq=covered_seq,
        )
        return await self._write(checkpoints.save_checkpoint, now=db_now(), **fields)

    async def checkpoint(self, session: str) -> Checkpoint | None:
        """The latest checkpoint of ``session`` that no correction or deletion invalidated."""
        session = require_name(session, "session")
        return await self._read(checkpoints.latest_checkpoint, session)

    async def host_ingest(
        self,
        instance: str,
        entries: Sequence[Mapping[str, Any]],
        *,
        start: int = 0,
        expected_cursor: int | None = None,
        checkpoint: Mapping[str, Any] | None = None,
        people: Mapping[str, str] | None = None,
    ) -> CaptureResult:
        """Capture a host's transcript slice, in order, in one transaction.

        ``entries`` are the transcript's entries from index ``start`` on, each a mapping
        with ``event_id`` (required: a stable ID), ``text``, ``role`` and optionally
        ``session``, ``source``, ``category``, ``occurred_at``, ``person`` and ``speaker``.
        Entries before this instance's cursor are skipped, the rest stored idempotently;
        an optional ``checkpoint`` (the fields of ``save_checkpoint``) is saved; then the
        cursor advances. ``expected_cursor`` turns on compare-and-set: if the stored cursor
        differs, nothing is written (``version_conflict``).

        ``people`` maps speakers to person IDs of the registry (``upsert_person``): an
        entry's speaker is its ``speaker`` (a name the host gives whoever said it, e.g. a
        user of a group chat; not stored) or, without one, its ``role``, exactly as
        written. A newly stored entry whose speaker is mapped belongs to that person,
        unless it names a ``person`` itself. A person ID the mapping names that is not in
        the registry refuses the whole slice (``not_found``): nothing is written.
        """
        instance = require_name(instance, "instance")
        start = require_int(start, "start", low=0, high=MAX_INTEGER)
        if expected_cursor is not None:
            require_int(expected_cursor, "expected_cursor", low=0, high=MAX_INTEGER)
        if not isinstance(entries, Sequence) or len(entries) > MAX_CAPTURE_ENTRIES:
            raise InvalidInput(f"entries must be a list of at most {MAX_CAPTURE_ENTRIES} events")
        for n, entry in enumerate(entries):
            if not isinstance(entry, Mapping) or entry.get("event_id") is None:
                raise InvalidInput(f"entries[{n}] needs an event_id (a stable ID)")
        speakers = speaker_people(people)
        made = await self._new_events(
            [captured_entry(entry, speakers, f"entries[{n}]") for n, entry in enumerate(entries)]
        )
        fields = None if checkpoint is None else checkpoint_from(checkpoint)
        result = await self._write(
            capture.ingest,
            instance=instance,
            start=start,
            entries=made,
            expected_cursor=expected_cursor,
            checkpoint=fields,
            now=db_now(),
            people=sorted(set(speakers.values())),
        )
        self._runtime.after_commit(result.receipts)
        return result

    async def capture_transcript(
        self,
        instance: str,
        entries: Sequence[Mapping[str, Any]],
        *,
        checkpoint: Mapping[str, Any] | None = None,
        progress: Progress | None = None,
        people: Mapping[str, str] | None = None,
    ) -> CaptureResult:
        """Capture a whole transcript (``entries`` from its first entry on, as
        ``host_ingest`` takes them): the entries past this instance's cursor are sent in
        slices of at most ``MAX_CAPTURE_ENTRIES``, each one compare-and-set transaction from
        the cursor it read, and ``checkpoint`` goes with the last, so it is saved only once
        everything before it is captured. ``progress(done, total)`` follows the slices.
        ``people`` maps speakers to person IDs, as ``host_ingest`` takes it (checked with
        the first slice: an unknown person ID writes nothing). The result adds up every
        slice.
        """
        cursor = first = await self.capture_cursor(instance)
        slices: list[CaptureResult] = []
        while True:
            chunk = entries[cursor : cursor + MAX_CAPTURE_ENTRIES]
            last = cursor + len(chunk) >= len(entries)
            done = await self.host_ingest(
                instance,
                chunk,
                start=cursor,
                expected_cursor=cursor,
                checkpoint=checkpoint if last else None,
                people=people,
            )
            slices.append(done)
            cursor = done.cursor
            if progress is not None:
                progress(min(cursor, len(entries)), len(entries))
            if last:
                break
        return capture.combined(slices, skipped=min(first, len(entries)))

    async def capture_cursor(self, instance: str) -> int:
        """How many transcript entries ``instance`` has captured in this scope."""
        return await self._read(capture.read_cursor, require_name(instance, "instance"))

    async def _new_events(
        self, items: Sequence[Mapping[str, Any]], *, field: str = "events"
    ) -> list[events.NewEvent]:
        """Validated events of this scope (``field`` names the list in errors); conversation
        text segmented for the index (the raw fallback), off the loop."""
        now = db_now()  # one ingestion time for the request, written once
        many = len(items) > 1
        made = [
            self._new_event(submitted_event(item, f"{field}[{n}]" if many else ""), now)
            for n, item in enumerate(items)
        ]
        indexed = [n for n, event in enumerate(made) if index.indexes_event(event.category)]
        segmented = await segment_off_loop([made[n].text for n in indexed])
        for n, tokens in zip(indexed, segmented, strict=True):
            made[n].segmented = tokens
        return made

    def _new_event(self, event: SubmittedEvent, now: str) -> events.NewEvent:
        extracted = event.category == "conversation" and self._runtime.settings.extraction_enabled
        return events.NewEvent(
            id=event.id or new_event_id(),
            persona=self.persona,
            project=self.project,
            session=event.session,
            role=event.role,
            category=event.category,
            source=event.source,
            text=event.text,
            occurred_at=now if event.occurred_at is None else db_time(event.occurred_at),
            occurred_at_given=event.occurred_at is not None,
            ingested_at=now,
            status="pending" if extracted else "stored",
            person=event.person,
        )

    # --- people ------------------------------------------------------------------------

    async def upsert_person(
        self,
        person_id: str | None = None,
        *,
        display_name: str,
        aliases: Sequence[str] = (),
        locale: str | None = None,
        timezone: str | None = None,
        notes: str | None = None,
    ) -> Person:
        """Add a person to this scope's registry, or make the person ``person_id`` exactly
        this (every field as given: an omitted one is cleared). Without ``person_id`` a new
        person gets a new ID. A change adds one to ``version``; an unchanged person is
        returned as it is. Names need not be unique: ``find_person`` returns every match."""
        if not isinstance(aliases, Sequence) or isinstance(aliases, str):
            raise InvalidInput("aliases must be a list of names")
        if len(aliases) > MAX_ALIASES:
            raise InvalidInput(f"aliases holds at most {MAX_ALIASES} names")
        return await self._write(
            people.upsert_person,
            person_id=optional_name(person_id, "person_id"),
            display_name=require_name(display_name, "display_name", max_chars=MAX_NAME_CHARS),
            aliases=list(
                dict.fromkeys(
                    require_name(a, f"aliases[{n}]", max_chars=MAX_NAME_CHARS)
                    for n, a in enumerate(aliases)
                )
            ),
            locale=optional_name(locale, "locale"),
            timezone=optional_name(timezone, "timezone"),
            notes=None if notes is None else require_text(notes, "notes", max_chars=MAX_NOTE_CHARS),
            now=db_now(),
        )

    async def people(self) -> list[Person]:
        """Every person of this scope's registry, oldest first."""
        return await self._read(people.list_people)

    async def find_person(self, name: str) -> list[Person]:
        """Every person whose display name or alias is ``name`` (case, full- and
        half-width forms and white-space runs aside; Chinese names as written), oldest
        first: several when several match, never a guess among them."""
        return await self._read(
            people.find_people, require_name(name, "name", max_chars=MAX_NAME_CHARS)
        )

    async def remove_person(self, person_id: str) -> Person:
        """Take a person out of the registry; returns them as they were. Refused
        (``person_in_use``) while an event or memory belongs to them or is about them, or
        they have a state: ``erase(person=...)`` first, or ``assign`` the events away."""
        return await self._write(people.remove_person, require_name(person_id, "person_id"))

    async def assign(
        self, event_id: str, person: str | None, reason: str | None = None
    ) -> Assignment:
        """Move an event into ``person``'s relationship (None: no one's), with every
        memory derived from it, without copying anything. Its role, text and times stay
        as they were: an assistant's words stay the assistant's. Recorded with
        ``reason``. A single-valued fact moves between the people's fact chains: it no
        longer ends the old person's value, and ends the new person's earlier one."""
        return await self._write(
            facts.reassign,
            require_name(event_id, "event_id"),
            optional_name(person, "person"),
            None if reason is None else require_text(reason, "reason", max_chars=MAX_NOTE_CHARS),
            db_now(),
        )

    async def state(self) -> State:
        """The scope's own state: version 0 and no data before the first save."""
        return await self._read(people.load_state, None)

    async def save_state(
        self, data: Mapping[str, Any], expected_version: int | None = None
    ) -> State:
        """Store ``data`` (a JSON object) as the scope's state, one version on. With
        ``expected_version``, only if the stored version is still that one; otherwise
        ``Conflict`` (``version_conflict``) and nothing changes."""
        return await self._save_state(None, data, expected_version)

    async def patch_state(
        self,
        base: Mapping[str, Any] | State,
        new: Mapping[str, Any] | State,
        *,
        person: str | None = None,
    ) -> State:
        """Apply the top-level keys ``new`` changes from ``base`` (the state as the caller
        read it) to the state as stored now, one version on; keys the caller did not
        change stay as stored, whoever changed them meanwhile. ``Conflict``
        (``version_conflict``) only when a key this call changes was changed meanwhile;
        nothing is written then. ``person``: that person's state, not the scope's."""
        before, after = (x.data if isinstance(x, State) else x for x in (base, new))
        for field, value in (("base", before), ("new", after)):
            if not isinstance(value, Mapping):
                raise InvalidInput(f"{field} must be an object (or a State)")
        people.state_json(after)
        return await self._write(
            people.patch_state, optional_name(person, "person"), before, after, db_now()
        )

    async def person_state(self, person: str) -> State:
        """A person's state: version 0 and no data before the first save."""
        return await self._read(people.load_state, require_name(person, "person"))

    async def save_person_state(
        self, person: str, data: Mapping[str, Any], expected_version: int | None = None
    ) -> State:
        """``save_state`` for a person of the registry."""
        return await self._save_state(require_name(person, "person"), data, expected_version)

    async def _save_state(
        self, person: str | None, data: Mapping[str, Any], expected_version: int | None
    ) -> State:
        if expected_version is not None:
            require_int(expected_version, "expected_version", low=0, high=MAX_INTEGER)
        people.state_json(data)  # refused before the write lock is taken
        return await self._write(people.save_state, person, data, expected_version, db_now())

    # --- browsing and capacity ----------------------------------------------------------

    async def list(
        self,
        what: str = "memories",
        *,
        kinds: Collection[str] | None = None,
        roles: Collection[str] | None = None,
        session: str | None = None,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        include_revoked: bool = False,
        include_expired: bool = False,
        tier: str | None = None,
        cursor: str | None = None,
        limit: int = DEFAULT_LIST_LIMIT,
        person: str | None = None,
    ) -> Listing:
        """One page of what this scope stores: ``memories`` or ``events``, newest stored
        first, with the totals of every page.

        Filters: ``kinds`` and ``tier`` (memories), ``roles`` (of the event; for a memory, of its
        source event), ``session``, and ``since <= t < until`` on ``valid_at`` (memories) or
        ``occurred_at`` (events). Memories are current ones unless ``include_revoked``
        (corrected or retracted) or ``include_expired`` (validity ended by now) add the
        others, flagged. ``next_cursor`` continues with the same filters; rows written
        meanwhile never shift a page. ``limit`` is 1 to 500. ``person`` (a registry ID)
        lists only that person's events, or the memories derived from them or about them.
        """
        query = self._list_query(
            what,
            kinds=kinds,
            roles=roles,
            session=session,
            since=since,
            until=until,
            include_revoked=include_revoked,
            include_expired=include_expired,
            tier=tier,
            limit=limit,
            person=person,
        )
        if query.person is not None:
            await self._read(people.load_person, query.person)  # not_found for a stranger
        if cursor is not None:
            if not isinstance(cursor, str):
                raise InvalidInput("cursor must be a string a listing returned")
            after = listing.decode_cursor(cursor, query, self.persona, self.project)
        else:
            after = None
        return await self._read(listing.list_items, query, after)

    def _list_query(
        self,
        what: object,
        *,
        kinds: object,
        roles: object,
        session: object,
        since: object,
        until: object,
        include_revoked: object,
        include_expired: object,
        tier: object,
        limit: object,
        person: object = None,
    ) -> listing.ListQuery:
        what = require_choice(what, "what", LIST_TARGETS)
        if what == "events" and (
            kinds is not None
            or tier is not None
            or include_revoked is True
            or include_expired is True
        ):
            raise InvalidInput(
                "kinds, tier, include_revoked and include_expired list memories only"
            )
        start = None if since is None else db_time(parse_time(since, "since"))
        end = None if until is None else db_time(parse_time(until, "until"))
        if start is not None and end is not None and end <= start:
            raise InvalidInput("until must be later than since", code="invalid_time")
        return listing.ListQuery(
            what=what,
            kinds=None if kinds is None else require_choices(kinds, "kinds", MEMORY_KINDS),
            roles=None if roles is None else require_choices(roles, "roles", ROLES),
            session=optional_name(session, "session"),
            since=start,
            until=end,
            include_revoked=require_bool(include_revoked, "include_revoked"),
            include_expired=require_bool(include_expired, "include_expired"),
            tier=None if tier is None else require_choice(tier, "tier", MEMORY_TIERS),
            limit=require_int(limit, "limit", low=1, high=MAX_LIST_LIMIT),
            now=db_now(),
            person=optional_name(person, "person"),
        )

    async def set_limits(
        self, *, max_events: int | None = None, max_text_bytes: int | None = None
    ) -> Capacity:
        """Make this scope's capacity limits exactly these (None: no limit; no arguments
        clears both); returns the scope's capacity with them.

        ``max_events`` bounds the events stored, ``max_text_bytes`` the UTF-8 bytes of the
        events' and memories' text. A write that would pass one is refused with
        ``capacity_exceeded`` and writes nothing; a resubmitted duplicate is not refused.
        A limit below what the scope holds removes nothing: new rows wait until it is back
        under it.
        """
        if max_events is not None:
            require_int(max_events, "max_events", low=1, high=MAX_SCOPE_LIMIT)
        if max_text_bytes is not None:
            require_int(max_text_bytes, "max_text_bytes", low=1, high=MAX_SCOPE_LIMIT)
        return await self._write(
            capacity.set_limits, max_events=max_events, max_text_bytes=max_text_bytes
        )


def scope_name(name: str | None, field: str, default: str) -> str:
    """A persona or project name; None (never "") takes the configured default."""
    return require_name(default if name is None else name, field, max_chars=MAX_NAME_CHARS)


def erase_selector(
    session: str | None,
    since: str | datetime | None,
    until: str | datetime | None,
    subject: str | None,
    fact_key: str | None,
    everything: bool,
    person: str | None = None,
) -> erasure.Selector:
    """The events a bulk erase starts from, checked: at least one selector, and
    ``everything`` alone, so that nothing is erased by accident."""
    everything = require_bool(everything, "everything")
    given = [x is not None for x in (session, since, until, subject, fact_key, person)]
    if everything and any(given):
        raise InvalidInput("everything=True erases the whole scope and takes no other selector")
    if not everything and not any(given):
        raise InvalidInput(
            "say what to erase: session, since/until, subject (with fact_key), person, "
            "or everything=True"
        )
    if fact_key is not None and subject is None:
        raise InvalidInput("fact_key needs subject")
    start = None if since is None else db_time(parse_time(since, "since"))
    end = None if until is None else db_time(parse_time(until, "until"))
    if start is not None and end is not None and start >= end:
        raise InvalidInput("since must be earlier than until")
    subject, fact_key = (
        None if value is None else require_name(value, field, max_chars=MAX_KEY_CHARS)
        for field, value in (("subject", subject), ("fact_key", fact_key))
    )
    return erasure.Selector(
        session=optional_name(session, "session"),
        since=start,
        until=end,
        subject=subject,
        fact_key=fact_key,
        person=optional_name(person, "person"),
        everything=everything,
    )


def evicted_ids(event_ids: object) -> list[str]:
    """The event IDs ``evict`` names, checked, in order, each once."""
    if not isinstance(event_ids, Collection) or isinstance(event_ids, str | bytes | Mapping):
        raise InvalidInput("event_ids must be a list of IDs")
    if len(event_ids) > MAX_EVICTED_IDS:
        raise InvalidInput(f"event_ids holds more than {MAX_EVICTED_IDS} IDs")
    names = (require_name(item, f"event_ids[{n}]") for n, item in enumerate(event_ids))
    return list(dict.fromkeys(names))


def new_event_id() -> str:
    return f"evt_{uuid.uuid4().hex}"
