"""The command line and ``amem serve`` on PostgreSQL: ``--db`` and ``$AMEM_DB`` take a
``postgresql://`` URL for every command that opens a memory; a password in it is never
shown; a command that only reads never creates amem's tables; the commands that run on a
SQLite file only refuse a URL, naming what to do instead. The command line runs in this
process (``helpers.amem_cli``) on both event loops (``--backend``); ``amem serve`` runs as
a real process, driven by the MCP SDK's client (``mcp_client``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import pytest
from helpers import amem_cli, cli_ok
from mcp_client import (
    INITIALIZED,
    PERSONA,
    PROJECT,
    SPEC_ARGS,
    connect,
    initialize,
    ok,
    other,
    raw_server,
)
from pg_cluster import Cluster

import amem
from amem.cli.options import SQLITE_ONLY
from amem.db.schema import SCHEMA_VERSION

PASSWORD = "s3cret-pw-7731"
"""Put into every URL (the test cluster trusts local connections and ignores it); nothing
amem prints may contain it."""
ONE_ERROR_LINE = re.compile(r"amem: error: [a-z_]+: [^\n]+\n")


GIVEN_AS = ["--db", "AMEM_DB"]


def with_password(url: str) -> str:
    return url.replace("://postgres@", f"://postgres:{PASSWORD}@", 1)


@pytest.fixture
def url(pg_url: str) -> str:
    """A new database's URL, with a password in it."""
    return with_password(pg_url)


@pytest.fixture(params=GIVEN_AS)
def how(request: pytest.FixtureRequest) -> str:
    """How a command is given the URL: the option or the environment variable."""
    return str(request.param)


@pytest.fixture(params=["asyncio", "trio"])
def backend(request: pytest.FixtureRequest) -> str:
    """The event loop the command line runs on (``--backend``)."""
    return str(request.param)


def pg(url: str, how: str, *words: str, backend: str = "asyncio") -> tuple[int, str, str]:
    """``amem WORDS`` on the database at ``url``, given as ``--db`` or as ``$AMEM_DB``
    (``how``); its exit status, stdout and stderr, none of which shows the password."""
    db = ["--db", url] if how == "--db" else []
    env = {"AMEM_DB": url} if how == "AMEM_DB" else None
    ran = amem_cli(*words, *db, "--backend", backend, env=env)
    assert PASSWORD not in ran.stdout + ran.stderr
    return ran.returncode, ran.stdout, ran.stderr


def pg_ok(url: str, how: str, *words: str, backend: str = "asyncio") -> str:
    status, out, err = pg(url, how, *words, backend=backend)
    assert status == 0, err
    assert "error" not in err
    return out


def tables(cluster: Cluster, url: str) -> list[str]:
    """The tables of the database at ``url``."""
    dbname = url.rsplit("/", 1)[1]
    found = cluster.sql(
        "select tablename from pg_tables where schemaname = 'public'", dbname=dbname
    )
    return sorted(name for (name,) in found)


# --- the command line ---------------------------------------------------------------------


def test_reading_commands_never_create_amem_tables_in_postgresql(
    pg_cluster: Cluster, url: str, how: str, backend: str
) -> None:
    for words in (
        ["status"],
        ["list"],
        ["list", "scopes"],
        ["recall", "Hangzhou"],
        ["read", "evt-1"],
        ["people"],
        ["persona", "show"],
        ["erase", "--session", "s-1"],  # a preview
    ):
        status, out, err = pg(url, how, *words, backend=backend)
        assert status == 1, words
        assert ONE_ERROR_LINE.fullmatch(err), err
        assert err.startswith(
            f"amem: error: no_database: no amem tables in the PostgreSQL database at the "
            f"{'--db' if how == '--db' else '$AMEM_DB'} URL; this command only reads"
        ), err
        assert out == ""
    assert tables(pg_cluster, url) == []


def test_personas_people_and_limits_are_kept_in_postgresql(
    url: str, how: str, backend: str
) -> None:
    pg_ok(url, how, "persona", "set", "You are a patient tutor.", backend=backend)
    assert "You are a patient tutor." in pg_ok(url, how, "persona", "show", backend=backend)
    assert "v1" in pg_ok(url, how, "persona", "history", backend=backend)
    added = pg_ok(url, how, "people", "add", "Ada", "--alias", "阿达", backend=backend)
    person = added.split()[1].rstrip(":")
    assert person in pg_ok(url, how, "people", "find", "阿达", backend=backend)
    assert "Ada" in pg_ok(url, how, "people", "list", backend=backend)
    limits = pg_ok(url, how, "limits", "--max-events", "100", backend=backend)
    assert "0 of 100 events" in limits
    assert pg_ok(url, how, "list", "scopes", backend=backend).startswith("(no scope")


