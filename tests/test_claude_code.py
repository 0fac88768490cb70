"""Claude Code capture: transcripts in Claude Code's own format, and the hook run the way
Claude Code runs it (the command with the hook's JSON on stdin; a real process where its
memory is measured)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import amem_cli, clean_env, help_text, rows

import amem
from amem.hosts import claude_code
from amem.limits import (
    MAX_EVENT_CHARS,
    MAX_HOOK_INPUT_BYTES,
    MAX_TRANSCRIPT_BYTES,
    MAX_TRANSCRIPT_LINE_BYTES,
)

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


def read(path: Path, session: str = SESSION) -> tuple[list[dict[str, Any]], claude_code.LeftOut]:
    """The entries of the transcript at ``path``, and the lines left out."""
    left_out = claude_code.LeftOut()
    with closing(claude_code.open_transcript(path, session)) as transcript:
        return list(claude_code.entries(transcript, left_out)), left_out


def said(entries: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(e["event_id"], e["role"], e["text"]) for e in entries]


async def capture(
    scope: amem.Scope, path: Path, session: str = SESSION, **options: Any
) -> claude_code.Captured:
    with closing(claude_code.open_transcript(path, session)) as transcript:
        return await claude_code.capture(scope, transcript, **options)


def expected(lines: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    return [(event_id(u), role, text) for u, role, text in lines]


# --- reading a transcript ------------------------------------------------------------------


def test_a_transcript_gives_what_the_user_and_the_assistant_said(tmp_path: Path) -> None:
    entries, left_out = read(transcript_file(tmp_path, "session.jsonl"))
    # left out: thinking, tool calls and results, a subagent's sidechain, meta lines, slash
    # command echoes, an interruption, a synthetic API error, the compaction summary,
    # system lines, the file history snapshot and the title summary
    assert said(entries) == expected(SAID)
    assert left_out == claude_code.LeftOut()
    first = entries[0]
    assert first["session"] == SESSION
    assert first["source"] == "claude-code"
    assert first["occurred_at"] == "2026-03-01T22:38:47.557Z"


def test_a_line_seen_before_keeps_its_first_entry(tmp_path: Path) -> None:
    path = transcript_file(tmp_path, "session.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    [prompt] = [line for line in lines if uuid(5) in line and '"type":"user"' in line]
    changed = prompt.replace("health check", "metrics")  # the same uuid, other words
    path.write_text("".join([*lines, changed]), encoding="utf-8")
    assert said(read(path)[0]) == expected(SAID)


def test_a_line_copied_into_a_resumed_session_keeps_the_session_it_names(
    tmp_path: Path,
) -> None:
    resumed = "0b9e4c2a-8f3d-4a6b-b1c7-5e2d9f0a3c18"
    path = tmp_path / f"{resumed}.jsonl"
    path.write_bytes((FIXTURES / "session.jsonl").read_bytes())
    entries, _ = read(path, resumed)
    assert said(entries) == expected(SAID)  # the IDs the original session gave them
    assert {e["session"] for e in entries} == {SESSION}


def test_a_line_still_being_written_is_read_once_it_is_whole(tmp_path: Path) -> None:
    path = transcript_file(tmp_path, "session.jsonl")
    later = (FIXTURES / "session_more.jsonl").read_bytes()
    half = later.index(b"\n") // 2
    with path.open("ab") as f:
        f.write(later[:half])  # Claude Code is halfway through writing a line
    now, left_out = read(path)
    assert (said(now), left_out.malformed) == (expected(SAID), [])  # not an error: not read yet
    with path.open("ab") as f:
        f.write(later[half:])
    grown, left_out = read(path)
    assert said(grown) == expected(SAID + SAID_LATER)
    assert left_out.malformed == []


def test_a_line_that_is_not_json_is_left_out_and_reported(tmp_path: Path) -> None:
    path = transcript_file(tmp_path, "session.jsonl")
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(6, b'{"type":"user","message":{"role":"user","content":"cut sh\n')
    lines.insert(8, b"\xff\xfe not UTF-8\n")
    path.write_bytes(b"".join(lines))
    entries, left_out = read(path)
    assert said(entries) == expected(SAID)
    assert left_out.malformed == [7, 9]


def test_a_text_longer_than_an_event_holds_is_cut_with_a_mark(tmp_path: Path) -> None:
    record = {
        "type": "user",
        "uuid": uuid(99),
        "sessionId": SESSION,
        "message": {"role": "user", "content": "x\x00" + "长" * MAX_EVENT_CHARS},
    }
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    [entry], _ = read(path)
    assert len(entry["text"]) == MAX_EVENT_CHARS
    assert entry["text"].startswith("x长")  # NUL cannot be stored: it goes
    assert entry["text"].endswith("[cut: the transcript line is longer]")
    assert "occurred_at" not in entry  # no timestamp: the time of capture


def nested(depth: int) -> bytes:
    """A transcript line (a user line, as far as its start goes) nested ``depth`` deep."""
    return b'{"type":"user","message":' + b'{"content":' * depth + b'"x"' + b"}" * depth + b"}\n"


def user_line(n: int, text: str, **fields: object) -> bytes:
    record = {
        "type": "user",
        "uuid": uuid(n),
        "sessionId": SESSION,
        "message": {"role": "user", "content": text},
    } | fields
    return json.dumps(record, ensure_ascii=False).encode() + b"\n"


def test_a_line_longer_than_the_line_limit_is_read_past_and_counted(tmp_path: Path) -> None:
    path = transcript_file(tmp_path, "session.jsonl")
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(3, user_line(97, "长" * (MAX_TRANSCRIPT_LINE_BYTES // 3)))  # just over it
    lines.insert(5, user_line(98, "x" * (MAX_TRANSCRIPT_LINE_BYTES - 200)))  # just under it
    path.write_bytes(b"".join(lines))
    entries, left_out = read(path)
    assert said(entries) == expected([(uuid(98), "user", entries[0]["text"]), *SAID])
    assert entries[0]["text"].endswith("[cut: the transcript line is longer]")
    assert left_out == claude_code.LeftOut(malformed=[], too_long=[4])


def test_a_line_too_long_that_is_still_being_written_is_read_once_it_is_whole(
    tmp_path: Path,
) -> None:
    path = transcript_file(tmp_path, "session.jsonl")
    with path.open("ab") as f:
        f.write(user_line(97, "x" * MAX_TRANSCRIPT_LINE_BYTES)[:-1])  # no newline yet
    entries, left_out = read(path)
    assert (said(entries), left_out) == (expected(SAID), claude_code.LeftOut())  # not yet
    with path.open("ab") as f:
        f.write(b"\n" + (FIXTURES / "session_more.jsonl").read_bytes())
    entries, left_out = read(path)
    assert said(entries) == expected(SAID + SAID_LATER)
    assert left_out.too_long == [len(path.read_bytes().splitlines()) - 2]


@pytest.mark.parametrize("kind", ["directory", "fifo", "device"])
def test_only_a_regular_file_is_a_transcript(tmp_path: Path, kind: str) -> None:
    path = {"directory": tmp_path, "fifo": tmp_path / "t.jsonl", "device": Path("/dev/zero")}[kind]
    if kind == "fifo":
        os.mkfifo(path)  # nobody writes to it: opening it for reading would wait forever
    with pytest.raises(amem.InvalidInput, match="not a regular file"):
        claude_code.open_transcript(path, SESSION)


def test_a_transcript_larger_than_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / f"{SESSION}.jsonl"
    with path.open("wb") as f:
        f.truncate(MAX_TRANSCRIPT_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(amem.InvalidInput, match=f"larger than {MAX_TRANSCRIPT_BYTES >> 20} MiB"):
        claude_code.open_transcript(path, SESSION)


def test_the_end_of_the_hook_input_is_found_however_it_is_split() -> None:
    hook = {
        "session_id": SESSION,
        "transcript_path": "/tmp/t.jsonl",
        "custom_instructions": 'keep "}" and ] and \\" and {[',
    }
    data = json.dumps(hook).encode()
    for cut in range(len(data)):
        buffer, end = bytearray(data[:cut]), claude_code.ValueEnd()
        assert not end.found_in(buffer), cut
        buffer += data[cut:] + b"\n{}"  # what follows the object is not looked at
        assert end.found_in(buffer), cut
        assert claude_code.hook_input(bytes(buffer[: len(data)])).session_id == SESSION


@pytest.mark.parametrize(
    ("stdin", "problem"),
    [
        (b"PreCompact", "not JSON"),
        (b'["session_id"]', "not a JSON object"),
        (b'{"transcript_path": "/tmp/t.jsonl"}', "no usable session_id"),
        (b'{"session_id": "s", "transcript_path": ""}', "no transcript_path"),
        (b'{"session_id": "s\\u202e", "transcript_path": "/tmp/t.jsonl"}', "no usable session_id"),
        (b'{"session_id": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "not JSON"),
    ],
)
def test_hook_input_that_names_no_transcript_is_refused(stdin: bytes, problem: str) -> None:
    with pytest.raises(amem.InvalidInput, match=problem):
        claude_code.hook_input(stdin)


def test_the_hook_input_is_read_without_waiting_for_stdin_to_close() -> None:
    read_end, write_end = os.pipe()
    hook = {
        "session_id": SESSION,
        "transcript_path": "/tmp/t.jsonl",
        "hook_event_name": "SessionEnd",
        "reason": "prompt_input_exit",
    }
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
    first = (await capture(scope, path)).result
    assert first.stored == [event_id(u) for u, _, _ in SAID]
    assert first.instance == f"claude-code:{SESSION}"
    again = (await capture(scope, path)).result
    assert (again.stored, again.duplicates, again.skipped) == ([], [], len(SAID))
    path.write_bytes(path.read_bytes() + (FIXTURES / "session_more.jsonl").read_bytes())
    grown = (await capture(scope, path)).result
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
    path = transcript_file(tmp_path, "session.jsonl")
    results = []

    async def capture_it() -> None:
        results.append((await capture(scope, path)).result)

    async with anyio.create_task_group() as tg:  # e.g. a Stop and a PreCompact hook
        tg.start_soon(capture_it)
        tg.start_soon(capture_it)
    assert sorted(e for r in results for e in r.stored) == sorted(event_id(u) for u, _, _ in SAID)
    assert await scope.capture_cursor(claude_code.instance_for(SESSION)) == len(SAID)


@pytest.mark.anyio
async def test_a_deleted_line_is_not_captured_again(scope: amem.Scope, tmp_path: Path) -> None:
    path = transcript_file(tmp_path, "session.jsonl")
    await capture(scope, path)
    await scope.delete(event_id=event_id(uuid(15)))
    again = (await capture(scope, path)).result
    assert again.stored == []  # the session's cursor is past it
    copy = tmp_path / "backup-of-the-session.jsonl"  # a backfill under another name
    copy.write_bytes(path.read_bytes())
    backfill = (await capture(scope, copy, copy.stem)).result
    assert backfill.erased == [event_id(uuid(15))]  # its tombstone refuses it
    assert backfill.stored == []


@pytest.mark.anyio
async def test_a_session_is_captured_into_one_scope(mem: amem.Memory, tmp_path: Path) -> None:
    path = transcript_file(tmp_path, "session.jsonl")
    await capture(mem.scope(project="shop"), path)
    with pytest.raises(amem.Conflict) as refused:  # event IDs are unique in the database
        await capture(mem.scope(project="elsewhere"), path)
    assert refused.value.code == "duplicate_conflict"


def many_lines(path: Path, n: int, **fields: object) -> list[bytes]:
    """A transcript of ``n`` user lines (``fields`` added to each), written to ``path``."""
    lines = [user_line(k, f"line {k}: I like tea number {k}", **fields) for k in range(n)]
    path.write_bytes(b"".join(lines))
    return lines


async def stored_texts(scope: amem.Scope) -> list[str]:
    listing = await scope.list("events", limit=500)
    return [event.text for event in listing.items]


@pytest.mark.anyio
async def test_a_capture_stopped_by_its_time_limit_is_continued_by_the_next_run(
    scope: amem.Scope, tmp_path: Path
) -> None:
    path, n = tmp_path / f"{SESSION}.jsonl", 2 * claude_code.SLICE_ENTRIES + 10
    many_lines(path, n)
    cursors = []
    while True:  # a time limit of 0: each run captures one slice and stops
        done = await capture(scope, path, time_limit=0)
        cursors.append((done.result.cursor, len(done.result.stored), done.finished))
        assert await scope.capture_cursor(claude_code.instance_for(SESSION)) == done.result.cursor
        if done.finished:
            break
    slice_ = claude_code.SLICE_ENTRIES
    assert cursors == [(slice_, slice_, False), (2 * slice_, slice_, False), (n, 10, True)]
    assert (await scope.list("events", limit=1)).total == n  # each line once


@pytest.mark.anyio
async def test_a_line_nested_too_deep_or_not_utf8_is_counted_and_the_rest_is_captured(
    scope: amem.Scope, tmp_path: Path
) -> None:
    path = transcript_file(tmp_path, "session.jsonl")
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(4, nested(100_000))
    lines.insert(9, b'{"type":"user","uuid":"\xff\xfe"}\n')
    lines.insert(11, nested(900))  # parses: nothing else recurses into it
    path.write_bytes(b"".join(lines))
    done = await capture(scope, path)
    assert done.result.stored == [event_id(u) for u, _, _ in SAID]
    assert done.left_out == claude_code.LeftOut(malformed=[5, 10], too_long=[])


@pytest.mark.anyio
async def test_an_erased_line_without_a_session_id_stays_erased_under_any_session_name(
    scope: amem.Scope, tmp_path: Path
) -> None:
    path = tmp_path / "notes.jsonl"
    many_lines(path, 3, sessionId=None)  # the lines name no session
    first = (await capture(scope, path, "first-name")).result
    assert first.stored == [f"claude-code:{uuid(k)}" for k in range(3)]  # not first-name's
    await scope.delete(event_id=first.stored[1])
    with pytest.raises(amem.Conflict) as refused:  # another instance: its cursor is 0
        await capture(scope, path, "other-name")
    assert refused.value.code == "duplicate_conflict"  # the same lines in another session
    assert "line 1: I like tea number 1" not in await stored_texts(scope)
    await scope.erase(session="first-name")
    again = (await capture(scope, path, "third-name")).result
    assert (again.erased, again.stored) == (first.stored, [])
    assert await stored_texts(scope) == []


# --- the commands, as Claude Code and a user run them ---------------------------------------


def hook(db: Path, stdin: dict[str, str] | str, *options: str) -> tuple[int, str, str]:
    text = stdin if isinstance(stdin, str) else json.dumps(stdin)
    result = amem_cli("claude-code-hook", "--db", str(db), *options, input=text)
    return result.returncode, result.stdout, result.stderr


def hook_input(path: Path, event: str = "PreCompact") -> dict[str, str]:
    """A hook's stdin, as Claude Code writes it."""
    fields = {
        "session_id": SESSION,
        "transcript_path": str(path),
        "cwd": "/home/ana/src/shop",
        "hook_event_name": event,
    }
    if event == "PreCompact":
        fields |= {"trigger": "auto", "custom_instructions": ""}
    if event == "SessionEnd":
        fields |= {"reason": "prompt_input_exit"}
    return fields


