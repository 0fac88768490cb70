"""``amem.AgentSession``: a turn is stored whole or not at all, prefetch packs what was said,
the model's tool calls run over the MCP server's own tool table in the session's scope,
and end_turn runs the configured consolidation."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import anyio
import pytest
from helpers import cancelled_after, memory_draft
from mcp_client import PERSONA, PROJECT, connect, other

import amem

pytestmark = pytest.mark.anyio

TURN = [
    {"role": "user", "text": "我下周去杭州出差，帮我记住我只坐高铁。", "event_id": "t1-u"},
    {"role": "assistant", "text": "Noted: trains only for the Hangzhou trip.", "event_id": "t1-a"},
]


async def stored_events(scope: amem.Scope) -> int:
    return (await scope.list("events")).total


@pytest.fixture
def agent(scope: amem.Scope) -> amem.AgentSession:
    return amem.AgentSession(scope, "chat-1")


async def test_remember_turn_stores_each_message_as_an_event_of_the_session(
    agent: amem.AgentSession, scope: amem.Scope
) -> None:
    receipts = await agent.remember_turn(
        [*TURN, {"role": "tool", "text": "weather: sunny", "occurred_at": "2026-11-30T09:00:00Z"}]
    )

    assert [r.event_id for r in receipts[:2]] == ["t1-u", "t1-a"]
    assert receipts[2].event_id  # an ID of amem's own
    assert [r.seq for r in receipts] == sorted(r.seq for r in receipts)
    assert {r.session for r in receipts} == {"chat-1"}
    assert not any(r.duplicate for r in receipts)
    assert receipts[2].occurred_at.isoformat() == "2026-11-30T09:00:00+00:00"
    page = await scope.list("events", session="chat-1")
    assert {(e.id, e.role) for e in page.items} == {
        ("t1-u", "user"),
        ("t1-a", "assistant"),
        (receipts[2].event_id, "tool"),
    }
    assert (await scope.read("t1-u")).text == TURN[0]["text"]


async def test_one_bad_message_stores_none_of_the_turn(
    agent: amem.AgentSession, scope: amem.Scope
) -> None:
    good = {"role": "user", "text": "first"}
    for bad in (
        {"role": "robot", "text": "who?"},
        {"role": "user", "text": ""},
        {"role": "user", "text": "hi", "occurred_at": "yesterday"},
        {"role": "user", "text": "hi", "session": "another"},  # the session is the agent's
        "just a string",
    ):
        with pytest.raises(amem.InvalidInput) as refused:
            await agent.remember_turn([good, bad])  # type: ignore[list-item]
        assert "messages" in refused.value.message
    for turn in ([], "hello", [good] * 10_001):
        with pytest.raises(amem.InvalidInput):
            await agent.remember_turn(turn)  # type: ignore[arg-type]
    assert await stored_events(scope) == 0


async def test_a_conflict_in_the_turn_rolls_the_whole_turn_back(
    agent: amem.AgentSession, scope: amem.Scope
) -> None:
    await scope.submit_event("original", role="user", event_id="used", session="chat-1")

    with pytest.raises(amem.Conflict) as refused:
        await agent.remember_turn(
            [
                {"role": "user", "text": "new", "event_id": "new"},
                {"role": "user", "text": "changed", "event_id": "used"},
            ]
        )

    assert refused.value.code == "duplicate_conflict"
    assert await stored_events(scope) == 1
    with pytest.raises(amem.NotFound):
        await scope.read("new")


async def test_a_cancelled_turn_is_stored_whole_or_not_at_all(scope: amem.Scope) -> None:
    """Cancel remember_turn after 0, 1, 2, ... scheduler ticks, until one completes first."""
    for ticks in range(2000):
        agent = amem.AgentSession(scope, f"tick-{ticks}")
        turn = [{**m, "event_id": f"{m['event_id']}-{ticks}"} for m in TURN]
        done = await cancelled_after(ticks, partial(agent.remember_turn, turn))
        await scope.submit_event("barrier", role="system", event_id=f"barrier-{ticks}")
        stored = (await scope.list("events", session=agent.session)).total
        assert stored in (0, len(TURN)), f"{stored} of the turn's messages after {ticks} ticks"
        if done:
            assert stored == len(TURN)
            break
    else:
        pytest.fail("no remember_turn completed within 2000 ticks")


async def test_resubmitting_a_turn_changes_nothing(
    agent: amem.AgentSession, scope: amem.Scope
) -> None:
    first = await agent.remember_turn(TURN)
    again = await agent.remember_turn(TURN)

    assert [r.duplicate for r in again] == [True, True]
    assert [r.seq for r in again] == [r.seq for r in first]
    assert await stored_events(scope) == 2


async def test_prefetch_packs_what_the_session_remembered(
    agent: amem.AgentSession, scope: amem.Scope
) -> None:
    await agent.remember_turn(TURN)

    pack = await agent.prefetch("杭州 高铁")

    assert pack.session == "chat-1"
    assert (pack.persona, pack.project) == (scope.persona, scope.project)
    assert pack.budget == 4000
    assert "只坐高铁" in pack.context
    assert "recent_events" in pack.included
    small = await agent.prefetch("杭州 高铁", budget=600)
    assert small.budget == 600
    assert small.tokens_used <= 600
    with pytest.raises(amem.InvalidInput):
        await agent.prefetch("杭州", budget=0)


async def test_prefetch_does_not_recall_the_turn_it_is_asked_about(scope: amem.Scope) -> None:
    agent = amem.AgentSession(scope, "chat-3")
    await agent.remember_turn([{"role": "user", "text": "I take the train to Hangzhou often"}])
    [now] = await agent.remember_turn([{"role": "user", "text": "Which train to Hangzhou?"}])

    pack = json.loads((await agent.prefetch("Which train to Hangzhou?")).context)

    recalled = [m["id"] for m in pack["memories"]]
    assert now.event_id not in recalled
    plain = json.loads((await scope.resume("chat-3", query="Which train to Hangzhou?")).context)
    assert plain["memories"][0]["id"] == now.event_id  # what the exclusion keeps out
    assert any("often" in m["text"] for m in pack["memories"])
    assert now.event_id in [e["id"] for e in pack["recent_events"]]  # still in the session's


async def test_prefetch_counts_tokens_with_the_sessions_counter(scope: amem.Scope) -> None:
    agent = amem.AgentSession(scope, "chat-1", budget=800, counter=len)
    await agent.remember_turn(TURN)

    pack = await agent.prefetch("杭州 高铁")

    assert pack.counter == "len"
    assert len(pack.context) == pack.tokens_used <= 800
    assert "只坐高铁" in pack.render()
    estimated = await amem.AgentSession(scope, "chat-1", budget=300).prefetch("杭州 高铁")
    assert estimated.counter == "estimate_tokens"
    with pytest.raises(amem.InvalidInput):
        amem.AgentSession(scope, "chat-1", counter="cl100k")  # type: ignore[arg-type]


async def test_the_session_budget_is_the_default(scope: amem.Scope) -> None:
    await scope.submit_event("hello", role="user", session="chat-2")
    pack = await amem.AgentSession(scope, "chat-2", budget=1500).prefetch("hello")
    assert pack.budget == 1500
    for bad in ({"budget": 0}, {"budget": "big"}, {"consolidate": "yes"}):
        with pytest.raises(amem.InvalidInput):
            amem.AgentSession(scope, "chat-2", **bad)  # type: ignore[arg-type]
    with pytest.raises(amem.InvalidInput):
        amem.AgentSession(scope, "")


async def test_call_tool_runs_amems_tools_in_the_sessions_scope(
    agent: amem.AgentSession, scope: amem.Scope, mem: amem.Memory
) -> None:
    await agent.remember_turn(TURN)

    added = await agent.call_tool(
        "memory_add",
        {
            "event_id": "t1-u",
            "memories": [
                memory_draft("User only takes high-speed trains", "我只坐高铁", "preference")
            ],
        },
    )
    recalled = await agent.call_tool("memory_recall", {"query": "高铁", "mode": "fast"})

    [memory_id] = added["memory_ids"]
    assert recalled["items"][0]["id"] == memory_id
    assert recalled["items"][0]["text"] == "User only takes high-speed trains"
    assert (recalled["persona"], recalled["project"]) == (scope.persona, scope.project)
    [record] = (await scope.recall("高铁")).items
    assert record.id == memory_id  # committed in the session's scope, nowhere else
    assert (await mem.scope(scope.persona, "elsewhere").recall("高铁")).items == []
    status = await agent.call_tool("memory_status")
    assert status["events"] == {**status["events"], "stored": 1, "extracted": 1}


async def test_tool_refusals_raise_amem_errors_with_their_codes(
    agent: amem.AgentSession, scope: amem.Scope
) -> None:
    await agent.remember_turn(TURN)
    draft = {"text": "User flies", "quote": "我坐飞机", "kind": "fact", "basis": "user_statement"}

    with pytest.raises(amem.InvalidInput) as mismatch:
        await agent.call_tool("memory_add", {"event_id": "t1-u", "memories": [draft]})
    with pytest.raises(amem.NotFound) as missing:
        await agent.call_tool("memory_read", {"id": "no-such-id"})
    with pytest.raises(amem.InvalidInput) as bad_args:
        await agent.call_tool("memory_recall", {"limit": 5})
    with pytest.raises(amem.InvalidInput) as unknown:
        await agent.call_tool("memory_teleport", {})
    with pytest.raises(amem.InvalidInput) as moved:
        await agent.call_tool("event_submit", {"text": "x", "role": "user", "project": "other"})

    assert mismatch.value.code == "quote_mismatch"
    assert missing.value.code == "not_found"
    assert bad_args.value.code == "invalid_input"
    assert "memory_recall" in unknown.value.message  # it lists the tools there are
    assert moved.value.code == "invalid_input"
    assert await stored_events(scope) == 2
    assert (await scope.list()).total == 0


async def test_naming_the_sessions_own_scope_is_allowed(
    agent: amem.AgentSession, scope: amem.Scope
) -> None:
    own = {"persona": scope.persona, "project": scope.project}
    receipt = await agent.call_tool("event_submit", {"text": "hi", "role": "user", **own})
    assert receipt["project"] == scope.project
    assert await stored_events(scope) == 1


async def working_note(agent: amem.AgentSession, text: str) -> str:
    """A user message of the session and a working note quoting it whole, through the tools
    the model would call; returns the note's ID."""
    [receipt] = await agent.remember_turn([{"role": "user", "text": text}])
    draft = memory_draft(text, text, "observation", tier="working")
    added = await agent.call_tool("memory_add", {"event_id": receipt.event_id, "memories": [draft]})
    [memory_id] = added["memory_ids"]
    return str(memory_id)


