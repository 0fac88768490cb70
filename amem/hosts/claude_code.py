"""Claude Code capture: its session transcripts, read as host-capture entries.

Claude Code appends each session's transcript to a JSONL file
(``~/.claude/projects/<project>/<session_id>.jsonl``), one JSON object a line, and never
rewrites a line. Its hooks (``PreCompact``, ``SessionEnd``, ``Stop``, ...) get a JSON
object on stdin that names the ``session_id`` and the ``transcript_path``. Capture turns
the file into ``Scope.capture_transcript`` entries and sends them as the host instance
``claude-code:<session_id>``, so each session has its own cursor.

What a line becomes (one event at most):

- a ``user`` line a person typed (``message.content`` a string, or its ``text`` blocks):
  role ``user``;
- an ``assistant`` line's ``text`` blocks: role ``assistant``.

Left out, deliberately: ``thinking`` blocks (the model's private reasoning); tool calls
and tool results (file contents and command output: bulky, often secret, and every
captured event is an extraction call; the assistant's text says what they did);
sidechains (``isSidechain``: a subagent's own conversation, whose answer comes back as a
tool result); meta lines (``isMeta``: text Claude Code injects); compaction summaries
(``isCompactSummary``: a retelling of lines captured already); synthetic API error
messages; echoes of slash commands and shell escapes (``<command-name>``,
``<local-command-stdout>``, ``<bash-input>``, ...) and interruption notices; and every
other line type (``summary``, ``system``, ``file-history-snapshot``, ...).

An event's ID is ``<sessionId>:<uuid>`` of its line, its session the line's
``sessionId`` (else the hook's), ``occurred_at`` its ``timestamp``: a line is always the
same event, so a replay, or a line copied into a resumed session's file, is a duplicate,
never a conflict.

The cursor counts entries, so a transcript's entries may only ever grow at the end. They
do: an entry depends on its line alone; an ID seen before keeps its first line; a line
that is not a JSON object is left out every time (and reported); and a last line without
its newline that does not parse is still being written: it is read next time.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

from ..errors import Conflict, InvalidInput
from ..inputs import parse_time
from ..limits import CONTROL_CHARS, MAX_EVENT_CHARS, MAX_ID_CHARS
from ..llm.pipeline import Progress
from ..memory import Scope
from ..models import CaptureResult

SOURCE = "claude-code"
"""The ``source`` of every captured event."""
MAX_PART_CHARS = (MAX_ID_CHARS - 1) // 2
"""Longest session ID and line uuid: ``<sessionId>:<uuid>`` is an event ID."""
LEFT_OUT_FLAGS = ("isSidechain", "isMeta", "isCompactSummary", "isApiErrorMessage")
HOST_ECHOES = (
    "<command-name>",
    "<command-message>",
    "<command-args>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<local-command-caveat>",
    "<bash-input>",
    "<bash-stdout>",
    "<bash-stderr>",
    "[Request interrupted by user",
)
"""How the user lines Claude Code writes itself begin: slash commands and their output,
shell escapes (``!``), interruptions."""
CUT_MARK = "\n[cut: the transcript line is longer]"
CONFLICT_ATTEMPTS = 3
"""Captures of one session that race (two hooks at once) each try this often."""
READ_CHUNK = 65_536


@dataclass(frozen=True)
class HookInput:
    """The fields of a Claude Code hook's stdin that capture uses."""

    session_id: str
    transcript_path: Path
    event: str | None
    """``hook_event_name``: ``PreCompact``, ``SessionEnd``, ``Stop``, ..."""


@dataclass(frozen=True)
class Transcript:
    """A transcript file read as host-capture entries."""

    session: str
    entries: list[dict[str, Any]]
    malformed: list[int]
    """Numbers (from 1) of the lines left out because they are not JSON objects."""


def read_hook_input(fd: int) -> HookInput:
    """The hook's JSON object, read from the file descriptor ``fd`` (stdin) up to the
    object's end rather than to end of file: Claude Code may hold stdin open a while."""
    data = b""
    while chunk := os.read(fd, READ_CHUNK):
        data += chunk
        if data.rstrip().endswith(b"}") and is_json(data):
            break
    return hook_input(data)


def is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except ValueError:
        return False
    return True


