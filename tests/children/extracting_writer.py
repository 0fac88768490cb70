"""Submit events to a database with extraction configured, then idle while it extracts.

Usage: extracting_writer.py asyncio|trio DB_PATH BASE_URL PREFIX COUNT

Events ``PREFIX-N`` (text from ``extraction_text``) are submitted one by one, each
acknowledged with an ``ack`` line after ``submit_event`` returned; the background
extraction against BASE_URL (a ``FakeOpenAI``) runs until the parent kills the child.
"""

from __future__ import annotations

import sys
from functools import partial

import anyio
from common import PERSONA, PROJECT, child_args, emit, wait_for_go

import amem


def extraction_text(event_id: str) -> str:
    """What event ``event_id`` says; each of its three sentences yields one memory."""
    return f"{event_id}：我住在杭州。我喜欢喝龙井茶。今天去西湖散步了。"


async def main(db_path: str, base_url: str, prefix: str, count: int) -> None:
    settings = amem.Settings(extract_base_url=base_url, extract_model="fake", extract_concurrency=4)
    async with amem.open(db_path, settings=settings) as mem:
        scope = mem.scope(persona=PERSONA, project=PROJECT)
        for n in range(count):
            event_id = f"{prefix}-{n}"
            receipt = await scope.submit_event(
                extraction_text(event_id), role="user", event_id=event_id, session=prefix
            )
            emit(f"ack {event_id} {receipt.seq} {int(receipt.duplicate)}")
        await anyio.sleep_forever()


if __name__ == "__main__":
    backend, db_path, (base_url, prefix, count) = child_args(sys.argv)
    if wait_for_go():
        anyio.run(partial(main, db_path, base_url, prefix, int(count)), backend=backend)
