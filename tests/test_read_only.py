"""A database on read-only storage (a mounted snapshot, a write-protected stick): amem says
``read_only`` instead of "not a SQLite database", and ``restore`` loads it into a new file.

The storage is made read-only for real: the child process runs in its own mount namespace
(``unshare``, as root or as a user with user namespaces) where the folder is bind-mounted
read-only. The test fails, never skips, where that cannot be done.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

import amem

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]  # see tests/conftest.py


def on_read_only_storage(folder: Path, *command: str | Path) -> subprocess.CompletedProcess[str]:
    """Run ``amem COMMAND`` with ``folder`` mounted read-only for that process alone."""
    unshare = shutil.which("unshare")
    assert unshare, "the read-only tests need util-linux's unshare"
    amem_command = " ".join(f"'{part}'" for part in (sys.executable, "-m", "amem", *command))
    script = (
        f"mount --bind '{folder}' '{folder}' && mount -o remount,bind,ro '{folder}' && "
        f"touch '{folder}/probe' 2>/dev/null && exit 99; exec {amem_command}"
    )
    done = subprocess.run(
        [unshare, "--map-root-user", "--mount", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 99, "the folder was still writable inside the namespace"
    return done


async def stored_database(folder: Path) -> Path:
    folder.mkdir()
    path = folder / "memory.db"
    async with amem.open(path) as mem:
        await mem.scope().submit_event("I moved to Hangzhou", role="user", event_id="m-1")
    return path


async def test_opening_a_database_on_read_only_storage_says_read_only(tmp_path: Path) -> None:
    path = await stored_database(tmp_path / "ro")
    done = on_read_only_storage(path.parent, "recall", "Hangzhou", "--db", path)
    assert done.returncode != 0
    assert "read_only" in done.stderr, done.stderr
    assert "not_a_database" not in done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in path.parent.iterdir()) == ["memory.db"]


async def test_a_database_on_read_only_storage_restores_into_a_new_file(tmp_path: Path) -> None:
    path = await stored_database(tmp_path / "ro")
    copy = tmp_path / "copy.db"
    done = on_read_only_storage(path.parent, "restore", path, "--db", copy)
    assert done.returncode == 0, done.stderr
    async with amem.open(copy) as mem:
        assert [item.id for item in (await mem.scope().recall("Hangzhou")).items] == ["m-1"]


async def test_a_write_ahead_log_on_read_only_storage_is_named_not_ignored(
    tmp_path: Path,
) -> None:
    """``immutable`` reads would skip a ``-wal`` that still holds commits: refuse instead."""
    path = await stored_database(tmp_path / "ro")
    with closing(sqlite3.connect(path)) as conn:  # a writer that never checkpointed
        conn.execute("pragma wal_autocheckpoint = 0")
        conn.execute("update events set source = 'later' where id = 'm-1'")
        conn.commit()
        shutil.copy(f"{path}-wal", tmp_path / "wal")
    shutil.copy(tmp_path / "wal", f"{path}-wal")
    done = on_read_only_storage(path.parent, "restore", path, "--db", tmp_path / "copy.db")
    assert done.returncode != 0
    assert "read_only" in done.stderr, done.stderr
    assert "-wal" in done.stderr
