"""Export, import, backup, restore and doctor on PostgreSQL (issue 33).

The same writes give the same archive from a SQLite file and from a PostgreSQL database;
an archive of either imports into the other and exports again unchanged; a PostgreSQL
backup is a SQLite file that restores into either; later writes after a load take new
row numbers; doctor checks what PostgreSQL does not check itself.
"""

from __future__ import annotations

import json
import re
import secrets
import sqlite3
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, closing
from pathlib import Path

import anyio
import psycopg
import pytest
from pg_cluster import Cluster
from test_ops import PERSONA, PROJECT, archive_lines, leftovers, populate
from test_ops import good_archive as good_archive  # a fixture, shared
from test_people_ops import acquaint

import amem
from amem.db.schema import SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]  # see tests/conftest.py

STORED_TIME = re.compile(r'"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"')


@asynccontextmanager
async def opened(where: str | Path) -> AsyncIterator[amem.Memory]:
    async with amem.open(where, settings=amem.Settings()) as mem:
        yield mem


async def write_everything(mem: amem.Memory) -> None:
    """``populate`` (events of every category, memories, a correction, a relation, a
    checkpoint, personas, a cursor), people with what belongs to them (an assignment,
    a memory about someone, states)."""
    await populate(mem)
    await acquaint(mem)


async def write_the_rest(mem: amem.Memory) -> None:
    """A consolidation run with its sources, an erased event (its tombstone) and an
    evicted one. Each looks into the lexical index, which PostgreSQL does not have yet:
    these rows reach PostgreSQL by import here."""
    s = mem.scope(PERSONA, PROJECT)
    await s.evict(["t-2"])
    run = await s.prepare_consolidation()
    await s.record_attempt(run.id, {"entries": []}, "nothing to tidy yet")
    await s.submit_event("forget this", role="user", event_id="gone")
    await s.delete(event_id="gone")


def ids_from_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every new ID (``uuid4``) counts up from 1 again: the same writes then name the
    same rows on two databases."""
    counter = iter(range(1, 1 << 30))
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(int=next(counter)))


@pytest.fixture(scope="module")
def full_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An archive of a SQLite file holding a row of every table (``write_everything``
    and ``write_the_rest``), written once."""
    directory = tmp_path_factory.mktemp("full")

    async def build() -> None:
        async with opened(directory / "source.db") as mem:
            await write_everything(mem)
            await write_the_rest(mem)
            exported = await mem.export(directory / "full.jsonl")
        assert all(exported.counts.values())
        assert '"evicted_at":"' in (directory / "full.jsonl").read_text(encoding="utf-8")

    anyio.run(build)
    return directory / "full.jsonl"


@pytest.fixture
def second_pg_url(pg_cluster: Cluster) -> Iterator[str]:
    """Another new, empty database in ``pg_cluster``, dropped after the test."""
    name = f"test_{secrets.token_hex(4)}"
    yield pg_cluster.create_database(name)
    pg_cluster.drop_database(name)


def rows(path: Path) -> list[str]:
    """An archive's lines after its header (which ``archive_lines`` checks)."""
    header, lines = archive_lines(path)
    assert header["schema_version"] == SCHEMA_VERSION
    return lines


def timeless(lines: list[str]) -> list[str]:
    """The lines with every stored time the same: two runs of the same writes differ in
    the clock only."""
    return [STORED_TIME.sub('"T"', line) for line in lines]


# --- the archive format ----------------------------------------------------------------


