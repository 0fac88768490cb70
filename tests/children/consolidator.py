"""Prepare and apply consolidation runs forever until killed; print each applied run.

Usage: consolidator.py asyncio|trio DB_PATH PREFIX

Each round stores two messages in session ``PREFIX``, prepares a run of the session and
applies a patch that derives a memory from the first message and evicts it. A line
``mark applied RUN_ID`` is printed only after ``apply_consolidation`` returned.
"""

from __future__ import annotations

import sys

import anyio
from common import PERSONA, PROJECT, child_args, emit, wait_for_go

import amem


async def main(db_path: str, prefix: str) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope(persona=PERSONA, project=PROJECT)
        n = 0
        while True:
            planted = f"{prefix} round {n}: I planted tomatoes in the garden."
            first = await scope.submit_event(planted, role="user", session=prefix)
            await scope.submit_event(f"{prefix} round {n}: and basil.", role="user", session=prefix)
            run = await scope.prepare_consolidation(session=prefix)
            entry = {
                "op": "add",
                "source": first.event_id,
                "text": f"User planted tomatoes ({n})",
                "quote": "I planted tomatoes",
                "kind": "fact",
                "basis": "user_statement",
            }
            await scope.apply_consolidation(run.id, {"entries": [entry], "evict": [first.event_id]})
            emit(f"mark applied {run.id}")
            n += 1


if __name__ == "__main__":
    backend, db_path, (prefix,) = child_args(sys.argv)
    if wait_for_go():
        anyio.run(main, db_path, prefix, backend=backend)
