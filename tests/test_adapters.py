"""Framework adapters, each against the real library the dev group installs.

- ``AmemSession`` (OpenAI Agents SDK ``Session``) and ``AmemStore`` (LangGraph
  ``BaseStore``) use anyio alone, so they are specified on asyncio and trio. The SDK's
  ``Runner`` is asyncio-only (it schedules with ``asyncio`` tasks), so the test that runs an
  agent through it is parametrized on asyncio alone, deliberately, not skipped on trio.
- ``memory_tools`` are plain async functions, specified on both backends; pydantic-ai's
  ``Agent`` registers and calls them on both as well (it runs on anyio).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from agents import Agent, RunConfig, Runner, RunResult, TResponseInputItem
from agents.items import ModelResponse
from agents.memory import SessionSettings
from agents.models.interface import Model
from agents.usage import Usage
from helpers import cancelled_after, memory_draft
from langgraph.store.base import GetOp, InvalidNamespaceError, ListNamespacesOp, PutOp, SearchOp
from openai.types.responses import ResponseOutputMessage, ResponseOutputText
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelMessage, TextPart, ToolCallPart
from pydantic_ai.messages import ModelResponse as PydanticResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

import amem
from amem.adapters.langgraph import AmemStore
from amem.adapters.openai_agents import AmemSession
from amem.adapters.tools import memory_tools

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent

# --- OpenAI Agents SDK: Session ---------------------------------------------------------

OUTPUT_MESSAGE: dict[str, Any] = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Hangzhou is lovely.", "annotations": []}],
}
ITEMS: list[Any] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "我搬到杭州了"},
    OUTPUT_MESSAGE,
    {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city":"杭州"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny, 21°C"},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"role": "developer", "content": "Answer in English."},
    {"role": "user", "content": [{"type": "input_text", "text": "and now?"}]},
    {"role": "user", "content": "   "},  # blank: kept as JSON, not as an empty event
    {"type": "message", "role": "user", "content": "typed message"},
    {"role": "user", "content": "a\x00b"},
    {"role": "assistant", "content": "  two\r\nlines, kept as written \n"},
]


async def test_session_gives_back_exactly_what_was_added_in_order(scope: amem.Scope) -> None:
    session = AmemSession(scope, "chat-1")
    await session.add_items(ITEMS[:4])
    await session.add_items(ITEMS[4:])
    assert await session.get_items() == ITEMS
    assert await session.get_items(limit=3) == ITEMS[-3:]
    assert await session.get_items(limit=0) == []
    assert await AmemSession(scope, "chat-2").get_items() == []


async def test_session_settings_limit_applies_when_no_limit_is_given(scope: amem.Scope) -> None:
    session = AmemSession(scope, "chat-1", session_settings=SessionSettings(limit=2))
    await session.add_items(ITEMS)
    assert await session.get_items() == ITEMS[-2:]
    assert await session.get_items(limit=4) == ITEMS[-4:]


async def test_plain_messages_are_searchable_and_other_items_archived(scope: amem.Scope) -> None:
    session = AmemSession(scope, "chat-1")
    await session.add_items(ITEMS)
    hits = await scope.recall("杭州")
    assert [item.text for item in hits.items] == ["我搬到杭州了"]
    assert hits.items[0].role == "user"
    listed = await scope.list("events", session="chat-1", limit=100)
    roles = [(e.role, e.category) for e in reversed(listed.items)]  # type: ignore[union-attr]
    assert roles[:8] == [
        ("system", "conversation"),
        ("user", "conversation"),
        ("assistant", "reference"),  # the output message as it was, for get_items
        ("assistant", "conversation"),  # and its text, said by the assistant
        ("assistant", "reference"),
        ("tool", "reference"),
        ("assistant", "reference"),
        ("system", "reference"),
    ]


async def test_an_assistant_reply_is_searchable_as_what_it_said(scope: amem.Scope) -> None:
    session = AmemSession(scope, "chat-1")
    reply = OUTPUT_MESSAGE | {
        "content": [
            {"type": "output_text", "text": "I recommend the Longjing tea.", "annotations": []},
            {"type": "output_text", "text": "Try it at West Lake.", "annotations": []},
        ]
    }
    await session.add_items([{"role": "user", "content": "What should I drink?"}, reply])
    [hit] = (await scope.recall("recommend")).items
    assert (hit.text, hit.role, hit.raw_fallback) == (
        "I recommend the Longjing tea.\nTry it at West Lake.",
        "assistant",
        True,
    )
    assert not any("{" in item.text for item in (await scope.recall("Longjing tea")).items)
    assert await session.get_items() == [{"role": "user", "content": "What should I drink?"}, reply]
    assert await session.get_items(limit=1) == [reply]
    assert await session.pop_item() == reply  # the item goes with the text said
    assert (await scope.recall("recommend")).items == []
    assert (await scope.list("events", session="chat-1")).total == 1


async def test_long_items_come_back_whole(scope: amem.Scope) -> None:
    session = AmemSession(scope, "chat-1")
    long = {"type": "function_call_output", "call_id": "c1", "output": "数据" * 20_000}
    await session.add_items([{"role": "user", "content": "长" * 30_000}, long])
    assert await session.get_items() == [{"role": "user", "content": "长" * 30_000}, long]


async def test_add_items_writes_all_or_nothing(scope: amem.Scope) -> None:
    session = AmemSession(scope, "chat-1")
    too_long = {"role": "user", "content": "x" * 100_001}
    with pytest.raises(amem.InvalidInput):
        await session.add_items([ITEMS[1], too_long])
    assert await session.get_items() == []
    assert (await scope.list("events")).total == 0


async def test_concurrent_adds_each_stay_whole(scope: amem.Scope) -> None:
    session = AmemSession(scope, "chat-1")
    batches = [
        [{"role": "user", "content": f"batch {b} item {i}"} for i in range(5)] for b in range(6)
    ]

    async with anyio.create_task_group() as tg:
        for batch in batches:
            tg.start_soon(session.add_items, batch)
    got = await session.get_items()
    assert len(got) == 30
    runs = [got[n : n + 5] for n in range(0, 30, 5)]
    assert sorted(runs, key=str) == sorted(batches, key=str)


async def test_pop_item_erases_the_latest_item(scope: amem.Scope) -> None:
    session = AmemSession(scope, "chat-1")
    assert await session.pop_item() is None
    await session.add_items(ITEMS[:3])
    newest = (await scope.list("events", session="chat-1")).items[0]
    assert await session.pop_item() == ITEMS[2]
    assert await session.get_items() == ITEMS[:2]
    with pytest.raises(amem.NotFound):
        await scope.read(newest.id)
    assert await session.pop_item() == ITEMS[1]
    assert (await scope.recall("杭州")).items == []  # erased words are not found again
    await session.add_items([ITEMS[3]])
    assert await session.get_items() == [ITEMS[0], ITEMS[3]]


async def test_clear_session_erases_only_that_session(scope: amem.Scope) -> None:
    one, two = AmemSession(scope, "chat-1"), AmemSession(scope, "chat-2")
    await one.add_items(ITEMS[:3])
    await two.add_items(ITEMS[:2])
    await one.clear_session()
    assert await one.get_items() == []
    assert await two.get_items() == ITEMS[:2]
    await one.add_items(ITEMS[3:5])
    assert await one.get_items() == ITEMS[3:5]


async def test_corrections_in_the_session_are_not_items(scope: amem.Scope) -> None:
    session = AmemSession(scope, "chat-1")
    await session.add_items(ITEMS[:2])
    [event] = [e for e in (await scope.list("events")).items if e.text == "我搬到杭州了"]
    draft = memory_draft("User moved to Hangzhou", "我搬到杭州了")
    [memory] = await scope.add_memories(event.id, [draft])
    await scope.correct(memory.id, "User moved to Suzhou")
    assert (await scope.list("events", session="chat-1")).total == 3
    assert await session.get_items() == ITEMS[:2]
    assert await session.pop_item() == ITEMS[1]


async def test_sessions_of_other_scopes_are_apart(mem: amem.Memory) -> None:
    a = AmemSession(mem.scope(persona="a"), "chat-1")
    b = AmemSession(mem.scope(persona="b"), "chat-1")
    await a.add_items(ITEMS[:2])
    await b.add_items(ITEMS[2:3])
    assert await a.get_items() == ITEMS[:2]
    assert await b.get_items() == ITEMS[2:3]


class ScriptedModel(Model):
    """Answers every turn with the next reply, and keeps the input it was given."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.inputs: list[list[TResponseInputItem]] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.inputs.append(list(input))
        n = len(self.inputs)
        text = ResponseOutputText(type="output_text", text=self.replies.pop(0), annotations=[])
        message = ResponseOutputMessage(
            id=f"msg_{n}", type="message", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def agent_runs(
    scope: amem.Scope, model: ScriptedModel
) -> tuple[Callable[[str], Awaitable[RunResult]], AmemSession]:
    """A turn of an agent on ``model`` whose session is ``chat-1`` in amem, and that session."""
    agent = Agent(name="helper", instructions="Be brief.", model=model)
    session = AmemSession(scope, "chat-1")
    config = RunConfig(tracing_disabled=True)

    async def run(said: str) -> RunResult:
        return await Runner.run(agent, said, session=session, run_config=config)

    return run, session


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the SDK's Runner is asyncio-only
async def test_an_agent_run_remembers_the_conversation(scope: amem.Scope) -> None:
    model = ScriptedModel("Noted: Hangzhou.", "You live in Hangzhou.")
    run, session = agent_runs(scope, model)
    await run("我搬到杭州了")
    assert (await run("Where do I live?")).final_output == "You live in Hangzhou."
    history = await session.get_items()
    assert history[0] == {"role": "user", "content": "我搬到杭州了"}
    assert history[2] == {"role": "user", "content": "Where do I live?"}
    assert model.inputs[1] == history[:3]  # the second turn saw the first, read back from amem
    assert [item.get("role") for item in history] == ["user", "assistant", "user", "assistant"]
    assert [item.text for item in (await scope.recall("杭州")).items] == ["我搬到杭州了"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the SDK's Runner is asyncio-only
async def test_what_an_agent_recommended_is_recalled_later(scope: amem.Scope) -> None:
    model = ScriptedModel("I recommend the Longjing tea at West Lake.", "Enjoy!")
    run, session = agent_runs(scope, model)
    await run("What should I drink in Hangzhou?")
    items = await session.get_items()
    await run("Thanks")
    assert model.inputs[1][:2] == items  # the reply came back to the model as it was
    assert (await session.get_items())[:2] == items
    hits = (await scope.recall("what did you recommend")).items
    assert [(item.text, item.role) for item in hits] == [
        ("I recommend the Longjing tea at West Lake.", "assistant")
    ]


# --- LangGraph: BaseStore ----------------------------------------------------------------

U1 = ("memories", "u1")


@pytest.fixture
def store(mem: amem.Memory) -> AmemStore:
    return AmemStore(mem, persona="graph")


async def test_store_puts_and_gets_values_as_events_of_a_scope(
    store: AmemStore, mem: amem.Memory
) -> None:
    value = {"content": "用户喜欢乌龙茶", "tags": ["tea"], "meta": {"n": 1, "ok": None}}
    await store.aput(U1, "pref-1", value)
    item = await store.aget(U1, "pref-1")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (U1, "pref-1", value)
    assert item.created_at == item.updated_at
    assert await store.aget(U1, "absent") is None
    assert await store.aget(("memories", "u2"), "pref-1") is None
    [event] = (await mem.scope("graph", "memories.u1").list("events")).items
    assert (event.session, json.loads(event.text)) == ("pref-1", value)  # type: ignore[union-attr]
    assert await AmemStore(mem, persona="other").aget(U1, "pref-1") is None


async def test_a_put_replaces_the_value_and_erases_the_old_one(
    store: AmemStore, mem: amem.Memory
) -> None:
    await store.aput(U1, "home", {"city": "Beijing"})
    [old] = (await mem.scope("graph", "memories.u1").list("events")).items
    await store.aput(U1, "home", {"city": "Hangzhou"})
    item = await store.aget(U1, "home")
    assert item is not None
    assert item.value == {"city": "Hangzhou"}
    assert (await mem.scope("graph", "memories.u1").list("events")).total == 1
    with pytest.raises(amem.NotFound):
        await mem.scope("graph", "memories.u1").read(old.id)
    assert [hit.value for hit in await store.asearch(U1, query="Beijing")] == []


async def test_a_cancelled_put_leaves_one_value_of_the_key(
    store: AmemStore, mem: amem.Memory
) -> None:
    await store.aput(U1, "k", {"v": 0})
    for ticks in range(0, 60, 3):
        done = await cancelled_after(ticks, lambda t=ticks: store.aput(U1, "k", {"v": t}))
        item = await store.aget(U1, "k")
        assert item is not None
        if done:
            assert item.value == {"v": ticks}
        events = await mem.scope("graph", "memories.u1").list("events", session="k")
        assert events.total == 1


async def test_delete_erases_the_key_for_good(store: AmemStore) -> None:
    await store.aput(U1, "home", {"city": "Hangzhou"})
    await store.aput(U1, "job", {"title": "teacher"})
    await store.adelete(U1, "home")
    assert await store.aget(U1, "home") is None
    assert await store.asearch(U1, query="Hangzhou") == []
    await store.adelete(U1, "never-put")
    await store.adelete(U1, "job")
    assert await store.alist_namespaces() == []


async def test_search_by_query_ranks_with_recall_under_the_prefix(store: AmemStore) -> None:
    await store.aput(U1, "tea", {"content": "User drinks oolong tea every morning", "n": 1})
    await store.aput(U1, "city", {"content": "User lives in Hangzhou", "n": 2})
    await store.aput(("memories", "u2"), "tea", {"content": "User hates tea", "n": 3})
    await store.aput(("notes",), "tea", {"content": "tea shop list", "n": 4})
    hits = await store.asearch(U1, query="tea")
    assert [(h.namespace, h.key) for h in hits] == [(U1, "tea")]
    assert hits[0].score is not None
    assert hits[0].score > 0
    both = await store.asearch(("memories",), query="tea")
    assert sorted(h.namespace for h in both) == [U1, ("memories", "u2")]
    assert [h.key for h in await store.asearch((), query="tea", filter={"n": {"$gte": 3}})] == [
        "tea",
        "tea",
    ]
    assert len(await store.asearch((), query="tea", limit=2)) == 2
    assert len(await store.asearch((), query="tea", offset=2)) == 1


async def test_search_without_query_lists_newest_first_with_filters(
    store: AmemStore, mem: amem.Memory
) -> None:
    for n in range(5):
        ns = U1 if n % 2 else ("memories", "u2")
        await store.aput(
            ns, f"k{n}", {"n": n, "kind": "even" if n % 2 == 0 else "odd", "meta": {"src": "chat"}}
        )
    keys = [h.key for h in await store.asearch(("memories",))]
    assert keys == ["k4", "k3", "k2", "k1", "k0"]
    assert [h.score for h in await store.asearch(("memories",))] == [None] * 5
    assert [h.key for h in await store.asearch(U1)] == ["k3", "k1"]
    assert [h.key for h in await store.asearch((), limit=2, offset=1)] == ["k3", "k2"]
    assert [h.key for h in await store.asearch((), filter={"kind": "even"})] == ["k4", "k2", "k0"]
    assert [h.key for h in await store.asearch((), filter={"n": {"$gt": 1, "$ne": 3}})] == [
        "k4",
        "k2",
    ]
    assert len(await store.asearch((), filter={"meta": {"src": "chat"}})) == 5
    assert await store.asearch((), filter={"meta": {"src": "mail"}}) == []
    await mem.scope("graph", "memories.u1").submit_event("not an item", role="user")
    assert [h.key for h in await store.asearch(U1)] == ["k3", "k1"]
    with pytest.raises(ValueError, match="operator"):
        await store.asearch((), filter={"n": {"$in": [1]}})


async def test_list_namespaces_matches_prefix_suffix_and_depth(store: AmemStore) -> None:
    for ns in [U1, ("memories", "u2"), ("docs", "v1"), ("docs", "drafts", "v1")]:
        await store.aput(ns, "k", {"x": 1})
    everything = [("docs", "drafts", "v1"), ("docs", "v1"), U1, ("memories", "u2")]
    assert await store.alist_namespaces() == everything
    assert await store.alist_namespaces(prefix=("memories",)) == [U1, ("memories", "u2")]
    assert await store.alist_namespaces(suffix=("v1",)) == [
        ("docs", "drafts", "v1"),
        ("docs", "v1"),
    ]
    assert await store.alist_namespaces(prefix=("*", "u2")) == [("memories", "u2")]
    assert await store.alist_namespaces(max_depth=1) == [("docs",), ("memories",)]
    assert await store.alist_namespaces(limit=1, offset=1) == [("docs", "v1")]


async def test_abatch_runs_operations_in_order(store: AmemStore) -> None:
    results = await store.abatch(
        [
            PutOp(U1, "a", {"text": "first"}),
            GetOp(U1, "a"),
            PutOp(U1, "a", None),
            GetOp(U1, "a"),
            PutOp(U1, "b", {"text": "second"}),
            SearchOp(U1, query="second"),
            ListNamespacesOp(),
        ]
    )
    assert results[0] is None
    assert results[2] is None
    assert results[4] is None
    assert results[1].value == {"text": "first"}  # type: ignore[union-attr]
    assert results[3] is None
    assert [hit.key for hit in results[5]] == ["b"]  # type: ignore[union-attr]
    assert results[6] == [U1]


async def test_unindexed_values_are_kept_but_not_searched(store: AmemStore) -> None:
    await store.aput(U1, "secret", {"text": "oolong"}, index=False)
    item = await store.aget(U1, "secret")
    assert item is not None
    assert item.value == {"text": "oolong"}
    assert await store.asearch(U1, query="oolong") == []
    assert [h.key for h in await store.asearch(U1)] == ["secret"]


async def test_the_store_refuses_what_amem_cannot_keep(store: AmemStore) -> None:
    with pytest.raises(NotImplementedError, match="ttl"):
        await store.aput(U1, "k", {"x": 1}, ttl=5)
    with pytest.raises(NotImplementedError, match="fields"):
        await store.aput(U1, "k", {"x": 1}, index=["x"])
    with pytest.raises(NotImplementedError, match="async"):
        store.get(U1, "k")
    with pytest.raises(InvalidNamespaceError):
        await store.abatch([GetOp(("a.b",), "k")])
    with pytest.raises(amem.InvalidInput):
        await store.aput(U1, "", {"x": 1})
    assert await store.asearch(()) == []


# --- plain async tools ------------------------------------------------------------------


async def test_remember_stores_a_note_recall_finds_it_and_read_pages_it(
    scope: amem.Scope,
) -> None:
    remember, recall, read = memory_tools(scope, session="chat-1")
    note_id = await remember("The user's cat is called 墨墨.")
    page = await scope.read(note_id)
    assert (page.text, page.event.role, page.event.session) == (
        "The user's cat is called 墨墨.",
        "assistant",
        "chat-1",
    )
    [found] = await recall("墨墨")
    assert found == {
        "id": note_id,
        "text": "The user's cat is called 墨墨.",
        "when": page.event.occurred_at.isoformat(timespec="seconds"),
    }
    assert await read(note_id) == {"text": "The user's cat is called 墨墨."}


async def test_tool_results_are_compact_and_bounded(scope: amem.Scope) -> None:
    remember, recall, read = memory_tools(scope)
    long_id = await remember("tea " + "长" * 5000)
    for n in range(30):
        await remember(f"tea note {n}")
    assert len(await recall("tea", limit=100)) == 20
    [long] = list(await recall("长", limit=1))
    assert long["id"] == long_id
    assert long["truncated"] is True
    first = await read(long_id)
    assert first["next_offset"] == len(first["text"])
    rest = await read(long_id, offset=first["next_offset"])
    assert first["text"] + rest["text"] == "tea " + "长" * 5000
    assert "next_offset" not in rest
    await scope.submit_event("I drink oolong", role="user", event_id="u-1")
    draft = memory_draft("User drinks oolong", "I drink oolong", "preference")
    await scope.add_memories("u-1", [draft])
    [memory] = await recall("oolong")
    assert memory["kind"] == "preference"
    assert set(memory) == {"id", "text", "when", "kind"}


async def test_tools_raise_amem_errors_on_bad_arguments(scope: amem.Scope) -> None:
    remember, recall, read = memory_tools(scope)
    with pytest.raises(amem.InvalidInput):
        await remember("")
    with pytest.raises(amem.InvalidInput):
        await recall("tea", limit=0)
    with pytest.raises(amem.NotFound):
        await read("evt_missing")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # pydantic-ai's Agent runs on asyncio
async def test_pydantic_ai_registers_the_tools_as_they_are(scope: amem.Scope) -> None:
    model = TestModel(call_tools=[])
    await PydanticAgent(model, tools=memory_tools(scope)).run("hi")
    params = model.last_model_request_parameters
    assert params is not None
    tools = {tool.name: tool for tool in params.function_tools}
    assert sorted(tools) == ["read", "recall", "remember"]
    recall_schema = tools["recall"].parameters_json_schema
    assert recall_schema["required"] == ["query"]
    assert (
        recall_schema["properties"]["limit"]["description"] == "How many results at most (1 to 20)."
    )
    assert tools["remember"].description.startswith("Save something worth knowing")


def scripted(messages: list[ModelMessage], info: AgentInfo) -> PydanticResponse:
    """A model that saves a note, searches for it, reads it, then answers with its text."""
    if len(messages) == 1:
        return PydanticResponse(
            parts=[ToolCallPart("remember", {"text": "User lives in Hangzhou"})]
        )
    if len(messages) == 3:
        return PydanticResponse(parts=[ToolCallPart("recall", {"query": "Hangzhou"})])
    returned = messages[-1].parts[0].content  # type: ignore[union-attr]
    if len(messages) == 5:
        return PydanticResponse(parts=[ToolCallPart("read", {"id": returned[0]["id"]})])
    return PydanticResponse(parts=[TextPart(returned["text"])])


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # pydantic-ai's Agent runs on asyncio
async def test_a_pydantic_ai_agent_remembers_and_recalls_through_the_tools(
    scope: amem.Scope,
) -> None:
    agent = PydanticAgent(FunctionModel(scripted), tools=memory_tools(scope, session="s1"))
    result = await agent.run("I moved to Hangzhou")
    assert result.output == "User lives in Hangzhou"
    [event] = (await scope.list("events", session="s1")).items
    assert event.text == "User lives in Hangzhou"


# --- packaging ---------------------------------------------------------------------------

ADAPTERS = {"openai_agents": ("agents", "openai-agents"), "langgraph": ("langgraph", "langgraph")}


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_an_adapter_without_its_library_names_the_extra(adapter: str) -> None:
    library, extra = ADAPTERS[adapter]
    code = f"import sys; sys.modules[{library!r}] = None\nimport amem.adapters.{adapter}"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode != 0
    assert "ImportError" in result.stderr
    assert f"'{extra}' extra" in result.stderr


def test_import_amem_imports_no_adapter_nor_framework() -> None:
    frameworks = ("amem.adapters", "agents", "langgraph", "pydantic_ai")
    code = f"import sys, amem; print(sorted(m for m in sys.modules if m.startswith({frameworks})))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr


def test_the_tools_need_no_framework() -> None:
    code = (
        "import sys\n"
        "for name in ('agents', 'langgraph', 'pydantic_ai'): sys.modules[name] = None\n"
        "from amem.adapters.tools import memory_tools"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
