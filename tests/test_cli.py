"""The ``amem`` command line, run in this process through ``amem.cli.main`` as the
installed script runs it (``helpers.amem_cli``); the script itself once as a real process."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import amem_cli, amem_process, cli_ok, rows

import amem
from amem.cli.demo import SAMPLE_CONVERSATION
from amem.limits import MAX_CAPTURE_ENTRIES


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
    ids = [row[0] for row in rows(path, "select id from events where category != 'correction'")]
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


# --- every command answers --help -----------------------------------------------------------

HELP = {
    # command words: text its help must carry (its purpose and its own options)
    "serve": ["MCP", "stdout", "--log-level"],
    "demo": ["sample", "as_of", "session_resume"],
    "submit": ["TEXT", "--role", "--event-id", "--occurred-at", "stdin"],
    "remember": [
        "TEXT",
        "stdin",
        "--kind",
        "--subject",
        "--fact-key",
        "--session",
        "--occurred-at",
        "closes the older",
        "amem submit",
    ],
    "recall": ["QUERY", "--limit", "--mode", "--as-of", "--history", "--kind"],
    "read": ["ID", "--offset", "--limit"],
    "persona": ["show", "set", "history", "rollback", "MCP hosts can only read"],
    "persona show": ["NAME", "--version"],
    "persona set": ["NAME", "TEXT", "--file", "--note"],
    "persona history": ["NAME", "version"],
    "persona rollback": ["NAME", "VERSION"],
    "export": ["PATH", "archive"],
    "import": ["PATH", "archive"],
    "backup": ["PATH", "backup"],
    "restore": ["PATH", "backup"],
    "doctor": ["--rebuild-index", "problem"],
    "reindex": ["AMEM_EMBED", "stderr"],
    "retry": ["--event-id", "AMEM_EXTRACT", "stderr"],
    "host-ingest": ["FILE", "--instance", "--session", "--goal", "version_conflict"],
    "correct": ["MEMORY_ID", "TEXT", "--reason", "--valid-at", "amended"],
    "retract": ["MEMORY_ID", "--reason", "amem delete", "stay"],
    "delete": [
        "--event",
        "--memory",
        "--yes",
        "preview",
        "siblings",
        "amem retract",
        "never be stored again",
    ],
    "erase": [
        "--session",
        "--since",
        "--subject",
        "--fact-key",
        "--everything",
        "--yes",
        "preview",
    ],
    "list": [
        "WHAT",
        "events",
        "scopes",
        "--kind",
        "--role",
        "--session",
        "--since",
        "--until",
        "--revoked",
        "--expired",
        "--tier",
        "--cursor",
        "--limit",
        "total",
    ],
    "status": ["capacity", "limits", "WAL", "free pages"],
    "limits": ["--max-events", "--max-text-bytes", "--clear", "none", "capacity_exceeded"],
    "pin": ["MEMORY_ID", "--unpin", "working note"],
    "consolidate": ["--yes", "--dry-run", "preview", "expired", "AMEM_PROMOTE_AFTER", "background"],
    "compact-working": ["SESSION", "--keep", "--dry-run", "episodic", "word for word"],
}


@pytest.mark.parametrize("command", list(HELP))
def test_every_command_answers_help(command: str) -> None:
    result = amem_cli(*command.split(), "--help")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    out = " ".join(result.stdout.split())  # argparse wraps lines
    assert out.startswith(f"usage: amem {command}")
    for text in HELP[command]:
        assert text in out, text
    for option in ("--db", "--persona", "--project", "--backend", "--json"):
        assert option in out


def test_top_level_help_lists_every_command() -> None:
    result = amem_cli("--help")
    assert result.returncode == 0
    for command in {c.split()[0] for c in HELP}:
        assert f"    {command} " in result.stdout or f"    {command}\n" in result.stdout, command


def test_installed_script_runs_like_python_m_amem() -> None:
    script = Path(sys.executable).with_name("amem")
    result = subprocess.run(
        [str(script), "recall", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    assert result.stdout.startswith("usage: amem recall")


def test_python_m_amem_exits_with_the_commands_status(tmp_path: Path) -> None:
    """The rest of this file calls ``main`` in process; here ``python -m amem`` runs as a
    real process once: its exit status is the command's, its output goes where it says."""
    db = ["--db", str(tmp_path / "m.db")]
    stored = amem_process("submit", "我搬到杭州了。", "--event-id", "m-1", *db)
    assert (stored.returncode, stored.stdout) == (
        0,
        "stored m-1 (seq 1, stored) in default/default\n",
    )
    assert stored.stderr == ""
    refused = amem_process("read", "nope", *db)
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr.startswith("amem: error: not_found: ")
    misused = amem_process("recall", *db)
    assert (misused.returncode, misused.stdout) == (2, "")
    assert "usage: amem recall" in misused.stderr


