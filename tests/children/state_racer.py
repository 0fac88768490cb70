"""Read the scope's state, wait for the parent, then change it: the other children read
the same version meanwhile, so their writes race.

Usage: state_racer.py asyncio|trio DB_PATH save|patch KEY VALUE

``save``: ``save_state`` of the state read plus ``KEY=VALUE``, expecting the version read.
``patch``: ``patch_state`` from the state read to it plus ``KEY=VALUE``.
Prints ``mark read VERSION`` once the state is read, waits for a line, then prints
``mark saved VERSION`` or ``mark conflict CODE``.
"""

from __future__ import annotations

import sys

import anyio
from common import PERSONA, PROJECT, child_args, emit, wait_for_go

import amem


async def main(db_path: str, how: str, key: str, value: str) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope(persona=PERSONA, project=PROJECT)
        read = await scope.state()
        emit(f"mark read {read.version}")
        await anyio.to_thread.run_sync(sys.stdin.readline)  # the parent: everyone has read
        changed = {**read.data, key: value}
        try:
            if how == "save":
                saved = await scope.save_state(changed, expected_version=read.version)
            else:
                saved = await scope.patch_state(read, changed)
        except amem.Conflict as exc:
            emit(f"mark conflict {exc.code}")
        else:
            emit(f"mark saved {saved.version}")


if __name__ == "__main__":
    backend, db_path, (how, key, value) = child_args(sys.argv)
    if wait_for_go():
        anyio.run(main, db_path, how, key, value, backend=backend)
