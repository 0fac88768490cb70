"""``AgentSession``: amem under an in-process agent loop.

Each turn the loop hands amem what was said (``remember_turn``), asks for a pack that fits
the next model call (``prefetch``), lets its model call amem's tools (``call_tool``, over
the MCP server's own tool table, so no schema is written twice) and ends the turn
(``end_turn``: consolidation, which runs only when called). One session works in one
scope; nothing a model passes to a tool moves it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import InvalidInput
from .inputs import require_bool, require_int, require_name
from .limits import (
    DEFAULT_BUDGET,
    MAX_BUDGET,
    MAX_CAPTURE_ENTRIES,
    MAX_EXCLUDED_EVENTS,
    MAX_INTEGER,
    MAX_KEEP_NOTES,
)
from .memory import Scope
from .models import ContextPack, EventReceipt, TurnEnd
from .tokens import TokenCounter, estimate_tokens

TURN_FIELDS = frozenset(("role", "text", "event_id", "occurred_at"))
"""What one message of a turn may say; the session adds its own session name."""
SCOPE_ARGUMENTS = ("persona", "project")
"""Arguments every MCP tool takes, which an ``AgentSession`` fixes to its scope."""


class AgentSession:
    """One conversation of an agent loop, in one scope: remember each turn, prefetch a
    budgeted pack for the next model call, run amem's tools for the model, end the turn.

    ``budget`` is ``prefetch``'s default, in tokens as ``counter`` counts them (the
    model's tokenizer, or amem's offline estimate by default). ``end_turn`` runs
    ``compact_working(session, keep=compact_keep)`` when ``compact_keep`` is given (None:
    no compaction), then ``consolidate()`` when ``consolidate`` is true, and every
    ``prepare_every`` turns (None: never) prepares a consolidation run of the session for
    the host's model (``TurnEnd.run``; apply its patch with ``Scope.apply_consolidation``
    or the ``consolidation_apply`` tool).
    """

    def __init__(
        self,
        scope: Scope,
        session: str,
        *,
        budget: int = DEFAULT_BUDGET,
        counter: TokenCounter = estimate_tokens,
        consolidate: bool = True,
        compact_keep: int | None = None,
        prepare_every: int | None = None,
    ) -> None:
        if not isinstance(scope, Scope):
            raise InvalidInput("scope must be a Scope (Memory.scope gives one)")
        if not callable(counter):
            raise InvalidInput("counter must be a function from text to a token count")
        consolidate = require_bool(consolidate, "consolidate")
        self.scope = scope
        self.session = require_name(session, "session")
        self.budget = require_int(budget, "budget", low=1, high=MAX_BUDGET)
        self.counter = counter
        self.consolidate = consolidate
        self.compact_keep = (
            None
            if compact_keep is None
            else require_int(compact_keep, "compact_keep", low=0, high=MAX_KEEP_NOTES)
        )
        self.prepare_every = (
            None
            if prepare_every is None
            else require_int(prepare_every, "prepare_every", low=1, high=MAX_INTEGER)
        )
        self._turns_ended = 0
        self._turn: list[str] = []
        """The last ``remember_turn``'s event IDs (its newest 100), left out of ``prefetch``'s
        recall."""

    def __repr__(self) -> str:
        return f"AgentSession({self.scope!r}, session={self.session!r})"

    async def remember_turn(self, messages: Sequence[Mapping[str, Any]]) -> list[EventReceipt]:
        """Store a turn's messages as conversation events of this session, in order, in
        one transaction: every message is validated first, and one refused message
        stores none. Each is a mapping with ``role`` and ``text``, optionally
        ``event_id`` (resubmitting it is safe, as with ``submit_event``) and
        ``occurred_at``. Extraction and embedding are queued after the commit."""
        if not isinstance(messages, Sequence) or isinstance(messages, str):
            raise InvalidInput("messages must be a list of {role, text} mappings")
        if not 1 <= len(messages) <= MAX_CAPTURE_ENTRIES:
            raise InvalidInput(f"a turn holds 1 to {MAX_CAPTURE_ENTRIES} messages")
        for n, message in enumerate(messages):
            if not isinstance(message, Mapping) or set(message) - TURN_FIELDS:
                raise InvalidInput(
                    f"messages[{n}] must be a mapping of role, text and optionally "
                    "event_id and occurred_at"
                )
        events = [{**message, "session": self.session} for message in messages]
        receipts = await self.scope._submit_events(events, field="messages")
        self._turn = [receipt.event_id for receipt in receipts][-MAX_EXCLUDED_EVENTS:]
        return receipts

    async def prefetch(self, query: str, budget: int | None = None) -> ContextPack:
        """The context pack for the next model call: ``Scope.resume`` of this session,
        recalling for ``query``, within ``budget`` tokens (default: the session's) under the
        session's counter. The messages of the last ``remember_turn`` are not recalled into
        it (the prompt holds them already; the pack's recent events still show them).
        ``pack.render()`` is its prompt text."""
        return await self.scope.resume(
            self.session,
            query=query,
            budget=self.budget if budget is None else budget,
            counter=self.counter,
            exclude_event_ids=self._turn,
        )

    def tool_schemas(self) -> list[dict[str, Any]]:
        """amem's tools as the MCP server lists them (``name``, ``description``,
        ``inputSchema``, ``annotations``), less any ``persona`` or ``project`` argument
        (``persona_get`` shows ``persona``): this session's scope is fixed. Register them
        with a model's tools."""
        from .tools import table as tools

        schemas = [tools.tool_schema(tool) for tool in tools.TOOLS.values()]
        for schema in schemas:
            for name in SCOPE_ARGUMENTS:
                schema["inputSchema"].get("properties", {}).pop(name, None)
        return schemas

    async def call_tool(self, name: str, args: Mapping[str, Any] | None = None) -> Any:
        """Run amem's tool ``name`` with ``args`` in this session's scope, as the MCP server
        would, and return its result decoded from the JSON the server would answer (as
        bounded). A refusal raises the ``AmemError`` with its code; an unknown tool or a
        ``persona``/``project`` other than this session's raises ``InvalidInput``."""
        from .tools import table as tools

        tool = tools.TOOLS.get(name) if isinstance(name, str) else None
        if tool is None:
            raise InvalidInput(f"unknown tool; amem's tools are {', '.join(tools.TOOLS)}")
        if args is None:
            args = {}
        elif not isinstance(args, Mapping):
            raise InvalidInput("tool arguments must be a mapping")
        fixed = {name: getattr(self.scope, name) for name in SCOPE_ARGUMENTS}
        if any(args.get(name) not in (None, own) for name, own in fixed.items()):
            raise InvalidInput("persona and project are the session's own; a tool cannot move them")
        served = tools.Served(self.scope._memory, self.scope.persona, self.scope.project)
        result = await tools.run(served, tool, args)
        return json.loads(tools.encode(result))

    async def end_turn(self) -> TurnEnd:
        """The configured upkeep, run now (amem never runs it in the background):
        ``compact_working`` of this session, keeping the newest ``compact_keep`` working
        notes (when given), then ``consolidate`` of the scope (when ``consolidate``), then,
        every ``prepare_every`` turns, ``prepare_consolidation`` of this session.
        Compaction comes first so that the older notes it folds into an episodic memory
        are kept, not deleted for their TTL. Each step is one transaction."""
        compaction = (
            None
            if self.compact_keep is None
            else await self.scope.compact_working(self.session, keep=self.compact_keep)
        )
        consolidation = await self.scope.consolidate() if self.consolidate else None
        self._turns_ended += 1
        due = self.prepare_every is not None and self._turns_ended % self.prepare_every == 0
        run = await self.scope.prepare_consolidation(session=self.session) if due else None
        return TurnEnd(compaction=compaction, consolidation=consolidation, run=run)
