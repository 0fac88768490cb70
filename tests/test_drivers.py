"""The two drivers behind ``db.drivers.Connection``: a job runs whole on the connection's
own thread, its result or its exception comes back, and closing is idempotent.

The asyncio driver runs jobs through aiosqlite's public ``execute`` on the ``sqlite3``
connection aiosqlite opened for it (``JobConnection``): the last test checks that a job and
aiosqlite's own statements share that connection and its thread, in order.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from amem.db.drivers import AioConnection, connect

pytestmark = pytest.mark.anyio


def thread_id(conn: sqlite3.Connection) -> int:
    return threading.get_ident()


async def test_a_job_runs_on_the_connection_thread_and_returns(tmp_path: Path) -> None:
    conn = await connect(str(tmp_path / "memory.db"), readonly=False)
    try:
        first, second = await conn.run(thread_id), await conn.run(thread_id)
        assert first == second != threading.get_ident()
        assert await conn.run(lambda c: c.execute("select 6 * 7").fetchone()[0]) == 42
        with pytest.raises(sqlite3.OperationalError):
            await conn.run(lambda c: c.execute("select * from missing"))
    finally:
        await conn.close()
        await conn.close()
    with pytest.raises(ValueError, match="closed"):
        await conn.run(thread_id)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_aiosqlite_runs_amem_jobs_on_the_connection_it_opened(tmp_path: Path) -> None:
    conn = await AioConnection.open(str(tmp_path / "memory.db"), readonly=False)
    aio = conn._conn
    try:
        await conn.run(lambda c: c.execute("begin immediate"))
        assert aio.in_transaction  # aiosqlite's own connection saw the job's statement
        await aio.execute("create table t (x)")  # queued after the job, on the same thread
        assert await conn.run(lambda c: c.execute("select count(*) from t").fetchone()[0]) == 0
        await conn.run(lambda c: c.execute("rollback"))
        assert not aio.in_transaction
    finally:
        await conn.close()
