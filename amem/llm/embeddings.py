"""Embeddings over an OpenAI-compatible ``/embeddings`` endpoint.

Vectors come back normalised to unit length as float32, so cosine similarity is a dot
product. Where they are kept and searched: ``search.vectors``.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from ..config import Settings
from ..errors import UpstreamError
from .client import post_json

if TYPE_CHECKING:
    import httpx

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
