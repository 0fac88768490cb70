"""What is PostgreSQL's own: erased text leaving the table files after the documented
vacuum, a URL's password never shown, a server that cannot be reached, a database that
holds someone else's tables, and the rewrites that let SQLite's SQL run there. What both
databases share is tested once for both (the ``both_databases`` marker)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from helpers import memory_draft
from pg_cluster import Cluster, free_port

import amem
from amem.db.postgres import spelling

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]  # see tests/conftest.py

DOCS = Path(__file__).parent.parent / "docs" / "postgres.md"
SECRET = "Zanzibar7731 我的秘密暗号是青龙偃月刀"


def erasure_sql() -> list[str]:
    """The statements of the SQL block under the docs' "Erasure" heading."""
    section = DOCS.read_text().split("\n## Erasure\n", 1)[1]
    block = re.search(r"```sql\n(.*?)```", section, re.DOTALL)
    assert block is not None, "docs/postgres.md shows the erasure's SQL"
    return [s.strip() for s in block.group(1).split(";") if s.strip()]


def table_files(cluster: Cluster, url: str) -> bytes:
    """Every file of the database's directory under the cluster's ``base``, as one byte
    string: its tables, indexes and TOAST, after a checkpoint wrote them out."""
    dbname = urlsplit(url).path.lstrip("/")
    cluster.sql("checkpoint")
    [(oid,)] = cluster.sql(f"select oid from pg_database where datname = '{dbname}'")
    folder = cluster.data_dir / "base" / str(oid)
    return b"".join(path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file())


async def test_erased_text_leaves_the_table_files_after_the_documented_vacuum(
    pg_cluster: Cluster, pg_url: str
) -> None:
    async with amem.open(pg_url) as mem:
        scope = mem.scope()
        await scope.submit_event(f"Remember this: {SECRET}", role="user", event_id="secret")
        await scope.add_memories(
            "secret", [memory_draft(f"User's password hint is {SECRET}", SECRET)]
        )
        for n in range(50):  # neighbours in the same pages, which must survive
            await scope.submit_event(f"ordinary note {n}", role="user")
        stored = table_files(pg_cluster, pg_url)
        assert SECRET.encode() in stored  # the scan sees stored text
        assert b"zanzibar7731" in stored  # and the index's term
        await scope.delete(event_id="secret")
    dbname = urlsplit(pg_url).path.lstrip("/")
    for statement in erasure_sql():
        pg_cluster.sql(statement, dbname=dbname)
    data = table_files(pg_cluster, pg_url)
    for needle in (SECRET, "Zanzibar7731", "zanzibar7731", "青龙偃月刀", "password hint"):
        assert needle.encode() not in data, needle
    assert b"ordinary note 49" in data


async def test_the_password_is_never_shown(pg_cluster: Cluster, pg_url: str) -> None:
    # the tests' cluster trusts 127.0.0.1, so any password opens it: enough to check
    # that none is shown, from a working database and from one that cannot be reached
    url = pg_url.replace("postgres@", "postgres:hunter2secret@")
    async with amem.open(url) as mem:
        assert mem.path == pg_url
        assert "hunter2secret" not in repr(await mem.scope().status())
    closed = url.replace(f":{pg_cluster.port}/", f":{free_port()}/")
    with pytest.raises(amem.StorageError) as refused:
        async with amem.open(closed):
            pass
    assert refused.value.code == "database_unreachable"
    assert "hunter2secret" not in str(refused.value)
    assert "hunter2secret" not in repr(refused.value.__cause__)


async def test_a_server_that_does_not_answer_is_unreachable(pg_cluster: Cluster) -> None:
    url = f"postgresql://postgres@127.0.0.1:{pg_cluster.port}/no_such_database"
    with pytest.raises(amem.StorageError) as refused:
        async with amem.open(url):
            pass
    assert refused.value.code == "database_unreachable"


async def test_a_database_with_other_tables_is_refused_untouched(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("create table invoices (id integer primary key)")
    with pytest.raises(amem.StorageError) as refused:
        async with amem.open(pg_url):
            pass
    assert refused.value.code == "not_amem_database"
    with psycopg.connect(pg_url) as conn:
        tables = conn.execute(
            "select tablename from pg_tables where schemaname = current_schema()"
        ).fetchall()
    assert tables == [("invoices",)]


async def test_processes_opening_a_new_database_migrate_it_once(pg_url: str) -> None:
    async with amem.open(pg_url) as first, amem.open(pg_url) as second:
        await first.scope().submit_event("one", role="user", event_id="a")
        await second.scope().submit_event("two", role="user", event_id="b")
        assert (await second.scope().read("a")).text == "one"
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("select version from amem_schema").fetchall() == [
            (amem.db.schema.SCHEMA_VERSION,)
        ]


@pytest.mark.parametrize(
    ("sqlite", "postgresql"),
    [
        ("select max(a, b), max(c) from t", "select greatest(a, b), max(c) from t"),
        ("select min(x, (1)) from t", "select least(x, (1)) from t"),
        (
            "where a is ? and b is not :b",
            "where a is not distinct from %s and b is distinct from %(b)s",
        ),
        ("where a is null and b is not null", "where a is null and b is not null"),
        ("where m.a is e.b", "where m.a is not distinct from e.b"),
        (
            "from json_each(m.about) where",
            "from json_array_elements_text(cast(m.about as json)) where",
        ),
        ("select length(cast(text as blob))", "select length(convert_to(text, 'UTF8'))"),
        ("select group_concat(id, ' ')", "select string_agg(id, ' ')"),
        ("select a || char(31) || b", "select a || chr(31) || b"),
        (
            "insert or ignore into t (a) values (?)",
            "insert into t (a) values (%s) on conflict do nothing",
        ),
        (
            "select 1 from t not indexed where a like 'x%' and b = ?",
            "select 1 from t  where a like 'x%%' and b = %s",
        ),
        ("select ':name?' where a = :a", "select ':name?' where a = %(a)s"),
        (
            "insert into events (id) values (?) on conflict (id) do nothing",
            "insert into events (id) values (%s) on conflict (id) do nothing returning seq",
        ),
        (
            "insert into t (a) values (?)\nreturning num",
            "insert into t (a) values (%s)\nreturning num",
        ),
    ],
)
def test_sqlite_sql_is_spelled_for_postgresql(sqlite: str, postgresql: str) -> None:
    assert spelling(sqlite) == postgresql
