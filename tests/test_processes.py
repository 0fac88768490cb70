"""Several OS processes write to one database at once, starting on a database amem has not
opened yet (so they also race to create and migrate it): a SQLite file, and a PostgreSQL
database, as processes on several hosts share it. Nobody sees "database is locked",
nothing is lost, and the database ends up migrated once and intact.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from children import common  # tests/children/common.py (pytest puts tests/ on sys.path)
from helpers import inspect_file

import amem
from amem.db.schema import SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.both_databases]


PROCESSES = 3
EVENTS = 300
"""Events each process submits."""
TASKS = 8
"""Concurrent submitting tasks inside each process."""


@pytest.mark.both_backends
async def test_processes_share_one_new_database(
    anyio_backend: str, tmp_path: Path, database: str, target: str
) -> None:
    assert database == "postgresql" or not Path(target).exists()

    async with common.spawner(anyio_backend, tmp_path) as spawn:
        children = [
            await spawn.start("concurrent_writer.py", target, f"p{n}", EVENTS, TASKS)
            for n in range(PROCESSES)
        ]
        for child in children:  # all imported, so "go" releases them onto the file together
            await child.ready.wait()
        for child in children:
            await child.go()
        for child in children:
            await child.finish()

    acked: dict[str, int] = {}
    for child in children:
        assert child.returncode == 0, child.describe()
        assert child.errors == [], child.describe()
        assert child.unexpected == [], child.describe()
        assert child.summary == {"acked": EVENTS, "errors": 0, "locked": 0}, child.describe()
        assert len(child.acks) == EVENTS
        assert "locked" not in child.stderr_path.read_text().lower(), child.describe()
        for event_id, seq, duplicate in child.acks:
            assert not duplicate, event_id
            assert event_id not in acked
            acked[event_id] = seq
    assert len(acked) == PROCESSES * EVENTS
    assert len(set(acked.values())) == len(acked), "two acknowledged events share a seq"

    async with amem.open(target, settings=amem.Settings()) as mem:
        scope = mem.scope(persona=common.PERSONA, project=common.PROJECT)
        for event_id, seq in acked.items():
            page = await scope.read(event_id, limit=100_000)
            assert page.text == common.payload(event_id), event_id
            assert page.event.seq == seq
            assert page.event.session == common.session(event_id)

    report = await anyio.to_thread.run_sync(inspect_file, target)
    assert report.integrity == [("ok",)]
    assert report.user_version == SCHEMA_VERSION
    rows = {event_id: (row.seq, row.text) for event_id, row in report.events.items()}
    assert rows == {event_id: (seq, common.payload(event_id)) for event_id, seq in acked.items()}
