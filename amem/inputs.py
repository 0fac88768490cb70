"""Checking and normalising what callers pass in, before anything reaches the database.

Every check raises ``InvalidInput`` naming the field, never echoing the value.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from datetime import UTC, datetime
from typing import TypeVar

from pydantic import ValidationError

from .errors import InvalidInput
from .limits import MAX_ID_CHARS

S = TypeVar("S", bound=str)

CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
"""Unicode's control characters (category Cc): C0, DEL and C1."""


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
    """An identifier: non-empty, short, printable (no control characters)."""
    text = require_text(value, field, max_chars=max_chars)
    if text != text.strip() or CONTROL.search(text):
        raise InvalidInput(f"{field} must not contain control characters or edge whitespace")
    return text


def optional_name(value: object, field: str) -> str | None:
    return None if value is None else require_name(value, field)


def require_choice(value: object, field: str, choices: Collection[S]) -> S:
    if value not in choices:
        raise InvalidInput(f"{field} must be one of: {', '.join(sorted(choices))}")
    return value  # type: ignore[return-value]


def require_int(value: object, field: str, *, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInput(f"{field} must be an integer from {low} to {high}")
    return value


def parse_time(value: object, field: str) -> datetime:
    """An aware ``datetime`` or ISO-8601 string with a UTC offset, normalised to UTC."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidInput(f"{field} is not an ISO-8601 time", code="invalid_time") from None
    if not isinstance(value, datetime):
        raise InvalidInput(f"{field} must be an ISO-8601 time string", code="invalid_time")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(
            f"{field} must include a UTC offset (e.g. +08:00 or Z)", code="invalid_time"
        )
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59:59-14:00 is later than any UTC time Python has
        raise InvalidInput(
            f"{field} is outside the years 1 to 9999 in UTC", code="invalid_time"
        ) from None


def db_time(value: datetime) -> str:
    """The stored form: fixed-width UTC with microseconds, so text order is time order."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def from_db_time(value: str) -> datetime:
    return datetime.fromisoformat(value)


def utc_now() -> datetime:
    return datetime.now(UTC)


def validation_problems(exc: ValidationError, fields: Iterable[str], *, most: int = 5) -> str:
    """Where and why pydantic refused a value, safe to show: only field names we defined
    and list positions are named; other keys (chosen by the sender) appear as ``?``."""
    known = set(fields)
    problems = []
    for error in exc.errors(include_input=False, include_url=False)[:most]:
        where = ".".join(
            str(part) if isinstance(part, int) or part in known else "?" for part in error["loc"]
        )
        why = "unexpected field" if error["type"] == "extra_forbidden" else error["msg"]
        problems.append(f"{where or 'value'}: {why[:120]}")
    return "; ".join(problems)


TIME_FIELDS = frozenset(("valid_at", "invalid_at"))
"""Times validated by pydantic models (a draft's); other times go through ``parse_time``."""


def refused(exc: ValidationError, fields: Iterable[str], what: str) -> InvalidInput:
    """``InvalidInput`` for a pydantic refusal, ``what`` then ``validation_problems``; its
    code is ``invalid_time`` when the first problem is a time's, as ``parse_time``'s is."""
    first = exc.errors()[0]["loc"]
    code = "invalid_time" if any(part in TIME_FIELDS for part in first) else None
    return InvalidInput(f"{what}: {validation_problems(exc, fields)}", code=code)
