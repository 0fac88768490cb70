"""Submit events with a memory each, wait until they are embedded, then reindex on cue.

Usage: reindexing.py asyncio|trio DB_PATH BASE_URL PREFIX COUNT BATCH

Embeddings go to BASE_URL (a ``FakeOpenAI``), BATCH texts per request. Events
``PREFIX-N`` (text ``brief``, role and session from common.py) are acknowledged with ``ack`` lines,
each memory derived from one with ``mark memory MEMORY_ID EVENT_ID``. Once the background
embedding covers the scope the child prints ``mark embedded`` and waits for a line on
stdin: ``reindex`` starts ``Scope.reindex``, which prints ``mark stored DONE TOTAL`` after
each batch is stored (staged) and ``mark reindexed`` at the end.
"""

from __future__ import annotations

import sys
from functools import partial

import anyio
from common import (
    PERSONA,
    PROJECT,
    brief,
    child_args,
    emit,
    memory_of,
    role,
    session,
    wait_for_go,
)

import amem

POLL_SECONDS = 0.02
"""How often the child looks at its scope's coverage (the background embedding says nothing)."""


async def main(db_path: str, base_url: str, prefix: str, count: int, batch: int) -> None:
    settings = amem.Settings(embed_base_url=base_url, embed_model="fake", embed_batch=batch)
    async with amem.open(db_path, settings=settings) as mem:
        scope = mem.scope(persona=PERSONA, project=PROJECT)
        for n in range(count):
            event_id = f"{prefix}-{n}"
            receipt = await scope.submit_event(
                brief(event_id), role=role(event_id), event_id=event_id, session=session(event_id)
            )
            emit(f"ack {event_id} {receipt.seq} {int(receipt.duplicate)}")
            [memory] = await scope.add_memories(event_id, [memory_of(event_id)])
            emit(f"mark memory {memory.id} {event_id}")
        while (await scope.status()).coverage != 1.0:
            await anyio.sleep(POLL_SECONDS)
        emit("mark embedded")
        if (await anyio.to_thread.run_sync(sys.stdin.readline)).strip() == "reindex":
            await scope.reindex(progress=lambda done, total: emit(f"mark stored {done} {total}"))
            emit("mark reindexed")


if __name__ == "__main__":
    backend, db_path, (base_url, prefix, count, batch) = child_args(sys.argv)
    if wait_for_go():
        run = partial(main, db_path, base_url, prefix, int(count), int(batch))
        anyio.run(run, backend=backend)
