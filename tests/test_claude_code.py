"""Claude Code capture: transcripts in Claude Code's own format, and the hook run the way
Claude Code runs it (a subprocess with the hook's JSON on stdin)."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path

import anyio
import pytest
from test_cli import amem_cli

import amem
from amem.hosts import claude_code
from amem.limits import MAX_EVENT_CHARS

FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
SESSION = "7c2f3b1e-5a4d-4e8f-9b6a-2d1c0e9f8a7b"  # the session of the fixtures


def uuid(n: int) -> str:
    """The uuid of the fixtures' line ``n`` (their uuids count up)."""
    return f"4d2196f2-bd5f-45fd-9777-83d22fabe{n:03x}"


SAID = [  # what the user and the assistant said in session.jsonl, nothing else
    (
        uuid(5),
        "user",
        "我们的商店用 Postgres 16，测试用 pytest 跑。Please add a health check endpoint.",
    ),
    (uuid(7), "assistant", "I'll look at the app factory first."),
    (uuid(10), "assistant", "Adding `/health` to `shop/app.py`."),
    (uuid(15), "user", "Also the endpoint must not touch the database."),
    (uuid(20), "assistant", "Done: `/health` returns 200 without a database query."),
]
SAID_LATER = [  # session_more.jsonl: the same session, grown
    (uuid(21), "user", "Ship it. I prefer squash merges."),
    (uuid(22), "assistant", "Merged with a squash commit."),
]


def event_id(line_uuid: str) -> str:
    return f"{SESSION}:{line_uuid}"


def transcript_file(tmp_path: Path, *parts: str) -> Path:
    """A copy of the fixture files ``parts``, one after the other, named as Claude Code
    names a transcript (``<session_id>.jsonl``)."""
    path = tmp_path / f"{SESSION}.jsonl"
    path.write_bytes(b"".join((FIXTURES / part).read_bytes() for part in parts))
    return path


def said(transcript: claude_code.Transcript) -> list[tuple[str, str, str]]:
    return [(e["event_id"], e["role"], e["text"]) for e in transcript.entries]