# --- the demo's story, checked against what it prints -----------------------------------------


def section(out: str, number: int) -> str:
    """The text of the demo's numbered section ``number``."""
    start = out.index(f"\n{number}. ")
    end = out.find(f"\n{number + 1}. ", start)
    return out[start : end if end != -1 else len(out)]


def test_demo_tells_the_story_it_promises(tmp_path: Path) -> None:
    from amem.cli.demo import SAMPLE_MEMORIES
    from amem.search.text import _jieba

    result = amem_cli("demo", "--db", str(tmp_path / "demo.db"))
    assert result.returncode == 0, result.stderr
    out = result.stdout

    changes = section(out, 2)  # a fact that changes twice: three residences, two expired
    assert "User lives in Hangzhou  (" in changes
    assert changes.count("[expired]") == 2
    assert "User lives in Beijing [expired]" in changes

    assert "misheard -> 'User lives in Shanghai'" in section(out, 3)  # a correction

    deletion = section(out, 4)  # a deletion: the number is not found any more
    assert "(no evidence found)" in deletion
    assert "555-0199" not in deletion.split("\n", 2)[2]

    as_of = section(out, 5).splitlines()[2:]  # what was true on 2026-07-01: the corrected fact
    assert len(as_of) == 1
    assert "User lives in Shanghai" in as_of[0]
    assert "[expired]" not in as_of[0]

    book = section(out, 6)  # 书 stands only inside 本书: no jieba word is 书
    assert "读《三体》 [gist]" in book
    sample_texts = [text for *_, text in SAMPLE_CONVERSATION] + [
        str(draft[field])
        for drafts in SAMPLE_MEMORIES.values()
        for draft in drafts
        for field in ("text", "quote", "gist")
        if field in draft
    ]
    words = {w for t in sample_texts for w in _jieba().cut_for_search(t)}
    assert "本书" in words
    assert "书" not in words

    now = section(out, 7)
    assert "preference  User prefers tea" in now
    assert "agreement   Plan a weekend trip together" in now

    resume = section(out, 8)  # a pack under a small budget, with what was left out
    header = resume.splitlines()[1]
    assert "500-token budget" in header
    used = int(header.rsplit(", ", 1)[1].split()[0])
    assert 0 < used <= 500
    assert "partial ['recent_events (" in header
    pack = json.loads(resume[resume.index("{") : resume.rindex("}") + 1])
    assert amem.estimate_tokens(json.dumps(pack, ensure_ascii=False, separators=(",", ":"))) == used
    assert "instructions" in pack["notice"]
    texts = [m["text"] for m in pack["memories"]]
    assert "User lives in Hangzhou" in texts
    assert not any("Shenzhen" in t or "555-0199" in t for t in texts)
    assert out.rstrip().endswith("杭州")  # how to explore the file afterwards


# --- commands with good input -----------------------------------------------------------------

SCOPE = ["--persona", "assistant", "--project", "support"]
TEXT = "我搬到杭州了，离西湖很近。"
T0 = "2026-11-30T09:00:00+08:00"