async def test_the_same_writes_export_the_same_archive_from_either_database(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    archives = {}
    for name, where in (("sqlite", tmp_path / "a.db"), ("postgresql", pg_url)):
        ids_from_one(monkeypatch)
        async with opened(where) as mem:
            await write_everything(mem)
            archives[name] = await mem.export(tmp_path / f"{name}.jsonl")
    assert archives["sqlite"].counts == archives["postgresql"].counts
    empty = [table for table, count in archives["sqlite"].counts.items() if not count]
    assert empty == ["erased_events", "consolidation_runs", "consolidation_sources"]
    sqlite_rows = rows(tmp_path / "sqlite.jsonl")
    assert timeless(rows(tmp_path / "postgresql.jsonl")) == timeless(sqlite_rows)


async def test_archives_cross_between_the_databases_both_ways(
    tmp_path: Path, pg_url: str, second_pg_url: str, full_archive: Path
) -> None:
    async with opened(pg_url) as mem:  # SQLite -> PostgreSQL
        imported = await mem.import_archive(full_archive)
        assert all(imported.counts.values())
        await mem.export(tmp_path / "p.jsonl")
    async with opened(tmp_path / "b.db") as mem:  # PostgreSQL -> SQLite
        await mem.import_archive(tmp_path / "p.jsonl")
        await mem.export(tmp_path / "b.jsonl")
        assert (await mem.doctor()).ok
    async with opened(second_pg_url) as mem:  # PostgreSQL -> PostgreSQL
        await mem.import_archive(tmp_path / "p.jsonl")
        await mem.export(tmp_path / "q.jsonl")
    expected = rows(full_archive)
    for name in ("p", "b", "q"):
        assert rows(tmp_path / f"{name}.jsonl") == expected, name


async def test_an_import_into_postgres_counts_once_and_leaves_planner_statistics(
    pg_url: str, full_archive: Path
) -> None:
    """The counters a load leaves to its end (a row updated per loaded row is quadratic on
    PostgreSQL) agree with the rows, and count on after it. Without statistics PostgreSQL
    plans recall as over empty tables until autovacuum comes by: at 100,000 memories,
    59 ms a recall instead of 6.6."""
    async with opened(pg_url) as mem:
        await mem.import_archive(full_archive)
        with psycopg.connect(pg_url) as conn:
            for table in ("events", "memories", "search_docs", "search_postings"):
                [(estimated,)] = conn.execute(
                    "select reltuples from pg_class where relname = %s", (table,)
                ).fetchall()
                [(counted,)] = conn.execute(f"select count(*) from {table}").fetchall()
                assert (table, estimated) == (table, counted)
        checked = await mem.doctor()
        assert checked.ok, checked
        scope = mem.scope(PERSONA, PROJECT)
        before = (await scope.status()).capacity
        await scope.submit_event("after the load", role="user")
        assert (await scope.status()).capacity.events == before.events + 1
        assert (await mem.doctor()).ok


NUMBERED = {"events": "seq", "memories": "num", "checkpoints": "num", "assignments": "num"}
"""Tables whose rows an import inserts with their own numbers, and the numbering column."""


def newest_numbers(path: Path) -> dict[str, int]:
    """The largest row number of each ``NUMBERED`` table in an archive."""
    newest = dict.fromkeys(NUMBERED, 0)
    for line in rows(path)[:-1]:
        data = json.loads(line)
        if (table := data["table"]) in NUMBERED:
            newest[table] = max(newest[table], data["row"][NUMBERED[table]])
    return newest


async def test_writes_after_an_import_into_postgres_take_new_row_numbers(
    tmp_path: Path, pg_url: str, full_archive: Path
) -> None:
    async with opened(pg_url) as mem:
        await mem.import_archive(full_archive)
        s = mem.scope(PERSONA, PROJECT)
        await s.submit_event("我又搬家了", role="user", event_id="later", session="chat")
        draft = amem.MemoryDraft(
            text="用户又搬家了", quote="又搬家", kind="fact", basis="user_statement"
        )
        await s.add_memories("later", [draft])
        [tom] = [person for person in await s.people() if person.display_name == "Tom"]
        await s.assign("later", tom.id, reason="Tom said it")
        await s.save_checkpoint("chat", goal="move again")
        await mem.export(tmp_path / "p.jsonl")
    before = newest_numbers(full_archive)
    assert newest_numbers(tmp_path / "p.jsonl") == {t: n + 1 for t, n in before.items()}


async def test_a_bad_archive_leaves_a_postgres_database_as_it_was(
    tmp_path: Path, pg_url: str, good_archive: Path
) -> None:
    lines = good_archive.read_text(encoding="utf-8").splitlines()
    spoiled = [
        line.replace("我搬到杭州了", "我搬到苏州了") if '"quote"' in line else line
        for line in lines
    ]
    (tmp_path / "bad.jsonl").write_text("\n".join(spoiled) + "\n", encoding="utf-8")
    async with opened(pg_url) as mem:
        with pytest.raises(amem.StorageError) as caught:
            await mem.import_archive(tmp_path / "bad.jsonl")
        assert caught.value.code == "archive_invalid"
        assert "quote does not occur" in caught.value.message
        assert (await mem.doctor()).counts["events"] == 0
        imported = await mem.import_archive(good_archive)  # nothing was left behind
        assert imported.counts["events"] == 6


# --- backup and restore ----------------------------------------------------------------


@pytest.mark.both_backends
async def test_a_postgres_backup_is_a_sqlite_file_that_restores_into_either(
    tmp_path: Path, pg_url: str, second_pg_url: str, full_archive: Path
) -> None:
    async with opened(pg_url) as mem:
        await mem.import_archive(full_archive)
        exported = await mem.export(tmp_path / "p.jsonl")
        backup = await mem.backup(tmp_path / "p.backup")
    assert backup.counts == exported.counts
    assert leftovers(tmp_path) == []
    copy = tmp_path / "p.backup"
    assert copy.stat().st_mode & 0o777 == 0o600
    with closing(sqlite3.connect(copy)) as conn:
        assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
        assert conn.execute("pragma journal_mode").fetchone() == ("delete",)
    expected = rows(tmp_path / "p.jsonl")

    async with opened(copy) as mem:  # amem opens the backup as it is
        assert (await mem.doctor()).ok
    async with opened(tmp_path / "s.db") as mem:
        await mem.restore(copy)
        await mem.export(tmp_path / "s.jsonl")
        await mem.backup(tmp_path / "s.backup")  # SQLite's own backup, restored below
    async with opened(second_pg_url) as mem:
        restored = await mem.restore(tmp_path / "s.backup")
        assert restored.counts == exported.counts
        await mem.export(tmp_path / "q.jsonl")
    assert rows(tmp_path / "s.jsonl") == rows(tmp_path / "q.jsonl") == expected


# --- doctor ----------------------------------------------------------------------------


def failed(report: amem.DoctorReport) -> dict[str, str]:
    return {check.name: check.detail for check in report.checks if not check.ok}


async def test_doctor_on_postgres_finds_a_healthy_database_healthy(
    pg_url: str, full_archive: Path
) -> None:
    async with opened(pg_url) as mem:
        imported = await mem.import_archive(full_archive)
        report = await mem.doctor()
    assert report.ok, report.checks
    assert report.schema_version == SCHEMA_VERSION
    assert failed(report) == {}
    details = {check.name: check.detail for check in report.checks}
    assert details["integrity"].startswith("not checked on PostgreSQL: the server checks")
    assert details["search index"] == "ok"
    assert details["foreign keys"] == details["archive"] == details["ownership"] == "ok"
    assert report.counts["events"] == imported.counts["events"]


BROKEN = {
    "a row without its parent": (
        ["set session_replication_role = replica", "delete from consolidation_runs"],
        {"foreign keys", "archive"},
    ),
    "counters": (["update scope_usage set events = events + 5"], {"capacity accounting"}),
    "about no one known": (
        ["""update memories set about = '["per_nobody"]' where about is not null"""],
        {"ownership", "archive"},
    ),
    "about not JSON": (
        ["update memories set about = '[\"per_' where about is not null"],
        {"ownership", "archive"},
    ),
}
"""Writes around amem (``psql``), and the checks that must fail after each. A replica
session fires no triggers: PostgreSQL does not check its foreign keys."""


@pytest.mark.parametrize("case", list(BROKEN))
async def test_doctor_on_postgres_sees_what_a_write_around_amem_broke(
    pg_url: str, pg_cluster: Cluster, full_archive: Path, case: str
) -> None:
    statements, checks = BROKEN[case]
    async with opened(pg_url) as mem:
        await mem.import_archive(full_archive)
        dbname = pg_url.rsplit("/", 1)[1]
        pg_cluster.psql(*(arg for sql in statements for arg in ("-c", sql)), dbname=dbname)
        report = await mem.doctor()
    assert not report.ok
    assert set(failed(report)) == checks, report.checks


async def test_doctor_on_postgres_rebuilds_what_it_counts(
    pg_url: str, pg_cluster: Cluster, full_archive: Path
) -> None:
    async with opened(pg_url) as mem:
        await mem.import_archive(full_archive)
        dbname = pg_url.rsplit("/", 1)[1]
        pg_cluster.sql("update scope_usage set events = events + 5", dbname=dbname)
        assert set(failed(await mem.doctor())) == {"capacity accounting"}
        repaired = await mem.doctor(rebuild_index=True)
    assert repaired.ok, repaired.checks
