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

A line's speaker is its role, ``user`` or ``assistant``: Claude Code writes no name of
the person at the keyboard. A capture's ``people`` maps these to person IDs of the
scope's registry (``{"user": "per_..."}``), so the events of a speaker it maps belong to
that person's relationship.

An event's ID is ``<sessionId>:<uuid>`` of its line (``claude-code:<uuid>`` for a line
without a ``sessionId``: never the session name the capture was given, so an erased line's
tombstone refuses it under any name), its session the line's ``sessionId`` (else the
hook's), ``occurred_at`` its ``timestamp``: a line is always the same event, so a replay,
or a line copied into a resumed session's file, is a duplicate, never a conflict.

The cursor counts entries, so a transcript's entries may only ever grow at the end. They
do: an entry depends on its line alone; an ID seen before keeps its first line; a line
that cannot be read (not a JSON object, not UTF-8, nested too deep, longer than
``MAX_TRANSCRIPT_LINE_BYTES``) is left out every time (and counted); and a last line
without its newline that does not parse is still being written: it is read next time.

A transcript is outside input, so reading it is bounded: only a regular file of at most
``MAX_TRANSCRIPT_BYTES`` is opened (a FIFO, a device or a directory is refused, never
waited on), it is read a line at a time, and it is captured in slices of at most
``SLICE_ENTRIES`` entries and ``SLICE_CHARS`` characters, each its own transaction, until
the transcript ends or the run's time limit passes (the hook's: ``CAPTURE_SECONDS``).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import count as numbers
from itertools import islice
from pathlib import Path
from typing import Any, BinaryIO, TypeGuard

import anyio
import anyio.to_thread

from ..errors import Conflict, InvalidInput
from ..inputs import parse_time
from ..json_input import parse_json
from ..limits import (
    MAX_EVENT_CHARS,
    MAX_HOOK_INPUT_BYTES,
    MAX_ID_CHARS,
    MAX_TRANSCRIPT_BYTES,
    MAX_TRANSCRIPT_LINE_BYTES,
    has_hidden_characters,
)
from ..memory import Scope
from ..models import CaptureResult, Progress
from ..store.capture import combined

SOURCE = "claude-code"
"""The ``source`` of every captured event."""
SPEAKERS = ("user", "assistant")
"""Who speaks in a transcript (a captured event's role): the names ``people`` maps."""
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
SLICE_ENTRIES = 1_000
SLICE_CHARS = 1_000_000
"""A slice (one transaction) ends at this many entries or characters of text, whichever
comes first: a second or two of work, so a run stops soon after its time limit."""


# --- the hook's input on stdin ----------------------------------------------------------


@dataclass(frozen=True)
class HookInput:
    """The fields of a Claude Code hook's stdin that capture uses."""

    session_id: str
    transcript_path: Path
    event: str | None
    """``hook_event_name``: ``PreCompact``, ``SessionEnd``, ``Stop``, ..."""


def read_hook_input(fd: int) -> HookInput:
    """The hook's JSON object, read from the file descriptor ``fd`` (stdin) up to the
    object's end rather than to end of file: Claude Code may hold stdin open a while. One
    pass over at most ``MAX_HOOK_INPUT_BYTES``, whatever arrives."""
    data = bytearray()
    end = ValueEnd()
    while chunk := os.read(fd, READ_CHUNK):
        data += chunk
        if len(data) > MAX_HOOK_INPUT_BYTES:
            raise InvalidInput(
                f"the hook input on stdin is longer than {MAX_HOOK_INPUT_BYTES} bytes"
            )
        if end.found_in(data):
            break
    return hook_input(bytes(data))


JSON_STRUCTURE = re.compile(rb'[{}\[\]"]')
JSON_STRING_STOP = re.compile(rb'["\\]')


