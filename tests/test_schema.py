"""Schema versions, migrations and refusing files amem must not touch."""

from __future__ import annotations

import hashlib
import sqlite3
import sys
from pathlib import Path

import anyio
import pytest
from helpers import undo_v6, value

import amem
from amem.db import schema
from amem.db.schema import FTS_TOKENIZER, MIGRATIONS, SCHEMA_VERSION

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]  # see tests/conftest.py


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_old_database(path: Path, version: int) -> None:
    """A file as an older amem left it: migrations up to ``version``, one event."""
    conn = sqlite3.connect(path, isolation_level=None)
    for target, statements in MIGRATIONS[:version]:
        for statement in statements:
            conn.execute(statement)
        conn.execute(f"pragma user_version = {target}")
    conn.execute(
        "insert into events (id, persona, project, session, role, category, source, text,"
        " occurred_at, ingested_at, status) values ('old-1', 'p', 'q', null, 'user',"
        " 'conversation', null, '旧的事件', '2025-01-01T00:00:00.000000Z',"
        " '2025-01-01T00:00:00.000000Z', 'stored')"
    )
    conn.close()


async def test_a_new_file_is_at_the_current_version_in_wal_mode(db_path: Path) -> None:
    async with amem.open(db_path):
        assert value(db_path, "pragma journal_mode") == "wal"
    assert value(db_path, "pragma user_version") == SCHEMA_VERSION == 12
    tables = {
        "events",
        "personas",
        "memories",
        "relations",
        "checkpoints",
        "vectors",
        "vector_epochs",
        "erased_events",
        "scope_limits",
        "search_docs",
        "search_fts",
        "capture_cursors",
        "scope_usage",
        "index_removals",
    }
    names = sqlite3.connect(db_path).execute("select name from sqlite_master").fetchall()
    assert tables <= {name for (name,) in names}


async def test_new_file_is_private_to_its_owner(db_path: Path) -> None:
    async with amem.open(db_path):
        pass
    assert db_path.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize("version", [1, 2, 3, 4])
async def test_older_versions_migrate_and_keep_their_data(db_path: Path, version: int) -> None:
    make_old_database(db_path, version)
    async with amem.open(db_path) as mem:
        page = await mem.scope("p", "q").read("old-1")
        found = await mem.scope("p", "q").recall("旧")  # v5 indexes what the file holds
        await mem.scope("p", "q").submit_event("新的", role="user")
    assert page.text == "旧的事件"
    assert value(db_path, "pragma user_version") == SCHEMA_VERSION
    assert value(db_path, "select count(*) from events") == 2
    assert [item.id for item in found.items] == ["old-1"]


async def assert_refused_untouched(path: Path, code: str) -> None:
    before = digest(path)
    with pytest.raises(amem.StorageError) as caught:
        async with amem.open(path):
            pass
    assert caught.value.code == code
    assert digest(path) == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