def stored_events(db: Path) -> list[tuple[str, str, str, str | None]]:
    return rows(db, "select id, role, text, session from events order by seq")


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


def test_the_hook_skips_what_it_cannot_read_and_captures_the_rest(tmp_path: Path) -> None:
    db, path = tmp_path / "memory.db", transcript_file(tmp_path, "session.jsonl")
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(4, nested(100_000))
    lines.insert(9, b"\xff\xfe not UTF-8\n")
    path.write_bytes(b"".join(lines))
    status, out, err = hook(db, hook_input(path))
    assert (status, out) == (0, "")
    assert (
        f"amem: warning: session {SESSION}: left out 2 transcript lines not JSON objects (not "
        "JSON, not UTF-8 or nested too deep): lines 5, 10\n" in err
    )
    assert f"session {SESSION}: cursor 5: stored 5" in err
    assert [(i, role, text) for i, role, text, _ in stored_events(db)] == expected(SAID)


@pytest.mark.parametrize(
    ("stdin", "problem"),
    [
        ('{"session_id": ' + "[" * 100_000 + "]" * 100_000 + "}", "is not JSON"),
        (" " * MAX_HOOK_INPUT_BYTES + "{}", f"is longer than {MAX_HOOK_INPUT_BYTES} bytes"),
    ],
)
def test_hook_input_nested_too_deep_or_too_long_is_a_clear_error(
    tmp_path: Path, stdin: str, problem: str
) -> None:
    db = tmp_path / "memory.db"
    status, out, err = hook(db, stdin)
    assert (status, out) == (1, "")
    assert err == f"amem: error: invalid_input: the hook input on stdin {problem}\n"
    assert not db.exists()


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_the_hook_refuses_a_transcript_path_that_is_no_file_at_once(
    tmp_path: Path, kind: str
) -> None:
    db, path = (
        tmp_path / "memory.db",
        {"fifo": tmp_path / "t.jsonl", "device": Path("/dev/zero")}[kind],
    )
    if kind == "fifo":
        os.mkfifo(path)
    status, out, err = hook(db, hook_input(path))
    assert (status, out) == (1, "")
    assert err == (
        "amem: error: invalid_input: the transcript is not a regular file (a directory, device "
        "or pipe)\n"
    )
    assert not db.exists()