def test_submit_recall_read(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "m.db"), *SCOPE]
    args = ["submit", TEXT, "--event-id", "m-1", "--session", "chat-7", "--occurred-at", T0]
    assert cli_ok(*args, *db) == "stored m-1 (seq 1, stored) in assistant/support\n"
    assert cli_ok(*args, *db) == "already stored m-1 (seq 1, stored) in assistant/support\n"
    receipt = json.loads(cli_ok("submit", "-", "--role", "assistant", "--json", *db, input="好的"))
    assert receipt["event_id"].startswith("evt_")
    assert receipt["seq"] > 1
    assert (receipt["duplicate"], receipt["persona"]) == (False, "assistant")

    lines = cli_ok("recall", "杭州", *db).splitlines()
    assert lines == [lines[0]]
    assert lines[0].endswith(f"2026-11-30  user      raw event   {TEXT}  (m-1)")
    found = json.loads(cli_ok("recall", "西湖", "--json", "--limit", "5", *db))
    assert [(i["id"], i["raw_fallback"]) for i in found["items"]] == [("m-1", True)]
    assert (
        cli_ok("recall", "杭州", "--as-of", "2026-01-01T00:00:00Z", *db) == "(no evidence found)\n"
    )
    other_scope = ["--db", str(tmp_path / "m.db"), "--persona", "assistant", "--project", "x"]
    assert cli_ok("recall", "杭州", *other_scope) == "(no evidence found)\n"

    header, page = cli_ok("read", "m-1", "--limit", "4", *db).splitlines()
    assert header == (
        "event m-1 (user, 2026-11-30T01:00:00+00:00, stored) chars 0-4 of 13, next page: --offset 4"
    )
    header, rest = cli_ok("read", "m-1", "--offset", "4", *db).splitlines()
    assert "next page" not in header
    assert page + rest == TEXT
    evidence = json.loads(cli_ok("read", "m-1", "--json", *db))
    assert (evidence["text"], evidence["event"]["session"]) == (TEXT, "chat-7")


def test_remember_stores_a_user_statement_and_its_memory(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "m.db"), *SCOPE]
    key = ["--subject", "user", "--fact-key", "residence"]
    said = ["--session", "chat-7", "--occurred-at", T0]
    out = cli_ok("remember", "I live in Hangzhou", *key, *said, *db)
    found = re.fullmatch(
        r"remembered (mem_\w+) \(fact; user/residence\) from event (evt_\w+) "
        r"in assistant/support\n",
        out,
    )
    assert found, out
    memory_id, event_id = found.groups()
    evidence = json.loads(cli_ok("read", memory_id, "--json", *db))
    assert (evidence["text"], evidence["event"]["id"]) == ("I live in Hangzhou", event_id)
    assert (evidence["event"]["role"], evidence["event"]["session"]) == ("user", "chat-7")
    assert evidence["memory"]["quote"] == "I live in Hangzhou"
    assert evidence["memory"]["basis"] == "user_statement"

    moved = json.loads(
        cli_ok(
            "remember",
            "-",
            *key,
            "--occurred-at",
            "2026-12-01",
            "--json",
            *db,
            input="I live in Suzhou\n",
        )
    )
    assert (moved["memory"]["text"], moved["memory"]["kind"]) == ("I live in Suzhou", "fact")
    assert moved["event"]["event_id"] == moved["memory"]["event_id"]
    closed = json.loads(cli_ok("read", memory_id, "--json", *db))["memory"]
    assert closed["invalid_at"] == moved["memory"]["valid_at"]  # the newer residence wins
    tea = cli_ok("remember", "I prefer green tea", "--kind", "preference", *db)
    assert re.fullmatch(r"remembered mem_\w+ \(preference\) from event evt_\w+ .*\n", tea)
    assert "preference  I prefer green tea" in cli_ok("recall", "green tea", *db)


def test_remember_refuses_a_draft_before_storing_anything(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "m.db")]
    cli_ok("submit", "hello", *db)
    for args, code in (
        (["x", "--kind", "agreement", "--subject", "user", "--fact-key", "k"], "role_violation"),
        (["x", "--fact-key", "k"], "role_violation"),  # a key needs a subject
        (["x" * 2_001], "invalid_input"),
        (["-"], "invalid_input"),  # blank stdin
    ):
        result = amem_cli("remember", *args, *db, input=" \n")
        assert result.returncode == 1, args
        assert result.stderr.startswith(f"amem: error: {code}: "), result.stderr
    assert rows(tmp_path / "m.db", "select count(*) from events") == [(1,)]
    result = amem_cli("remember", "x", "--kind", "emotion", *db)  # an assistant's only
    assert result.returncode == 2


