"""The model work of one ``Memory``: extraction and embedding, outside every transaction.

``Pipeline.serve`` runs in the ``Memory``'s task group. Events queued by ``submit_event``
are extracted in the background, at most ``extract_concurrency`` at a time, each call in
its own cancel scope with its own deadline. New memories and conversation events are
embedded in the background after their commit, one batch at a time (whatever queued up
while the previous batch ran, up to ``embed_batch`` texts), so a burst of writes is
acknowledged at once and embedding catches up behind it; a failed batch only lowers
coverage. What has no vector of the configured model (written by a process that exited
before embedding it, imported, or stored before this model) is embedded by the next
process that opens the file: ``_backfill`` starts ``BACKFILL_AFTER`` seconds after open and
embeds it newest first, a batch at a time. Network calls never happen inside a
transaction: the pipeline reads what it needs, awaits the model, then hands the result to
the writer actor. Closing the ``Memory`` cancels in-flight calls; their events stay
``pending`` and ``retry`` (or resubmitting them) resumes them. There is no daemon: work
left when the process exits waits for the next ``retry`` (extraction) or the next open
(embedding).
"""

from __future__ import annotations

import logging
import math
import sqlite3
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from .config import Settings
from .db.database import Database
from .db.times import db_now
from .errors import AmemError, UpstreamError
from .llm import embeddings
from .llm.client import Refused
from .llm.extraction import extract
from .models import Progress
from .search import text, vector_rows
from .search.index import INDEXED_EVENT, INDEXED_MEMORY
from .search.vector_rows import Embedded, Key
from .store import extraction
from .store.extraction import Outcome

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("amem")