def test_status_on_postgresql_shows_the_database_size_and_no_file_figures(
    url: str, how: str
) -> None:
    pg_ok(url, how, "limits", "--max-events", "100")  # creates the tables
    status = pg_ok(url, how, "status")
    assert f"schema version {SCHEMA_VERSION}" in status
    last = status.splitlines()[-1]
    assert re.fullmatch(r"database: [\d,]+ bytes \(the whole PostgreSQL database\)", last), last
    assert "WAL" not in status
    assert "free pages" not in status
    capacity = json.loads(pg_ok(url, how, "status", "--json"))["capacity"]
    assert capacity["file_bytes"] == int(last.split()[1].replace(",", ""))
    assert capacity["file_bytes"] > 1_000_000  # a PostgreSQL database is some MB at least
    assert (capacity["wal_bytes"], capacity["free_bytes"]) == (0, 0)
    assert pg_ok(url, how, "limits").splitlines()[-1] == last


def test_events_and_memories_through_the_command_line_on_postgresql(
    url: str, how: str, backend: str
) -> None:
    run = {"backend": backend}
    pg_ok(
        url, how, "submit", "我最近在读《三体》。", "--event-id", "zh-1", "--session", "s-1", **run
    )
    remembered = pg_ok(
        url,
        how,
        "remember",
        "I live in Hangzhou now",
        "--subject",
        "user",
        "--fact-key",
        "residence",
        "--json",
        **run,
    )
    memory_id = json.loads(remembered)["memory"]["id"]
    assert memory_id in pg_ok(url, how, "recall", "Hangzhou", **run)
    assert "《三体》" in pg_ok(url, how, "recall", "三体", **run)  # the raw event
    assert "I live in Hangzhou now" in pg_ok(url, how, "list", **run)
    events = pg_ok(url, how, "list", "events", **run)
    assert events.startswith("2 events in default/default")
    assert pg_ok(url, how, "read", "zh-1", **run).strip().endswith("我最近在读《三体》。")
    pg_ok(url, how, "pin", memory_id, **run)
    assert "[pinned]" in pg_ok(url, how, "list", **run)
    pg_ok(url, how, "consolidate", **run)  # a preview
    status = pg_ok(url, how, "status", **run)
    assert "events: 2 " in status
    assert "memories: 1 current" in status


def test_commands_that_run_on_a_sqlite_file_only_refuse_postgresql(
    pg_cluster: Cluster, url: str, tmp_path: Path
) -> None:
    arguments: dict[str, list[str]] = {"inspect": [], "demo": []}
    assert set(arguments) == set(SQLITE_ONLY)
    for how in ("--db", "AMEM_DB"):
        for command, words in arguments.items():
            if command == "demo" and how == "AMEM_DB":
                continue  # the demo never reads $AMEM_DB: its database is always new
            db = ["--db", url] if how == "--db" else []
            env = {"AMEM_DB": url} if how == "AMEM_DB" else None
            ran = amem_cli(command, *words, *db, cwd=tmp_path, env=env)
            assert ran.returncode == 1, command
            assert ONE_ERROR_LINE.fullmatch(ran.stderr), ran.stderr
            assert ran.stderr.startswith(
                f"amem: error: unsupported_database: amem {command} runs on a SQLite file "
                f"only, not on PostgreSQL; {SQLITE_ONLY[command]}"
            ), ran.stderr
            assert PASSWORD not in ran.stderr
            assert ran.stdout == ""
    assert list(tmp_path.iterdir()) == []
    assert tables(pg_cluster, url) == []


def test_an_export_from_postgresql_imports_into_a_file_and_back(
    url: str, pg_cluster: Cluster, tmp_path: Path
) -> None:
    pg_ok(url, "--db", "submit", "我最近在读《三体》。", "--event-id", "zh-1")
    pg_ok(url, "--db", "remember", "I live in Hangzhou now", "--subject", "user")
    archive, copy = tmp_path / "memory.jsonl", tmp_path / "copy.db"
    pg_ok(url, "--db", "export", str(archive))
    assert amem_cli("import", str(archive), "--db", str(copy)).returncode == 0
    assert "I live in Hangzhou now" in amem_cli("list", "--db", str(copy)).stdout
    again = with_password(pg_cluster.create_database(f"{url.rsplit('/', 1)[1]}_again"))
    pg_ok(again, "AMEM_DB", "import", str(archive))
    assert pg_ok(again, "AMEM_DB", "read", "zh-1").strip().endswith("我最近在读《三体》。")
    assert "ok" in pg_ok(again, "AMEM_DB", "doctor")


def test_the_demo_does_not_read_a_postgresql_amem_db(pg_cluster: Cluster, url: str) -> None:
    out = cli_ok("demo", env={"AMEM_DB": url})
    assert out.startswith("amem demo: a fresh database at ")
    assert out.splitlines()[0].endswith("demo.db")
    assert tables(pg_cluster, url) == []


