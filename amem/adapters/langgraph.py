"""LangGraph's ``BaseStore``, kept in amem.

``AmemStore(memory, persona=...)`` maps the store onto amem plainly:

- a namespace is a scope of ``persona``: ``("memories", "u1")`` is the project
  ``memories.u1`` (LangGraph forbids ``.`` in a label, so the join is unambiguous);
- an item is one event of that scope whose ``session`` is the item's key and whose text is
  the value as JSON, category ``conversation``: found by ``recall`` and a source of memories
  like any chat turn (``index=False`` stores it as ``reference``: kept, never searched);
- ``put`` stores the new value as a new event, then erases the key's older events;
  ``delete`` erases the key's events (``Scope.erase(session=key)``): for good, with every
  memory derived from them;
- ``search`` with a ``query`` ranks with ``Scope.recall`` in every namespace under the prefix
  (the best 200 hits of each); without one it lists items newest first. ``filter`` is
  matched on the values (exact values, nested objects and ``$eq $ne $gt $gte $lt $lte``);
- ``list_namespaces`` lists the projects of ``persona``, so give the store a persona of its
  own.

Refused with ``NotImplementedError``: the synchronous methods (``batch`` and what calls it:
``get``, ``put``, ...; run graphs with ``ainvoke``/``astream``), ``ttl`` (amem forgets by
erasing, never by expiry) and ``index`` field lists (amem indexes a value's whole text; its
vectors come from amem's own embedding settings, so the store takes no ``index`` config).
"""

from __future__ import annotations

import contextlib
import json
import operator
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import anyio

from amem.adapters import missing_extra

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        validate_op_namespace,
    )
except ImportError as error:  # pragma: no cover - the dev group installs the extra
    raise missing_extra("langgraph", "LangGraph's store interface", "langgraph") from error

import amem
from amem.limits import MAX_LIST_LIMIT, MAX_READ_CHARS, MAX_RECALL_LIMIT

__all__ = ["AmemStore"]

ITEM_CATEGORIES = ("conversation", "reference")
"""Event categories that hold values; a correction event in a key's session is not one."""