def expected(lines: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    return [(event_id(u), role, text) for u, role, text in lines]


# --- reading a transcript ------------------------------------------------------------------


def test_a_transcript_gives_what_the_user_and_the_assistant_said(tmp_path: Path) -> None:
    transcript = claude_code.read_transcript(transcript_file(tmp_path, "session.jsonl"), SESSION)
    # left out: thinking, tool calls and results, a subagent's sidechain, meta lines, slash
    # command echoes, an interruption, a synthetic API error, the compaction summary,
    # system lines, the file history snapshot and the title summary
    assert said(transcript) == expected(SAID)
    assert transcript.malformed == []
    first = transcript.entries[0]
    assert first["session"] == SESSION
    assert first["source"] == "claude-code"
    assert first["occurred_at"] == "2026-03-01T22:38:47.557Z"


def test_a_line_seen_before_keeps_its_first_entry(tmp_path: Path) -> None:
    path = transcript_file(tmp_path, "session.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    [prompt] = [line for line in lines if uuid(5) in line and '"type":"user"' in line]
    changed = prompt.replace("health check", "metrics")  # the same uuid, other words
    path.write_text("".join([*lines, changed]), encoding="utf-8")
    assert said(claude_code.read_transcript(path, SESSION)) == expected(SAID)


def test_a_line_copied_into_a_resumed_session_keeps_the_session_it_names(
    tmp_path: Path,
) -> None:
    resumed = "0b9e4c2a-8f3d-4a6b-b1c7-5e2d9f0a3c18"
    path = tmp_path / f"{resumed}.jsonl"
    path.write_bytes((FIXTURES / "session.jsonl").read_bytes())
    transcript = claude_code.read_transcript(path, resumed)
    assert said(transcript) == expected(SAID)  # the IDs the original session gave them
    assert {e["session"] for e in transcript.entries} == {SESSION}


def test_a_line_still_being_written_is_read_once_it_is_whole(tmp_path: Path) -> None:
    path = transcript_file(tmp_path, "session.jsonl")
    later = (FIXTURES / "session_more.jsonl").read_bytes()
    half = later.index(b"\n") // 2
    with path.open("ab") as f:
        f.write(later[:half])  # Claude Code is halfway through writing a line
    now = claude_code.read_transcript(path, SESSION)
    assert (said(now), now.malformed) == (expected(SAID), [])  # not an error: not read yet
    with path.open("ab") as f:
        f.write(later[half:])
    grown = claude_code.read_transcript(path, SESSION)
    assert said(grown) == expected(SAID + SAID_LATER)
    assert grown.malformed == []


def test_a_line_that_is_not_json_is_left_out_and_reported(tmp_path: Path) -> None:
    path = transcript_file(tmp_path, "session.jsonl")
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(6, b'{"type":"user","message":{"role":"user","content":"cut sh\n')
    lines.insert(8, b"\xff\xfe not UTF-8\n")
    path.write_bytes(b"".join(lines))
    transcript = claude_code.read_transcript(path, SESSION)
    assert said(transcript) == expected(SAID)
    assert transcript.malformed == [7, 9]


def test_a_text_longer_than_an_event_holds_is_cut_with_a_mark(tmp_path: Path) -> None:
    record = {"type": "user", "uuid": uuid(99), "sessionId": SESSION,
              "message": {"role": "user", "content": "x\x00" + "长" * MAX_EVENT_CHARS}}  # fmt: skip
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    [entry] = claude_code.read_transcript(path, SESSION).entries
    assert len(entry["text"]) == MAX_EVENT_CHARS
    assert entry["text"].startswith("x长")  # NUL cannot be stored: it goes
    assert entry["text"].endswith("[cut: the transcript line is longer]")
    assert "occurred_at" not in entry  # no timestamp: the time of capture


@pytest.mark.parametrize(
    ("stdin", "problem"),
    [
        (b"PreCompact", "not JSON"),
        (b'["session_id"]', "not a JSON object"),
        (b'{"transcript_path": "/tmp/t.jsonl"}', "no usable session_id"),
        (b'{"session_id": "s", "transcript_path": ""}', "no transcript_path"),
    ],
)
def test_hook_input_that_names_no_transcript_is_refused(stdin: bytes, problem: str) -> None:
    with pytest.raises(amem.InvalidInput, match=problem):
        claude_code.hook_input(stdin)


def test_the_hook_input_is_read_without_waiting_for_stdin_to_close() -> None:
    read_end, write_end = os.pipe()
    hook = {"session_id": SESSION, "transcript_path": "/tmp/t.jsonl",
            "hook_event_name": "SessionEnd", "reason": "prompt_input_exit"}  # fmt: skip
    os.write(write_end, json.dumps(hook).encode())
    got: list[claude_code.HookInput] = []
    reader = threading.Thread(target=lambda: got.append(claude_code.read_hook_input(read_end)))
    reader.start()
    reader.join(timeout=10)
    finished_with_stdin_open = not reader.is_alive()
    os.close(write_end)  # only now (a reader still waiting returns at the end of file)
    reader.join()
    os.close(read_end)
    assert finished_with_stdin_open
    assert got == [claude_code.HookInput(SESSION, Path("/tmp/t.jsonl"), "SessionEnd")]


# --- capturing, in process, on both backends ------------------------------------------------


@pytest.mark.anyio
async def test_capture_stores_each_line_once_and_then_only_what_is_new(
    scope: amem.Scope, tmp_path: Path
) -> None:
    path = transcript_file(tmp_path, "session.jsonl")
    first = await claude_code.capture(scope, claude_code.read_transcript(path, SESSION))
    assert first.stored == [event_id(u) for u, _, _ in SAID]
    assert first.instance == f"claude-code:{SESSION}"
    again = await claude_code.capture(scope, claude_code.read_transcript(path, SESSION))
    assert (again.stored, again.duplicates, again.skipped) == ([], [], len(SAID))
    path.write_bytes(path.read_bytes() + (FIXTURES / "session_more.jsonl").read_bytes())
    grown = await claude_code.capture(scope, claude_code.read_transcript(path, SESSION))
    assert grown.stored == [event_id(u) for u, _, _ in SAID_LATER]
    assert grown.skipped == len(SAID)
    events = await scope.list("events", session=SESSION, limit=50)
    assert [(e.role, e.text) for e in reversed(events.items)] == [
        (role, text) for _, role, text in SAID + SAID_LATER
    ]


@pytest.mark.anyio
async def test_two_captures_of_one_session_at_once_store_each_line_once(
    scope: amem.Scope, tmp_path: Path
) -> None:
    transcript = claude_code.read_transcript(transcript_file(tmp_path, "session.jsonl"), SESSION)
    results = []

    async def capture() -> None:
        results.append(await claude_code.capture(scope, transcript))

    async with anyio.create_task_group() as tg:  # e.g. a Stop and a PreCompact hook
        tg.start_soon(capture)
        tg.start_soon(capture)
    assert sorted(e for r in results for e in r.stored) == sorted(event_id(u) for u, _, _ in SAID)
    assert await scope.capture_cursor(claude_code.instance_for(SESSION)) == len(SAID)


@pytest.mark.anyio
async def test_a_deleted_line_is_not_captured_again(scope: amem.Scope, tmp_path: Path) -> None:
    path = transcript_file(tmp_path, "session.jsonl")
    await claude_code.capture(scope, claude_code.read_transcript(path, SESSION))
    await scope.delete(event_id=event_id(uuid(15)))
    again = await claude_code.capture(scope, claude_code.read_transcript(path, SESSION))
    assert again.stored == []  # the session's cursor is past it
    copy = tmp_path / "backup-of-the-session.jsonl"  # a backfill under another name
    copy.write_bytes(path.read_bytes())
    backfill = await claude_code.capture(scope, claude_code.read_transcript(copy, copy.stem))
    assert backfill.erased == [event_id(uuid(15))]  # its tombstone refuses it
    assert backfill.stored == []


@pytest.mark.anyio
async def test_a_session_is_captured_into_one_scope(mem: amem.Memory, tmp_path: Path) -> None:
    transcript = claude_code.read_transcript(transcript_file(tmp_path, "session.jsonl"), SESSION)
    await claude_code.capture(mem.scope(project="shop"), transcript)
    with pytest.raises(amem.Conflict) as refused:  # event IDs are unique in the database
        await claude_code.capture(mem.scope(project="elsewhere"), transcript)
    assert refused.value.code == "duplicate_conflict"


# --- the commands, as Claude Code and a user run them ---------------------------------------


def hook(db: Path, stdin: dict[str, str] | str, *options: str) -> tuple[int, str, str]:
    text = stdin if isinstance(stdin, str) else json.dumps(stdin)
    result = amem_cli("claude-code-hook", "--db", str(db), *options, input=text)
    return result.returncode, result.stdout, result.stderr


def hook_input(path: Path, event: str = "PreCompact") -> dict[str, str]:
    """A hook's stdin, as Claude Code writes it."""
    fields = {"session_id": SESSION, "transcript_path": str(path), "cwd": "/home/ana/src/shop",
              "hook_event_name": event}  # fmt: skip
    if event == "PreCompact":
        fields |= {"trigger": "auto", "custom_instructions": ""}
    if event == "SessionEnd":
        fields |= {"reason": "prompt_input_exit"}
    return fields


def stored_events(db: Path) -> list[tuple[str, str, str, str | None]]:
    conn = sqlite3.connect(db)
    rows = conn.execute("select id, role, text, session from events order by seq").fetchall()
    conn.close()
    return rows


def test_the_hook_captures_the_session_and_never_writes_stdout(tmp_path: Path) -> None:
    db, path = tmp_path / "memory.db", transcript_file(tmp_path, "session.jsonl")
    status, out, err = hook(db, hook_input(path, "PreCompact"), "--project", "shop")
    assert (status, out) == (0, "")
    assert f"amem: PreCompact: session {SESSION}: cursor 5: stored 5" in err
    path.write_bytes(path.read_bytes() + (FIXTURES / "session_more.jsonl").read_bytes())
    status, out, err = hook(db, hook_input(path, "SessionEnd"), "--project", "shop")
    assert (status, out) == (0, "")
    assert "cursor 7: stored 2, 0 already stored, 5 skipped" in err
    rows = stored_events(db)
    assert [(i, role, text) for i, role, text, _ in rows] == expected(SAID + SAID_LATER)
    assert {session for *_, session in rows} == {SESSION}


def test_a_missing_transcript_is_an_error_that_changes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    status, out, err = hook(db, hook_input(tmp_path / "gone.jsonl", "SessionEnd"))
    assert (status, out) == (1, "")  # 1: Claude Code shows the error and goes on
    assert err == "amem: error: invalid_input: the transcript file does not exist\n"
    assert not db.exists()


def test_a_hook_that_is_misused_exits_1_never_2(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    status, out, err = hook(db, "PreCompact")  # stdin is not the hook's JSON
    assert (status, out) == (1, "")
    assert err == "amem: error: invalid_input: the hook input on stdin is not JSON\n"
    status, out, err = hook(db, hook_input(tmp_path / "t.jsonl"), "--sesion", "x")  # a typo
    assert (status, out) == (1, "")  # 2 would block compaction
    assert "unrecognized arguments: --sesion" in err
    assert not db.exists()


def test_a_backfill_shares_the_hooks_cursor(tmp_path: Path) -> None:
    db, path = tmp_path / "memory.db", transcript_file(tmp_path, "session.jsonl")
    result = amem_cli("claude-code-capture", str(path), "--db", str(db))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"session {SESSION}: cursor 5: stored 5, 0 already stored, 0 skipped\n"
    status, out, err = hook(db, hook_input(path, "SessionEnd"))
    assert (status, out) == (0, "")
    assert "cursor 5: stored 0, 0 already stored, 5 skipped" in err
    assert len(stored_events(db)) == len(SAID)


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("claude-code-hook", ["stdin", "session_id", "transcript_path", "stderr", "never 2"]),
        ("claude-code-capture", ["TRANSCRIPT", "--session", "SESSION.jsonl", "cursor"]),
    ],
)
def test_the_claude_code_commands_explain_themselves(command: str, words: list[str]) -> None:
    result = amem_cli(command, "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for word in words:
        assert word in text, word