def test_the_hook_stops_at_its_time_limit_and_the_next_run_goes_on(tmp_path: Path) -> None:
    db, path = tmp_path / "memory.db", tmp_path / f"{SESSION}.jsonl"
    many_lines(path, claude_code.SLICE_ENTRIES + 10)
    status, out, err = hook(db, hook_input(path), "--time-limit", "0")
    assert (status, out) == (0, "")
    assert err.endswith(
        f"cursor {claude_code.SLICE_ENTRIES}: stored {claude_code.SLICE_ENTRIES}, 0 already "
        "stored, 0 skipped; stopped at the time limit (0 s): the next run goes on from there\n"
    )
    assert len(stored_events(db)) == claude_code.SLICE_ENTRIES  # committed
    status, out, err = hook(db, hook_input(path), "--time-limit", "0")
    assert err.endswith(f"stored 10, 0 already stored, {claude_code.SLICE_ENTRIES} skipped\n")
    assert len(stored_events(db)) == claude_code.SLICE_ENTRIES + 10
    status, out, err = hook(db, hook_input(path), "--time-limit", "soon")
    assert (status, out) == (1, "")  # never 2
    assert "--time-limit: must be a number of seconds from 0 to 3600" in err


def test_the_hook_waits_for_its_vectors_within_its_time_limit(tmp_path: Path) -> None:
    from amem.testing import FakeOpenAI

    db, path = tmp_path / "memory.db", transcript_file(tmp_path, "session.jsonl")
    stdin = json.dumps(hook_input(path))
    with FakeOpenAI() as api:
        env = {"AMEM_EMBED_BASE_URL": api.base_url, "AMEM_EMBED_MODEL": "fake"}
        result = amem_cli("claude-code-hook", "--db", str(db), input=stdin, env=env)
        assert (result.returncode, result.stdout) == (0, ""), result.stderr
        assert "no vector" not in result.stderr
        assert embedded_events(db) == {event_id for event_id, *_ in expected(SAID)}

        path.write_bytes(path.read_bytes() + (FIXTURES / "session_more.jsonl").read_bytes())
        api.gate.clear()  # the endpoint holds its answers, and the time limit leaves no wait
        result = amem_cli(
            "claude-code-hook", "--db", str(db), "--time-limit", "0", input=stdin, env=env
        )
        api.gate.set()
    assert (result.returncode, result.stdout) == (0, ""), result.stderr
    assert "amem: note: 2 of the new memories and events have no vector yet" in result.stderr
    assert result.stderr.endswith("stored 2, 0 already stored, 5 skipped\n")
    assert len(embedded_events(db)) == 5


