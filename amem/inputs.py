"""Checking and normalising what callers pass in, before anything reaches the database.

Every check raises ``InvalidInput`` naming the field, never echoing the value.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import ValidationError

from .db.times import utc_now
from .errors import InvalidInput
from .limits import (
    MAX_CHECKPOINT_CHARS,
    MAX_DRAFTS,
    MAX_EVENT_CHARS,
    MAX_ID_CHARS,
    MAX_INTEGER,
    MAX_JSON_CHARS,
    MAX_LIST_ITEMS,
    MAX_SPEAKERS,
    has_hidden_characters,
)
from .models import (
    DRAFT_FIELDS,
    ROLES,
    SUBMITTABLE_CATEGORIES,
    MemoryDraft,
    Role,
    SubmittableCategory,
)

S = TypeVar("S", bound=str)


def require_text(value: object, field: str, *, max_chars: int) -> str:
    """Non-empty text of at most ``max_chars`` that SQLite and UTF-8 store faithfully."""
    if not isinstance(value, str):
        raise InvalidInput(f"{field} must be a string")
    if not value.strip():
        raise InvalidInput(f"{field} must not be empty")
    if len(value) > max_chars:
        raise InvalidInput(f"{field} is longer than {max_chars} characters")
    if "\x00" in value:
        raise InvalidInput(f"{field} must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{field} contains a lone surrogate (not valid Unicode)") from None
    return value


def require_name(value: object, field: str, *, max_chars: int = MAX_ID_CHARS) -> str:
    """An identifier: non-empty, short, every character visible where it stands (none of
    ``limits.HIDDEN_CATEGORIES``), no white space at either end."""
    text = require_text(value, field, max_chars=max_chars)
    if has_hidden_characters(text):
        raise InvalidInput(
            f"{field} must not contain control, format (zero-width or bidirectional) or "
            "private-use characters"
        )
    if text != text.strip():
        raise InvalidInput(f"{field} must not begin or end with white space")
    return text


def optional_name(value: object, field: str) -> str | None:
    return None if value is None else require_name(value, field)


def require_choice(value: object, field: str, choices: Collection[S]) -> S:
    if value not in choices:
        raise InvalidInput(f"{field} must be one of: {', '.join(sorted(choices))}")
    return value  # type: ignore[return-value]


def require_choices(value: object, field: str, choices: Collection[S]) -> frozenset[S]:
    """A collection (list, tuple, set) of values from ``choices``; one bare string is
    refused, not taken as its characters."""
    if not isinstance(value, Collection) or isinstance(value, str | bytes | Mapping):
        raise InvalidInput(f"{field} must be a list of: {', '.join(sorted(choices))}")
    return frozenset(require_choice(item, field, choices) for item in value)


def require_bool(value: object, field: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{field} must be true or false")
    return value


def require_int(value: object, field: str, *, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInput(f"{field} must be an integer from {low} to {high}")
    return value


def require_names(value: object, field: str, *, most: int) -> frozenset[str]:
    """A collection (list, tuple, set) of at most ``most`` identifiers; one bare string is
    refused, not taken as its characters."""
    if not isinstance(value, Collection) or isinstance(value, str | bytes | Mapping):
        raise InvalidInput(f"{field} must be a list of IDs")
    if len(value) > most:
        raise InvalidInput(f"{field} holds more than {most} IDs")
    return frozenset(require_name(item, f"{field}[{n}]") for n, item in enumerate(value))


PLAIN_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
"""A date without a time (``2026-01-01``): the start of that day in UTC, on every surface."""


def parse_time(value: object, field: str) -> datetime:
    """An aware ``datetime`` or ISO-8601 string with a UTC offset, normalised to UTC; a
    plain date (``PLAIN_DATE``) is the start of that day in UTC."""
    if isinstance(value, str) and PLAIN_DATE.fullmatch(value):
        value = f"{value}T00:00:00+00:00"
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidInput(f"{field} is not an ISO-8601 time", code="invalid_time") from None
    if not isinstance(value, datetime):
        raise InvalidInput(f"{field} must be an ISO-8601 time string", code="invalid_time")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(
            f"{field} must include a UTC offset (e.g. +08:00 or Z) or be a plain date",
            code="invalid_time",
        )
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59:59-14:00 is later than any UTC time Python has
        raise InvalidInput(
            f"{field} is outside the years 1 to 9999 in UTC", code="invalid_time"
        ) from None


PLAIN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")
"""An unknown key ``validation_problems`` may name: what a caller means as an argument name."""


def validation_problems(
    exc: ValidationError, fields: Iterable[str], *, most: int = 5, name_unknown: bool = False
) -> str:
    """Where and why pydantic refused a value, safe to show: field names we defined and list
    positions are named; other keys (chosen by the sender) appear as ``?``, or, with
    ``name_unknown``, by name when it is a ``PLAIN_NAME`` (a tool's caller must see which
    argument it got wrong). No value is ever shown."""
    known = set(fields)
    problems = []
    for error in exc.errors(include_input=False, include_url=False)[:most]:
        unknown = error["type"] == "extra_forbidden"
        where = ".".join(
            str(part)
            if isinstance(part, int)
            or part in known
            or (unknown and name_unknown and PLAIN_NAME.fullmatch(part))
            else "?"
            for part in error["loc"]
        )
        why = "unexpected field" if unknown else error["msg"]
        problems.append(f"{where or 'value'}: {why[:120]}")
    return "; ".join(problems)


TIME_FIELDS = frozenset(("valid_at", "invalid_at"))
"""Times validated by pydantic models (a draft's); other times go through ``parse_time``."""


def refused(
    exc: ValidationError, fields: Iterable[str], what: str, *, name_unknown: bool = False
) -> InvalidInput:
    """``InvalidInput`` for a pydantic refusal, ``what`` then ``validation_problems``; its
    code is ``invalid_time`` when the first problem is a time's, as ``parse_time``'s is."""
    first = exc.errors()[0]["loc"]
    code = "invalid_time" if any(part in TIME_FIELDS for part in first) else None
    problems = validation_problems(exc, fields, name_unknown=name_unknown)
    return InvalidInput(f"{what}: {problems}", code=code)


def when_or_now(value: object, field: str) -> datetime:
    """``parse_time`` of ``value``; now when it is None."""
    return utc_now() if value is None else parse_time(value, field)


# --- events ----------------------------------------------------------------------------

EVENT_FIELDS = frozenset(
    ("text", "role", "event_id", "session", "source", "category", "occurred_at", "person")
)


@dataclass(frozen=True, slots=True)
class SubmittedEvent:
    """What a caller said about one event, checked; the scope adds the rest."""

    id: str | None
    session: str | None
    role: Role
    category: SubmittableCategory
    source: str | None
    text: str
    occurred_at: datetime | None
    person: str | None = None
    """The person whose relationship it belongs to (a registry ID)."""


def submitted_event(item: Mapping[str, Any], where: str = "") -> SubmittedEvent:
    """The fields of one event a caller submits (``where`` prefixes the field names in
    errors, e.g. ``entries[3]``)."""

    def field(name: str) -> str:
        return f"{where}.{name}" if where else name

    if set(item) - EVENT_FIELDS:
        raise InvalidInput(f"{where or 'event'} has fields amem does not know")
    category = item.get("category") or "conversation"
    if category == "correction":
        raise InvalidInput("category 'correction' is reserved for correct()")
    occurred_at = item.get("occurred_at")
    return SubmittedEvent(
        id=optional_name(item.get("event_id"), field("event_id")),
        session=optional_name(item.get("session"), field("session")),
        role=require_choice(item.get("role"), field("role"), ROLES),
        category=require_choice(category, field("category"), SUBMITTABLE_CATEGORIES),
        source=optional_name(item.get("source"), field("source")),
        text=require_text(item.get("text"), field("text"), max_chars=MAX_EVENT_CHARS),
        occurred_at=None if occurred_at is None else parse_time(occurred_at, field("occurred_at")),
        person=optional_name(item.get("person"), field("person")),
    )


def speaker_people(people: object) -> dict[str, str]:
    """A capture's ``people``, checked: speaker names (as the transcript writes them) to
    person IDs; None maps no one."""
    if people is None:
        return {}
    if not isinstance(people, Mapping) or len(people) > MAX_SPEAKERS:
        raise InvalidInput(f"people must map at most {MAX_SPEAKERS} speakers to person IDs")
    return {
        require_name(speaker, "people (a speaker)"): require_name(person, "people (a person ID)")
        for speaker, person in people.items()
    }


def captured_entry(
    entry: Mapping[str, Any], people: Mapping[str, str], where: str
) -> Mapping[str, Any]:
    """A host-capture entry as the event it submits. Its speaker is its ``speaker`` (a
    name the host gives whoever said it, e.g. in a group chat; not stored) or, without
    one, its ``role``; an entry that names no ``person`` of its own belongs to the person
    ``people`` maps its speaker to."""
    if "speaker" not in entry and not people:
        return entry
    fields = dict(entry)
    speaker = optional_name(fields.pop("speaker", None), f"{where}.speaker")
    if speaker is None:
        speaker = fields.get("role")
    if fields.get("person") is None and isinstance(speaker, str) and speaker in people:
        fields["person"] = people[speaker]
    return fields


# --- memory drafts ---------------------------------------------------------------------


def parse_drafts(memories: object) -> list[MemoryDraft]:
    """Drafts from models or plain mappings; errors name the field, never the value."""
    if not isinstance(memories, Sequence) or isinstance(memories, str):
        raise InvalidInput("memories must be a list of memory drafts")
    if not 1 <= len(memories) <= MAX_DRAFTS:
        raise InvalidInput(f"memories must hold 1 to {MAX_DRAFTS} drafts")
    drafts = []
    for n, item in enumerate(memories):
        try:
            drafts.append(
                item if isinstance(item, MemoryDraft) else MemoryDraft.model_validate(item)
            )
        except ValidationError as exc:
            raise refused(exc, DRAFT_FIELDS, f"memories[{n}] is not a valid draft") from None
    return drafts


# --- checkpoints -----------------------------------------------------------------------


def checkpoint_fields(
    *,
    session: object,
    goal: object,
    completed: object = (),
    pending: object = (),
    constraints: object = (),
    next_action: object = None,
    covered_seq: object = None,
) -> dict[str, Any]:
    """Validated keyword arguments of ``store.checkpoints.save_checkpoint``."""
    return {
        "session": require_name(session, "session"),
        "goal": require_text(goal, "goal", max_chars=MAX_CHECKPOINT_CHARS),
        "completed": require_text_list(completed, "completed"),
        "pending": require_text_list(pending, "pending"),
        "constraints": require_text_list(constraints, "constraints"),
        "next_action": optional_text(next_action, "next_action", max_chars=MAX_CHECKPOINT_CHARS),
        "covered_seq": None
        if covered_seq is None
        else require_int(covered_seq, "covered_seq", low=1, high=MAX_INTEGER),
    }


CHECKPOINT_FIELDS = tuple(inspect.signature(checkpoint_fields).parameters)
"""A checkpoint's fields, in order: the parameters of ``checkpoint_fields``."""


def checkpoint_from(checkpoint: object) -> dict[str, Any]:
    """``checkpoint_fields`` of a mapping a host sent (``host_ingest``'s ``checkpoint``)."""
    if not (
        isinstance(checkpoint, Mapping)
        and {"session", "goal"} <= checkpoint.keys() <= set(CHECKPOINT_FIELDS)
    ):
        raise InvalidInput(
            f"checkpoint must be a mapping with session, goal and only: "
            f"{', '.join(CHECKPOINT_FIELDS)}"
        )
    return checkpoint_fields(**checkpoint)


def json_value(value: object, field: str) -> str:
    """``value`` as JSON text, refused when it is no JSON value or too long to keep."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        raise InvalidInput(f"{field} must be a JSON value") from None
    if len(text) > MAX_JSON_CHARS:
        raise InvalidInput(f"{field} is longer than {MAX_JSON_CHARS} characters as JSON")
    return text


def optional_text(value: object, field: str, *, max_chars: int) -> str | None:
    return None if value is None else require_text(value, field, max_chars=max_chars)


def require_text_list(items: object, field: str) -> list[str]:
    if not isinstance(items, Sequence) or isinstance(items, str) or len(items) > MAX_LIST_ITEMS:
        raise InvalidInput(f"{field} must be a list of at most {MAX_LIST_ITEMS} strings")
    return [
        require_text(item, f"{field}[{n}]", max_chars=MAX_CHECKPOINT_CHARS)
        for n, item in enumerate(items)
    ]
