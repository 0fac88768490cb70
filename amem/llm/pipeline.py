"""The model work of one ``Memory``: extraction and embedding, outside every transaction.

``Pipeline.serve`` runs in the ``Memory``'s task group. Events queued by ``submit_event``
are extracted in the background, at most ``extract_concurrency`` at a time, each call in
its own cancel scope with its own deadline. Network calls never happen inside a
transaction: the pipeline reads what it needs, awaits the model, then hands the result to
the writer actor. Closing the ``Memory`` cancels in-flight calls; their events stay
``pending`` and ``retry`` (or resubmitting them) resumes them. There is no daemon: work
left when the process exits waits for the next ``retry``.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress

import anyio
import anyio.abc
import httpx

from ..config import Settings
from ..db.database import Database
from ..db.times import db_now
from ..errors import AmemError, UpstreamError
from ..search import text
from . import embeddings, extraction
from .extraction import Outcome

log = logging.getLogger("amem")

ScopeKey = tuple[str, str]
"""``(persona, project)``."""
Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` while long work runs."""


class Pipeline:
    def __init__(self, db: Database, settings: Settings, client: httpx.AsyncClient) -> None:
        self._db = db
        self._settings = settings
        self.client = client
        self._limiter = anyio.CapacityLimiter(settings.extract_concurrency)
        self._queued: set[str] = set()
        self._busy: dict[str, anyio.Event] = {}
        self._send, self._receive = anyio.create_memory_object_stream[str](math.inf)
        self._scope = anyio.CancelScope()

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Extract queued events until ``close``."""
        with self._scope, self._send, self._receive:
            async with anyio.create_task_group() as tg:
                task_status.started()
                async for event_id in self._receive:
                    tg.start_soon(self._extract_queued, event_id)

    def close(self) -> None:
        """Cancel every in-flight call; their events stay ``pending``."""
        self._scope.cancel()

    def enqueue(self, event_id: str) -> None:
        """Extract ``event_id`` in the background (once, however often it is queued)."""
        if self._settings.extraction_enabled and event_id not in self._queued:
            self._queued.add(event_id)
            with suppress(anyio.ClosedResourceError):  # closing: it stays pending
                self._send.send_nowait(event_id)

    async def _extract_queued(self, event_id: str) -> None:
        try:
            await self.extract_event(event_id)
        except Exception:  # one event's bug must not stop the others
            log.exception("extraction of a queued event failed unexpectedly")
        finally:
            self._queued.discard(event_id)

    async def extract_event(self, event_id: str, *, resume: ScopeKey | None = None) -> Outcome:
        """Extract one event now: read it, ask the model, commit the result.

        One extraction per event at a time: a second caller waits for the first, then
        sees its result. ``resume`` (the event's scope) first puts a failed or stored
        event back to ``pending``, as ``retry`` does.
        """
        async with self._exclusive(event_id), self._limiter:
            if resume is not None:
                persona, project = resume
                await self._db.write(
                    extraction.mark_pending, persona=persona, project=project, event_id=event_id
                )
            event = await self._db.read(extraction.load_for_extraction, event_id=event_id)
            if event is None:
                return await self._db.read(extraction.current_outcome, event_id=event_id)
            try:
                drafts = await extraction.extract(self.client, self._settings, event)
            except UpstreamError as exc:
                return await self._db.write(
                    extraction.mark_failed, event_id=event_id, error=str(exc)
                )
            segmented = await text.segment_off_loop([draft.text for draft in drafts])
            outcome = await self._db.write(
                extraction.complete_extraction,
                event_id=event_id,
                drafts=drafts,
                segmented=segmented,
                now=db_now(),
            )
        if outcome.new and outcome.memory_ids:
            await self.embed_opportunistically(outcome.memory_ids)
        return outcome

    @asynccontextmanager
    async def _exclusive(self, event_id: str) -> AsyncIterator[None]:
        while (busy := self._busy.get(event_id)) is not None:
            await busy.wait()
        self._busy[event_id] = done = anyio.Event()
        try:
            yield
        finally:
            del self._busy[event_id]
            done.set()

    async def extract_many(
        self, event_ids: Sequence[str], scope: ScopeKey, progress: Progress | None
    ) -> list[Outcome]:
        """Resume and extract ``event_ids`` concurrently (within the limit); wait for all."""
        outcomes: list[Outcome] = []
        errors: list[AmemError] = []  # e.g. storage_full: raised as itself, not in a group

        async def one(event_id: str) -> None:
            try:
                outcomes.append(await self.extract_event(event_id, resume=scope))
            except AmemError as exc:
                errors.append(exc)
            if progress:
                progress(len(outcomes) + len(errors), len(event_ids))

        async with anyio.create_task_group() as tg:
            for event_id in event_ids:
                tg.start_soon(one, event_id)
        if errors:
            raise errors[0]
        return outcomes

    async def embed_opportunistically(self, memory_ids: Sequence[str]) -> None:
        """Embed freshly extracted memories; a failure only lowers index coverage."""
        fingerprint = self._settings.embed_fingerprint
        if fingerprint is None:
            return
        try:
            texts = await self._db.read(texts_of, memory_ids=memory_ids)
            vectors = await embeddings.embed(
                self.client, self._settings, [text for _, text in texts], query=False
            )
        except UpstreamError as exc:
            log.warning("embedding new memories failed (%s); run reindex later", exc)
            return
        items = [
            (memory_id, embeddings.text_hash(text), vector)
            for (memory_id, text), vector in zip(texts, vectors, strict=True)
        ]
        await self._db.write(
            embeddings.store_vectors, fingerprint=fingerprint, items=items, now=db_now()
        )

    async def reindex(
        self, persona: str, project: str, progress: Progress | None
    ) -> tuple[int, int]:
        """Embed every current memory of a scope, then swap the scope's index in one go.

        Vectors are staged under a private fingerprint while the batches run (outside any
        transaction); the old index stays in use until every batch succeeded. Returns
        ``(memories, stored)``.
        """
        fingerprint = self._settings.embed_fingerprint
        assert fingerprint is not None
        staged = f"staging:{uuid.uuid4().hex}"
        todo = await self._db.read(embeddings.memories_to_index, persona=persona, project=project)
        stored = 0
        try:
            for start in range(0, len(todo), self._settings.embed_batch):
                batch = todo[start : start + self._settings.embed_batch]
                vectors = await embeddings.embed(
                    self.client, self._settings, [text for _, text in batch], query=False
                )
                items = [
                    (memory_id, embeddings.text_hash(text), vector)
                    for (memory_id, text), vector in zip(batch, vectors, strict=True)
                ]
                stored += await self._db.write(
                    embeddings.store_vectors, fingerprint=staged, items=items, now=db_now()
                )
                if progress:
                    progress(start + len(batch), len(todo))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._db.write(embeddings.drop_staged, staged=staged)
            raise
        await self._db.write(
            embeddings.swap_in,
            persona=persona,
            project=project,
            staged=staged,
            fingerprint=fingerprint,
            indexed=[memory_id for memory_id, _ in todo],
        )
        return len(todo), stored


SELECT_TEXT = "select id, text from memories where id = ? and revoked_at is null"


def texts_of(conn: sqlite3.Connection, memory_ids: Sequence[str]) -> list[tuple[str, str]]:
    rows = [conn.execute(SELECT_TEXT, (m,)).fetchone() for m in memory_ids]
    return [(str(row[0]), str(row[1])) for row in rows if row is not None]
