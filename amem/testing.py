"""Test helpers, public like ``trio.testing``: a real OpenAI-compatible server on 127.0.0.1,
and a way below the public API for tests and benches that must reach it.

``FakeOpenAI`` serves ``/v1/chat/completions`` with scripted extraction answers and
``/v1/embeddings`` with deterministic vectors (hashed bags of amem's search tokens, so
texts sharing words are similar). It runs on a thread with the standard library's HTTP
server, so it works the same under asyncio and trio, and tests reach it over real TCP::

    with FakeOpenAI(answer=lambda event: [{"text": ..., "quote": ..., ...}]) as api:
        settings = amem.Settings(extract_base_url=api.base_url, extract_model="fake",
                                 embed_base_url=api.base_url, embed_model="fake")
        async with amem.open("memory.db", settings=settings) as mem:
            ...
"""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from .llm.local_server import JSONHandler
from .search.text import tokens

if TYPE_CHECKING:
    from .db.database import Database
    from .memory import Memory


def database(memory: Memory) -> Database:
    """The ``Database`` under ``memory`` (its writer actor and read connections), for tests
    and benches that reach below the public API: raw SQL in a write transaction, holding
    the writer busy, counting commits. Not for applications."""
    return memory._runtime.db


Answer = Callable[[dict[str, Any]], "list[dict[str, Any]] | str"]
"""Given the event the model is asked about (``role``, ``occurred_at``, ``text``), return
the drafts to answer with, or a raw string to send as the message content instead."""


def no_memories(event: dict[str, Any]) -> list[dict[str, Any]]:
    return []


def fake_embedding(text: str, dim: int = 64) -> list[float]:
    """A deterministic vector: token counts hashed into ``dim`` buckets, plus a bias."""
    vector = [0.0] * dim
    vector[0] = 0.1  # never all zero
    for token in tokens(text):
        vector[1 + zlib.crc32(token.encode()) % (dim - 1)] += 1.0
    return vector


class FakeOpenAI:
    """An OpenAI-compatible server for tests. Use it as a (sync) context manager."""

    def __init__(self, answer: Answer = no_memories, *, dim: int = 64) -> None:
        self.answer = answer
        self.dim = dim
        self.chat_requests: list[dict[str, Any]] = []
        """Bodies of every chat completion request received, in order."""
        self.embedding_requests: list[dict[str, Any]] = []
        self.gate = threading.Event()
        """Requests wait here while it is cleared (it starts set)."""
        self.gate.set()
        self.fail_status: int | None = None
        """When set, every request is answered with this HTTP status."""
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.gate.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def respond(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.fail_status is not None:
            return self.fail_status, {"error": {"message": "fake failure"}}
        if path.endswith("/chat/completions"):
            self.chat_requests.append(body)
            return 200, self.chat_completion(body)
        if path.endswith("/embeddings"):
            self.embedding_requests.append(body)
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            data = [
                {"object": "embedding", "index": n, "embedding": fake_embedding(t, self.dim)}
                for n, t in enumerate(texts)
            ]
            return 200, {"object": "list", "data": data, "model": body.get("model")}
        return 404, {"error": {"message": "unknown route"}}

    def chat_completion(self, body: dict[str, Any]) -> dict[str, Any]:
        event = json.loads(body["messages"][-1]["content"])
        answer = self.answer(event)
        content = answer if isinstance(answer, str) else json.dumps({"memories": answer})
        return {
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content},
                }
            ],
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(JSONHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake._lock:
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                try:
                    fake.gate.wait(timeout=60)
                    status, answer = fake.respond(self.path, body)
                finally:
                    with fake._lock:
                        fake.in_flight -= 1
                self.answer(status, answer)

        return Handler
