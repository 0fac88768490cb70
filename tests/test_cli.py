"""The ``amem`` command line, run as a real subprocess."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from amem.sample import SAMPLE_CONVERSATION


def amem_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "amem", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_demo_stores_the_sample_and_shows_it_back(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "demo.db"
    result = amem_cli("demo", "--db", str(path), "--backend", backend)
    assert result.returncode == 0, result.stderr
    for *_, text in SAMPLE_CONVERSATION:
        assert text in result.stdout
    assert str(path) in result.stdout
    conn = sqlite3.connect(path)
    rows = conn.execute("select id, text from events order by seq").fetchall()
    conn.close()
    assert rows == [(event_id, text) for event_id, _, _, text in SAMPLE_CONVERSATION]


def test_demo_without_db_uses_a_new_temporary_file(tmp_path: Path) -> None:
    result = amem_cli("demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    first_line = result.stdout.splitlines()[0]
    path = Path(first_line.removeprefix(f"Stored {len(SAMPLE_CONVERSATION)} events in "))
    assert path.exists()
    assert not list(tmp_path.iterdir())  # nothing written to the working directory


def test_demo_refuses_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "precious.db"
    path.write_bytes(b"keep me")
    result = amem_cli("demo", "--db", str(path))
    assert result.returncode == 1
    assert "target_exists" in result.stderr
    assert path.read_bytes() == b"keep me"
    assert result.stdout == ""


@pytest.mark.parametrize("args", [["--help"], ["demo", "--help"]])
def test_help_answers(args: list[str]) -> None:
    result = amem_cli(*args)
    assert result.returncode == 0
    assert "usage: amem" in result.stdout


def test_no_command_prints_usage_and_fails() -> None:
    result = amem_cli()
    assert result.returncode == 2
    assert "demo" in result.stdout
