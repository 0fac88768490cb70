"""Which event loops an async test runs on, and the fixtures most tests share.

An async test runs on asyncio and on trio where the backend can change the outcome: the
database drivers and the writer actor, cancellation and timeouts, the MCP server, the agent
loop (``AgentSession``), the framework adapters, the embedding and extraction pipelines,
capture, durability and kill tests, and several processes sharing one file. Those are built
on anyio's primitives, whose scheduling, cancellation and thread hand-offs differ between
the two loops; a bug there shows on one backend only.

A module (or a test) marked ``one_backend`` checks logic the event loop cannot change:
ranking, tokenizing, input validation, temporal rules, what SQL returns, the docs, the
command line's argument handling, the inspector's HTML. It runs on asyncio only; running
it on trio as well would only run the same code twice. In such a module a test marked
``both_backends`` (e.g. one that drives the MCP server) still runs on both.

A test that parametrizes ``anyio_backend`` itself (an SDK that runs on asyncio only) keeps
its own list. A missing trio fails the run, never skips it.
"""

from __future__ import annotations

import inspect
import os
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio  # noqa: F401  (imported so a missing trio is an error, never a skip)
from helpers import inspector_client
from pg_cluster import Cluster, PostgresMissing, running_cluster

import amem

if TYPE_CHECKING:
    import httpx

BACKENDS = ("asyncio", "trio")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``--numprocesses=auto`` (the default in pyproject.toml): half as many workers again
    as the cores this process may run on. Many tests spend seconds waiting on another
    process (a server draining, a child killed, a client that reads nothing), and a third
    worker on 2 cores runs other tests meanwhile: the suite took 6:25 with 2 workers and
    5:45 with 3 on one machine."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(2, (cores or 1) * 3 // 2)


def backends_for(definition: pytest.Function) -> tuple[str, ...]:
    """The backends a test runs on: both, unless it is marked ``one_backend`` (and not
    ``both_backends``)."""
    if definition.get_closest_marker("both_backends") is not None:
        return BACKENDS
    if definition.get_closest_marker("one_backend") is not None:
        return BACKENDS[:1]
    return BACKENDS


DATABASES = ("sqlite", "postgresql")


def runs_on_both_databases(metafunc: pytest.Metafunc) -> bool:
    """A test marked ``both_databases`` that opens its memory with ``mem`` or ``target``;
    one that also takes ``db_path`` itself reads the SQLite file beside amem, so it stays
    on SQLite, as does one marked ``sqlite_only`` (what it tests is the file's)."""
    definition = metafunc.definition
    if definition.get_closest_marker("both_databases") is None:
        return False
    if definition.get_closest_marker("sqlite_only") is not None:
        return False
    own = inspect.signature(metafunc.function).parameters
    opens = "mem" in metafunc.fixturenames or "target" in metafunc.fixturenames
    return opens and "db_path" not in own


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if runs_on_both_databases(metafunc):
        metafunc.parametrize("database", DATABASES, indirect=True)
    if "anyio_backend" not in metafunc.fixturenames:
        return
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0]
        if isinstance(names, str):
            names = [name.strip() for name in names.split(",")]
        if "anyio_backend" in names:
            return  # the test names its backends itself
    metafunc.parametrize("anyio_backend", backends_for(metafunc.definition), indirect=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test on PostgreSQL runs on asyncio only, unless it is marked ``both_backends``:
    what differs between the databases is SQL, which the event loop cannot change, while
    the driver's hand-offs under each loop are tested where it matters (cancellation,
    processes, kill -9), marked so."""
    dropped = [item for item in items if postgres_on_trio_alone(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item not in dropped]


def postgres_on_trio_alone(item: pytest.Item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return (
        params.get("database") == "postgresql"
        and params.get("anyio_backend") == "trio"
        and item.get_closest_marker("both_backends") is None
    )


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
def database(request: pytest.FixtureRequest) -> str:
    """Which database ``mem`` opens: a test marked ``both_databases`` runs on a SQLite
    file and on a fresh PostgreSQL database; any other test on a SQLite file."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def target(database: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A database no process has opened yet, as ``amem.open`` takes it: a path where no
    file is yet, or the URL of an empty PostgreSQL database."""
    if database == "postgresql":
        return str(request.getfixturevalue("pg_url"))
    return str(tmp_path / "fresh" / "memory.db")


@pytest.fixture
async def mem(
    database: str, db_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[amem.Memory]:
    where: str | Path = db_path
    if database == "postgresql":  # the test's own empty database if it asks for one
        given = "pg_url" if "pg_url" in request.fixturenames else "migrated_pg_url"
        where = request.getfixturevalue(given)
    async with amem.open(where, settings=amem.Settings()) as memory:
        yield memory


@pytest.fixture
def scope(mem: amem.Memory) -> amem.Scope:
    return mem.scope(persona="assistant", project="support")


@pytest.fixture
async def client(sample: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The inspector's app over ``sample.path``, through an HTTP client in process: for a
    module whose own ``sample`` fixture fills a database file to inspect."""
    async with inspector_client(sample.path) as client:
        yield client


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """A throwaway PostgreSQL cluster (tests/pg_cluster.py), one per worker process.
    Without PostgreSQL installed the tests that use it fail, never skip."""
    try:
        with running_cluster() as cluster:
            yield cluster
    except PostgresMissing as missing:
        # from None: the message is the whole story, not a traceback of the search
        raise pytest.fail.Exception(str(missing), pytrace=False) from None


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> Iterator[str]:
    """The URL of a new, empty database in ``pg_cluster``, dropped after the test."""
    name = f"test_{secrets.token_hex(4)}"
    yield pg_cluster.create_database(name)
    pg_cluster.drop_database(name)


@pytest.fixture
def migrated_pg_url(pg_cluster: Cluster) -> Iterator[str]:
    """The URL of a new database that already holds amem's current schema (a copy of
    ``Cluster.migrated_template``): what ``mem`` opens on PostgreSQL, unless the test
    takes ``pg_url`` (an empty one) itself."""
    name = f"test_{secrets.token_hex(4)}"
    yield pg_cluster.create_database(name, template=pg_cluster.migrated_template())
    pg_cluster.drop_database(name)