def hook_input(data: bytes) -> HookInput:
    """The ``HookInput`` in a hook's stdin; ``invalid_input`` names what is missing."""
    try:
        fields = json.loads(data)
    except ValueError:
        raise InvalidInput("the hook input on stdin is not JSON") from None
    if not isinstance(fields, dict):
        raise InvalidInput("the hook input on stdin is not a JSON object")
    session, path = fields.get("session_id"), fields.get("transcript_path")
    if not usable_id(session):
        raise InvalidInput("the hook input has no usable session_id")
    if not isinstance(path, str) or not path.strip():
        raise InvalidInput("the hook input has no transcript_path")
    event = fields.get("hook_event_name")
    return HookInput(session, Path(path).expanduser(), event if isinstance(event, str) else None)


def read_transcript(path: Path, session: str) -> Transcript:
    """The transcript file at ``path`` of ``session``, as entries; ``invalid_input`` if it
    cannot be read (the message names the problem, not the path)."""
    if not usable_id(session):
        raise InvalidInput(
            f"a Claude Code session ID is a one-line name of 1 to {MAX_PART_CHARS} characters"
        )
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InvalidInput("the transcript file does not exist") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InvalidInput(f"the transcript file cannot be read ({reason})") from None
    return transcript_of(data, session)


def transcript_of(data: bytes, session: str) -> Transcript:
    """The entries of a transcript's bytes, in order, each event ID once."""
    lines = data.split(b"\n")
    entries: list[dict[str, Any]] = []
    malformed: list[int] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:  # invalid JSON or invalid UTF-8
            record = None
        if not isinstance(record, dict):
            if number == len(lines):  # no newline after it yet: Claude Code is writing it
                break
            malformed.append(number)
            continue
        entry = entry_of(record, session)
        if entry is not None and entry["event_id"] not in seen:
            seen.add(entry["event_id"])
            entries.append(entry)
    return Transcript(session, entries, malformed)


def entry_of(record: dict[str, Any], session: str) -> dict[str, Any] | None:
    """The host-capture entry of one transcript line, or None for a line left out."""
    kind, message, uuid = record.get("type"), record.get("message"), record.get("uuid")
    if kind not in ("user", "assistant") or any(record.get(f) for f in LEFT_OUT_FLAGS):
        return None
    if not isinstance(message, dict) or message.get("model") == "<synthetic>":
        return None
    if not usable_id(uuid):
        return None  # no stable ID, so no idempotent capture
    text = message_text(message.get("content"))
    if not text.strip() or (kind == "user" and text.lstrip().startswith(HOST_ECHOES)):
        return None
    line_session = record.get("sessionId")
    if usable_id(line_session):
        session = line_session
    entry = {
        "event_id": f"{session}:{uuid}",
        "role": kind,
        "text": storable(text),
        "session": session,
        "source": SOURCE,
    }
    if is_time(record.get("timestamp")):
        entry["occurred_at"] = record["timestamp"]
    return entry


def message_text(content: object) -> str:
    """The text of a message's ``content``: the string, or its ``text`` blocks."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = [
        block["text"]
        for block in content
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    ]
    return "\n\n".join(texts)


def storable(text: str) -> str:
    """``text`` as an event can hold it: no NUL, valid UTF-8, at most ``MAX_EVENT_CHARS``
    (a longer text is cut, with a mark saying so)."""
    text = text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    if len(text) > MAX_EVENT_CHARS:
        text = text[: MAX_EVENT_CHARS - len(CUT_MARK)] + CUT_MARK
    return text


def usable_id(value: object) -> TypeGuard[str]:
    """A session ID or line uuid amem can build an event ID from."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_PART_CHARS
        and value == value.strip()
        and not CONTROL_CHARS.search(value)
    )


def is_time(value: object) -> bool:
    """Whether ``value`` is a time string amem takes (ISO-8601 with a UTC offset)."""
    if not isinstance(value, str):
        return False
    try:
        parse_time(value, "timestamp")
    except InvalidInput:
        return False
    return True


def instance_for(session: str) -> str:
    """The host instance whose cursor follows a Claude Code session."""
    return f"{SOURCE}:{session}"


async def capture(
    scope: Scope, transcript: Transcript, *, progress: Progress | None = None
) -> CaptureResult:
    """Capture ``transcript`` in ``scope``: the entries past its session's cursor, in
    compare-and-set transactions. A capture of the same session that ran meanwhile (two
    hooks at once) is not an error: the cursor is read again and the rest is sent."""
    attempts = CONFLICT_ATTEMPTS
    while True:
        try:
            return await scope.capture_transcript(
                instance_for(transcript.session), transcript.entries, progress=progress
            )
        except Conflict as exc:
            attempts -= 1
            if exc.code != "version_conflict" or not attempts:
                raise
