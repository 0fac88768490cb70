"""The async API: ``open`` gives a ``Memory``; ``Memory.scope`` gives a ``Scope``.

One anyio task group, opened by ``open``, owns everything a ``Memory`` runs (today the
writer actor). Nothing is global: two ``Memory`` objects on two files share nothing, and
two on one file (or two processes) coordinate through SQLite's own locks.
"""

from __future__ import annotations

import inspect
import os
import sqlite3
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

import anyio
import httpx
from pydantic import ValidationError

from .config import Settings
from .db.database import Database
from .errors import Closed, InvalidInput, UpstreamError
from .inputs import (
    db_time,
    optional_name,
    parse_time,
    refused,
    require_choice,
    require_int,
    require_name,
    require_text,
    utc_now,
)
from .limits import (
    DEFAULT_READ_CHARS,
    MAX_BUDGET,
    MAX_CAPTURE_ENTRIES,
    MAX_CHECKPOINT_CHARS,
    MAX_DRAFTS,
    MAX_EVENT_CHARS,
    MAX_LIST_ITEMS,
    MAX_MEMORY_CHARS,
    MAX_NAME_CHARS,
    MAX_NOTE_CHARS,
    MAX_PERSONA_CHARS,
    MAX_QUERY_CHARS,
    MAX_READ_CHARS,
    MAX_RECALL_LIMIT,
)
from .llm import embeddings, extraction
from .llm.pipeline import Pipeline, Progress
from .models import (
    DRAFT_FIELDS,
    MEMORY_KINDS,
    RECALL_MODES,
    ROLES,
    SUBMITTABLE_CATEGORIES,
    ArchiveResult,
    CaptureResult,
    Checkpoint,
    ContextPack,
    Correction,
    CurrentEmotion,
    Deletion,
    DoctorReport,
    EventReceipt,
    EventStatus,
    Evidence,
    MemoryDraft,
    MemoryRecord,
    Persona,
    RecallResult,
    ReindexResult,
    Relation,
    RetryResult,
    Status,
)
from .ops import doctor, files, transfer
from .search import index
from .search.recall import RecallQuery, recall_memories
from .search.text import segment_off_loop, warm_up
from .store import (
    capture,
    checkpoints,
    corrections,
    emotions,
    erasure,
    events,
    evidence,
    facts,
    packs,
    personas,
    relations,
    status,
)

EVENT_FIELDS = frozenset(
    ("text", "role", "event_id", "session", "source", "category", "occurred_at")
)
T = TypeVar("T")


@asynccontextmanager
async def open(
    path: str | os.PathLike[str],
    *,
    settings: Settings | None = None,
    http_client: httpx.AsyncClient | None = None,
) -> AsyncIterator[Memory]:
    """Open (creating and migrating if needed) the memory database at ``path``.

    Works under asyncio and trio. Settings come from ``AMEM_*`` environment variables
    unless ``settings`` is given. Extraction and embedding calls go through
    ``http_client`` when given (amem does not close it), else through a client of its own.
    Leaving the block cancels in-flight model calls, lets queued writes commit, then closes.
    """
    settings = settings or Settings()
    error: BaseException | None = None
    async with (
        Database.open(path, readers=settings.readers, wal_limit=settings.wal_limit_mb << 20) as db,
        model_client(settings, http_client) as client,
        anyio.create_task_group() as tg,
    ):
        warming = anyio.CancelScope()
        tg.start_soon(cancellable, warming, warm_up)  # jieba loads in a worker thread
        with anyio.CancelScope(shield=True):  # once started, these must be closed below
            await tg.start(db.writer.serve)
            pipeline = None if client is None else Pipeline(db, settings, client)
            if pipeline is not None:
                await tg.start(pipeline.serve)
        memory = Memory(db, settings, pipeline)
        try:
            yield memory
        except BaseException as exc:  # re-raised below, outside the task group
            error = exc
        finally:
            warming.cancel()
            await memory.aclose()
    if error is not None:
        raise error


async def cancellable(scope: anyio.CancelScope, fn: Callable[[], Awaitable[None]]) -> None:
    with scope:
        await fn()


@asynccontextmanager
async def model_client(
    settings: Settings, given: httpx.AsyncClient | None
) -> AsyncIterator[httpx.AsyncClient | None]:
    """The caller's client, a new one when a model endpoint is configured, else None."""
    if given is not None:
        yield given
    elif settings.extraction_enabled or settings.embedding_enabled:
        async with httpx.AsyncClient() as client:
            yield client
    else:
        yield None


