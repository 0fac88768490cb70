"""Submit events forever from several tasks until killed; print each acknowledged ID.

Usage: writer.py asyncio|trio DB_PATH PREFIX TASKS

Event IDs are ``PREFIX-tTASK-N``; text, role and session derive from the ID (common.py).
A line ``ack ID SEQ DUP`` is printed only after ``submit_event`` returned for that ID.
"""

from __future__ import annotations

import sys
from functools import partial

import anyio
from common import PERSONA, PROJECT, child_args, emit, payload, role, session, wait_for_go

import amem


async def submit_forever(scope: amem.Scope, prefix: str) -> None:
    n = 0
    while True:
        event_id = f"{prefix}-{n}"
        receipt = await scope.submit_event(
            payload(event_id), role=role(event_id), event_id=event_id, session=session(event_id)
        )
        emit(f"ack {event_id} {receipt.seq} {int(receipt.duplicate)}")
        n += 1


async def main(db_path: str, prefix: str, tasks: int) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope(persona=PERSONA, project=PROJECT)
        async with anyio.create_task_group() as tg:
            for task in range(tasks):
                tg.start_soon(submit_forever, scope, f"{prefix}-t{task}")


if __name__ == "__main__":
    backend, db_path, (prefix, tasks) = child_args(sys.argv)
    if wait_for_go():
        anyio.run(partial(main, db_path, prefix, int(tasks)), backend=backend)