def test_remember_offers_the_kinds_a_user_statement_may_have() -> None:
    from amem.cli.events import KEYED_KINDS, STATED_KINDS
    from amem.models import MEMORY_KINDS
    from amem.store import facts

    assert set(STATED_KINDS) == set(MEMORY_KINDS) - {"emotion"}
    assert set(KEYED_KINDS) == facts.KEYED_KINDS


def test_persona_options_before_the_action_count(tmp_path: Path) -> None:
    """``amem persona --db FILE --persona NAME set TEXT`` writes NAME's persona into FILE,
    as the same options after the action would (never into the default database)."""
    home = tmp_path / "home"
    db = tmp_path / "m.db"
    env = {"HOME": str(home), "XDG_DATA_HOME": str(home / "data")}
    before = ["persona", "--db", str(db), "--persona", "helper"]
    assert cli_ok(*before, "set", "You are kind.", env=env) == "helper is now v1\n"
    assert cli_ok("persona", "show", "helper", "--db", str(db), env=env) == (
        "helper v1: You are kind.\n"
    )
    assert not (home / "data").exists(), "nothing went to the default database"


def test_persona_show_set_history_rollback(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "m.db"), *SCOPE]
    cli_ok("submit", TEXT, *db)  # `persona show` only reads: it needs a database
    assert cli_ok("persona", "show", *db).startswith("assistant v1: A helpful")  # a neutral default
    assert cli_ok("persona", "set", "assistant", "You are 小助手.", "--note", "first", *db) == (
        "assistant is now v2\n"
    )
    assert cli_ok("persona", "set", *db, input="你是一个简洁的助手。\n") == "assistant is now v3\n"
    file = tmp_path / "persona.txt"
    file.write_text("You are a travel agent.", encoding="utf-8")
    assert cli_ok("persona", "set", "--file", str(file), *db) == "assistant is now v4\n"
    assert cli_ok("persona", "show", *db) == "assistant v4: You are a travel agent.\n"
    assert cli_ok("persona", "show", "--version", "2", *db) == "assistant v2: You are 小助手.\n"

    history = cli_ok("persona", "history", *db)
    assert [line.split()[0] for line in history.splitlines() if line.startswith("v")] == [
        "v1",
        "v2",
        "v3",
        "v4",
    ]
    assert "first" in history
    assert "你是一个简洁的助手。" in history
    assert cli_ok("persona", "rollback", "2", *db).startswith("assistant is now v5")
    assert cli_ok("persona", "show", "assistant", *db) == "assistant v5: You are 小助手.\n"
    versions = json.loads(cli_ok("persona", "history", "--json", *db))["versions"]
    assert [v["version"] for v in versions] == [1, 2, 3, 4, 5]
    assert cli_ok("persona", "show", "someone-else", *db).startswith("someone-else v1")


def transcript_lines(n: int) -> str:
    lines = [
        json.dumps(
            {
                "event_id": f"h-{i}",
                "role": "user" if i % 2 == 0 else "assistant",
                "text": f"第{i}句：下周去杭州出差，住西湖边。",
                "session": "s1",
                "occurred_at": f"2026-11-30T09:00:0{i}+08:00",
            },
            ensure_ascii=False,
        )
        for i in range(n)
    ]
    return "\n".join(lines) + "\n\n"  # a trailing blank line is fine


def test_host_ingest(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "m.db"), *SCOPE]
    path = tmp_path / "transcript.jsonl"
    path.write_text(transcript_lines(3), encoding="utf-8")
    first = cli_ok("host-ingest", str(path), "--instance", "laptop", *db)
    assert first == "cursor 3: stored 3, 0 already stored, 0 skipped\n"
    again = cli_ok("host-ingest", str(path), "--instance", "laptop", *db)
    assert again == "cursor 3: stored 0, 0 already stored, 3 skipped\n"

    args = ["host-ingest", "-", "--instance", "laptop", "--json", "--session", "s1"]
    args += ["--goal", "订西湖边的酒店", "--next-action", "比较价格"]
    more = json.loads(cli_ok(*args, *db, input=transcript_lines(4)))
    assert (more["cursor"], more["stored"], more["skipped"]) == (4, ["h-3"], 3)
    assert more["checkpoint"]["goal"] == "订西湖边的酒店"
    assert more["checkpoint"]["next_action"] == "比较价格"
    assert more["checkpoint"]["covered_seq"] == more["receipts"][-1]["seq"] == 4

    other = cli_ok("host-ingest", str(path), "--instance", "phone", *db)
    assert other == "cursor 3: stored 0, 3 already stored, 0 skipped\n"
    assert "h-3" in cli_ok("recall", "出差", "--limit", "10", *db)