class Memory:
    """An open memory database. Get one from ``amem.open``; use it through scopes."""

    def __init__(self, db: Database, settings: Settings, pipeline: Pipeline | None) -> None:
        self._db = db
        self.settings = settings
        self._pipeline = pipeline
        self._closed = False

    @property
    def path(self) -> str:
        """The database file."""
        return str(self._db.path)

    def scope(self, persona: str | None = None, project: str | None = None) -> Scope:
        """The persona + project partition every event and memory operation runs in.

        Omitted names fall back to the configured defaults (``default``/``default``).
        """
        return Scope(
            self,
            require_name(
                self.settings.default_persona if persona is None else persona,
                "persona",
                max_chars=MAX_NAME_CHARS,
            ),
            require_name(
                self.settings.default_project if project is None else project,
                "project",
                max_chars=MAX_NAME_CHARS,
            ),
        )

    async def persona(self, persona: str, version: int | None = None) -> Persona:
        """A persona version (the latest by default); a new persona starts neutral."""
        name = require_name(persona, "persona", max_chars=MAX_NAME_CHARS)
        if version is not None:
            require_int(version, "version", low=1, high=2**62)
        found = await self._read(partial(personas.get_persona, persona=name, version=version))
        if found is not None:
            return found
        return await self._write(partial(personas.ensure_persona, persona=name, now=_now()))

    async def set_persona(self, persona: str, text: str, *, note: str | None = None) -> Persona:
        """Append a new persona version with ``text``; returns it."""
        name = require_name(persona, "persona", max_chars=MAX_NAME_CHARS)
        text = require_text(text, "text", max_chars=MAX_PERSONA_CHARS)
        if note is not None:
            note = require_text(note, "note", max_chars=MAX_NOTE_CHARS)
        return await self._write(
            partial(personas.append_version, persona=name, text=text, note=note, now=_now())
        )

    async def rollback_persona(self, persona: str, version: int) -> Persona:
        """Append a new version equal to ``version``; history is never erased."""
        name = require_name(persona, "persona", max_chars=MAX_NAME_CHARS)
        require_int(version, "version", low=1, high=2**62)
        return await self._write(
            partial(personas.rollback_to, persona=name, version=version, now=_now())
        )

    async def persona_history(self, persona: str) -> list[Persona]:
        """Every version of ``persona``, oldest first (empty for a persona never read)."""
        name = require_name(persona, "persona", max_chars=MAX_NAME_CHARS)
        return await self._read(partial(personas.persona_history, persona=name))

    async def export(
        self,
        path: str | os.PathLike[str],
        *,
        root: str | os.PathLike[str] | None = None,
        progress: Progress | None = None,
    ) -> ArchiveResult:
        """Write every authoritative table, from one consistent snapshot, to a new JSONL
        archive at ``path`` (never overwritten; appears atomically). ``root`` confines
        the path to a directory. ``progress(done, total)`` is called from a worker thread.
        """
        target = await anyio.to_thread.run_sync(files.checked_target, path, root)
        counts = await self._read(partial(transfer.write_archive, target=target, progress=progress))
        return ArchiveResult(path=str(target), counts=counts)

    async def import_archive(
        self, path: str | os.PathLike[str], *, progress: Progress | None = None
    ) -> ArchiveResult:
        """Load an archive into this (empty) database and rebuild the search index.

        The archive is read as a stream, in one write transaction: every row is validated
        before it is inserted, and nothing is committed unless the whole archive is valid.
        ``progress(done, total)`` counts rows, from the writer's thread. Vectors need
        ``reindex``.
        """
        return await self._load(transfer.import_archive, path, progress)

    async def backup(
        self, path: str | os.PathLike[str], *, root: str | os.PathLike[str] | None = None
    ) -> ArchiveResult:
        """Copy the database to a new file with SQLite's backup API, while writers run."""
        target = await anyio.to_thread.run_sync(files.checked_target, path, root)
        await anyio.to_thread.run_sync(transfer.backup_file, self._db.path, target)
        return ArchiveResult(path=str(target), counts={})

    async def restore(
        self, path: str | os.PathLike[str], *, progress: Progress | None = None
    ) -> ArchiveResult:
        """Load a backup file into this (empty) database, through the same validation as
        an archive (and the same single transaction), and rebuild the search index."""
        return await self._load(transfer.restore_backup, path, progress)

    async def _load(
        self, load: transfer.Load, path: str | os.PathLike[str], progress: Progress | None
    ) -> ArchiveResult:
        counts = await self._write(partial(load, path=path, progress=progress))
        return ArchiveResult(path=str(path), counts=counts)

    async def doctor(self, *, rebuild_index: bool = False) -> DoctorReport:
        """Check the database's health (see docs/operations.md); ``rebuild_index`` first
        rebuilds the search index from the data. The checks that read every row run on a
        read snapshot; the others hold the write lock while they check."""
        if rebuild_index:
            sources = await self._read(doctor.index_sources)
            segmented = await segment_off_loop([source[4] for source in sources])
            docs = [(*s[:4], t) for s, t in zip(sources, segmented, strict=True)]
            await self._write(partial(doctor.rebuild_index, docs=docs))
        row_checks = await self._read(doctor.row_checks)
        return await self._write(
            partial(doctor.examine, settings=self.settings, row_checks=row_checks)
        )

    async def aclose(self) -> None:
        """Cancel model calls, let queued writes commit, refuse new work. ``open`` calls it."""
        self._closed = True
        if self._pipeline is not None:
            self._pipeline.close()
        await self._db.writer.close()

    def _model_work(self, configured: bool, what: str) -> Pipeline:
        if not configured or self._pipeline is None:
            prefix = "AMEM_EXTRACT" if what == "extraction" else "AMEM_EMBED"
            raise InvalidInput(
                f"no {what} endpoint is configured ({prefix}_BASE_URL, {prefix}_MODEL)",
                code="not_configured",
            )
        return self._pipeline

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._db.write(fn)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise Closed("this Memory is closed")
        return await self._db.read(fn)


