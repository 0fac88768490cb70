"""Embeddings over an OpenAI-compatible ``/embeddings`` endpoint, and the vector cache.

Vectors are a rebuildable cache keyed by memory ID and *fingerprint* (endpoint + model +
configured version). They are normalised to unit length and stored as float32, so cosine
similarity is a dot product. A vector is stored only if its memory is still present,
unrevoked and has the text that was embedded (checked in the writing transaction).
Vector failures never touch events or memories.
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
from array import array
from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

import httpx

from ..config import Settings
from ..errors import UpstreamError
from .client import post_json

CODE = "embedding_failed"

Vector: TypeAlias = "array[float]"  # array("f"): a unit vector of float32


async def embed(
    client: httpx.AsyncClient, settings: Settings, texts: Sequence[str], *, query: bool
) -> list[Vector]:
    """Unit vectors for ``texts``, in order, one request per ``embed_batch`` texts."""
    assert settings.embed_base_url
    assert settings.embed_model
    vectors: list[Vector] = []
    for start in range(0, len(texts), settings.embed_batch):
        batch = list(texts[start : start + settings.embed_batch])
        payload: dict[str, Any] = {"model": settings.embed_model, "input": batch}
        if settings.embed_input_type:
            payload["input_type"] = "query" if query else "passage"
        data = await post_json(
            client,
            settings.embed_base_url,
            "/embeddings",
            settings.embed_api_key,
            payload,
            seconds=settings.embed_timeout,
            code=CODE,
        )
        vectors += parse_vectors(data, len(batch))
    if len({len(v) for v in vectors}) > 1:
        raise UpstreamError("the endpoint returned vectors of different sizes", code=CODE)
    return vectors


def parse_vectors(data: dict[str, Any], expected: int) -> list[Vector]:
    try:
        items = sorted(data["data"], key=lambda item: item["index"])
        raw = [item["embedding"] for item in items]
    except (KeyError, TypeError):
        raise UpstreamError("the answer is not an embeddings list", code=CODE) from None
    if len(raw) != expected:
        raise UpstreamError(f"expected {expected} vectors, got {len(raw)}", code=CODE)
    return [unit_vector(values) for values in raw]


def unit_vector(values: object) -> Vector:
    if not isinstance(values, list) or not values:
        raise UpstreamError("a vector is not a list of numbers", code=CODE)
    try:
        floats = [float(v) for v in values]
    except (TypeError, ValueError):
        raise UpstreamError("a vector is not a list of numbers", code=CODE) from None
    norm = math.sqrt(sum(v * v for v in floats))
    if not math.isfinite(norm) or norm == 0:
        raise UpstreamError("a vector is zero or not finite", code=CODE)
    return array("f", (v / norm for v in floats))


def cosine(a: Vector, b: Vector) -> float:
    """Cosine similarity of two unit vectors."""
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def from_blob(blob: bytes) -> Vector:
    vector = array("f")
    vector.frombytes(blob)
    return vector


SELECT_CURRENT_TEXT = "select text from memories where id = ? and revoked_at is null"
UPSERT_VECTOR = """
insert into embeddings (memory_id, fingerprint, dim, vector, text_hash, created_at)
values (?, ?, ?, ?, ?, ?)
on conflict (memory_id, fingerprint) do update set
    dim = excluded.dim, vector = excluded.vector, text_hash = excluded.text_hash,
    created_at = excluded.created_at
"""


def store_vectors(
    conn: sqlite3.Connection,
    fingerprint: str,
    items: Iterable[tuple[str, str, Vector]],
    now: str,
) -> int:
    """Store ``(memory_id, text_hash, vector)`` for memories still as they were embedded;
    returns how many were stored (a memory deleted, revoked or changed meanwhile is skipped)."""
    stored = 0
    for memory_id, hashed, vector in items:
        row = conn.execute(SELECT_CURRENT_TEXT, (memory_id,)).fetchone()
        if row is None or text_hash(row[0]) != hashed:
            continue
        conn.execute(
            UPSERT_VECTOR, (memory_id, fingerprint, len(vector), vector.tobytes(), hashed, now)
        )
        stored += 1
    return stored


SCOPE_MEMORIES = "select id from memories where persona = ? and project = ?"
DELETE_OTHER_SPACES = f"""
delete from embeddings
where memory_id in ({SCOPE_MEMORIES}) and fingerprint != ? and fingerprint != ?
"""
DELETE_REPLACED = "delete from embeddings where memory_id = ? and fingerprint = ?"
PROMOTE_STAGED = "update embeddings set fingerprint = ? where fingerprint = ?"
DROP_STAGED = "delete from embeddings where fingerprint = ?"


def swap_in(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    staged: str,
    fingerprint: str,
    indexed: Iterable[str],
) -> None:
    """Replace the scope's vector index with the staged vectors, in one transaction.

    Vectors of other fingerprints go; so do current ones of the ``indexed`` memories (the
    reindex's snapshot), which the staged vectors replace. A memory extracted while the
    reindex ran keeps the vector it got meanwhile.
    """
    conn.execute(DELETE_OTHER_SPACES, (persona, project, staged, fingerprint))
    conn.executemany(DELETE_REPLACED, ((memory_id, fingerprint) for memory_id in indexed))
    conn.execute(PROMOTE_STAGED, (fingerprint, staged))


def drop_staged(conn: sqlite3.Connection, staged: str) -> None:
    conn.execute(DROP_STAGED, (staged,))


SELECT_TO_INDEX = """
select id, text from memories
where persona = ? and project = ? and revoked_at is null order by num
"""


def memories_to_index(
    conn: sqlite3.Connection, persona: str, project: str
) -> list[tuple[str, str]]:
    return [(str(i), str(t)) for i, t in conn.execute(SELECT_TO_INDEX, (persona, project))]
