"""Derive events, then evict every derived event of the scope, until killed.

Usage: evicting.py asyncio|trio DB_PATH PREFIX COUNT

Events ``PREFIX-N`` (text ``brief``, role and session from common.py) are stored in slices
of 100 and each gets one memory quoting its ID; then the child prints ``mark evicting``
and evicts them slice by slice (``Scope.evict(ids, before=...)``), printing ``mark
evicted COUNT`` after each slice, if it is not killed first.
"""

from __future__ import annotations

import sys
from functools import partial

import anyio
from common import PERSONA, PROJECT, child_args, emit, entry_of, memory_of, wait_for_go

import amem

SLICE = 100


async def main(db_path: str, prefix: str, count: int) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope(persona=PERSONA, project=PROJECT)
        ids = [f"{prefix}-{n}" for n in range(count)]
        entries = [entry_of(event_id) for event_id in ids]
        for start in range(0, count, SLICE):
            await scope.host_ingest(prefix, entries[start : start + SLICE], start=start)
        for event_id in ids:
            await scope.add_memories(event_id, [memory_of(event_id)])
        emit("mark evicting")
        for start in range(0, count, SLICE):  # a call per slice, so a kill can land between
            done = await scope.evict(ids[start : start + SLICE], before="2999-01-01")
            emit(f"mark evicted {done.evicted}")


if __name__ == "__main__":
    backend, db_path, (prefix, count) = child_args(sys.argv)
    if wait_for_go():
        anyio.run(partial(main, db_path, prefix, int(count)), backend=backend)