async def test_end_turn_deletes_expired_working_notes_and_keeps_pinned_ones(
    db_path: Path,
) -> None:
    settings = amem.Settings(working_ttl_hours=1e-6)  # every note expires at once
    async with amem.open(db_path, settings=settings) as mem:
        scope = mem.scope("assistant", "support")
        agent = amem.AgentSession(scope, "task-1")
        scratch = await working_note(agent, "maybe restart the quokka pod")
        kept = await working_note(agent, "the customer is on the wombat plan")
        await agent.call_tool("memory_pin", {"memory_id": kept})
        await anyio.sleep(0.01)

        done = await agent.end_turn()

        assert done.compaction is None  # compact_keep not given
        assert done.consolidation is not None
        assert done.consolidation.deleted == [scratch]
        assert done.consolidation.promotions == [
            amem.Promotion(id=kept, from_tier="working", to_tier="episodic")
        ]
        assert scratch not in {item.id for item in (await scope.recall("quokka")).items}
        assert (await scope.recall("wombat")).items[0].id == kept
        again = await agent.end_turn()
        assert again.consolidation is not None
        assert (again.consolidation.deleted, again.consolidation.promotions) == ([], [])


async def test_end_turn_compacts_the_sessions_older_working_notes(scope: amem.Scope) -> None:
    agent = amem.AgentSession(scope, "task-1", compact_keep=1)
    notes = [await working_note(agent, f"step {n}: checked shard {n}") for n in range(3)]
    other_session = amem.AgentSession(scope, "task-2")
    elsewhere = await working_note(other_session, "a note of another task")

    done = await agent.end_turn()

    assert done.compaction is not None
    assert done.compaction.folded == notes[:2]
    assert done.compaction.kept == notes[2:]
    assert done.compaction.memory is not None
    assert done.compaction.memory.tier == "episodic"
    assert done.consolidation is not None
    assert done.consolidation.deleted == []  # nothing expired yet (24 hours by default)
    working = await scope.list(tier="working")
    assert {m.id for m in working.items} == {notes[2], elsewhere}
    again = await agent.end_turn()
    assert again.compaction is not None
    assert again.compaction.folded == []


