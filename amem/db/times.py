"""Times as the database stores them: fixed-width UTC text with microseconds, so that
text order is time order and SQL compares times as strings."""

from __future__ import annotations

from datetime import UTC, datetime


def db_time(value: datetime) -> str:
    """The stored form of an aware ``datetime``."""
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def from_db_time(value: str) -> datetime:
    return datetime.fromisoformat(value)


def utc_now() -> datetime:
    return datetime.now(UTC)


def db_now() -> str:
    """Now, in the stored form: the time a write records."""
    return db_time(utc_now())