def test_an_unreachable_postgresql_server_is_one_error_line_without_the_password() -> None:
    url = f"postgresql://amem:{PASSWORD}@127.0.0.1:1/memory"  # nothing listens on port 1
    for words in (["status"], ["submit", "hello"]):
        for how in GIVEN_AS:
            status, out, err = pg(url, how, *words)
            assert status == 1
            assert ONE_ERROR_LINE.fullmatch(err), err
            assert err.startswith("amem: error: database_unreachable: "), err
            assert out == ""


# --- amem serve ---------------------------------------------------------------------------


def draft(text: str, quote: str, **fields: str) -> dict[str, str]:
    return {"text": text, "quote": quote, "kind": "fact", "basis": "user_statement", **fields}


@pytest.mark.anyio
async def test_a_host_starts_amem_serve_on_postgresql_then_stores_and_recalls(
    anyio_backend: str, url: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    async with connect(url, other(anyio_backend), log) as session:
        listed = await session.list_tools()
        assert {tool.name for tool in listed.tools} == set(SPEC_ARGS)
        status = await ok(session, "memory_status")
        assert (status["persona"], status["project"]) == (PERSONA, PROJECT)
        assert status["schema_version"] == SCHEMA_VERSION
        assert sum(status["events"].values()) == 0
        capacity = status["capacity"]
        assert capacity["file_bytes"] > 0
        assert (capacity["wal_bytes"], capacity["free_bytes"]) == (0, 0)
        person = await ok(session, "person_upsert", display_name="Ada")
        people = await ok(session, "person_list")
        assert [p["id"] for p in people["people"]] == [person["id"]]
        listed_memories = await ok(session, "memory_list")
        assert listed_memories["total"] == 0
        receipt = await ok(
            session,
            "event_submit",
            text="I moved to Hangzhou last spring.",
            role="user",
            event_id="en-1",
        )
        assert (receipt["status"], receipt["duplicate"]) == ("stored", False)
        added = await ok(
            session,
            "memory_add",
            event_id="en-1",
            memories=[draft("User lives in Hangzhou", "I moved to Hangzhou", subject="user")],
        )
        [memory_id] = added["memory_ids"]
        listed = await ok(session, "memory_list")
        assert [item["id"] for item in listed["items"]] == [memory_id]
        status = await ok(session, "memory_status")
        assert sum(status["events"].values()) == 1
        assert status["memories"] == 1
        hits = await ok(session, "memory_recall", query="Hangzhou")
        assert memory_id in [item["id"] for item in hits["items"]]
    assert PASSWORD not in log.read_text()


EVENTS_PER_SERVER = 40


@pytest.mark.anyio
async def test_two_servers_write_to_one_postgresql_database_at_once_and_lose_nothing(
    anyio_backend: str, url: str, tmp_path: Path
) -> None:
    """One server on each event loop, started together on a database with no tables yet
    (both migrate it), each taking a burst of concurrent event_submit calls."""
    acked: dict[str, int] = {}

    async def host(name: str, backend: str) -> None:
        async with connect(url, backend, tmp_path / f"{name}.log") as session:

            async def submit(n: int) -> None:
                event_id = f"{name}-{n}"
                receipt = await ok(
                    session,
                    "event_submit",
                    text=f"note {n} from {name}",
                    role="user",
                    event_id=event_id,
                )
                acked[event_id] = receipt["seq"]

            async with anyio.create_task_group() as tg:
                for n in range(EVENTS_PER_SERVER):
                    tg.start_soon(submit, n)

    async with anyio.create_task_group() as tg:
        tg.start_soon(host, "a", "asyncio")
        tg.start_soon(host, "b", "trio")

    assert len(acked) == 2 * EVENTS_PER_SERVER
    assert len(set(acked.values())) == len(acked), "two acknowledged events share a seq"
    async with amem.open(url, settings=amem.Settings()) as memory:
        scope = memory.scope(PERSONA, PROJECT)
        listed = await scope.list("events", limit=500)
        assert listed.total == len(acked)
        stored = {item.id: item.seq for item in listed.items}
        assert stored == acked
    for name in ("a", "b"):
        assert PASSWORD not in (tmp_path / f"{name}.log").read_text()


@pytest.mark.anyio
async def test_serve_on_an_unreachable_postgresql_server_exits_without_showing_the_password(
    anyio_backend: str, tmp_path: Path
) -> None:
    url = f"postgresql://amem:{PASSWORD}@127.0.0.1:1/memory"  # nothing listens on port 1
    log = tmp_path / "server.log"
    extra = ("--log-level", "DEBUG")
    async with raw_server(url, other(anyio_backend), log, extra_args=extra) as wire:
        init_id, init = initialize(wire)
        _, tools_list = wire.request("tools/list")
        await wire.send(init, INITIALIZED, tools_list)
        assert "result" in await wire.response(init_id)  # answered before the database opens
        assert await wire.exit_status() == 1
        wire.assert_only_jsonrpc()
    said = log.read_text()
    assert "database_unreachable" in said
    assert PASSWORD not in said