class ValueEnd:
    """Finds where the first JSON object or array of a growing buffer closes, looking at
    each byte once: brackets are counted outside strings (a scan, not a parse; the parse
    comes once it closed)."""

    def __init__(self) -> None:
        self._position = 0
        self._depth = 0
        self._in_string = False

    def found_in(self, data: bytearray) -> bool:
        """Whether the value has closed within ``data`` (the same buffer, grown)."""
        while True:
            pattern = JSON_STRING_STOP if self._in_string else JSON_STRUCTURE
            found = pattern.search(data, self._position)
            if found is None:
                self._position = len(data)
                return False
            mark = data[found.start()]
            if mark == ord("\\"):
                if found.end() == len(data):  # the escaped byte has not come yet
                    self._position = found.start()
                    return False
                self._position = found.end() + 1
                continue
            self._position = found.end()
            if mark == ord('"'):
                self._in_string = not self._in_string
            elif mark in b"{[":
                self._depth += 1
            else:
                self._depth -= 1
                if self._depth <= 0:
                    return True


def hook_input(data: bytes) -> HookInput:
    """The ``HookInput`` in a hook's stdin; ``invalid_input`` names what is missing."""
    try:
        fields = parse_json(data)
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


# --- reading a transcript ----------------------------------------------------------------


@dataclass(frozen=True)
class Transcript:
    """A session's transcript file, open: a regular file of at most
    ``MAX_TRANSCRIPT_BYTES`` when it was opened. Close it (``contextlib.closing``)."""

    session: str
    file: BinaryIO
    size: int

    def close(self) -> None:
        self.file.close()


@dataclass
class LeftOut:
    """The numbers (from 1) of the transcript lines left out because they cannot be read."""

    malformed: list[int] = field(default_factory=list)
    """Not a JSON object: not JSON, not UTF-8, or nested deeper than Python parses."""
    too_long: list[int] = field(default_factory=list)
    """Longer than ``MAX_TRANSCRIPT_LINE_BYTES``: read past, never held whole."""


OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
"""``O_NONBLOCK``: opening a FIFO returns at once instead of waiting for a writer (on a
regular file it changes nothing)."""


def open_transcript(path: Path, session: str) -> Transcript:
    """The transcript file at ``path`` of ``session``, open; ``invalid_input`` if it is not
    a regular file, is too large or cannot be opened (the message names the problem, not
    the path)."""
    if not usable_id(session):
        raise InvalidInput(
            f"a Claude Code session ID is a one-line name of 1 to {MAX_PART_CHARS} characters"
        )
    try:
        fd = os.open(path, OPEN_FLAGS)
    except FileNotFoundError:
        raise InvalidInput("the transcript file does not exist") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InvalidInput(f"the transcript file cannot be read ({reason})") from None
    facts = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(facts.st_mode):
        problem = "the transcript is not a regular file (a directory, device or pipe)"
    elif facts.st_size > MAX_TRANSCRIPT_BYTES:
        problem = f"the transcript file is larger than {MAX_TRANSCRIPT_BYTES >> 20} MiB"
    if problem is not None:
        os.close(fd)
        raise InvalidInput(problem)
    return Transcript(session, os.fdopen(fd, "rb"), facts.st_size)


