"""Open an older file whose search index the migration rebuilds, pausing the rebuild.

Usage: migrating.py asyncio|trio DB_PATH PAUSE_SECONDS

Prints (stdout, one line each, flushed at once):

- ``paused DONE TOTAL`` once the first batch of documents is in the new index; the child
  then sleeps PAUSE_SECONDS inside the migration's transaction (the parent may kill it);
- ``opened`` once ``amem.open`` returned, the migration committed.
"""

from __future__ import annotations

import sys
import time
from functools import partial

import anyio
from common import child_args, emit

import amem


async def main(db_path: str, pause: float) -> None:
    paused: list[int] = []

    def progress(done: int, total: int) -> None:
        if done < total and not paused:
            paused.append(done)
            emit(f"paused {done} {total}")
            time.sleep(pause)  # the migration's thread, holding the write lock

    async with amem.open(db_path, settings=amem.Settings(), progress=progress):
        emit("opened")


if __name__ == "__main__":
    backend, db_path, (pause,) = child_args(sys.argv)
    anyio.run(partial(main, db_path, float(pause)), backend=backend)