def test_host_ingest_of_a_transcript_longer_than_one_call_takes(tmp_path: Path) -> None:
    """Over ``MAX_CAPTURE_ENTRIES`` the CLI sends slices, the checkpoint with the last."""
    db = ["--db", str(tmp_path / "m.db"), *SCOPE]
    n = MAX_CAPTURE_ENTRIES + 50
    path = tmp_path / "transcript.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for i in range(n):
            entry = {"event_id": f"long-{i}", "role": "user", "text": f"第{i}句", "session": "s1"}
            out.write(json.dumps(entry, ensure_ascii=False) + "\n")
    args = ["host-ingest", str(path), "--instance", "laptop", "--json", "--session", "s1"]
    result = json.loads(cli_ok(*args, "--goal", "读完长记录", *db))
    assert result["cursor"] == n
    assert result["stored"] == [f"long-{i}" for i in range(n)]  # every slice reported
    assert result["checkpoint"]["covered_seq"] == n
    again = cli_ok("host-ingest", str(path), "--instance", "laptop", *db)
    assert again == f"cursor {n}: stored 0, 0 already stored, {n} skipped\n"
    page = json.loads(cli_ok("read", f"long-{n - 1}", "--json", *db))
    assert page["text"] == f"第{n - 1}句"


# --- bad input: non-zero exit, the stable code on stderr, nothing echoed, nothing on stdout -----

SECRET = "秘密-7f3a"


@pytest.fixture(scope="module")
def filled_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("bad") / "m.db"
    db = ["--db", str(path), *SCOPE]
    cli_ok("submit", TEXT, "--event-id", "m-1", "--occurred-at", T0, *db)
    cli_ok("persona", "set", "assistant", "You are 小助手.", *db)
    return path


BAD_INPUT: list[tuple[list[str], str, str | None]] = [
    # (arguments, error code, stdin)
    (["submit", SECRET, "--occurred-at", "2026-11-30T09:00:00"], "invalid_time", None),
    (["submit", SECRET, "--occurred-at", SECRET], "invalid_time", None),
    (["submit", SECRET, "--event-id", "m-1"], "duplicate_conflict", None),
    (["submit", "x", "--event-id", ""], "invalid_input", None),
    (["submit", "x", "--session", f"{SECRET}\u202egpj.exe"], "invalid_input", None),
    (["submit", "x", "--source", f"\u200b{SECRET}"], "invalid_input", None),
    (["submit", "-"], "invalid_input", ""),
    (["submit", "-"], "invalid_input", SECRET * 20_000),
    (["recall", SECRET, "--as-of", SECRET], "invalid_time", None),
    (["recall", SECRET, "--limit", "0"], "invalid_input", None),
    (["recall", SECRET, "--kind", SECRET], "invalid_input", None),
    (["recall", "   "], "invalid_input", None),
    (["read", SECRET], "not_found", None),
    (["read", "m-1", "--offset", "-1"], "invalid_input", None),
    (["read", "m-1", "--limit", "0"], "invalid_input", None),
    (["persona", "show", "--version", "99"], "not_found", None),
    (["persona", "set"], "invalid_input", ""),
    (["persona", "set", "--file", f"/nonexistent/{SECRET}.txt"], "invalid_input", None),
    (["persona", "rollback", "99"], "not_found", None),
    (["reindex"], "not_configured", None),
    (["retry"], "not_configured", None),
    (["host-ingest", "-", "--instance", "i"], "invalid_input", f'{{"event_id": "a"}}\n{SECRET}\n'),
    (["host-ingest", "-", "--instance", "i"], "invalid_input", f'{{"text": "{SECRET}"}}\n'),
    (["host-ingest", "-", "--instance", "i"], "invalid_input", f"[{json.dumps(SECRET)}]\n"),
    (["host-ingest", "-", "--instance", "i"], "invalid_input", "[" * 100_000 + "\n"),
    (["host-ingest", "-", "--instance", "\ufeffi"], "invalid_input", ""),
    (
        ["host-ingest", "-", "--instance", "i"],
        "invalid_time",
        json.dumps({"event_id": "a", "role": "user", "text": "x", "occurred_at": SECRET}) + "\n",
    ),
    (
        ["host-ingest", "-", "--instance", "i"],
        "duplicate_conflict",
        json.dumps({"event_id": "m-1", "role": "user", "text": SECRET}) + "\n",
    ),
    (["host-ingest", f"/nonexistent/{SECRET}.jsonl", "--instance", "i"], "invalid_input", None),
    (["host-ingest", "-", "--instance", "i", "--goal", SECRET], "invalid_input", ""),
    (["host-ingest", "-", "--instance", ""], "invalid_input", ""),
]