def entries(transcript: Transcript, left_out: LeftOut) -> Iterator[dict[str, Any]]:
    """The entries of ``transcript`` from its first line, in order, each event ID once;
    the lines left out go into ``left_out``."""
    seen: set[str] = set()
    for number, line in lines(transcript.file):
        if line is None:
            left_out.too_long.append(number)
            continue
        if not line.strip():
            continue
        try:
            record = parse_json(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            if not line.endswith(b"\n"):  # no newline after it yet: Claude Code is writing it
                return
            left_out.malformed.append(number)
            continue
        entry = entry_of(record, transcript.session)
        if entry is not None and entry["event_id"] not in seen:
            seen.add(entry["event_id"])
            yield entry


def lines(file: BinaryIO) -> Iterator[tuple[int, bytes | None]]:
    """The lines of ``file`` from its start, numbered from 1, each with its newline (a last
    line may lack it: it is still being written). A line longer than
    ``MAX_TRANSCRIPT_LINE_BYTES`` comes as None once its end is read; one still being
    written does not come. At most ``MAX_TRANSCRIPT_BYTES`` are read (the file may grow)."""
    file.seek(0)
    room = MAX_TRANSCRIPT_BYTES
    for number in numbers(1):
        line = file.readline(min(MAX_TRANSCRIPT_LINE_BYTES + 1, room))
        room -= len(line)
        if len(line) <= MAX_TRANSCRIPT_LINE_BYTES:
            if line:
                yield number, line
            if not line.endswith(b"\n"):
                return
            continue
        while not line.endswith(b"\n"):  # read past the rest, a chunk at a time
            line = file.readline(min(READ_CHUNK, room))
            room -= len(line)
            if not line:
                return
        yield number, None


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
        session, event_id = line_session, f"{line_session}:{uuid}"
    else:  # the line's own identity, whatever name this capture was given
        event_id = f"{SOURCE}:{uuid}"
    entry = {
        "event_id": event_id,
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
        and not has_hidden_characters(value)
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


@dataclass(frozen=True)
class Captured:
    """What one capture of a transcript did."""

    result: CaptureResult
    """Every slice's, added up; ``skipped`` counts the entries before the cursor. Its
    ``receipts`` are left empty: a long transcript would hold one for each event."""
    left_out: LeftOut
    finished: bool
    """False when the time limit passed first: the cursor says where the next run resumes."""


async def capture(
    scope: Scope,
    transcript: Transcript,
    *,
    time_limit: float | None = None,
    progress: Progress | None = None,
    people: Mapping[str, str] | None = None,
) -> Captured:
    """Capture ``transcript`` in ``scope``: the entries past its session's cursor, slice
    by slice, each a compare-and-set transaction, until the transcript ends or, with
    ``time_limit`` (seconds), until that much time has passed (the slice in hand is
    finished). A capture of the same session that ran meanwhile (two hooks at once) is not
    an error: the cursor is read again and the rest is sent. ``progress(done, total)``
    follows the bytes read. ``people`` maps speakers (``SPEAKERS``) to person IDs of the
    scope's registry: one that is not there refuses the first slice, and nothing is
    written (``not_found``)."""
    check_speakers(people)
    deadline = None if time_limit is None else anyio.current_time() + time_limit
    attempts = CONFLICT_ATTEMPTS
    while True:
        try:
            return await capture_past_cursor(scope, transcript, deadline, progress, people)
        except Conflict as exc:
            attempts -= 1
            if exc.code != "version_conflict" or not attempts:
                raise


def check_speakers(people: Mapping[str, str] | None) -> None:
    """Refuse (``invalid_input``) a ``people`` that maps a speaker no transcript has."""
    if people is not None and set(people) - set(SPEAKERS):
        raise InvalidInput(
            "a Claude Code transcript's speakers are user and assistant (it names no one): "
            "people maps another name"
        )


async def capture_past_cursor(
    scope: Scope,
    transcript: Transcript,
    deadline: float | None,
    progress: Progress | None,
    people: Mapping[str, str] | None,
) -> Captured:
    instance = instance_for(transcript.session)
    left_out = LeftOut()
    stream = entries(transcript, left_out)
    cursor = await scope.capture_cursor(instance)
    skipped = await anyio.to_thread.run_sync(count, islice(stream, cursor))
    slices: list[CaptureResult] = []
    while True:  # the parsing, in a worker thread; the writes, on the loop
        chunk, ended = await anyio.to_thread.run_sync(next_slice, stream)
        if chunk or not slices:  # with nothing new, one call still records the visit
            done = await scope.host_ingest(
                instance, chunk, start=cursor, expected_cursor=cursor, people=people
            )
            slices.append(done.model_copy(update={"receipts": []}))  # one an event: unbounded
            cursor = done.cursor
        if progress is not None:
            progress(transcript.file.tell(), transcript.size)
        if ended or (deadline is not None and anyio.current_time() >= deadline):
            return Captured(combined(slices, skipped), left_out, finished=ended)


def count(items: Iterator[object]) -> int:
    return sum(1 for _ in items)


def next_slice(stream: Iterator[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """The next entries of ``stream``, up to ``SLICE_ENTRIES`` and ``SLICE_CHARS``, and
    whether the stream ended."""
    chunk: list[dict[str, Any]] = []
    chars = 0
    for entry in stream:
        chunk.append(entry)
        chars += len(entry["text"])
        if len(chunk) >= SLICE_ENTRIES or chars >= SLICE_CHARS:
            return chunk, False
    return chunk, True
