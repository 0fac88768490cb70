"""An acknowledged event survives ``kill -9`` of the process that wrote it.

A child process submits events from several tasks and prints each event ID only after
``submit_event`` returned. The test kills it with SIGKILL at a random moment, again and
again on the same file (each round reopens it and so recovers the WAL the last one left),
then checks that every acknowledged event is there with exactly the text the child sent,
that no row is half-written, and that SQLite finds the file intact.

A ``reindex`` killed mid-run (its embedding server, on 127.0.0.1, holds the request after
a random batch) leaves the old vector index whole and the file healthy; the next reindex
completes and covers the scope. ``bench/kill9.py`` runs every kind of write this way.
"""

from __future__ import annotations

import math
import random
import signal
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any, NamedTuple

import anyio
import pytest
from children import common  # tests/children/common.py (pytest puts tests/ on sys.path)
from helpers import inspect_file

import amem
from amem.db.schema import SCHEMA_VERSION
from amem.search.vector_rows import chunks
from amem.testing import FakeOpenAI

pytestmark = pytest.mark.anyio


KILLED_ROUNDS = 20
"""Rounds killed 0.05-0.5 s after the first acknowledgement."""
EARLY_ROUNDS = 3
"""Rounds killed 0-50 ms after start: during open, WAL recovery or (first) migration."""
TASKS = 6
MAX_READ = 100_000


@pytest.mark.both_backends
@pytest.mark.both_databases
async def test_acknowledged_events_survive_sigkill(
    anyio_backend: str, tmp_path: Path, target: str
) -> None:
    rng = random.Random(f"sigkill/{anyio_backend}")
    db_path = target
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

    # Then, with amem closed, plain sqlite3 (psycopg) looks at every row and at the file.
    report = await anyio.to_thread.run_sync(inspect_file, db_path)
    assert report.integrity == [("ok",)]
    assert report.user_version == SCHEMA_VERSION
    torn = [event_id for event_id, row in report.events.items() if row[1:] != written(event_id)]
    assert torn == [], "rows whose content is not what any child wrote"
    missing = [event_id for event_id in acked if event_id not in report.events]
    assert missing == [], f"{len(missing)} acknowledged events are gone"
    assert all(report.events[event_id].seq == seq for event_id, seq in acked.items())


def written(event_id: str) -> tuple[str, str, str | None, str, str, str]:
    """What a child stores for ``event_id``: persona, project, session, role, category,
    text."""
    return (
        common.PERSONA,
        common.PROJECT,
        common.session(event_id),
        common.role(event_id),
        "conversation",
        common.payload(event_id),
    )


REINDEX_ROUNDS = 3
REINDEX_EVENTS = 8
"""Events per round, each with one memory: a round's reindex embeds all of them so far."""
EMBED_BATCH = 2


class HeldEmbeddings(FakeOpenAI):
    """Answers embedding requests until ``hold_after`` of them were answered in all, then
    holds every further one (at the gate) until the gate is set again."""

    hold_after: int | None = None

    def respond(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        answer = super().respond(path, body)
        if self.hold_after is not None and len(self.embedding_requests) >= self.hold_after:
            self.gate.clear()
        return answer


async def test_reindex_killed_mid_run_keeps_the_index_whole(
    anyio_backend: str, tmp_path: Path
) -> None:
    rng = random.Random(f"reindex/{anyio_backend}")
    db_path = tmp_path / "memory.db"
    acked: dict[str, int] = {}
    memories: dict[str, str] = {}
    with HeldEmbeddings() as api:
        settings = amem.Settings(
            embed_base_url=api.base_url, embed_model="fake", embed_batch=EMBED_BATCH
        )
        fingerprint = settings.embed_fingerprint
        assert fingerprint is not None
        async with common.spawner(anyio_backend, tmp_path) as spawn:
            for number in range(REINDEX_ROUNDS):
                child = await spawn.start(
                    "reindexing.py",
                    db_path,
                    api.base_url,
                    f"x{number}",
                    REINDEX_EVENTS,
                    EMBED_BATCH,
                )
                await child.go()
                assert await child.marked("embedded") is not None, child.describe()
                items = 2 * REINDEX_EVENTS * (number + 1)
                stored = rng.randint(1, math.ceil(items / EMBED_BATCH) - 1)
                api.hold_after = len(api.embedding_requests) + stored
                await child.send("reindex")
                # that batch is staged; the next request waits at the server: kill mid-run
                assert await child.marked("stored", stored) is not None, child.describe()
                child.kill()
                assert await child.finish() == -signal.SIGKILL, child.describe()
                api.hold_after = None
                api.gate.set()
                assert "reindexed" not in [mark for mark, *_ in child.marks]
                acked.update((event_id, seq) for event_id, seq, _ in child.acks)
                memories.update((m[1], m[2]) for m in child.marks if m[0] == "memory")

                vectors = await anyio.to_thread.run_sync(inspect_vectors, db_path, fingerprint)
                assert vectors.integrity == [("ok",)]
                assert vectors.staged > 0, "the kill came before any batch was staged"
                # the old index is whole: every event and memory keeps its vectors
                assert vectors.covered == set(acked) | set(memories)

        # amem reopens the file: healthy, the interrupted reindex reported, nothing lost
        async with amem.open(db_path, settings=settings) as mem:
            report = await mem.doctor()
            assert report.ok, report
            assert "interrupted reindex" in {check.name for check in report.checks}
            scope = mem.scope(persona=common.PERSONA, project=common.PROJECT)
            for event_id, seq in acked.items():
                page = await scope.read(event_id, limit=MAX_READ)
                assert (page.text, page.event.seq) == (common.brief(event_id), seq)
            for memory_id, event_id in memories.items():
                page = await scope.read(memory_id, limit=1)
                assert page.memory is not None
                assert page.memory.event_id == event_id

            # and the next reindex completes and covers the scope
            result = await scope.reindex()
            assert (result.events, result.memories) == (len(acked), len(memories))
            assert result.embedded == len(acked) + len(memories)
            assert (await scope.status()).coverage == 1.0
            report = await mem.doctor()
            assert report.ok, report
            assert "interrupted reindex" not in {check.name for check in report.checks}
        vectors = await anyio.to_thread.run_sync(inspect_vectors, db_path, fingerprint)
        assert vectors.integrity == [("ok",)]
        assert vectors.staged == 0
        assert vectors.covered == set(acked) | set(memories)


class Vectors(NamedTuple):
    integrity: list[tuple[str]]
    staged: int
    """Vectors staged by a reindex that never swapped them in."""
    covered: set[str]
    """Events and memories with a vector of the configured model for every chunk."""


def inspect_vectors(db_path: Path, fingerprint: str) -> Vectors:
    with closing(sqlite3.connect(db_path)) as conn:
        integrity = conn.execute("pragma integrity_check").fetchall()
        staged = conn.execute(
            "select count(*) from vectors where fingerprint like 'staging:%'"
        ).fetchone()[0]
        events = dict(conn.execute("select id, text from events").fetchall())
        memories = {m for (m,) in conn.execute("select id from memories")}
        found: dict[str, set[int]] = {}
        rows = conn.execute("select ref, chunk from vectors where fingerprint = ?", (fingerprint,))
        for ref, chunk in rows:
            found.setdefault(ref, set()).add(chunk)
    wanted = {event_id: len(chunks(text)) for event_id, text in events.items()}
    wanted |= dict.fromkeys(memories, 1)
    covered = {ref for ref, got in found.items() if got == set(range(wanted.get(ref, -1)))}
    return Vectors(integrity, staged, covered)