class Scope:
    """Event and memory operations inside one persona + project partition.

    IDs that belong to another scope read as absent (``not_found``). Scopes organise one
    trusted user's data; they are not a security boundary between tenants.
    """

    def __init__(self, memory: Memory, persona: str, project: str) -> None:
        self._memory = memory
        self.persona = persona
        self.project = project

    def __repr__(self) -> str:
        return f"Scope(persona={self.persona!r}, project={self.project!r})"

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
    ) -> EventReceipt:
        """Persist an original event; returns after it is committed.

        Resubmitting an ``event_id`` with the same payload returns the stored receipt with
        ``duplicate=True`` (an omitted ``occurred_at`` reuses the stored time); a different
        payload or scope raises ``Conflict`` (``duplicate_conflict``). Never waits for a model.
        """
        [event] = await self._new_events(
            [{"text": text, "role": role, "event_id": event_id, "session": session,
              "source": source, "category": category, "occurred_at": occurred_at}]
        )  # fmt: skip
        receipt = await self._memory._write(partial(events.insert_event, event=event))
        self._enqueue_pending([receipt])
        return receipt

    async def read(self, id: str, *, offset: int = 0, limit: int = DEFAULT_READ_CHARS) -> Evidence:
        """Page through the original event behind an event or memory ID, unaltered.

        For a memory ID, ``memory`` holds the memory and the page is its source event.
        """
        id = require_name(id, "id")
        offset = require_int(offset, "offset", low=0, high=MAX_EVENT_CHARS)
        limit = require_int(limit, "limit", low=1, high=MAX_READ_CHARS)
        return await self._memory._read(
            partial(evidence.read_evidence, persona=self.persona, project=self.project,
                    id=id, offset=offset, limit=limit)
        )  # fmt: skip

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
        return await self._memory._write(
            partial(facts.derive_memories, persona=self.persona, project=self.project,
                    event_id=event_id, drafts=drafts, segmented=segmented, now=_now())
        )  # fmt: skip

    async def recall(
        self,
        query: str,
        *,
        limit: int = 10,
        as_of: str | datetime | None = None,
        include_history: bool = False,
        mode: str = "fast",
        kinds: Collection[str] | None = None,
    ) -> RecallResult:
        """Memories of this scope that match ``query`` and were valid at ``as_of`` (now).

        ``include_history`` adds facts that had expired by ``as_of``, marked ``expired``.
        Revoked memories never appear. A query with no matching evidence returns no items.
        """
        query = require_text(query, "query", max_chars=MAX_QUERY_CHARS)
        limit = require_int(limit, "limit", low=1, high=MAX_RECALL_LIMIT)
        mode = require_choice(mode, "mode", RECALL_MODES)
        when = when_or_now(as_of, "as_of")
        if not isinstance(include_history, bool):
            raise InvalidInput("include_history must be true or false")
        wanted = (
            None if kinds is None else {require_choice(k, "kinds", MEMORY_KINDS) for k in kinds}
        )
        settings = self._memory.settings
        request = RecallQuery(
            persona=self.persona, project=self.project, query=query, limit=limit, as_of=when,
            include_history=include_history, kinds=None if wanted is None else frozenset(wanted),
            half_life_days=settings.freshness_half_life_days,
            fade_after_days=settings.fade_after_days,
            coarsen_after_days=settings.coarsen_after_days,
        )  # fmt: skip
        warnings: list[str] = []
        if mode != "fast":
            request, warnings = await self._with_query_vector(request, mode)
        items, found = await self._memory._read(partial(recall_memories, q=request))
        warnings += found
        return RecallResult(
            query=query, persona=self.persona, project=self.project, as_of=when, mode=mode,
            include_history=include_history, items=items, warnings=warnings,
        )  # fmt: skip

    async def _with_query_vector(
        self, request: RecallQuery, mode: str
    ) -> tuple[RecallQuery, list[str]]:
        """Embed the query for ``semantic``/``deep`` recall (outside any transaction)."""
        settings, pipeline = self._memory.settings, self._memory._pipeline
        if not settings.embedding_enabled or pipeline is None:
            return request, [f"{mode} mode needs an embedding endpoint; ranked lexically"]
        try:
            [vector] = await embeddings.embed(
                pipeline.client, settings, [request.query], query=True
            )
        except UpstreamError as exc:
            return request, [f"the query could not be embedded ({exc.message}); ranked lexically"]
        return replace(
            request, vector=vector, fingerprint=settings.embed_fingerprint,
            scan=settings.semantic_scan if mode == "semantic" else None,
            min_similarity=settings.embed_min_similarity,
        ), []  # fmt: skip

    async def retry(
        self, event_id: str | None = None, *, progress: Progress | None = None
    ) -> RetryResult:
        """Extract this scope's ``pending`` and ``failed`` events now, and wait for them.

        With ``event_id``, only that conversation event (also a ``stored`` one, e.g. from
        before extraction was configured). ``progress(done, total)`` is called as events
        finish. Needs an extraction endpoint (``not_configured`` otherwise).
        """
        pipeline = self._memory._model_work(self._memory.settings.extraction_enabled, "extraction")
        if event_id is not None:
            event_id = require_name(event_id, "event_id")
            await self.read(event_id, limit=1)  # not_found for unknown and foreign IDs
            ids = [event_id]
        else:
            ids = await self._memory._read(
                partial(extraction.retryable, persona=self.persona, project=self.project)
            )
        outcomes = await pipeline.extract_many(ids, (self.persona, self.project), progress)
        return RetryResult(
            persona=self.persona, project=self.project,
            extracted=[o.event_id for o in outcomes if o.status == "extracted"],
            failed=[o.event_id for o in outcomes if o.status == "failed"],
            memory_ids=[m for o in outcomes if o.new for m in o.memory_ids],
        )  # fmt: skip

    async def reindex(self, *, progress: Progress | None = None) -> ReindexResult:
        """Rebuild this scope's vector index with the configured embedding endpoint.

        Runs outside any transaction and swaps the new index in only after every batch
        succeeded (an ``UpstreamError`` leaves the old index as it was).
        ``progress(done, total)`` is called after each batch.
        """
        settings = self._memory.settings
        pipeline = self._memory._model_work(settings.embedding_enabled, "embedding")
        total, stored = await pipeline.reindex(self.persona, self.project, progress)
        assert settings.embed_fingerprint is not None
        return ReindexResult(
            persona=self.persona, project=self.project, fingerprint=settings.embed_fingerprint,
            memories=total, embedded=stored,
        )  # fmt: skip

    async def status(self) -> Status:
        """Counts, pending and failed extractions, vector coverage and schema version."""
        return await self._memory._read(
            partial(status.scope_status, persona=self.persona, project=self.project,
                    settings=self._memory.settings)
        )  # fmt: skip

    async def current_emotion(
        self, *, as_of: str | datetime | None = None
    ) -> CurrentEmotion | None:
        """The latest emotion the assistant expressed, decayed toward zero (6-hour
        half-life by default); None when there is none or it has faded below the floor."""
        settings = self._memory.settings
        return await self._memory._read(
            partial(emotions.current_emotion, persona=self.persona, project=self.project,
                    as_of=when_or_now(as_of, "as_of"),
                    half_life_hours=settings.emotion_half_life_hours,
                    floor=settings.emotion_floor)
        )  # fmt: skip

    async def resume(
        self,
        session: str,
        *,
        query: str | None = None,
        budget: int = 4000,
        model: str | None = None,
        as_of: str | datetime | None = None,
    ) -> ContextPack:
        """A JSON context pack for resuming ``session`` within ``budget`` tokens.

        Whole components in order: persona, checkpoint, recent agreements and growth,
        memories recalled for ``query`` (else for the checkpoint's goal and pending steps),
        current emotion, the session's last events. What does not fit is named in
        ``omitted``; if even the persona does not fit, the context is empty and
        ``insufficient_budget`` is set. Tokens are counted as UTF-8 bytes whatever
        ``model`` is (a conservative estimate). The same inputs give the same pack.
        """
        session = require_name(session, "session")
        budget = require_int(budget, "budget", low=1, high=MAX_BUDGET)
        if query is not None:
            query = require_text(query, "query", max_chars=MAX_QUERY_CHARS)
        if model is not None:
            require_name(model, "model")
        when = when_or_now(as_of, "as_of")
        persona = await self._memory.persona(self.persona)
        checkpoint = await self.checkpoint(session)
        agreements = await self._memory._read(
            partial(packs.recent_agreements, persona=self.persona, project=self.project,
                    as_of=when)
        )  # fmt: skip
        about = packs.recall_query(query, checkpoint)
        recalled = [] if about is None else (
            await self.recall(about, limit=packs.RECALLED + len(agreements), as_of=when)
        ).items  # fmt: skip
        events_ = await self._memory._read(
            partial(packs.recent_events, persona=self.persona, project=self.project,
                    session=session, as_of=when)
        )  # fmt: skip
        framing = {
            "amem_context": 1, "notice": packs.NOTICE,
            "scope": {"persona": self.persona, "project": self.project},
            "session": session, "as_of": when.isoformat(),
        }  # fmt: skip
        components = [
            ("persona", packs.persona_component(persona)),
            ("checkpoint", packs.checkpoint_component(checkpoint)),
            ("agreements", agreements),
            ("memories", packs.memories_component(recalled, {a["id"] for a in agreements})),
            ("emotion", packs.emotion_component(await self.current_emotion(as_of=when))),
            ("recent_events", events_),
        ]
        text_, included, omitted, insufficient = packs.pack(framing, components, budget)
        return ContextPack(
            persona=self.persona, project=self.project, session=session, context=text_,
            included=included, omitted=omitted, tokens_used=packs.size(text_), budget=budget,
            counter="utf8_bytes", insufficient_budget=insufficient, as_of=when,
        )  # fmt: skip

    async def correct(
        self,
        memory_id: str,
        text: str,
        *,
        valid_at: str | datetime | None = None,
        reason: str | None = None,
    ) -> Correction:
        """Replace a mistaken memory with ``text`` (for errors; submit changes as events).

        Creates a correction event, revokes the mistaken memory for good, derives the
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
        return await self._memory._write(
            partial(corrections.correct, persona=self.persona, project=self.project,
                    memory_id=memory_id, text=text, segmented=segmented, valid_at=start,
                    reason=reason, correction_event_id=new_event_id(), now=_now())
        )  # fmt: skip

    async def delete(
        self, *, event_id: str | None = None, memory_id: str | None = None
    ) -> Deletion:
        """Permanently delete an event or memory with everything derived from or correcting it.

        Give exactly one of ``event_id`` and ``memory_id``. Returns what was removed.
        """
        if (event_id is None) == (memory_id is None):
            raise InvalidInput("give exactly one of event_id and memory_id")
        removed = await self._memory._write(
            partial(erasure.delete, persona=self.persona, project=self.project,
                    event_id=optional_name(event_id, "event_id"),
                    memory_id=optional_name(memory_id, "memory_id"), now=_now())
        )  # fmt: skip
        # the index's copies of deleted terms and the WAL's copies of deleted pages go
        # when the writer is next idle (a merge and a WAL truncation), never on this await
        self._memory._db.writer.when_idle(index.purge_deleted_terms)
        return removed

    async def relate(self, from_id: str, to_id: str) -> Relation:
        """Link two memories of this scope with an explicit ``related`` link (idempotent)."""
        return await self._memory._write(
            partial(relations.relate, persona=self.persona, project=self.project,
                    from_id=require_name(from_id, "from_id"),
                    to_id=require_name(to_id, "to_id"), now=_now())
        )  # fmt: skip

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
            session=session, goal=goal, completed=completed, pending=pending,
            constraints=constraints, next_action=next_action, covered_seq=covered_seq,
        )  # fmt: skip
        return await self._memory._write(
            partial(checkpoints.save_checkpoint, persona=self.persona, project=self.project,
                    now=_now(), **fields)
        )  # fmt: skip

    async def checkpoint(self, session: str) -> Checkpoint | None:
        """The latest checkpoint of ``session`` that no correction or deletion invalidated."""
        return await self._memory._read(
            partial(checkpoints.latest_checkpoint, persona=self.persona, project=self.project,
                    session=require_name(session, "session"))
        )  # fmt: skip

    async def _new_events(self, items: Sequence[Mapping[str, Any]]) -> list[events.NewEvent]:
        """Validated events, conversation text segmented for the index (off the loop)."""
        now = utc_now()
        made = [self._new_event(item, f"events[{n}]" if len(items) > 1 else "", now)
                for n, item in enumerate(items)]  # fmt: skip
        indexed = [n for n, event in enumerate(made) if event.category == "conversation"]
        segmented = await segment_off_loop([made[n].text for n in indexed])
        for n, tokens in zip(indexed, segmented, strict=True):
            made[n].segmented = tokens  # the raw-fallback index
        return made

    def _new_event(self, item: Mapping[str, Any], where: str, now: datetime) -> events.NewEvent:
        def field(name: str) -> str:
            return f"{where}.{name}" if where else name

        unknown = set(item) - EVENT_FIELDS
        if unknown:
            raise InvalidInput(f"{where or 'event'} has fields amem does not know")
        category = item.get("category") or "conversation"
        if category == "correction":
            raise InvalidInput("category 'correction' is reserved for correct()")
        occurred_at = item.get("occurred_at")
        event_id = item.get("event_id")
        return events.NewEvent(
            id=require_name(event_id, field("event_id"))
            if event_id is not None
            else new_event_id(),
            persona=self.persona,
            project=self.project,
            session=optional_name(item.get("session"), field("session")),
            role=require_choice(item.get("role"), field("role"), ROLES),
            category=require_choice(category, field("category"), SUBMITTABLE_CATEGORIES),
            source=optional_name(item.get("source"), field("source")),
            text=require_text(item.get("text"), field("text"), max_chars=MAX_EVENT_CHARS),
            occurred_at=db_time(
                now if occurred_at is None else parse_time(occurred_at, field("occurred_at"))
            ),
            occurred_at_given=occurred_at is not None,
            ingested_at=db_time(now),
            status=self._initial_status(category),
        )

    async def host_ingest(
        self,
        instance: str,
        entries: Sequence[Mapping[str, Any]],
        *,
        start: int = 0,
        expected_cursor: int | None = None,
        checkpoint: Mapping[str, Any] | None = None,
    ) -> CaptureResult:
        """Capture a host's transcript slice, in order, in one transaction.

        ``entries`` are the transcript's entries from index ``start`` on, each a mapping
        with ``event_id`` (required: a stable ID), ``text``, ``role`` and optionally
        ``session``, ``source``, ``category``, ``occurred_at``. Entries before this
        instance's cursor are skipped, the rest stored idempotently; an optional
        ``checkpoint`` (the fields of ``save_checkpoint``) is saved; then the cursor
        advances. ``expected_cursor`` turns on compare-and-set: if the stored cursor
        differs, nothing is written (``version_conflict``).
        """
        instance = require_name(instance, "instance")
        start = require_int(start, "start", low=0, high=2**62)
        if expected_cursor is not None:
            require_int(expected_cursor, "expected_cursor", low=0, high=2**62)
        if not isinstance(entries, Sequence) or len(entries) > MAX_CAPTURE_ENTRIES:
            raise InvalidInput(f"entries must be a list of at most {MAX_CAPTURE_ENTRIES} events")
        for n, entry in enumerate(entries):
            if not isinstance(entry, Mapping) or entry.get("event_id") is None:
                raise InvalidInput(f"entries[{n}] needs an event_id (a stable ID)")
        made = await self._new_events(entries)
        fields = None if checkpoint is None else checkpoint_from(checkpoint)
        result = await self._memory._write(
            partial(capture.ingest, persona=self.persona, project=self.project,
                    instance=instance, start=start, entries=made,
                    expected_cursor=expected_cursor, checkpoint=fields, now=_now())
        )  # fmt: skip
        self._enqueue_pending(result.receipts)
        return result

    async def capture_cursor(self, instance: str) -> int:
        """How many transcript entries ``instance`` has captured in this scope."""
        return await self._memory._read(
            partial(capture.read_cursor, persona=self.persona, project=self.project,
                    instance=require_name(instance, "instance"))
        )  # fmt: skip

    def _enqueue_pending(self, receipts: Sequence[EventReceipt]) -> None:
        pipeline = self._memory._pipeline
        for receipt in receipts:
            if receipt.status == "pending" and pipeline is not None:
                pipeline.enqueue(receipt.event_id)  # after COMMIT, never awaited

    def _initial_status(self, category: str) -> EventStatus:
        if category == "conversation" and self._memory.settings.extraction_enabled:
            return "pending"
        return "stored"


def parse_drafts(memories: object) -> list[MemoryDraft]:
    """Drafts from models or plain mappings; errors name the field, never the value."""
    if not isinstance(memories, Sequence) or isinstance(memories, str):
        raise InvalidInput("memories must be a list of memory drafts")
    if not 1 <= len(memories) <= MAX_DRAFTS:
        raise InvalidInput(f"memories must hold 1 to {MAX_DRAFTS} drafts")
    drafts = []
    for n, item in enumerate(memories):
        try:
            drafts.append(
                item if isinstance(item, MemoryDraft) else MemoryDraft.model_validate(item)
            )
        except ValidationError as exc:
            raise refused(exc, DRAFT_FIELDS, f"memories[{n}] is not a valid draft") from None
    return drafts


def checkpoint_fields(
    *,
    session: object,
    goal: object,
    completed: object = (),
    pending: object = (),
    constraints: object = (),
    next_action: object = None,
    covered_seq: object = None,
) -> dict[str, Any]:
    """Validated arguments of ``checkpoints.save_checkpoint``."""
    return {
        "session": require_name(session, "session"),
        "goal": require_text(goal, "goal", max_chars=MAX_CHECKPOINT_CHARS),
        "completed": require_text_list(completed, "completed"),
        "pending": require_text_list(pending, "pending"),
        "constraints": require_text_list(constraints, "constraints"),
        "next_action": None if next_action is None
        else require_text(next_action, "next_action", max_chars=MAX_CHECKPOINT_CHARS),
        "covered_seq": None if covered_seq is None
        else require_int(covered_seq, "covered_seq", low=1, high=2**62),
    }  # fmt: skip


def checkpoint_from(checkpoint: object) -> dict[str, Any]:
    """``checkpoint_fields`` of a mapping a host sent (``host_ingest``'s ``checkpoint``)."""
    keys = inspect.signature(checkpoint_fields).parameters.keys()
    if not isinstance(checkpoint, Mapping) or not {"session", "goal"} <= checkpoint.keys() <= keys:
        raise InvalidInput(
            f"checkpoint must be a mapping with session, goal and only: {', '.join(keys)}"
        )
    return checkpoint_fields(**checkpoint)


def require_text_list(items: object, field: str) -> list[str]:
    if not isinstance(items, Sequence) or isinstance(items, str) or len(items) > MAX_LIST_ITEMS:
        raise InvalidInput(f"{field} must be a list of at most {MAX_LIST_ITEMS} strings")
    return [
        require_text(item, f"{field}[{n}]", max_chars=MAX_CHECKPOINT_CHARS)
        for n, item in enumerate(items)
    ]


def when_or_now(value: str | datetime | None, field: str) -> datetime:
    return utc_now() if value is None else parse_time(value, field)


def new_event_id() -> str:
    return f"evt_{uuid.uuid4().hex}"


def _now() -> str:
    return db_time(utc_now())
