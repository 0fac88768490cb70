"""The pydantic models amem returns and accepts. No I/O lives here."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

Role = Literal["user", "assistant", "system", "tool"]
Category = Literal["conversation", "reference", "persona", "correction"]
EventStatus = Literal["stored", "pending", "extracted", "failed", "amended"]

ROLES: frozenset[Role] = frozenset(("user", "assistant", "system", "tool"))
SUBMITTABLE_CATEGORIES: frozenset[Category] = frozenset(("conversation", "reference", "persona"))
"""Categories a host may submit; ``correction`` events are created by ``Scope.correct``."""


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EventReceipt(Record):
    """What ``submit_event`` acknowledges; returned only after the event is committed."""

    event_id: str
    seq: int
    """Database-wide sequence number: increases with every stored event, never reused."""
    status: EventStatus
    memory_ids: list[str]
    """Memories already derived from this event (non-empty only for duplicates)."""
    duplicate: bool
    """True when this ID was already stored with the same payload; nothing new was written."""
    persona: str
    project: str
    session: str | None
    occurred_at: datetime
    ingested_at: datetime


class Event(Record):
    """A stored original event, without its text (see ``Evidence.text``)."""

    id: str
    seq: int
    persona: str
    project: str
    session: str | None
    role: Role
    category: Category
    source: str | None
    occurred_at: datetime
    ingested_at: datetime
    status: EventStatus
    error: str | None
    chars: int
    """Length of the original text in characters."""


class Evidence(Record):
    """One page of original evidence, as ``Scope.read`` returns it; text is never altered."""

    id: str
    persona: str
    project: str
    event: Event
    text: str
    """Characters ``offset`` to ``offset + limit`` of the original event text."""
    offset: int
    limit: int
    total_chars: int
    next_offset: int | None
    """Where the next page starts, or None when this page reaches the end."""


class Persona(Record):
    """One immutable version of a persona; edits and rollbacks append versions."""

    persona: str
    version: int
    text: str
    note: str | None
    created_at: datetime
