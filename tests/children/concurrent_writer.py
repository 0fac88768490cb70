"""Submit COUNT events from TASKS concurrent tasks, then print a JSON summary and exit.

Usage: concurrent_writer.py asyncio|trio DB_PATH PREFIX COUNT TASKS

Event IDs are ``PREFIX-tTASK-N``. Prints ``ack ID SEQ DUP`` after each returned submit,
``error CODE MESSAGE`` for each exception a submit raised (the task then moves on), and
finally ``summary {"acked": .., "errors": .., "locked": ..}``. The database is opened only
after the parent's ``go``, so several children can be released onto a new file at once.
"""

from __future__ import annotations

import json
import sys
from functools import partial

import anyio
from common import PERSONA, PROJECT, child_args, emit, payload, role, session, wait_for_go

import amem


class Tally:
    def __init__(self) -> None:
        self.acked = 0
        self.errors = 0
        self.locked = 0


def is_lock_error(exc: Exception) -> bool:
    text = f"{getattr(exc, 'code', '')} {exc}".lower()
    return "locked" in text or "busy" in text


async def submit_share(scope: amem.Scope, prefix: str, count: int, tally: Tally) -> None:
    for n in range(count):
        event_id = f"{prefix}-{n}"
        try:
            receipt = await scope.submit_event(
                payload(event_id), role=role(event_id), event_id=event_id, session=session(event_id)
            )
        except Exception as exc:
            tally.errors += 1
            tally.locked += is_lock_error(exc)
            code = getattr(exc, "code", type(exc).__name__)
            emit(f"error {code} {str(exc).replace(chr(10), ' ')}")
            continue
        tally.acked += 1
        emit(f"ack {event_id} {receipt.seq} {int(receipt.duplicate)}")


async def main(db_path: str, prefix: str, count: int, tasks: int) -> None:
    tally = Tally()
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope(persona=PERSONA, project=PROJECT)
        async with anyio.create_task_group() as tg:
            for task in range(tasks):
                share = count // tasks + (task < count % tasks)
                tg.start_soon(submit_share, scope, f"{prefix}-t{task}", share, tally)
    emit("summary " + json.dumps(vars(tally)))


if __name__ == "__main__":
    backend, db_path, (prefix, count, tasks) = child_args(sys.argv)
    if wait_for_go():
        anyio.run(partial(main, db_path, prefix, int(count), int(tasks)), backend=backend)