def contents(path: Path) -> list[list[tuple[object, ...]]]:
    tables = ("events", "personas", "memories", "checkpoints", "capture_cursors")
    return [rows(path, f"select * from {table} order by 1") for table in tables]


@pytest.mark.parametrize(("args", "code", "stdin"), BAD_INPUT)
def test_bad_input_fails_with_its_code(
    filled_db: Path, args: list[str], code: str, stdin: str | None
) -> None:
    before = contents(filled_db)
    result = amem_cli(*args, "--db", str(filled_db), *SCOPE, input=stdin)
    assert contents(filled_db) == before  # nothing written
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith(f"amem: error: {code}: "), result.stderr
    assert result.stderr.count("\n") == 1
    assert SECRET not in result.stderr
    assert "nonexistent" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["recall"],
        ["recall", "x", "--limit", "many"],
        ["recall", "x", "--mode", "psychic"],
        ["submit", "x", "--role", "narrator"],
        ["host-ingest", "-"],
        ["persona", "rollback"],
        ["persona", "rollback", "one"],
        ["recall", "x", "--backend", "curio"],
    ],
)
def test_usage_errors_exit_2_with_usage_on_stderr(tmp_path: Path, args: list[str]) -> None:
    result = amem_cli(*args, "--db", str(tmp_path / "m.db"))
    assert result.returncode == 2
    assert result.stdout == ""
    assert "usage: amem" in result.stderr
    assert not (tmp_path / "m.db").exists()  # refused before the database was touched


# --- retry and reindex against a real OpenAI-compatible endpoint --------------------------------


KEY = "sk-test-4b1d9e"


