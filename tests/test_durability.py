"""An acknowledged event survives ``kill -9`` of the process that wrote it.

A child process submits events from several tasks and prints each event ID only after
``submit_event`` returned. The test kills it with SIGKILL at a random moment, again and
again on the same file (each round reopens it and so recovers the WAL the last one left),
then checks that every acknowledged event is there with exactly the text the child sent,
that no row is half-written, and that SQLite finds the file intact.
"""

from __future__ import annotations

import random
import signal
import sqlite3
from contextlib import closing
from pathlib import Path

import anyio
import pytest
from children import common  # tests/children/common.py (pytest puts tests/ on sys.path)

import amem
from amem.db.schema import SCHEMA_VERSION

pytestmark = pytest.mark.anyio


KILLED_ROUNDS = 20
"""Rounds killed 0.05-0.5 s after the first acknowledgement."""
EARLY_ROUNDS = 3
"""Rounds killed 0-50 ms after start: during open, WAL recovery or (first) migration."""
TASKS = 6
MAX_READ = 100_000


async def test_acknowledged_events_survive_sigkill(anyio_backend: str, tmp_path: Path) -> None:
    rng = random.Random(f"sigkill/{anyio_backend}")
    db_path = tmp_path / "memory.db"
    acked: dict[str, int] = {}
    acks_per_round: list[int] = []
    last_acks: set[str] = set()
    prefixes = [f"r{number:02d}" for number in range(EARLY_ROUNDS + KILLED_ROUNDS)]

    async with common.spawner(anyio_backend, tmp_path) as spawn:
        upcoming = await spawn.start("writer.py", db_path, prefixes[0], TASKS)
        for number, prefix in enumerate(prefixes):
            child = upcoming
            await child.go()
            if number + 1 < len(prefixes):  # its start-up overlaps this round
                upcoming = await spawn.start("writer.py", db_path, prefixes[number + 1], TASKS)
            if number < EARLY_ROUNDS:
                await anyio.sleep(rng.uniform(0, 0.05))
            else:
                await child.acked_or_gone.wait()
                await anyio.sleep(rng.uniform(0.05, 0.5))
            child.kill()
            returncode = await child.finish()

            assert returncode == -signal.SIGKILL, child.describe()
            assert not child.unexpected, child.describe()
            assert not child.errors, child.describe()
            for event_id, seq, duplicate in child.acks:
                assert event_id.startswith(f"{prefix}-t"), child.describe()
                assert not duplicate, f"{event_id} was new but acknowledged as a duplicate"
                assert event_id not in acked
                acked[event_id] = seq
            last_acks.update(event_id for event_id, _, _ in child.acks[-2 * TASKS :])
            if number >= EARLY_ROUNDS:
                acks_per_round.append(len(child.acks))

    assert all(count > 0 for count in acks_per_round), acks_per_round
    assert len(set(acked.values())) == len(acked), "two acknowledged events share a seq"

    # amem reopens the file (recovering the last round's WAL) and reads events back whole:
    # the riskiest ones (each round's last acknowledgements before the kill) and a sample.
    ordered = list(acked)
    riskiest = [event_id for event_id in ordered if event_id in last_acks]
    sample = riskiest + rng.sample(ordered, min(300, len(ordered)))
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope(persona=common.PERSONA, project=common.PROJECT)
        for event_id in sample:
            try:
                page = await scope.read(event_id, limit=MAX_READ)
            except amem.NotFound:
                pytest.fail(f"the acknowledged event {event_id} is gone")
            expected = common.payload(event_id)
            assert page.text == expected, event_id
            assert page.total_chars == len(expected)
            assert page.next_offset is None
            assert page.event.seq == acked[event_id]
            assert page.event.role == common.role(event_id)
            assert page.event.session == common.session(event_id)

    # Then, with amem closed, plain sqlite3 looks at every row and at the file itself.
    report = await anyio.to_thread.run_sync(inspect_file, db_path)
    assert report.integrity == [("ok",)]
    assert report.user_version == SCHEMA_VERSION
    assert report.torn_rows == [], "rows whose content is not what any child wrote"
    missing = [event_id for event_id in acked if event_id not in report.ids_to_seq]
    assert missing == [], f"{len(missing)} acknowledged events are gone"
    assert all(report.ids_to_seq[event_id] == seq for event_id, seq in acked.items())


class Report:
    def __init__(self) -> None:
        self.integrity: list[tuple[str]] = []
        self.user_version = -1
        self.ids_to_seq: dict[str, int] = {}
        self.torn_rows: list[str] = []


def inspect_file(db_path: Path) -> Report:
    report = Report()
    with closing(sqlite3.connect(db_path)) as conn:
        report.integrity = conn.execute("pragma integrity_check").fetchall()
        report.user_version = conn.execute("pragma user_version").fetchone()[0]
        rows = conn.execute(
            "select id, seq, persona, project, session, role, category, text from events"
        )
        for event_id, seq, persona, project, session, role, category, text in rows:
            report.ids_to_seq[event_id] = seq
            expected = (
                common.PERSONA,
                common.PROJECT,
                common.session(event_id),
                common.role(event_id),
                "conversation",
                common.payload(event_id),
            )
            if (persona, project, session, role, category, text) != expected:
                report.torn_rows.append(event_id)
    return report