async def test_a_newer_version_is_refused_and_the_file_left_byte_identical(db_path: Path) -> None:
    make_old_database(db_path, SCHEMA_VERSION)
    conn = sqlite3.connect(db_path)
    conn.execute(f"pragma user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    await assert_refused_untouched(db_path, "schema_too_new")
    assert value(db_path, "pragma journal_mode") == "delete"


async def test_a_foreign_database_is_refused_untouched(db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    conn.execute("create table notes (body text)")
    conn.execute("insert into notes values ('mine')")
    conn.commit()
    conn.close()
    await assert_refused_untouched(db_path, "not_amem_database")


async def test_a_file_that_is_not_sqlite_is_refused(db_path: Path) -> None:
    db_path.write_bytes(b"definitely not a database" * 100)
    await assert_refused_untouched(db_path, "not_a_database")


DIE_MID_WRITE = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("pragma cache_size = 10")  # spill pages into the file before COMMIT
conn.execute("begin")
conn.execute(sys.argv[2])
conn.executemany("insert into notes values (?)", [("x" * 500,)] * 5000)
os.kill(os.getpid(), 9)
"""


async def die_mid_write(path: Path, create: str) -> None:
    """A process killed by SIGKILL in the middle of a rollback-journal write (as amem is
    when killed while it switches a new file to WAL): the file keeps a hot journal."""
    done = await anyio.run_process(
        [sys.executable, "-c", DIE_MID_WRITE, str(path), create], check=False
    )
    assert done.returncode == -9
    assert Path(f"{path}-journal").stat().st_size > 0


async def test_a_file_left_mid_write_by_a_killed_process_opens(db_path: Path) -> None:
    await die_mid_write(db_path, "create table notes (body text)")
    async with amem.open(db_path) as mem:
        await mem.scope().submit_event("after the crash", role="user")
    assert value(db_path, "pragma user_version") == SCHEMA_VERSION
    assert value(db_path, "select count(*) from sqlite_master where name = 'notes'") == 0
    assert value(db_path, "select count(*) from events") == 1


async def test_a_foreign_file_left_mid_write_is_still_refused_as_foreign(db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    conn.execute("create table notes (body text)")
    conn.commit()
    conn.close()
    await die_mid_write(db_path, "select 1")
    with pytest.raises(amem.StorageError) as caught:
        async with amem.open(db_path):
            pass
    assert caught.value.code == "not_amem_database"
    assert value(db_path, "select count(*) from notes") == 0  # rolled back, kept


@pytest.mark.both_backends
async def test_concurrent_first_start_in_one_process_migrates_once(db_path: Path) -> None:
    receipts: list[amem.EventReceipt] = []

    async def start_and_write(n: int) -> None:
        async with amem.open(db_path) as mem:
            receipts.append(await mem.scope().submit_event(f"writer {n}", role="user"))

    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(start_and_write, n)
    assert len(receipts) == 4
    assert value(db_path, "pragma user_version") == SCHEMA_VERSION
    assert value(db_path, "select count(*) from events") == 4


async def test_missing_parent_directories_are_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "memory.db"
    async with amem.open(path) as mem:
        assert mem.path == str(path)
    assert path.exists()


async def test_v3_index_is_rebuilt_so_every_letter_is_found(db_path: Path) -> None:
    """Text indexed before v4 (whose tokenizer split New Tai Lue vowel letters away) is
    found by those letters after the upgrade, without being submitted again."""
    async with amem.open(db_path) as mem:
        await mem.scope("p", "q").submit_event("memo: ᦰᦱ and 杭州", role="user", event_id="e1")
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("drop table search_fts")  # the index as schema v3 built it
    for statement in (V3_FTS, "insert into search_fts (search_fts) values ('rebuild')"):
        conn.execute(statement)
    undo_v6(conn)
    conn.execute("pragma user_version = 3")
    conn.close()
    async with amem.open(db_path) as mem:
        assert value(db_path, "pragma user_version") == SCHEMA_VERSION
        for query in ("ᦰᦱ", "杭州"):
            hits = await mem.scope("p", "q").recall(query)
            assert [item.id for item in hits.items] == ["e1"], query


V3_FTS = MIGRATIONS[0][1][-1]  # search_fts as v1 created it; v4 recreates it


def test_every_letter_and_digit_is_one_token() -> None:
    """amem's segmented text separates tokens by spaces only; the FTS tokenizer must keep
    every character Python calls alphanumeric, or words made of them are lost."""
    conn = sqlite3.connect(":memory:")
    conn.execute(f'create virtual table t using fts5 (x, tokenize = "{FTS_TOKENIZER}")')
    chars = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    alnum = [char for char in chars if char.isalnum()]
    conn.executemany("insert into t (rowid, x) values (?, ?)", enumerate(alnum))
    lost = [
        char
        for n, char in enumerate(alnum)
        if not conn.execute(
            "select 1 from t where t match ? and rowid = ?", ('"' + char + '"', n)
        ).fetchone()
    ]
    assert lost == []


class MigratedMidCheck:
    """A read-only connection to a new file that another process migrates (its first step:
    the tables and version 1, in one commit) right after this connection's first
    statement, as a process starting at the same moment does."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        self.statements = 0

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        cursor = self.conn.execute(sql, *args)
        self.statements += 1
        if self.statements == 1:
            other = sqlite3.connect(self.path, isolation_level=None)
            other.execute("begin immediate")
            for statement in MIGRATIONS[0][1]:
                other.execute(statement)
            other.execute("pragma user_version = 1")
            other.execute("commit")
            other.close()
        return cursor

    def close(self) -> None:
        self.conn.close()


def test_a_new_file_another_process_migrates_meanwhile_is_not_called_foreign(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sqlite3.connect(db_path).execute("pragma journal_mode = wal").close()  # new, not empty
    monkeypatch.setattr(schema, "open_sqlite", lambda path, readonly: MigratedMidCheck(db_path))
    schema.check_existing(db_path)  # version and tables read together: one snapshot
    assert value(db_path, "pragma user_version") == 1