def embedded_events(db: Path) -> set[str]:
    return {ref for (ref,) in rows(db, "select ref from vectors where doc_kind = 'event'")}


def peak_rss_kib(args: list[str], stdin: str) -> int:
    """The peak resident memory of ``python -m amem ARGS``, in KiB, as a parent whose only
    child it is sees it."""
    parent = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    command = [sys.executable, "-c", parent, sys.executable, "-m", "amem", *args]
    result = subprocess.run(
        command, input=stdin, capture_output=True, text=True, timeout=300, env=clean_env()
    )
    assert result.returncode == 0, result.stderr
    return int(result.stdout.split()[-1])


def test_the_hook_reads_a_large_transcript_in_bounded_memory(tmp_path: Path) -> None:
    small, large = tmp_path / "small" / f"{SESSION}.jsonl", tmp_path / "large" / f"{SESSION}.jsonl"
    for path in (small, large):
        path.parent.mkdir()
        path.write_bytes((FIXTURES / "session.jsonl").read_bytes())
    result = {
        "type": "user",
        "sessionId": SESSION,
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x" * (1 << 20)}],
        },
    }
    with large.open("ab") as f:
        for n in range(150):  # 150 MB of tool output, left out line by line
            f.write(json.dumps(result | {"uuid": f"r-{n}"}).encode() + b"\n")
    args = ["claude-code-hook", "--db", str(tmp_path / "memory.db")]
    baseline = peak_rss_kib(args, json.dumps(hook_input(small)))
    reading = peak_rss_kib(args, json.dumps(hook_input(large)))
    assert reading - baseline < 50 << 10  # KiB: a line or two in memory, never the file


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("claude-code-hook", ["stdin", "session_id", "transcript_path", "stderr", "never 2"]),
        ("claude-code-capture", ["TRANSCRIPT", "--session", "SESSION.jsonl", "cursor"]),
    ],
)
def test_the_claude_code_commands_explain_themselves(command: str, words: list[str]) -> None:
    text = help_text(command)
    for word in words:
        assert word in text, word
