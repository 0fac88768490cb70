"""Helpers the test files share (each lives here once, never rewritten per file)."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.lowlevel

import amem
from amem.db.schema import V1

T = TypeVar("T")

JAN = "2026-01-01T00:00:00Z"


async def remember(
    scope: amem.Scope, event_id: str, text: str, quote: str, *, at: str = JAN, **draft: object
) -> amem.MemoryRecord:
    """A user event ``text`` in session ``s`` and one fact quoting ``quote`` from it."""
    await scope.submit_event(text, role="user", event_id=event_id, session="s", occurred_at=at)
    fields = {"text": f"User said: {quote}", "quote": quote, "kind": "fact",
              "basis": "user_statement", **draft}  # fmt: skip
    [memory] = await scope.add_memories(event_id, [fields])
    return memory


INDEX_LAYOUT = ("search_fts_data", "search_fts_idx", "search_fts_config")
"""FTS5's own tables: how its segments lie, which the writer's idle upkeep rearranges."""


def dump(path: Path) -> list[str]:
    """Everything in a database file as SQL text, the search index as what it holds (every
    token of every document, with its position) rather than how FTS5 lays it out."""
    with closing(sqlite3.connect(path)) as conn:
        lines = [
            line for line in conn.iterdump() if not line.startswith(INDEX_LAYOUT, 13)
        ]  # 'INSERT INTO "' is 13 characters, then the table's name
        conn.execute("create virtual table temp.vocab using fts5vocab(main, search_fts, instance)")
        postings = conn.execute("select term, doc, col, offset from temp.vocab order by 1, 2, 3, 4")
        return lines + [repr(row) for row in postings]


def file_bytes(db_path: Path) -> bytes:
    """The database file and its companions (-wal, -shm), as one byte string to scan."""
    return b"".join(p.read_bytes() for p in db_path.parent.glob(db_path.name + "*"))


def cancel_ticks(every: int = 2000, cap: int = 2_000_000) -> Iterator[int]:
    """When to cancel an operation, in scheduler ticks: each of the first ``every`` ticks,
    then 5% more each time. How many ticks an uncancelled write needs depends on the disk
    (fsync) and the machine's load, not on amem; the growing tail keeps a loaded machine
    from running out of ticks before the write can finish, without skipping an early one."""
    yield from range(every)
    ticks = every
    while ticks < cap:
        ticks = int(ticks * 1.05)
        yield ticks


async def cancelled_after(ticks: int, call: Callable[[], Awaitable[T]]) -> list[T]:
    """Start ``call()`` in a task and cancel it after ``ticks`` scheduler checkpoints (0:
    before it runs at all). Returns ``[its result]`` if it finished first, else ``[]``."""
    finished: list[T] = []
    cancel_scope = anyio.CancelScope()

    async def run() -> None:
        with cancel_scope:
            finished.append(await call())

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        for _ in range(ticks):
            await anyio.lowlevel.checkpoint()
        cancel_scope.cancel()
    return finished


def undo_v10(conn: sqlite3.Connection) -> None:
    """Take back schema v10: ``temp_files``, ``scrubs`` and its triggers go."""
    for name in ("events_erased", "memories_erased"):
        conn.execute(f"drop trigger {name}")
    conn.execute("drop table scrubs")
    conn.execute("drop table temp_files")


def undo_v9(conn: sqlite3.Connection) -> None:
    """Take back schema v9, and v10 after it: ``index_removals`` and its triggers go."""
    undo_v10(conn)
    for name in ("search_docs_removed", "search_docs_changed"):
        conn.execute(f"drop trigger {name}")
    conn.execute("drop table index_removals")


def undo_v8(conn: sqlite3.Connection) -> None:
    """Take back schema v8, and v9 after it: the tier columns and their indexes go."""
    undo_v9(conn)
    for name in ("memories_by_tier", "memories_by_expiry", "memories_pinned"):
        conn.execute(f"drop index {name}")
    for column in ("tier", "pinned", "expires_at"):
        conn.execute(f"alter table memories drop column {column}")


def undo_v7(conn: sqlite3.Connection) -> None:
    """Take back schema v7, and v8 after it: ``scope_usage`` and the triggers that keep
    it go."""
    undo_v8(conn)
    triggers = "select name from sqlite_master where type = 'trigger' and name like '%_usage_%'"
    for (name,) in conn.execute(triggers).fetchall():
        conn.execute(f"drop trigger {name}")
    conn.execute("drop table scope_usage")


def undo_v6(conn: sqlite3.Connection) -> None:
    """Take back schema v6 (it came after stemming), and v7 after it: their tables go,
    ``embeddings`` is back."""
    undo_v7(conn)
    for table in ("vectors", "vector_epochs", "erased_events", "scope_limits"):
        conn.execute(f"drop table {table}")
    conn.execute("alter table memories drop column revoke_reason")
    [embeddings] = [sql for sql in V1 if "create table embeddings" in sql]
    conn.execute(embeddings)