class AmemStore(BaseStore):
    """A LangGraph ``BaseStore`` whose namespaces are the projects of ``persona`` (None:
    the configured default) in ``memory``; async methods only.

    ``role`` is the role amem records for every value (``user``: what the store holds
    counts as what the user said, for extraction's role rules). Keys follow amem's rules
    for a session name (1 to 200 characters, no control, format or private-use
    characters), namespaces joined by ``.`` those for a project (at most 100 characters);
    others raise ``amem.InvalidInput``.
    """

    def __init__(self, memory: amem.Memory, *, persona: str | None = None, role: str = "user"):
        self.memory = memory
        self.persona = memory.scope(persona).persona
        self.role = role

    def __repr__(self) -> str:
        return f"AmemStore(persona={self.persona!r})"

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        raise NotImplementedError(
            "AmemStore is async: use abatch, aget, aput, asearch, adelete, alist_namespaces"
        )

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order, each as its own operation, and return their results."""
        return [await self._run(op) for op in ops]

    async def _run(self, op: Op) -> Result:
        validate_op_namespace(op)
        if isinstance(op, GetOp):
            return await self._get(op.namespace, op.key)
        if isinstance(op, PutOp):
            if op.value is None:
                await self._scope(op.namespace).erase(session=op.key)
            else:
                await self._put(op)
            return None
        if isinstance(op, SearchOp):
            return await self._search(op)
        if isinstance(op, ListNamespacesOp):
            return await self._list_namespaces(op)
        raise TypeError(f"unknown store operation: {type(op).__name__}")

    def _scope(self, namespace: tuple[str, ...]) -> amem.Scope:
        return self.memory.scope(self.persona, ".".join(namespace))

    async def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        events = await self._key_events(self._scope(namespace), key, most=1)
        if not events:
            return None
        event = events[0]
        return Item(
            value=await self._value(namespace, event),
            key=key,
            namespace=namespace,
            created_at=event.occurred_at,
            updated_at=event.occurred_at,
        )

    async def _put(self, op: PutOp) -> None:
        if op.ttl is not None:
            raise NotImplementedError("AmemStore keeps no TTL: amem forgets by erasing")
        if isinstance(op.index, list):
            raise NotImplementedError("AmemStore indexes a value's whole text, not fields")
        scope = self._scope(op.namespace)
        older = await self._key_events(scope, op.key)
        text = json.dumps(op.value, ensure_ascii=False)
        category = "reference" if op.index is False else "conversation"
        # once the new value is being written the put runs to its end, so a cancelled
        # caller never leaves two values of one key (the newest would still win reads)
        with anyio.CancelScope(shield=True):
            await scope.submit_event(
                text,
                role=self.role,
                event_id=f"lg_{uuid.uuid4().hex}",
                session=op.key,
                category=category,
            )
            for event in older:
                with contextlib.suppress(amem.NotFound):  # a concurrent put erased it
                    await scope.delete(event_id=event.id)

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        wanted = op.offset + op.limit
        namespaces = [
            ns
            for ns in await self._namespaces()
            if ns[: len(op.namespace_prefix)] == op.namespace_prefix
        ]
        if op.query is None:
            found = [
                found for ns in namespaces for found in await self._latest(ns, op.filter, wanted)
            ]
            found.sort(key=lambda pair: pair[0], reverse=True)
            return [item for _, item in found][op.offset : wanted]
        hits: list[tuple[float, tuple[str, ...], str]] = []
        most = MAX_RECALL_LIMIT if op.filter else min(MAX_RECALL_LIMIT, wanted)
        for ns in namespaces:
            result = await self._scope(ns).recall(op.query, limit=most)
            hits += [(item.score, ns, item.source_event_id) for item in result.items]
        hits.sort(key=lambda hit: hit[0], reverse=True)
        ranked: list[SearchItem] = []
        seen: set[tuple[tuple[str, ...], str]] = set()
        for score, ns, event_id in hits:
            key = (await self._scope(ns).read(event_id, limit=1)).event.session
            if key is None or (ns, key) in seen:
                continue
            seen.add((ns, key))
            item = await self._get(ns, key)
            if item is not None and matches(item.value, op.filter):
                ranked.append(search_item(item, score))
                if len(ranked) == wanted:
                    break
        return ranked[op.offset :]

    async def _latest(
        self, namespace: tuple[str, ...], filter: dict[str, Any] | None, most: int
    ) -> list[tuple[int, SearchItem]]:
        """The newest ``most`` items of a namespace that pass ``filter``, with their seq."""
        scope = self._scope(namespace)
        found: list[tuple[int, SearchItem]] = []
        seen: set[str] = set()
        cursor = None
        while True:
            page = await scope.list("events", cursor=cursor, limit=MAX_LIST_LIMIT)
            for event in cast(list[amem.ListedEvent], page.items):
                key = event.session
                if event.category not in ITEM_CATEGORIES or key is None or key in seen:
                    continue
                seen.add(key)  # the newest event of a key holds its value
                value = await self._value(namespace, event)
                if matches(value, filter):
                    item = SearchItem(namespace, key, value, event.occurred_at, event.occurred_at)
                    found.append((event.seq, item))
                    if len(found) == most:
                        return found
            if page.next_cursor is None:
                return found
            cursor = page.next_cursor

    async def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        namespaces = {
            ns if op.max_depth is None else ns[: op.max_depth]
            for ns in await self._namespaces()
            if all(fits(ns, condition) for condition in op.match_conditions or ())
        }
        return sorted(namespaces)[op.offset : op.offset + op.limit]

    async def _namespaces(self) -> list[tuple[str, ...]]:
        """The namespace of every project of the persona that stores something."""
        return [
            tuple(s.project.split("."))
            for s in await self.memory.scopes()
            if s.persona == self.persona
        ]

    async def _key_events(
        self, scope: amem.Scope, key: str, *, most: int | None = None
    ) -> list[amem.ListedEvent]:
        """The events holding ``key``'s values, newest first (one, but for a put cut short)."""
        found: list[amem.ListedEvent] = []
        cursor = None
        while True:
            limit = MAX_LIST_LIMIT if most is None else min(MAX_LIST_LIMIT, most - len(found))
            page = await scope.list("events", session=key, cursor=cursor, limit=limit)
            events = cast(list[amem.ListedEvent], page.items)
            found += [event for event in events if event.category in ITEM_CATEGORIES]
            if page.next_cursor is None or len(found) == most:
                return found
            cursor = page.next_cursor

    async def _value(self, namespace: tuple[str, ...], event: amem.ListedEvent) -> dict[str, Any]:
        text = event.text
        if event.truncated:
            pages: list[str] = []
            offset: int | None = 0
            while offset is not None:
                page = await self._scope(namespace).read(
                    event.id, offset=offset, limit=MAX_READ_CHARS
                )
                pages.append(page.text)
                offset = page.next_offset
            text = "".join(pages)
        return cast(dict[str, Any], json.loads(text))


def search_item(item: Item, score: float) -> SearchItem:
    return SearchItem(item.namespace, item.key, item.value, item.created_at, item.updated_at, score)


def fits(namespace: tuple[str, ...], condition: MatchCondition) -> bool:
    """Whether a namespace meets a prefix or suffix condition (``*`` matches any label)."""
    path = condition.path
    if len(namespace) < len(path):
        return False
    labels = namespace[: len(path)] if condition.match_type == "prefix" else namespace[-len(path) :]
    return all(want in ("*", label) for label, want in zip(labels, path, strict=True))


def matches(value: Any, filter: Mapping[str, Any] | None) -> bool:
    """Whether a value passes a store filter, as LangGraph's own stores read one."""
    if not filter:
        return True
    return isinstance(value, dict) and all(
        meets(value.get(field), wanted) for field, wanted in filter.items()
    )


def meets(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict) and any(str(k).startswith("$") for k in wanted):
        return all(compare(value, op, operand) for op, operand in wanted.items())
    if isinstance(wanted, dict):
        return matches(value, wanted)
    return bool(value == wanted)


ORDERINGS: dict[str, Callable[[float, float], bool]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}


def compare(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op not in ORDERINGS:
        raise ValueError(f"unsupported filter operator: {op}")
    try:
        return ORDERINGS[op](float(value), float(operand))
    except (TypeError, ValueError):
        return False  # not a number: no order to compare
