"""A throwaway PostgreSQL cluster for the tests: ``initdb`` in a temporary directory, one
server on a free port of 127.0.0.1 (trust authentication, no durability), stopped and
removed afterwards.

The binaries come from ``PATH`` or else from the newest ``/usr/lib/postgresql/*/bin``
(Debian's ``postgresql`` package; ``.ci/run`` installs it). PostgreSQL refuses to run as
root, so under root (as in CI) ``initdb`` and the server run as the ``postgres`` user the
package creates.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INSTALL_POSTGRESQL = (
    "the PostgreSQL tests need a PostgreSQL server's binaries (initdb, pg_ctl, postgres, psql): "
    "apt-get install -y --no-install-recommends postgresql (.ci/run does this on a fresh machine)"
)

# Debian installs each major version side by side: /usr/lib/postgresql/15/bin, ...
DEBIAN_BINS = Path("/usr/lib/postgresql")

SUPERUSER = "postgres"
MIGRATED = "amem_migrated_template"
OS_USER = "postgres"  # who runs the server when the tests run as root

# Tests need speed, not durability; 200 connections leave room for many processes at once.
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}

# A watcher in a session of its own (Ctrl-C does not reach it): when its stdin closes, however
# pytest ended (pytest-timeout's os._exit, kill -9), it stops the server and removes the
# directory, so no server outlives the tests. A normal teardown closes its stdin too.
REAPER = 'root=$1; shift; read -r _; "$@" >/dev/null 2>&1; rm -rf -- "$root"'


class PostgresMissing(RuntimeError):
    """No PostgreSQL binaries, or no user to run them as."""


@dataclass(frozen=True)
class Cluster:
    """A running cluster: ``SUPERUSER`` may connect over TCP to ``127.0.0.1:port``
    without a password."""

    pg_bin: Path
    data_dir: Path
    port: int

    def dsn(self, dbname: str) -> str:
        """The URL of database ``dbname``, as the superuser."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str, *, template: str | None = None) -> str:
        """Create database ``name``, empty or a copy of database ``template``; its URL."""
        copied = "" if template is None else f' template "{template}"'
        self.sql(f'create database "{name}"{copied}')
        return self.dsn(name)

    def migrated_template(self) -> str:
        """A database holding amem's current schema and no rows, made once per cluster:
        copying it (a file copy) takes a tenth of the time migrating a new one does."""
        if not self.sql(f"select 1 from pg_database where datname = '{MIGRATED}'"):
            from amem.db import pg_schema
            from amem.db.postgres import PgConnection

            url = self.create_database(MIGRATED)
            conn = PgConnection.connect(url, readonly=False)
            try:
                pg_schema.migrate(conn)
            finally:
                conn.close()
        return MIGRATED

    def drop_database(self, name: str) -> None:
        """Drop database ``name``, closing whatever connections are still open on it."""
        self.sql(f'drop database if exists "{name}" with (force)')

    def sql(self, statement: str, *, dbname: str = "postgres") -> list[tuple[Any, ...]]:
        """Run one statement as the superuser, outside a transaction (``create database``
        and ``vacuum`` need that); the rows it returns."""
        import psycopg  # importing it takes 0.4 s: only runs that use PostgreSQL pay it

        with psycopg.connect(self.dsn(dbname), autocommit=True) as conn:
            # bytes: psycopg's types take a str query only as a literal
            cursor = conn.execute(statement.encode())
            return cursor.fetchall() if cursor.description else []

    def psql(self, *args: str, dbname: str = "postgres") -> str:
        """Run ``psql`` as the superuser on ``dbname`` with ``args`` (``-c``, ``-f``, ...),
        stopping at the first error; what it printed."""
        command = [str(self.pg_bin / "psql"), "-X", "-v", "ON_ERROR_STOP=1", self.dsn(dbname)]
        return subprocess.run([*command, *args], capture_output=True, text=True, check=True).stdout


def find_pg_bin() -> Path:
    """The directory holding ``initdb``, ``pg_ctl``, ``postgres`` and ``psql``."""
    needed = ("initdb", "pg_ctl", "postgres", "psql")
    on_path = shutil.which("initdb")
    # Resolved: a symlink on PATH leads to the directory the rest of the binaries share.
    candidates = [Path(on_path).resolve().parent] if on_path else []
    installed = DEBIAN_BINS.glob("*/bin")
    versions = sorted(installed, key=lambda d: [int(n) for n in re.findall(r"\d+", d.parent.name)])
    candidates += reversed(versions)
    for directory in candidates:
        if all(os.access(directory / name, os.X_OK) for name in needed):
            return directory
    raise PostgresMissing(INSTALL_POSTGRESQL)


def as_server_user() -> list[str]:
    """The prefix that runs a command as the server's user: none unless we are root."""
    if os.geteuid() != 0:
        return []
    if shutil.which("runuser") is None:
        raise PostgresMissing("running the tests as root needs runuser (util-linux)")
    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        raise PostgresMissing(
            f"PostgreSQL refuses to run as root and there is no {OS_USER!r} user to run it as: "
            f"{INSTALL_POSTGRESQL}"
        ) from None
    return ["runuser", "-u", OS_USER, "--"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(command: list[str], *, cwd: Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")


@contextmanager
def running_cluster() -> Iterator[Cluster]:
    """Start a fresh cluster; stop it and remove its directory when the block ends."""
    pg_bin = find_pg_bin()
    prefix = as_server_user()
    root = Path(tempfile.mkdtemp(prefix="amem-pg-"))
    data_dir = root / "data"
    pg_ctl = [*prefix, str(pg_bin / "pg_ctl"), "--pgdata", str(data_dir)]
    reaper = subprocess.Popen(
        ["sh", "-c", REAPER, "sh", str(root), *pg_ctl, "stop", "--mode=immediate"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        if prefix:
            shutil.chown(root, user=OS_USER, group=OS_USER)
        # Commands run in root: the server's user may not enter our working directory.
        initdb = [str(pg_bin / "initdb"), "--pgdata", str(data_dir), "--username", SUPERUSER]
        options = ["--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"]
        run([*prefix, *initdb, *options], cwd=root)
        settings = {**SETTINGS, "unix_socket_directories": str(root)}
        with (data_dir / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{name} = '{value}'\n" for name, value in settings.items())
        port = start(pg_ctl, root=root)
        yield Cluster(pg_bin=pg_bin, data_dir=data_dir, port=port)
    finally:
        assert reaper.stdin is not None
        reaper.stdin.close()
        reaper.wait(timeout=120)


def start(pg_ctl: list[str], *, root: Path) -> int:
    """Start the server on a free port and wait until it accepts connections; the port."""
    for attempt in range(5):
        port = free_port()
        log = root / f"server-{attempt}.log"
        command = [*pg_ctl, "--log", str(log), "--options", f"-p {port}", "--wait", "start"]
        done = subprocess.run(command, cwd=root, capture_output=True, text=True)
        if done.returncode == 0:
            return port
        said = log.read_text(errors="replace") if log.exists() else ""
        # Another process may take the port between our probe and the server's bind.
        if "already in use" not in said:
            break
    raise RuntimeError(f"PostgreSQL did not start:\n{done.stdout}{done.stderr}{said}")
