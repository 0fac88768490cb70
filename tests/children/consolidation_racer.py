"""Prepare the session's consolidation run, wait for the parent, then apply a patch: the
other children prepare and apply at the same moments, so their writes race.

Usage: consolidation_racer.py asyncio|trio DB_PATH TEXT

The patch derives one memory whose text is TEXT from the session's first message. Prints
``mark prepared RUN_ID`` once the run is prepared, waits for a line, then prints ``mark
applied DUPLICATE`` (0 or 1) or ``mark refused CODE``.
"""

from __future__ import annotations

import sys

import anyio
from common import PERSONA, PROJECT, child_args, emit, wait_for_go

import amem


async def main(db_path: str, text: str) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope(persona=PERSONA, project=PROJECT)
        run = await scope.prepare_consolidation(session="race")
        emit(f"mark prepared {run.id}")
        await anyio.to_thread.run_sync(sys.stdin.readline)  # the parent: everyone prepared
        source = run.input.events[0]
        entry = {"op": "add", "source": source.id, "text": text, "quote": source.text}
        entry |= {"kind": "episode", "basis": "inference"}
        try:
            done = await scope.apply_consolidation(run.id, {"entries": [entry]})
        except amem.AmemError as exc:
            emit(f"mark refused {exc.code}")
        else:
            emit(f"mark applied {int(done.duplicate)}")


if __name__ == "__main__":
    backend, db_path, (text,) = child_args(sys.argv)
    if wait_for_go():
        anyio.run(main, db_path, text, backend=backend)
