"""``amem --version`` and ``amem --help`` answer at once (issue 30: within 0.15 s of the
spawn): building the parser imports nothing heavy. Each check runs in a fresh process,
since this one has loaded everything already; what it checks is which modules got loaded,
not a time (a shared machine makes times noisy)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env

from amem.version import __version__

HEAVY = ("numpy", "pydantic", "httpx", "anyio", "mcp", "jieba")
"""Third-party packages a command loads when it runs, never to build the parser."""

LIGHT_AMEM = {"amem", "amem.errors", "amem.limits", "amem.version"}
"""The modules of amem outside ``amem.cli`` that the parser may load."""

REPORT = """
import json, sys
{setup}
from amem.cli.app import build_parser, main
build_parser()
try:
    status = main({argv!r})
except SystemExit as exc:
    status = exc.code
print(json.dumps({{"status": status, "modules": sorted(sys.modules)}}))
"""

ALONE = """
import sys, types
package = types.ModuleType("amem")  # amem/__init__ left out: what amem.cli loads itself
package.__path__ = [{folder!r}]
sys.modules["amem"] = package
"""


def startup(argv: list[str], *, cli_alone: bool = False) -> tuple[dict[str, object], str]:
    """Run ``amem ARGV`` in a new process; return its exit status and loaded modules, and
    its stdout before them."""
    import amem

    setup = ALONE.format(folder=amem.__path__[0]) if cli_alone else ""
    code = REPORT.format(setup=setup, argv=argv)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=clean_env()
    )
    assert result.returncode == 0, result.stderr
    printed, _, report = result.stdout.rstrip("\n").rpartition("\n")
    return json.loads(report), printed


def heavy(modules: object) -> list[str]:
    """The packages of ``HEAVY`` among ``modules``."""
    assert isinstance(modules, list)
    return sorted({name.split(".")[0] for name in modules} & set(HEAVY))


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["recall", "--help"]])
def test_version_and_help_load_nothing_heavy(argv: list[str]) -> None:
    report, printed = startup(argv)
    assert report["status"] == 0
    assert printed.startswith(f"amem {__version__}" if argv == ["--version"] else "usage: amem")
    assert heavy(report["modules"]) == []


def test_the_cli_modules_themselves_import_nothing_heavy() -> None:
    """What ``amem.cli`` imports without ``amem/__init__``: argparse and amem's plain values."""
    report, printed = startup(["--help"], cli_alone=True)
    assert report["status"] == 0
    assert "compact-working" in printed
    assert heavy(report["modules"]) == []
    modules = report["modules"]
    assert isinstance(modules, list)
    loaded = {name for name in modules if name.split(".")[0] == "amem"}
    assert {name for name in loaded if not name.startswith("amem.cli")} == LIGHT_AMEM


def test_a_one_shot_write_and_lexical_recall_on_a_file_load_neither_numpy_nor_psycopg(
    tmp_path: Path,
) -> None:
    """numpy serves vector search only, psycopg PostgreSQL only: a command that stores text
    in a SQLite file and recalls it by its words (no embedding endpoint: ``auto`` is
    lexical) loads neither (each costs every process that starts amem)."""
    db = str(tmp_path / "memory.db")
    wrote, _ = startup(["remember", "--db", db, "I live in Lisbon"])
    recalled, printed = startup(["recall", "--db", db, "Lisbon"])
    assert wrote["status"] == recalled["status"] == 0
    assert "Lisbon" in printed
    for report in (wrote, recalled):
        assert "numpy" not in heavy(report["modules"])
        assert not [name for name in report["modules"] if name.startswith("psycopg")]


NEVER_LOADS = """
import sys, threading
import amem.search.text as text
text.import_jieba = lambda: threading.Event().wait()  # jieba's load never ends
from amem.cli.app import main
sys.exit(main({argv!r}))
"""


def test_a_one_shot_command_in_english_exits_without_waiting_for_jieba(tmp_path: Path) -> None:
    """Opening a memory starts loading jieba's dictionary in the background; a command
    that never meets Chinese text exits when it is done, however long that load takes."""
    db = str(tmp_path / "memory.db")
    for argv in (["remember", "--db", db, "I live in Lisbon"], ["recall", "--db", db, "Lisbon"]):
        code = NEVER_LOADS.format(argv=argv)
        result = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            env=clean_env(),
        )
        assert result.returncode == 0, result.stderr
    assert "Lisbon" in result.stdout


BRIEF_MEMORY = """
import sys, threading
import anyio
import amem
import amem.search.text as text
text.import_jieba = lambda: threading.Event().wait()  # jieba's load never ends
async def main() -> None:
    async with amem.open(sys.argv[1]) as mem:  # starts loading jieba in the background
        await mem.scope().submit_event("I live in Lisbon", role="user")
        print(len((await mem.scope().recall("Lisbon")).items))
anyio.run(main)
"""


def test_a_process_that_opens_a_memory_briefly_exits_without_waiting_for_jieba(
    tmp_path: Path,
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", BRIEF_MEMORY, str(tmp_path / "memory.db")],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"
