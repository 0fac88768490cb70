"""Plain async tool functions over an amem scope, for any function-calling framework.

``memory_tools(scope)`` returns ``remember``, ``recall`` and ``read``: async functions with
type hints and docstrings, which pydantic-ai (``Agent(tools=...)``), the OpenAI Agents SDK
(``function_tool``) and other frameworks turn into tool schemas as they are. They need no
framework, so this module needs no extra. Their results are plain JSON data, compact
because a model reads them; bad arguments raise ``amem`` errors whose messages are safe to
show a model.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import amem

__all__ = ["memory_tools"]

SOURCE = "tool:remember"
MOST_RECALLED = 20
"""The most memories one ``recall`` call returns: a model's context is not a database."""


def memory_tools(
    scope: amem.Scope, *, session: str | None = None, role: str = "assistant"
) -> list[Callable[..., Awaitable[Any]]]:
    """``[remember, recall, read]`` bound to ``scope``.

    ``remember`` stores its text as an event of ``session`` with ``role`` (``assistant``:
    a note the model wrote), a ``conversation`` event that recall finds and extraction, when
    configured, derives memories from.
    """

    async def remember(text: str) -> str:
        """Save something worth knowing in later conversations: a fact, preference,
        decision or promise, in one or two plain sentences. Returns the saved note's ID.

        Args:
            text: What to remember, in your own words, complete enough to read on its own.
        """
        receipt = await scope.submit_event(text, role=role, session=session, source=SOURCE)
        return receipt.event_id

    async def recall(query: str, limit: int = 5) -> list[dict[str, Any]]:
        """Search long-term memory for what was said or saved before. Returns the best
        matches first, each with its ID, text and when it happened; ``truncated`` ones
        continue with ``read``.

        Args:
            query: Words to look for, e.g. a name, a topic or a question.
            limit: How many results at most (1 to 20).
        """
        found = await scope.recall(query, limit=min(limit, MOST_RECALLED))
        return [recalled(item) for item in found.items]

    async def read(id: str, offset: int = 0) -> dict[str, Any]:
        """Read the original words behind a memory or note ID that recall returned, a page
        at a time. Returns the text and, while more follows, ``next_offset``.

        Args:
            id: An ID from recall.
            offset: Where to start reading, in characters (0, or a returned next_offset).
        """
        page = await scope.read(id, offset=offset)
        shown: dict[str, Any] = {"text": page.text}
        if page.next_offset is not None:
            shown["next_offset"] = page.next_offset
        return shown

    return [remember, recall, read]


def recalled(item: amem.RecallItem) -> dict[str, Any]:
    """What a model needs of one recall item, without empty fields."""
    shown: dict[str, Any] = {
        "id": item.id,
        "text": item.text,
        "when": item.occurred_at.isoformat(timespec="seconds"),
    }
    if item.kind is not None:
        shown["kind"] = item.kind
    if item.truncated:
        shown["truncated"] = True
    return shown