def test_retry_and_reindex_with_an_endpoint(tmp_path: Path) -> None:
    from amem.testing import FakeOpenAI

    def answer(event: dict[str, Any]) -> list[dict[str, Any]]:
        draft = {
            "text": "User moved to Hangzhou",
            "quote": event["text"][:6],
            "kind": "fact",
            "basis": "user_statement",
            "subject": "user",
            "fact_key": "residence",
        }
        return [draft]

    db = ["--db", str(tmp_path / "m.db"), *SCOPE]
    cli_ok("submit", TEXT, "--event-id", "m-1", *db)  # stored: no extractor configured yet
    with FakeOpenAI(answer) as api:
        env = {
            "AMEM_EXTRACT_BASE_URL": api.base_url,
            "AMEM_EXTRACT_MODEL": "fake",
            "AMEM_EMBED_BASE_URL": api.base_url,
            "AMEM_EMBED_MODEL": "fake",
            "AMEM_EXTRACT_API_KEY": KEY,
            "AMEM_EMBED_API_KEY": KEY,
        }
        result = amem_cli("retry", "--event-id", "m-1", *db, env=env)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "extracted 1 events, 0 failed, 1 new memories\n"
        assert "retry: 1/1" in result.stderr  # progress goes to stderr
        assert "User moved to Hangzhou" in cli_ok("recall", "Hangzhou", *db)

        api.fail_status = 500
        cli_ok("submit", "Later I moved again.", "--event-id", "m-2", *db)
        result = amem_cli("retry", "--event-id", "m-2", *db, env=env)
        assert result.returncode == 1
        assert result.stdout == "extracted 0 events, 1 failed, 0 new memories\n"
        assert "fake failure" not in result.stdout + result.stderr  # no response body
        assert KEY not in result.stdout + result.stderr
        api.fail_status = None
        result = amem_cli("retry", *db, env=env)  # the failed event resumes
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("extracted 1 events, 0 failed")

        result = amem_cli("reindex", *db, env=env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("embedded 4 of 4 (2 memories, 2 events; ")
        assert "reindex: 4/4" in result.stderr
        assert KEY not in result.stdout + result.stderr
        assert api.embedding_requests
        semantic = json.loads(
            cli_ok("recall", "relocation", "--mode", "semantic", "--json", *db, env=env)
        )
        assert "warnings" in semantic


def embedded_refs(path: Path) -> list[str]:
    return [row[0] for row in rows(path, "select distinct ref from vectors order by ref")]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_one_shot_write_leaves_its_vectors_or_says_it_did_not(
    tmp_path: Path, backend: str
) -> None:
    from amem.testing import FakeOpenAI

    path = tmp_path / "m.db"
    db = ["--db", str(path), *SCOPE, "--backend", backend]
    with FakeOpenAI() as api:
        env = {"AMEM_EMBED_BASE_URL": api.base_url, "AMEM_EMBED_MODEL": "fake"}
        result = amem_cli("submit", TEXT, "--event-id", "m-1", *db, env=env)
        assert result.returncode == 0, result.stderr
        assert "no vector" not in result.stderr
        assert embedded_refs(path) == ["m-1"]  # the command waited for it

        api.fail_status = 500  # the endpoint is down: the command says what is left
        result = amem_cli("submit", "我也喜欢龙井茶。", "--event-id", "m-2", *db, env=env)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "stored m-2 (seq 2, stored) in assistant/support\n"
        assert (
            "amem: note: 1 of the new memories and events have no vector yet; the next process "
            "that opens this database with embeddings configured embeds them"
        ) in result.stderr
        assert embedded_refs(path) == ["m-1"]

        api.fail_status = None  # auto recall now ranks by words, and says why
        quiet = {**env, "AMEM_EMBED_BACKFILL": "false"}  # so the coverage stays as it is
        result = amem_cli("recall", "龙井茶", *db, env=quiet)
        assert result.returncode == 0, result.stderr
        assert "(m-2)" in result.stdout
        assert "warning: ranked by words only: vectors cover less than 80%" in result.stdout
        found = json.loads(cli_ok("recall", "龙井茶", "--json", *db, env=quiet))
        assert found["ranking"] == "lexical"
        assert found["warnings"][0].startswith("ranked by words only")


def test_non_ascii_api_key_is_a_clean_error(tmp_path: Path) -> None:
    from amem.testing import FakeOpenAI

    db = ["--db", str(tmp_path / "m.db"), *SCOPE]
    cli_ok("submit", TEXT, "--event-id", "m-1", *db)
    with FakeOpenAI() as api:
        env = {
            "AMEM_EXTRACT_BASE_URL": api.base_url,
            "AMEM_EXTRACT_MODEL": "fake",
            "AMEM_EXTRACT_API_KEY": SECRET,
        }
        result = amem_cli("retry", "--event-id", "m-1", *db, env=env)
    assert result.returncode == 1
    assert result.stderr.startswith("amem: error: ")
    assert "Traceback" not in result.stderr


def test_list_shows_the_key_a_memory_is_filed_under_and_when_it_stopped_being_true(
    tmp_path: Path,
) -> None:
    """What ``erase --subject/--fact-key`` needs is on the listing's lines, not only in
    ``--json``."""
    db = str(tmp_path / "memory.db")
    for said in ("I live in Lisbon", "I moved to Porto"):
        ran = amem_cli("remember", "--db", db, "--subject", "user", "--fact-key", "residence", said)
        assert ran.returncode == 0, ran.stderr
    listed = amem_cli("list", "--db", db, "--expired")
    assert listed.returncode == 0, listed.stderr
    lisbon, porto = sorted(
        line for line in listed.stdout.splitlines() if "[user/residence]" in line
    )
    assert "I live in Lisbon [user/residence] [expired]" in lisbon
    assert "I moved to Porto [user/residence]  (" in porto
