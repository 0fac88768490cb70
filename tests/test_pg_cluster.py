"""The PostgreSQL fixtures the PostgreSQL tests stand on (tests/pg_cluster.py)."""

from __future__ import annotations

import psycopg
import pytest
from pg_cluster import Cluster

pytestmark = pytest.mark.one_backend

USER_TABLES = (
    "select table_name from information_schema.tables"
    " where table_schema not in ('pg_catalog', 'information_schema')"
)


@pytest.mark.parametrize("turn", [1, 2])
def test_each_test_gets_a_fresh_empty_database(pg_url: str, turn: int) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute(USER_TABLES).fetchall() == []
        # The other turn, in the same cluster, must not see this table.
        conn.execute("create table events (id bigint primary key)")


def test_databases_are_utf8_with_bytewise_order_and_room_for_many_clients(
    pg_url: str, pg_cluster: Cluster
) -> None:
    with psycopg.connect(pg_url) as conn:
        encoding, collation = conn.execute(
            "select pg_encoding_to_char(encoding), datcollate from pg_database"
            " where datname = current_database()"
        ).fetchone() or (None, None)
        assert (encoding, collation) == ("UTF8", "C")  # text sorts by bytes, as in SQLite
        assert conn.execute("show max_connections").fetchone() == ("200",)
    assert pg_cluster.sql("select current_setting('listen_addresses')") == [("127.0.0.1",)]