async def test_end_turn_runs_only_what_is_configured(scope: amem.Scope) -> None:
    agent = amem.AgentSession(scope, "task-1", consolidate=False)
    note = await working_note(agent, "a scratch note")
    done = await agent.end_turn()
    assert done == amem.TurnEnd(compaction=None, consolidation=None)
    assert (await scope.list(tier="working")).items[0].id == note
    for keep in (-1, 10_001, "3"):
        with pytest.raises(amem.InvalidInput):
            amem.AgentSession(scope, "task-1", compact_keep=keep)  # type: ignore[arg-type]


async def test_tool_schemas_are_the_mcp_servers_without_the_scope(
    anyio_backend: str, tmp_path: Path
) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as mcp:
        listed = (await mcp.list_tools()).tools
    async with amem.open(tmp_path / "m.db") as mem:
        schemas = amem.AgentSession(mem.scope(PERSONA, PROJECT), "s").tool_schemas()

    assert [s["name"] for s in schemas] == [tool.name for tool in listed]
    for schema, tool in zip(schemas, listed, strict=True):
        served = tool.model_dump(by_alias=True, mode="json", exclude_none=True)
        properties = served["inputSchema"].get("properties", {})
        for name in ("persona", "project"):  # persona_get shows persona over MCP
            properties.pop(name, None)
        assert schema == served
    [persona_get] = [s for s in schemas if s["name"] == "persona_get"]
    assert "version" in persona_get["inputSchema"]["properties"]


def test_import_amem_does_not_load_the_mcp_sdk() -> None:
    code = "import sys, amem; amem.AgentSession; print('mcp' in sys.modules)"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert shown.stdout.strip() == "False", shown.stderr
