"""The model work of one ``Memory``: extraction and embedding, outside every transaction.

``Pipeline.serve`` runs in the ``Memory``'s task group. Events queued by ``submit_event``
are extracted in the background, at most ``extract_concurrency`` at a time, each call in
its own cancel scope with its own deadline. New memories and conversation events are
embedded in the background after their commit, one batch at a time (whatever queued up
while the previous batch ran, up to ``embed_batch`` texts), so a burst of writes is
acknowledged at once and embedding catches up behind it; a failed batch only lowers
coverage, and ``reindex`` backfills. Network calls never happen inside a
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
from ..search import text, vectors
from ..search.index import INDEXED_EVENT
from ..search.vectors import Embedded, Key
from . import embeddings, extraction
from .client import Refused
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
        self._to_embed, self._embed_queue = anyio.create_memory_object_stream[Key](math.inf)
        self._scope = anyio.CancelScope()

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Extract and embed queued work until ``close``."""
        with self._scope, self._send, self._receive, self._to_embed, self._embed_queue:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._embed_queued)
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

    def embed_later(self, keys: Sequence[Key]) -> None:
        """Embed these memories and events in the background, after their commit."""
        if self._settings.embed_fingerprint is not None:
            for key in keys:
                with suppress(anyio.ClosedResourceError):  # closing: reindex backfills
                    self._to_embed.send_nowait(key)

    async def _embed_queued(self) -> None:
        """One batch at a time: the first queued item and whatever else is waiting."""
        async for first in self._embed_queue:
            batch = [first]
            with suppress(anyio.WouldBlock):
                while len(batch) < self._settings.embed_batch:
                    batch.append(self._embed_queue.receive_nowait())
            try:
                await self._embed_in_halves(batch)
            except Exception:  # one batch's bug must not stop the others
                log.exception("embedding queued items failed unexpectedly")

    async def _embed_in_halves(self, batch: list[Key]) -> None:
        """A refused batch may hold one text the endpoint cannot take (too long, say), from
        any scope: each half is then tried on its own, so that text costs only itself. At
        most ``2n - 1`` requests, each answered at once; a timeout, a lost connection or a
        refused key fails the whole batch without more requests."""
        try:
            await self.embed_now(batch)
        except UpstreamError as exc:
            if not (isinstance(exc, Refused) and exc.by_input and len(batch) > 1):
                log.warning("embedding %d new items failed (%s); run reindex", len(batch), exc)
                return
            half = len(batch) // 2
            await self._embed_in_halves(batch[:half])
            await self._embed_in_halves(batch[half:])

    async def embed_now(self, keys: Sequence[Key]) -> int:
        """Embed and store these memories and events (those still current); returns how
        many vectors were stored."""
        fingerprint = self._settings.embed_fingerprint
        assert fingerprint is not None
        texts = await self._db.read(texts_of, keys=keys, fingerprint=fingerprint)
        return await self._embed_and_store(texts, fingerprint)

    async def _embed_and_store(
        self, texts: Sequence[tuple[str, str, str]], fingerprint: str
    ) -> int:
        pieces = [
            (kind, ref, n, piece, vectors.text_hash(text))
            for kind, ref, text in texts
            for n, piece in enumerate(vectors.chunks(text) if kind == "event" else [text])
        ]
        if not pieces:
            return 0
        found = await embeddings.embed(
            self.client, self._settings, [piece for *_, piece, _ in pieces], query=False
        )
        items = [
            Embedded(kind, ref, n, hashed, vector)
            for (kind, ref, n, _, hashed), vector in zip(pieces, found, strict=True)
        ]
        return await self._db.write(
            vectors.store_vectors, fingerprint=fingerprint, items=items, now=db_now()
        )

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
                working_ttl=self._settings.working_ttl,
            )
        if outcome.new and outcome.memory_ids:
            self.embed_later([("memory", m) for m in outcome.memory_ids])
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

    async def reindex(
        self, persona: str, project: str, progress: Progress | None
    ) -> tuple[int, int, int]:
        """Embed every current memory and indexed event of a scope, then swap the scope's
        index in one go.

        Vectors are staged under a private fingerprint while the batches run (outside any
        transaction); the old index stays in use until every batch succeeded. Returns
        ``(memories, events, memories and events stored)``.
        """
        fingerprint = self._settings.embed_fingerprint
        assert fingerprint is not None
        staged = f"staging:{uuid.uuid4().hex}"
        todo = await self._db.read(vectors.to_embed, persona=persona, project=project)
        stored = 0
        try:
            for start in range(0, len(todo), self._settings.embed_batch):
                batch = todo[start : start + self._settings.embed_batch]
                stored += await self._embed_and_store(batch, staged)
                if progress:
                    progress(start + len(batch), len(todo))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._db.write(vectors.drop_staged, staged=staged)
            raise
        await self._db.write(
            vectors.swap_in,
            persona=persona,
            project=project,
            staged=staged,
            fingerprint=fingerprint,
        )
        memories = sum(1 for kind, _, _ in todo if kind == "memory")
        return memories, len(todo) - memories, stored


UNEMBEDDED = """not exists (select 1 from vectors v
    where v.fingerprint = :fingerprint and v.doc_kind = :kind and v.ref = :ref)"""
SELECT_MEMORY_TEXT = f"""
select text from memories m where id = :ref and revoked_at is null and {UNEMBEDDED}
"""
SELECT_EVENT_TEXT = f"""
select text from events e where id = :ref and {INDEXED_EVENT} and {UNEMBEDDED}
"""


def texts_of(
    conn: sqlite3.Connection, keys: Sequence[Key], fingerprint: str
) -> list[tuple[str, str, str]]:
    """``(doc_kind, ref, text)`` of the memories and indexed events still current and
    without a vector of ``fingerprint``, each once."""
    found = []
    for kind, ref in dict.fromkeys(keys):
        sql = SELECT_MEMORY_TEXT if kind == "memory" else SELECT_EVENT_TEXT
        params = {"ref": ref, "kind": kind, "fingerprint": fingerprint}
        row = conn.execute(sql, params).fetchone()
        if row is not None:
            found.append((kind, ref, str(row[0])))
    return found
