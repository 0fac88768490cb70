"""Erasure at scale: the search index survives thousands of deletions, a broken index can
always be rebuilt, and a deletion never waits for another connection's readers."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import anyio
import pytest

import amem
from amem.db.drivers import open_sqlite
from amem.db.schema import migrate
from amem.search import index

pytestmark = pytest.mark.anyio


def test_merging_the_index_after_every_deletion_keeps_it_readable(tmp_path: Path) -> None:
    """SQLite before 3.41 adds an FTS5 level at every ``optimize``: 2,000 levels and the
    index is unreadable (it broke at the 1,207th deletion). The purge amem runs after
    deletions keeps the level count bounded on whatever SQLite the tests run with."""
    with closing(open_sqlite(str(tmp_path / "m.db"), readonly=False)) as conn:
        migrate(conn)
        for n in range(3_000):
            conn.execute("begin immediate")
            index.index_doc(conn, "p", "q", "event", f"keep-{n}", f"keep {n} alpha beta")
            index.index_doc(conn, "p", "q", "event", f"gone-{n}", f"gone {n}")
            index.remove_docs(conn, "event", [f"gone-{n}"])
            index.purge_deleted_terms(conn)
            conn.execute("commit")
        assert index.index_levels(conn) <= index.MAX_LEVELS + 1
        conn.execute("insert into search_fts (search_fts, rank) values ('integrity-check', 1)")
        found = conn.execute("select count(*) from search_fts where search_fts match 'alpha'")
        assert found.fetchone()[0] == 3_000


async def test_ten_thousand_deletions_between_inserts_leave_a_healthy_index(
    db_path: Path,
) -> None:
    """The adversarial run's repro: keep one event, submit another and delete it, again
    and again. Every operation succeeds and the index answers at the end."""
    async with amem.open(db_path) as mem:
        scope = mem.scope("p", "q")

        async def rounds(worker: int) -> None:
            for n in range(worker, 10_000, 20):
                await scope.submit_event(f"keep {n} alpha beta", role="user", event_id=f"k{n}")
                await scope.submit_event(f"gone {n}", role="user", event_id=f"g{n}")
                await scope.delete(event_id=f"g{n}")

        async with anyio.create_task_group() as tg:
            for worker in range(20):  # concurrent rounds: group commit keeps it quick
                tg.start_soon(rounds, worker)
        report = await mem.doctor()
        assert report.ok, [check for check in report.checks if not check.ok]
        assert report.counts["events"] == 10_000
        hits = await scope.recall("alpha beta", limit=5)
        assert len(hits.items) == 5
        assert all(item.text.startswith("keep") for item in hits.items)
        assert not (await scope.recall("gone", limit=5)).items


def break_index(db_path: Path) -> None:
    """Overwrite the FTS5 structure record, as a 2,000-level index or a torn page leaves it."""
    with closing(sqlite3.connect(db_path)) as conn:
        conn.execute("update search_fts_data set block = x'00000000ffffffff' where id = 10")
        conn.commit()


async def test_a_broken_index_is_reported_and_rebuilt(db_path: Path) -> None:
    async with amem.open(db_path) as mem:
        await mem.scope().submit_event("I moved to Hangzhou", role="user", event_id="m-1")
    break_index(db_path)
    async with amem.open(db_path) as mem:
        scope = mem.scope()
        with pytest.raises(amem.StorageError):
            await scope.recall("Hangzhou")
        report = await mem.doctor()
        assert not report.ok
        assert [c.name for c in report.checks if not c.ok] == ["search index"]
        rebuilt = await mem.doctor(rebuild_index=True)
        assert rebuilt.ok, [check for check in rebuilt.checks if not check.ok]
        assert [item.id for item in (await scope.recall("Hangzhou")).items] == ["m-1"]
        await scope.submit_event("and then to Suzhou", role="user", event_id="m-2")
        assert [item.id for item in (await scope.recall("Suzhou")).items] == ["m-2"]


def file_bytes(db_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in db_path.parent.glob(db_path.name + "*"))


async def test_a_deletion_does_not_wait_for_another_connections_reader(db_path: Path) -> None:
    """A reader elsewhere (another process exporting, say) holds an old snapshot. The
    deletion and the writes after it go on; the deleted text leaves the WAL once the
    reader lets go, while the database stays open."""
    secret = "Zanzibar7731 青龙偃月刀"
    async with amem.open(db_path) as mem:
        scope = mem.scope()
        await scope.submit_event(f"the code is {secret}", role="user", event_id="secret")
        with closing(open_sqlite(str(db_path), readonly=True)) as reader:
            reader.execute("begin")
            reader.execute("select count(*) from events").fetchall()  # holds its snapshot
            with anyio.fail_after(5):  # a bound, not a timing assertion: it used to take 10 s
                await scope.delete(event_id="secret")
                await scope.submit_event("written right after", role="user")
                await anyio.sleep(1)  # the writer's truncation attempts meet the reader
                await scope.submit_event("and another", role="user")
            reader.execute("rollback")
        with anyio.fail_after(10):
            while secret.encode() in file_bytes(db_path):
                await anyio.sleep(0.1)
        assert (await scope.status()).events["stored"] == 2
