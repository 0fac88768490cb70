"""A new user's first hour with the ``amem`` command: mistyped paths, OS errors, persona
text, relative paths, plain dates, failed extractions, and the demo's way out."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys
from pathlib import Path

import anyio
import pytest
from helpers import amem_cli, clean_env, cli_ok, environment, value
from test_cli import SCOPE, TEXT

import amem
from amem.cli.options import READ_ONLY_COMMANDS

ONE_ERROR_LINE = re.compile(r"amem: error: [a-z_]+: [^\n]+\n")

# --- read-only commands never create a database ---------------------------------------------

READ_ONLY_LINES = {
    "status": ["status"],
    "list": ["list", "events"],
    "list scopes": ["list", "scopes"],
    "recall": ["recall", "杭州", "--as-of", "2026-01-01"],
    "read": ["read", "m-1"],
    "persona show": ["persona", "show"],
    "persona history": ["persona", "history", "assistant"],
    "people": ["people"],
    "people list": ["people", "list"],
    "people find": ["people", "find", "Anna"],
    "doctor": ["doctor"],
    "doctor --rebuild-index": ["doctor", "--rebuild-index"],
    "export": ["export", "OUT"],
    "backup": ["backup", "OUT"],
    "limits": ["limits"],
    "delete": ["delete", "--event", "m-1"],
    "delete --dry-run": ["delete", "--event", "m-1", "--dry-run"],
    "consolidate --dry-run": ["consolidate", "--dry-run"],
    "compact-working --dry-run": ["compact-working", "chat-7", "--dry-run"],
    "erase": ["erase", "--everything"],
    "erase --dry-run": ["erase", "--everything", "--dry-run"],
}


def test_every_read_only_command_is_checked_here() -> None:
    named = {
        " ".join(words[:2]) if words[0] in ("persona", "people") else words[0]
        for words in READ_ONLY_LINES.values()
    }
    assert named >= READ_ONLY_COMMANDS


@pytest.mark.parametrize("case", list(READ_ONLY_LINES))
def test_read_only_commands_refuse_a_missing_database(tmp_path: Path, case: str) -> None:
    mistyped = tmp_path / "typo" / "memroy.db"  # its folder does not exist either
    words = [str(tmp_path / "out") if w == "OUT" else w for w in READ_ONLY_LINES[case]]
    result = amem_cli(*words, "--db", str(mistyped))
    assert result.returncode == 1
    out, err = result.stdout, result.stderr
    assert ONE_ERROR_LINE.fullmatch(err), err
    assert err.startswith("amem: error: no_database: no database file at the --db path")
    assert str(mistyped) not in err  # CLI errors do not echo what was typed
    assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing created


def test_the_refusal_names_where_the_path_came_from(tmp_path: Path) -> None:
    result = amem_cli("status", env={"AMEM_DB": str(tmp_path / "nope.db")})
    assert result.stderr.startswith("amem: error: no_database: no database file at the $AMEM_DB")
    result = amem_cli("status", env={"XDG_DATA_HOME": str(tmp_path / "data")})
    default = tmp_path / "data" / "amem" / "memory.db"
    assert f"at the default path {default};" in result.stderr
    assert not (tmp_path / "data").exists()


def test_writing_commands_still_create_the_database_and_its_folders(tmp_path: Path) -> None:
    db = tmp_path / "new" / "folder" / "m.db"
    cli_ok("submit", TEXT, "--event-id", "m-1", "--db", str(db))
    assert "raw event" in cli_ok("recall", "杭州", "--db", str(db))  # and read-only ones read it
    assert cli_ok("status", "--db", str(db)).startswith("scope default/default")


URL = "mysql://amem:s3cret@db.example/memory"
"""A database amem does not run on (PostgreSQL URLs: test_pg_cli.py)."""


@pytest.mark.parametrize("words", [["submit", "x"], ["status"], ["recall", "x"]])
def test_a_database_url_is_refused_not_created_as_a_folder(
    tmp_path: Path, words: list[str]
) -> None:
    for given in ({"args": ["--db", URL]}, {"env": {"AMEM_DB": URL}}):
        result = amem_cli(*words, *given.get("args", []), cwd=tmp_path, env=given.get("env"))
        assert result.returncode == 1
        assert ONE_ERROR_LINE.fullmatch(result.stderr), result.stderr
        assert result.stderr.startswith("amem: error: unsupported_database: the database is ")
        assert "s3cret" not in result.stderr
        assert result.stdout == ""
        assert list(tmp_path.iterdir()) == []


@pytest.mark.anyio
async def test_opening_a_database_url_from_python_is_refused(tmp_path: Path) -> None:
    with contextlib.chdir(tmp_path), pytest.raises(amem.InvalidInput) as refused:
        async with amem.open(URL):
            pass
    assert refused.value.code == "unsupported_database"
    assert "s3cret" not in str(refused.value)
    assert list(tmp_path.iterdir()) == []


# --- every OS error is one amem error line ----------------------------------------------------


def test_os_errors_are_one_line_with_a_code(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    cli_ok("submit", TEXT, "--event-id", "m-1", "--db", str(db))
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    too_long = str(tmp_path / ("a" * 300))
    cases = {
        ("submit", "x", "--db", f"{too_long}.db"): "storage_error",
        ("submit", "x", "--db", str(db / "inside-a-file.db")): "storage_error",
        ("demo", "--db", str(db / "inside-a-file.db")): "storage_error",
        ("status", "--db=~no-such-user-amem/m.db"): "path_not_allowed",
        ("export", f"{too_long}.jsonl", "--db", str(db)): "path_not_allowed",
        ("export", str(tmp_path / "loop" / "a.jsonl"), "--db", str(db)): "path_not_allowed",
        ("backup", str(tmp_path / "no-folder" / "b.db"), "--db", str(db)): "path_not_allowed",
        ("backup", str(db), "--db", str(db)): "target_exists",
        ("import", str(tmp_path), "--db", str(tmp_path / "n.db")): "storage_error",
        ("persona", "set", "--file", str(tmp_path), "--db", str(db)): "invalid_input",
    }
    for args, code in cases.items():
        result = amem_cli(*args)
        assert result.returncode == 1, args
        assert ONE_ERROR_LINE.fullmatch(result.stderr), (args, result.stderr)
        assert result.stderr.startswith(f"amem: error: {code}: "), (args, result.stderr)
        assert "a" * 300 not in result.stderr


def test_an_os_error_nothing_expected_is_still_one_line(tmp_path: Path) -> None:
    """The working directory vanished: resolving a relative --db fails in the OS."""
    gone = tmp_path / "gone"
    gone.mkdir()
    with contextlib.chdir(gone):
        gone.rmdir()
        result = amem_cli("submit", "hello", "--db", "m.db")
    assert result.returncode == 1
    assert result.stderr == "amem: error: storage_error: a file operation failed " + (
        "(No such file or directory)\n"
    )


# --- persona set TEXT -------------------------------------------------------------------------


def test_persona_set_takes_one_word_as_the_text(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "m.db"), *SCOPE]
    assert cli_ok("persona", "set", "You are a travel agent.", *db) == "assistant is now v1\n"
    assert cli_ok("persona", "show", *db) == "assistant v1: You are a travel agent.\n"
    assert cli_ok("persona", "set", "guide", "You are a guide.", *db) == "guide is now v1\n"
    assert cli_ok("persona", "show", "guide", *db) == "guide v1: You are a guide.\n"
    file = tmp_path / "p.txt"
    file.write_text("From a file.", encoding="utf-8")
    assert cli_ok("persona", "set", "guide", "--file", str(file), *db) == "guide is now v2\n"
    assert cli_ok("persona", "show", "guide", *db) == "guide v2: From a file.\n"
    assert cli_ok("persona", "set", "-", *db, input="From stdin.") == "assistant is now v2\n"
    assert cli_ok("persona", "show", *db) == "assistant v2: From stdin.\n"
    result = amem_cli("persona", "set", "guide", "text", "--file", str(file), *db)
    assert result.returncode == 1
    assert result.stderr == "amem: error: invalid_input: give TEXT or --file, not both\n"
    assert cli_ok("persona", "show", "guide", *db) == "guide v2: From a file.\n"


# --- relative paths with '..' -----------------------------------------------------------------


def test_relative_paths_with_dotdot_are_ordinary_paths(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    cli_ok("submit", TEXT, "--event-id", "m-1", "--db", "../m.db", cwd=work)
    assert (tmp_path / "m.db").exists()
    (tmp_path / "out").mkdir()
    out = cli_ok("export", "../out/../a.jsonl", "--db", "../m.db", cwd=work)
    assert f" rows to {(tmp_path / 'a.jsonl').resolve()}: " in out
    backup = cli_ok("backup", "../b.db", "--db", "../m.db", cwd=work)
    assert backup == f"backed up to {(tmp_path / 'b.db').resolve()}\n"
    assert sorted(p.name for p in work.iterdir()) == []


# --- plain dates ------------------------------------------------------------------------------


def test_a_plain_date_is_the_start_of_that_day_in_utc(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "m.db"), *SCOPE]
    cli_ok("submit", TEXT, "--event-id", "m-1", "--occurred-at", "2026-03-10T12:00:00Z", *db)
    cli_ok("submit", "我在杭州。", "--event-id", "m-2", "--occurred-at", "2026-03-11", *db)

    def recalled(*options: str) -> list[str]:
        found = json.loads(cli_ok("recall", "杭州", "--json", *options, *db))
        return sorted(item["id"] for item in found["items"])

    assert recalled("--as-of", "2026-03-10") == []  # 00:00 UTC: not said yet
    assert recalled("--as-of", "2026-03-11") == ["m-1", "m-2"]  # m-2 occurred at 00:00
    assert recalled("--as-of", "2026-03-11") == recalled("--as-of", "2026-03-11T00:00:00Z")
    listed = json.loads(cli_ok("list", "events", "--since", "2026-03-11", "--json", *db))
    assert [(e["id"], e["occurred_at"]) for e in listed["items"]] == [
        ("m-2", "2026-03-11T00:00:00Z")
    ]
    listed = json.loads(cli_ok("list", "events", "--until", "2026-03-11", "--json", *db))
    assert [e["id"] for e in listed["items"]] == ["m-1"]
    for bad in ("2026-13-01", "2026-03-10T12:00"):  # no such month; no UTC offset
        result = amem_cli("recall", "杭州", "--as-of", bad, *db)
        assert result.returncode == 1
        assert result.stderr.startswith("amem: error: invalid_time: as_of "), result.stderr
        assert bad not in result.stderr


# --- failed extractions: doctor names them, read shows the error --------------------------------


def test_doctor_names_failed_extractions_and_read_shows_the_error(tmp_path: Path) -> None:
    from amem.testing import FakeOpenAI

    db = ["--db", str(tmp_path / "m.db"), *SCOPE]
    transcript = "".join(
        json.dumps({"event_id": f"m-{n}", "role": "user", "text": f"第{n}句：我搬到杭州了。"})
        + "\n"
        for n in range(7)
    )
    with FakeOpenAI() as api:
        api.fail_status = 500
        env = {"AMEM_EXTRACT_BASE_URL": api.base_url, "AMEM_EXTRACT_MODEL": "fake"}
        cli_ok("host-ingest", "-", "--instance", "laptop", *db, env=env, input=transcript)
        assert amem_cli("retry", *db, env=env).returncode == 1  # all seven failed
    error = value(tmp_path / "m.db", "select error from events where id = 'm-0'")
    assert error.startswith("extraction_failed: ")

    result = amem_cli("doctor", *db)
    assert result.returncode == 1
    [line] = [line for line in result.stdout.splitlines() if "failed extractions" in line]
    named = "; ".join(f"assistant/support m-{n} ({error})" for n in range(5))
    assert line == f"FAIL  failed extractions: 7 events failed extraction: {named} (and 2 more)"
    report = json.loads(amem_cli("doctor", "--json", *db).stdout)
    [check] = [c for c in report["checks"] if c["name"] == "failed extractions"]
    assert check["detail"] == line.removeprefix("FAIL  failed extractions: ")

    said = "第6句：我搬到杭州了。"
    header, failure, text = cli_ok("read", "m-6", *db).splitlines()
    assert header.endswith(f"failed) chars 0-{len(said)} of {len(said)}")
    assert failure == f"error: {error}"
    assert text == said
    page = json.loads(cli_ok("read", "m-6", "--json", *db))
    assert page["event"]["error"] == error


# --- the demo's last line runs where the demo ran ---------------------------------------------


def demo_last_line(tmp_path: Path, env: dict[str, str]) -> list[str]:
    db = tmp_path / "demo.db"
    with environment(env):  # all of it: without UV, amem was not started by uv
        result = amem_cli("demo", "--db", str(db))
    assert result.returncode == 0, result.stderr
    assert "written the way a host's own model writes them" in result.stdout
    last = result.stdout.rstrip().splitlines()[-1]
    assert last.startswith("Explore it: ")
    return shlex.split(last.removeprefix("Explore it: "))


def test_demo_explore_line_from_a_clone_is_uv_run(tmp_path: Path) -> None:
    own = os.path.dirname(sys.executable)  # the environment `uv run` put first on PATH
    env = clean_env({"UV": "uv", "PATH": os.pathsep.join([own, "/usr/bin", "/bin"])})
    words = demo_last_line(tmp_path, env)
    assert words[:3] == ["uv", "run", "amem"]
    result = amem_cli(*words[3:])  # the rest runs as printed
    assert result.returncode == 0, result.stderr
    assert "User lives in Hangzhou" in result.stdout


def test_demo_explore_line_is_amem_when_amem_is_installed(tmp_path: Path) -> None:
    installed = tmp_path / "bin"
    installed.mkdir()
    (installed / "amem").write_text("#!/bin/sh\n")
    (installed / "amem").chmod(0o755)
    env = clean_env({"UV": "uv", "PATH": os.pathsep.join([str(installed), "/usr/bin", "/bin"])})
    assert demo_last_line(tmp_path, env)[:2] == ["amem", "recall"]
    env = {k: v for k, v in clean_env().items() if k != "UV"}  # not started by uv at all
    assert demo_last_line(tmp_path / "again", env)[:2] == ["amem", "recall"]


def test_python_and_the_command_line_open_the_same_file_by_default(tmp_path: Path) -> None:
    env = clean_env({"XDG_DATA_HOME": str(tmp_path)})

    async def write() -> Path:
        async with amem.open() as mem:
            await mem.scope().submit_event("I moved to Lisbon", role="user", event_id="m-1")
            return Path(mem.path)

    with environment(env):
        path = anyio.run(write)
    assert path == tmp_path / "amem" / "memory.db"
    assert "I moved to Lisbon" in cli_ok("read", "m-1", env={"XDG_DATA_HOME": str(tmp_path)})