ScopeKey = tuple[str, str]
"""``(persona, project)``."""
BACKFILL_AFTER = 1.0
"""Seconds after open before the backfill starts: a process's first requests go first, and
a one-shot command done by then sends no embedding request it would abandon at exit."""
BACKFILL_SCAN = 2_000
"""Rows one backfill look reads (a few milliseconds on a reader): a file of millions of
rows, all embedded, is walked in short reads, never one long one."""
ENDPOINT_REFUSES = (
    "embedding what had no vector stopped (the endpoint fails or refuses); the next open, "
    "or `amem reindex`, goes on"
)


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
        self._waiting: set[Key] = set()
        """Memories and events queued by ``embed_later`` whose batch has not run yet (the
        backfill leaves them to it)."""
        self._missed = 0
        """Those whose batch failed: the next process that opens the file embeds them."""
        self._caught_up = anyio.Event()
        """Set while nothing is ``_waiting``."""
        self._caught_up.set()

    async def serve(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Extract and embed queued work until ``close``."""
        with self._scope, self._send, self._receive, self._to_embed, self._embed_queue:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._embed_queued)
                if self._settings.embed_fingerprint is not None and self._settings.embed_backfill:
                    tg.start_soon(self._backfill)
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
                if key in self._waiting:
                    continue
                with suppress(anyio.ClosedResourceError):  # closing: the next open embeds it
                    self._to_embed.send_nowait(key)
                    self._waiting.add(key)
                    if self._caught_up.is_set():
                        self._caught_up = anyio.Event()

    async def settle(self, seconds: float) -> int:
        """Wait up to ``seconds`` for the batches of everything ``embed_later`` queued;
        returns how many of those memories and events are still without a vector (their
        batch failed, or is still to come)."""
        with anyio.move_on_after(seconds):
            while self._waiting:
                await self._caught_up.wait()
        return len(self._waiting) + self._missed

    async def _embed_queued(self) -> None:
        """One batch at a time: the first queued item and whatever else is waiting."""
        async for first in self._embed_queue:
            batch = [first]
            with suppress(anyio.WouldBlock):
                while len(batch) < self._settings.embed_batch:
                    batch.append(self._embed_queue.receive_nowait())
            missed = len(batch)
            try:
                missed = await self._embed_in_halves(batch)
            except UpstreamError as exc:
                log.warning(
                    "embedding %d new items failed (%s); the next process that opens the "
                    "file embeds them",
                    len(batch),
                    exc,
                )
            except Exception:  # one batch's bug must not stop the others
                log.exception("embedding queued items failed unexpectedly")
            self._missed += missed
            self._waiting.difference_update(batch)
            if not self._waiting:
                self._caught_up.set()

    async def _embed_in_halves(self, batch: list[Key]) -> int:
        """Embed ``batch``; returns how many of it the endpoint refused to take.

        A refused batch may hold one text the endpoint cannot take (too long, say), from
        any scope: each half is then tried on its own, so that text costs only itself. At
        most ``2n - 1`` requests, each answered at once; a timeout, a lost connection or a
        refused key raises ``UpstreamError`` without more requests."""
        try:
            await self.embed_now(batch)
        except Refused as exc:
            if not exc.by_input:
                raise
            if len(batch) == 1:
                log.warning("the endpoint refused to embed one item (%s)", exc)
                return 1
            half = len(batch) // 2
            return await self._embed_in_halves(batch[:half]) + await self._embed_in_halves(
                batch[half:]
            )
        return 0

    async def _backfill(self) -> None:
        """Embed every current memory and indexed event of the file that has no vector of
        the configured model, newest first, ``embed_batch`` at a time, each batch read,
        embedded and stored like a queued one (outside any transaction). Another process
        backfilling the same file at once may embed the same rows (each vector is stored
        once: the table's key is the fingerprint, the row and the chunk). An endpoint
        that fails, or refuses every text of a batch, stops it until the next open."""
        fingerprint = self._settings.embed_fingerprint
        assert fingerprint is not None
        await anyio.sleep(BACKFILL_AFTER)
        try:
            for kind in ("memory", "event"):
                before: int | None = vector_rows.NEWEST
                while before is not None:
                    keys, before = await self._db.read(
                        vector_rows.unembedded,
                        fingerprint=fingerprint,
                        kind=kind,
                        before=before,
                        scan=BACKFILL_SCAN,
                    )
                    keys = [key for key in keys if key not in self._waiting]  # queued: not twice
                    for start in range(0, len(keys), self._settings.embed_batch):
                        batch = keys[start : start + self._settings.embed_batch]
                        if await self._embed_in_halves(batch) == len(batch):
                            log.warning(ENDPOINT_REFUSES)  # down, not refusing one text
                            return
        except UpstreamError as exc:
            log.warning("%s (%s)", ENDPOINT_REFUSES, exc)
        except Exception:  # a bug here must not stop the Memory
            log.exception("embedding what had no vector failed unexpectedly")

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
            (kind, ref, n, piece, vector_rows.text_hash(text))
            for kind, ref, text in texts
            for n, piece in enumerate(vector_rows.chunks(text) if kind == "event" else [text])
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
            vector_rows.store_vectors, fingerprint=fingerprint, items=items, now=db_now()
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
                drafts = await extract(self.client, self._settings, event)
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
        todo = await self._db.read(vector_rows.to_embed, persona=persona, project=project)
        stored = 0
        try:
            for start in range(0, len(todo), self._settings.embed_batch):
                batch = todo[start : start + self._settings.embed_batch]
                stored += await self._embed_and_store(batch, staged)
                if progress:
                    progress(start + len(batch), len(todo))
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._db.write(vector_rows.drop_staged, staged=staged)
            raise
        await self._db.write(
            vector_rows.swap_in,
            persona=persona,
            project=project,
            staged=staged,
            fingerprint=fingerprint,
        )
        memories = sum(1 for kind, _, _ in todo if kind == "memory")
        return memories, len(todo) - memories, stored


SELECT_MEMORY_TEXT = f"""
select text from memories m where id = :ref and {INDEXED_MEMORY} and {vector_rows.UNEMBEDDED_MEMORY}
"""
SELECT_EVENT_TEXT = f"""
select text from events e where id = :ref and {INDEXED_EVENT} and {vector_rows.UNEMBEDDED_EVENT}
"""


def texts_of(
    conn: sqlite3.Connection, keys: Sequence[Key], fingerprint: str
) -> list[tuple[str, str, str]]:
    """``(doc_kind, ref, text)`` of the memories and indexed events still current and
    without a vector of ``fingerprint``, each once."""
    found = []
    for kind, ref in dict.fromkeys(keys):
        sql = SELECT_MEMORY_TEXT if kind == "memory" else SELECT_EVENT_TEXT
        params = {"ref": ref, "fingerprint": fingerprint}
        row = conn.execute(sql, params).fetchone()
        if row is not None:
            found.append((kind, ref, str(row[0])))
    return found
