"""The ``amem`` command line, run as a real subprocess."""

from __future__ import annotations

import json
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
def test_demo_shows_the_whole_job(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "demo.db"
    result = amem_cli("demo", "--db", str(path), "--backend", backend)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for *_, text in SAMPLE_CONVERSATION:
        assert text in out
    assert str(path) in out.splitlines()[0]
    assert "User lives in Beijing [expired]" in out  # the fact changed twice
    assert "'User lives in Shanghai'" in out  # a correction
    assert "User lives in Shenzhen" not in out.split("3. A correction")[1]
    assert "读《三体》 [gist]" in out  # 书 found only through its single character
    pack = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert pack["persona"]["text"].startswith("You are")
    conn = sqlite3.connect(path)
    ids = [row[0] for row in conn.execute("select id from events where category != 'correction'")]
    conn.close()
    assert "demo-6" not in ids  # the deleted phone number
    assert len(ids) == len(SAMPLE_CONVERSATION) - 1


def test_demo_without_db_uses_a_new_temporary_file(tmp_path: Path) -> None:
    result = amem_cli("demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    path = Path(result.stdout.splitlines()[0].removeprefix("amem demo: a fresh database at "))
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
