"""The OpenAI Agents SDK ``Session`` protocol, kept in an amem scope.

``AmemSession(scope, session_id)`` stores each conversation item as one event of ``scope``
whose ``session`` is ``session_id``, in the order added:

- a plain message, exactly ``{"role": "user" | "assistant" | "system", "content": "text"}``
  (what ``Runner.run`` makes of a string input), as that text with that role, category
  ``conversation``: found by ``recall`` and a source of memories, like any chat turn;
- every other item (the model's output messages, tool calls and their outputs, reasoning)
  as its JSON, category ``reference``: archived, neither searched nor extracted, with the
  role of whoever produced it;
- and what an assistant's output message says (its ``output_text`` and ``refusal`` parts,
  one per line) once more, right after its JSON, as plain text with role ``assistant``,
  category ``conversation``: the reply is found by ``recall`` ("what did you recommend?")
  and is a source of memories, like any chat turn, while the JSON keeps the item exact.
  This event is the item's *text* (its ID is the item's with ``TEXT_SUFFIX``), not an
  item of its own.

``get_items`` decodes the items back, so it returns exactly what was added. ``pop_item``
and ``clear_session`` erase for good, as ``Scope.delete`` and ``Scope.erase`` do (an
item's text goes with it).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from typing import Any, cast

from amem.adapters import missing_extra

try:
    from agents import TResponseInputItem
    from agents.memory import SessionSettings
    from agents.memory.session_settings import resolve_session_limit
except ImportError as error:  # pragma: no cover - the dev group installs the extra
    raise missing_extra("openai_agents", "the OpenAI Agents SDK", "openai-agents") from error

import amem
from amem.limits import MAX_LIST_LIMIT, MAX_READ_CHARS

__all__ = ["AmemSession"]

CAPTURE_INSTANCE = "openai-agents"
"""The capture cursor ``add_items`` moves: one per scope, shared by its sessions."""
SOURCE = "openai-agents"
MESSAGE_ROLES = ("user", "assistant", "system")
ITEM_CATEGORIES = ("conversation", "reference")
"""Event categories that hold items; a correction event in the session is not one."""
ITEM_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
TEXT_SUFFIX = ".text"
"""An item's text event has the item event's ID with this suffix (``oai_<hex>.text``)."""
SAID_PARTS = {"output_text": "text", "refusal": "refusal"}
"""The parts of an output message that say something, and the field holding what."""


class AmemSession:
    """One agent conversation (``session_id``) as events of ``scope``; an OpenAI Agents SDK
    ``Session``: pass it as ``Runner.run(agent, input, session=...)``.

    ``session_settings.limit`` is the number of latest items ``get_items`` returns when it
    is given no ``limit`` (None: all). ``session_id`` follows amem's rules for a session
    name (1 to 200 characters, no control, format or private-use characters).
    """

    def __init__(
        self,
        scope: amem.Scope,
        session_id: str,
        *,
        session_settings: SessionSettings | None = None,
    ) -> None:
        self.scope = scope
        self.session_id = session_id
        self.session_settings = session_settings

    def __repr__(self) -> str:
        return f"AmemSession({self.scope!r}, {self.session_id!r})"

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The latest ``limit`` items (all when None and no settings limit), oldest first."""
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted is not None and wanted <= 0:
            return []
        newest = await self._newest_items(wanted)
        return [item for _, item in reversed(newest)]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` in one transaction: all are stored, in order, or none is
        (an item amem refuses, such as one longer than 100,000 characters, raises
        ``amem.InvalidInput``)."""
        if not items:
            return
        entries = [entry for item in items for entry in self._entries(item)]
        while True:  # the cursor only orders writers: whoever lost the race resends
            cursor = await self.scope.capture_cursor(CAPTURE_INSTANCE)
            try:
                await self.scope.host_ingest(
                    CAPTURE_INSTANCE, entries, start=cursor, expected_cursor=cursor
                )
            except amem.Conflict as conflict:
                if conflict.code != "version_conflict":
                    raise
            else:
                return

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the latest item (None when there is none). Its event is
        erased with everything derived from it, as ``Scope.delete`` does."""
        while True:
            newest = await self._newest_items(1)
            if not newest:
                return None
            [(event_id, item)] = newest
            try:
                await self.scope.delete(event_id=event_id)
            except amem.NotFound:  # a concurrent pop took it: pop the next one
                continue
            if said_text(cast(dict[str, Any], item)) is not None:
                with contextlib.suppress(amem.NotFound):  # only one pop took the item
                    await self.scope.delete(event_id=event_id + TEXT_SUFFIX)
            return item

    async def clear_session(self) -> None:
        """Erase every event of this session, with everything derived from them, as
        ``Scope.erase(session=...)`` does."""
        await self.scope.erase(session=self.session_id)

    def _entries(self, item: TResponseInputItem) -> list[dict[str, Any]]:
        """The ``host_ingest`` entries that store ``item`` so ``decode`` gives it back:
        one, and for an assistant's output message a second with what it says."""
        event_id = f"oai_{uuid.uuid4().hex}"
        entry = {"event_id": event_id, "session": self.session_id, "source": SOURCE}
        fields = cast(dict[str, Any], item)
        if is_plain_message(fields):
            return [entry | {"text": fields["content"], "role": fields["role"]}]
        text = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
        stored = entry | {"text": text, "role": item_role(fields), "category": "reference"}
        said = said_text(fields)
        if said is None:
            return [stored]
        return [
            stored,
            entry | {"event_id": event_id + TEXT_SUFFIX, "text": said, "role": "assistant"},
        ]

    async def _newest_items(self, count: int | None) -> list[tuple[str, TResponseInputItem]]:
        """Up to ``count`` (None: every) items of the session, newest first, with their
        event IDs. Events of other categories (corrections) are not items."""
        found: list[tuple[str, TResponseInputItem]] = []
        cursor = None
        while True:
            most = MAX_LIST_LIMIT if count is None else min(MAX_LIST_LIMIT, count - len(found))
            page = await self.scope.list(
                "events", session=self.session_id, cursor=cursor, limit=most
            )
            for event in cast(list[amem.ListedEvent], page.items):
                if event.category in ITEM_CATEGORIES and not is_text_of_item(event):
                    text = await self._whole_text(event) if event.truncated else event.text
                    found.append((event.id, decode(event.category, event.role, text)))
            if page.next_cursor is None or len(found) == count:
                return found
            cursor = page.next_cursor

    async def _whole_text(self, event: amem.ListedEvent) -> str:
        pages: list[str] = []
        offset: int | None = 0
        while offset is not None:
            page = await self.scope.read(event.id, offset=offset, limit=MAX_READ_CHARS)
            pages.append(page.text)
            offset = page.next_offset
        return "".join(pages)


def is_plain_message(item: dict[str, Any]) -> bool:
    """Whether ``item`` is a message amem can keep as plain text and give back as it was."""
    content = item.get("content")
    return (
        item.keys() == {"role", "content"}
        and item["role"] in MESSAGE_ROLES
        and isinstance(content, str)
        and content.strip() != ""
        and "\x00" not in content
    )


def said_text(item: dict[str, Any]) -> str | None:
    """What an assistant's output message says, its parts one per line; None for any
    other item, or one that says nothing amem can keep as text."""
    content = item.get("content")
    if item.get("role") != "assistant" or not isinstance(content, list):
        return None
    if item.get("type", "message") != "message":
        return None
    said = [
        part[SAID_PARTS[part["type"]]]
        for part in content
        if isinstance(part, dict)
        and part.get("type") in SAID_PARTS
        and isinstance(part.get(SAID_PARTS[part["type"]]), str)
    ]
    text = "\n".join(said)
    return text if text.strip() and "\x00" not in text else None


def is_text_of_item(event: amem.ListedEvent) -> bool:
    """Whether ``event`` holds the text of the item stored just before it."""
    return (
        event.category == "conversation"
        and event.role == "assistant"
        and event.id.startswith("oai_")
        and event.id.endswith(TEXT_SUFFIX)
    )


def item_role(item: dict[str, Any]) -> str:
    """Who produced an item: its message role, ``tool`` for a tool's output, else the
    assistant (tool calls, reasoning)."""
    role = ITEM_ROLES.get(str(item.get("role")))
    if role is not None:
        return role
    return "tool" if str(item.get("type", "")).endswith("_output") else "assistant"


def decode(category: str, role: str, text: str) -> TResponseInputItem:
    """The item an event of this adapter holds."""
    if category == "reference":
        return cast(TResponseInputItem, json.loads(text))
    return cast(TResponseInputItem, {"role": role, "content": text})
