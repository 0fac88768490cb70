"""The async API: ``open`` gives a ``Memory``; ``Memory.scope`` gives a ``Scope``.

One anyio task group, opened by ``open``, owns everything a ``Memory`` runs (today the
writer actor). Nothing is global: two ``Memory`` objects on two files share nothing, and
two on one file (or two processes) coordinate through SQLite's own locks.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial
from typing import TypeVar

import anyio

from . import events, personas
from .config import Settings
from .db.database import Database
from .errors import Closed, InvalidInput
from .inputs import (
    MAX_EVENT_CHARS,
    MAX_NAME_CHARS,
    MAX_PERSONA_CHARS,
    MAX_READ_CHARS,
    db_time,
    optional_name,
    parse_time,
    require_choice,
    require_int,
    require_name,
    require_text,
    utc_now,
)
from .models import ROLES, SUBMITTABLE_CATEGORIES, EventReceipt, EventStatus, Evidence, Persona

DEFAULT_READ_CHARS = 4000
T = TypeVar("T")


@asynccontextmanager
async def open(
    path: str | os.PathLike[str], *, settings: Settings | None = None
) -> AsyncIterator[Memory]:
    """Open (creating and migrating if needed) the memory database at ``path``.

    Works under asyncio and trio. Settings come from ``AMEM_*`` environment variables
    unless ``settings`` is given. Leaving the block lets queued writes commit, then closes.
    """
    settings = settings or Settings()
    error: BaseException | None = None
    async with Database.open(path, readers=settings.readers) as db, anyio.create_task_group() as tg:
        with anyio.CancelScope(shield=True):  # once started, the writer must be closed below
            await tg.start(db.writer.serve)
        memory = Memory(db, settings)
        try:
            yield memory
        except BaseException as exc:  # re-raised below, outside the task group
            error = exc
        finally:
            await memory.aclose()
    if error is not None:
        raise error


class Memory:
    """An open memory database. Get one from ``amem.open``; use it through scopes."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self.settings = settings
        self._closed = False

    @property
    def path(self) -> str:
        """The database file."""
        return str(self._db.path)

    def scope(self, persona: str | None = None, project: str | None = None) -> Scope:
        """The persona + project partition every event and memory operation runs in.

        Omitted names fall back to the configured defaults (``default``/``default``).
        """
        return Scope(
            self,
            require_name(
                persona or self.settings.default_persona, "persona", max_chars=MAX_NAME_CHARS
            ),
            require_name(
                project or self.settings.default_project, "project", max_chars=MAX_NAME_CHARS
            ),
        )

    async def persona(self, persona: str, version: int | None = None) -> Persona:
        """A persona version (the latest by default); a new persona starts neutral."""
        name = require_name(persona, "persona", max_chars=MAX_NAME_CHARS)
        if version is not None:
            require_int(version, "version", low=1, high=2**62)
        found = await self._read(partial(personas.get_persona, persona=name, version=version))
        if found is not None:
            return found
        return await self._write(partial(personas.ensure_persona, persona=name, now=_now()))

    async def set_persona(self, persona: str, text: str, *, note: str | None = None) -> Persona:
        """Append a new persona version with ``text``; returns it."""
        name = require_name(persona, "persona", max_chars=MAX_NAME_CHARS)
        text = require_text(text, "text", max_chars=MAX_PERSONA_CHARS)
        if note is not None:
            note = require_text(note, "note", max_chars=1000)
        return await self._write(
            partial(personas.append_version, persona=name, text=text, note=note, now=_now())
        )

    async def rollback_persona(self, persona: str, version: int) -> Persona:
        """Append a new version equal to ``version``; history is never erased."""
        name = require_name(persona, "persona", max_chars=MAX_NAME_CHARS)
        require_int(version, "version", low=1, high=2**62)
        return await self._write(
            partial(personas.rollback_to, persona=name, version=version, now=_now())
        )

    async def persona_history(self, persona: str) -> list[Persona]:
        """Every version of ``persona``, oldest first (empty for a persona never read)."""
        name = require_name(persona, "persona", max_chars=MAX_NAME_CHARS)
        return await self._read(partial(personas.persona_history, persona=name))

    async def aclose(self) -> None:
        """Let queued writes commit, then refuse new work. ``open`` calls this for you."""
        self._closed = True
        await self._db.writer.close()

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._db.write(fn)

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise Closed("this Memory is closed")
        return await self._db.read(fn)


class Scope:
    """Event and memory operations inside one persona + project partition.

    IDs that belong to another scope read as absent (``not_found``). Scopes organise one
    trusted user's data; they are not a security boundary between tenants.
    """

    def __init__(self, memory: Memory, persona: str, project: str) -> None:
        self._memory = memory
        self.persona = persona
        self.project = project

    def __repr__(self) -> str:
        return f"Scope(persona={self.persona!r}, project={self.project!r})"

    async def submit_event(
        self,
        text: str,
        *,
        role: str,
        event_id: str | None = None,
        session: str | None = None,
        source: str | None = None,
        category: str = "conversation",
        occurred_at: str | datetime | None = None,
    ) -> EventReceipt:
        """Persist an original event; returns after it is committed.

        Resubmitting an ``event_id`` with the same payload returns the stored receipt with
        ``duplicate=True`` (an omitted ``occurred_at`` reuses the stored time); a different
        payload or scope raises ``Conflict`` (``duplicate_conflict``). Never waits for a model.
        """
        text = require_text(text, "text", max_chars=MAX_EVENT_CHARS)
        role = require_choice(role, "role", ROLES)
        if category == "correction":
            raise InvalidInput("category 'correction' is reserved for correct()")
        category = require_choice(category, "category", SUBMITTABLE_CATEGORIES)
        now = utc_now()
        event = events.NewEvent(
            id=require_name(event_id, "event_id") if event_id is not None else new_event_id(),
            persona=self.persona,
            project=self.project,
            session=optional_name(session, "session"),
            role=role,
            category=category,
            source=optional_name(source, "source"),
            text=text,
            occurred_at=db_time(
                now if occurred_at is None else parse_time(occurred_at, "occurred_at")
            ),
            occurred_at_given=occurred_at is not None,
            ingested_at=db_time(now),
            status=self._initial_status(category),
        )
        return await self._memory._write(partial(events.insert_event, event=event))

    async def read(self, id: str, *, offset: int = 0, limit: int = DEFAULT_READ_CHARS) -> Evidence:
        """Page through the original evidence behind an event ID, unaltered."""
        id = require_name(id, "id")
        offset = require_int(offset, "offset", low=0, high=MAX_EVENT_CHARS)
        limit = require_int(limit, "limit", low=1, high=MAX_READ_CHARS)
        return await self._memory._read(
            partial(events.read_event, persona=self.persona, project=self.project,
                    event_id=id, offset=offset, limit=limit)
        )  # fmt: skip

    def _initial_status(self, category: str) -> EventStatus:
        if category == "conversation" and self._memory.settings.extraction_enabled:
            return "pending"
        return "stored"


def new_event_id() -> str:
    return f"evt_{uuid.uuid4().hex}"


def _now() -> str:
    return db_time(utc_now())
