"""``claude-code-hook`` and ``claude-code-capture``: Claude Code's session transcripts,
captured from a hook or afterwards (see docs/host-capture.md)."""

from __future__ import annotations

import argparse
import sys
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput
from ..limits import CAPTURE_SECONDS, MAX_TRANSCRIPT_LINE_BYTES, VECTOR_WAIT_SECONDS
from .common import Command, opened, progress, show, wait_for_vectors
from .ingest import capture_line, chosen_people
from .options import add_people_option, people_of, seconds

if TYPE_CHECKING:
    from ..hosts.claude_code import Captured, LeftOut, Transcript

SPEAKERS = "user or assistant: a Claude Code transcript names no one"


async def run_claude_code_hook(args: argparse.Namespace) -> int:
    import anyio.to_thread

    from ..hosts import claude_code

    # stdout is Claude Code's (it parses JSON there): this command writes only to stderr
    given = people_of(args.person)
    claude_code.check_speakers(given)
    hook = await anyio.to_thread.run_sync(claude_code.read_hook_input, sys.stdin.fileno())
    started = anyio.current_time()
    with closing(await open_transcript(hook.transcript_path, hook.session_id)) as transcript:
        async with opened(args) as (memory, scope):
            people = await chosen_people(scope, given)
            done = await claude_code.capture(
                scope, transcript, time_limit=args.time_limit, people=people
            )
            left = args.time_limit - (anyio.current_time() - started)  # the wait is in it
            await wait_for_vectors(memory, min(VECTOR_WAIT_SECONDS, max(left, 0.0)))
    warn_left_out(hook.session_id, done.left_out)
    line = session_line(hook.session_id, done, args.time_limit)
    print(f"amem: {hook.event or 'hook'}: {line}", file=sys.stderr)
    return 0


async def run_claude_code_capture(args: argparse.Namespace) -> int:
    from ..hosts import claude_code

    if args.session is not None and len(args.files) > 1:
        raise InvalidInput("--session names the session of one TRANSCRIPT; give one file")
    given = people_of(args.person)
    claude_code.check_speakers(given)
    named = [(path, args.session or path.stem) for path in args.files]
    for path, session in named:  # all checked before the database opens: a bad one changes nothing
        (await open_transcript(path, session)).close()
    captures = []
    async with opened(args) as (memory, scope):
        people = await chosen_people(scope, given)
        for path, session in named:
            with closing(await open_transcript(path, session)) as transcript:
                report = progress(f"claude-code-capture {session} (bytes)")
                done = await claude_code.capture(scope, transcript, progress=report, people=people)
            warn_left_out(session, done.left_out)
            captures.append((session, done))
        await wait_for_vectors(memory)
    data = {"captures": [capture_record(done) for _, done in captures]}
    show(args, data, "\n".join(session_line(session, done, None) for session, done in captures))
    return 0


async def open_transcript(path: Path, session: str) -> Transcript:
    import anyio.to_thread

    from ..hosts import claude_code

    return await anyio.to_thread.run_sync(claude_code.open_transcript, path, session)


def capture_record(done: Captured) -> dict[str, Any]:
    """A capture, as ``--json`` shows it: the ``CaptureResult`` and the lines left out."""
    return done.result.model_dump(mode="json") | {
        "malformed_lines": done.left_out.malformed,
        "too_long_lines": done.left_out.too_long,
        "finished": done.finished,
    }


def session_line(session: str, done: Captured, time_limit: float | None) -> str:
    line = f"session {session}: {capture_line(done.result)}"
    if not done.finished:
        line += f"; stopped at the time limit ({time_limit:g} s): the next run goes on from there"
    return line


def warn_left_out(session: str, left_out: LeftOut) -> None:
    """On stderr: the transcript's lines left out because they cannot be read."""
    for numbers, why in (
        (left_out.malformed, "not JSON objects (not JSON, not UTF-8 or nested too deep)"),
        (left_out.too_long, f"longer than {MAX_TRANSCRIPT_LINE_BYTES >> 20} MiB"),
    ):
        if numbers:
            shown = ", ".join(map(str, numbers[:10])) + (", ..." if len(numbers) > 10 else "")
            print(
                f"amem: warning: session {session}: left out {len(numbers)} transcript "
                f"lines {why}: lines {shown}",
                file=sys.stderr,
            )


def add_commands(command: Command) -> None:
    hook = command(
        "claude-code-hook",
        run_claude_code_hook,
        "capture a Claude Code session, as its hook (JSON on stdin)",
        (
            "Run as a Claude Code command hook (PreCompact, SessionEnd, Stop, ...): read the "
            "hook's JSON from stdin (session_id, transcript_path) and capture the session's "
            "transcript into the scope, its user and assistant text, each line once: only "
            "the lines past the session's cursor are stored, so running it again stores "
            "nothing twice. Prints nothing on stdout (Claude Code reads it); a summary goes "
            "to stderr. Exits 0 on success and 1 on any error, never 2 (which Claude Code "
            "reads as 'block compaction' or 'do not stop'). A long transcript is captured "
            "for --time-limit seconds at most; what was captured stays and the next run goes "
            "on from the cursor. With embeddings configured, what the time limit leaves "
            f"(at most {VECTOR_WAIT_SECONDS:g} s) is spent waiting for the new vectors; "
            "those still missing are embedded by the next process that opens the file."
        ),
    )
    hook.add_argument(
        "--time-limit",
        metavar="SECONDS",
        type=seconds(0, 3_600),  # 0: one slice
        default=CAPTURE_SECONDS,
        help=f"stop capturing after this long (default {CAPTURE_SECONDS:g}; keep it well "
        "under the hook's timeout)",
    )
    add_people_option(hook, SPEAKERS)
    capture = command(
        "claude-code-capture",
        run_claude_code_capture,
        "capture Claude Code transcript files (a backfill)",
        (
            "Capture Claude Code transcript files (~/.claude/projects/PROJECT/SESSION.jsonl) "
            "the way claude-code-hook does, e.g. sessions that ended before the hook was "
            "set up. Each file is its session, named by the file (SESSION.jsonl), and shares "
            "that session's cursor with the hook: nothing is stored twice."
        ),
    )
    capture.add_argument("files", metavar="TRANSCRIPT", nargs="+", type=Path)
    capture.add_argument(
        "--session", help="the session ID (one TRANSCRIPT only; default: its file name)"
    )
    add_people_option(capture, SPEAKERS)
