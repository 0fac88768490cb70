"""Serving the inspector: uvicorn on a socket bound to 127.0.0.1 and nowhere else.

The socket is bound and listening before uvicorn starts, so the URL announced (with the
port the system chose for ``--port 0``) answers at once. uvicorn's logging is left
unconfigured (warnings reach stderr) and its access log is off: nothing goes to stdout.
Ctrl-C (or SIGTERM) lets requests in flight finish, then stops; Ctrl-C exits with 130,
as every command does.
"""

from __future__ import annotations

import signal
import socket
import webbrowser
from collections.abc import Callable
from types import FrameType

import anyio.to_thread
import uvicorn
from starlette.types import ASGIApp

from ..errors import InvalidInput

HOST = "127.0.0.1"


class Server(uvicorn.Server):
    """uvicorn's server, remembering whether SIGINT stopped it.

    uvicorn catches SIGINT to shut down gracefully, then raises it again for whatever
    handled it before: in a process started with SIGINT ignored (a shell's background job,
    some process supervisors) that does nothing, and the command would exit 0 as if it had
    ended by itself."""

    interrupted = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.interrupted = self.interrupted or sig == signal.SIGINT
        super().handle_exit(sig, frame)


def bind(port: int) -> socket.socket:
    """A listening TCP socket on 127.0.0.1 at ``port`` (0: a free one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise InvalidInput(
            f"--port cannot be listened on ({exc.strerror or 'OS error'})", code="port_unavailable"
        ) from None
    return sock


async def serve(
    app: ASGIApp, *, port: int, path: str, announce: Callable[[str], None], open_browser: bool
) -> None:
    """Serve ``app`` on 127.0.0.1 until interrupted; ``announce`` gets the URL of ``path``
    once the socket listens."""
    sock = bind(port)
    url = f"http://{HOST}:{sock.getsockname()[1]}{path}"
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off")
    server = Server(config)
    try:
        announce(url)
        if open_browser:
            await anyio.to_thread.run_sync(webbrowser.open, url)
        await server.serve(sockets=[sock])
    finally:
        sock.close()
    if server.interrupted:
        raise KeyboardInterrupt
