"""Every MCP tool end to end, in Chinese and English: the tool list, each tool's results,
its refusals as tool errors with stable codes that echo nothing, results that stay bounded,
and two servers on one file. The clients and backends: ``mcp_client``."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import dump
from mcp import ClientSession
from mcp_client import (
    MARKER,
    PERSONA,
    PROJECT,
    SPEC_ARGS,
    assert_clean_error,
    client,
    connect,
    default_scope,
    integrity,
    ok,
    other,
    refused,
    server_backends,
    text_of,
)

import amem
from amem.db.schema import SCHEMA_VERSION
from amem.limits import MCP_MAX_RESULT_CHARS

pytestmark = pytest.mark.anyio

SPEC_REQUIRED: dict[str, set[str]] = {
    "event_submit": {"text", "role"},
    "memory_add": {"event_id", "memories"},
    "memory_recall": {"query"},
    "memory_read": {"id"},
    "memory_correct": {"memory_id", "text"},
    "memory_delete": set(),
    "memory_retract": {"memory_id"},
    "memory_relate": {"from_id", "to_id"},
    "memory_graph": set(),
    "consolidation_prepare": set(),
    "consolidation_apply": {"run_id", "patch"},
    "checkpoint_save": {"session", "goal"},
    "session_resume": {"session"},
    "persona_get": set(),
    "extraction_retry": set(),
    "memory_status": set(),
    "memory_list": set(),
    "memory_pin": {"memory_id"},
    "memory_consolidate": set(),
    "memory_compact_working": {"session"},
    "person_list": set(),
    "person_upsert": {"display_name"},
    "person_assign": {"event_id"},
}
EVIDENCE_TOOLS = ("memory_recall", "memory_read", "session_resume", "memory_list")

# --- 1. the tool list ---------------------------------------------------------------------


async def test_tools_are_exactly_the_spec_set(anyio_backend: str, tmp_path: Path) -> None:
    async with client(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as session:
        init = await session.initialize()
        listed = await session.list_tools()

    assert init.serverInfo.name == "amem"
    assert init.serverInfo.version == amem.__version__
    assert init.capabilities.tools is not None
    assert init.instructions
    assert "never instructions" in init.instructions
    assert "persona and project" in init.instructions
    assert "unset unless" in init.instructions

    tools = {tool.name: tool for tool in listed.tools}
    assert len(tools) == len(listed.tools)
    assert set(tools) == set(SPEC_ARGS)
    for name, tool in tools.items():
        schema = tool.inputSchema
        assert schema["type"] == "object", name
        assert set(schema["properties"]) == SPEC_ARGS[name], name  # the scope's are not shown
        assert set(schema.get("required", [])) == SPEC_REQUIRED[name], name
        assert tool.description, name
        assert len(tool.description) > 40, name
        assert tool.annotations is not None, name
    for name in EVIDENCE_TOOLS:
        description = (tools[name].description or "").lower()
        assert "evidence" in description, name
        assert "never instructions" in description, name
    for name in ("memory_recall", "memory_read", "session_resume", "memory_status", "memory_list"):
        assert tools[name].annotations.readOnlyHint is True, name  # type: ignore[union-attr]
    for name in ("event_submit", "memory_add", "memory_correct", "memory_delete", "memory_retract"):
        assert not tools[name].annotations.readOnlyHint, name  # type: ignore[union-attr]
    for name in ("memory_correct", "memory_delete", "memory_retract"):
        assert tools[name].annotations.destructiveHint is True, name  # type: ignore[union-attr]
    for name in ("event_submit", "memory_add", "checkpoint_save"):  # absent would mean true
        assert tools[name].annotations.destructiveHint is False, name  # type: ignore[union-attr]
    roles = tools["event_submit"].inputSchema["properties"]["role"]
    assert set(roles["enum"]) == {"user", "assistant", "system", "tool"}
    draft = tools["memory_add"].inputSchema["properties"]["memories"]["items"]
    assert set(draft["required"]) == {"text", "quote", "kind", "basis"}
    assert draft["properties"]["emotion"]["required"] == ["label", "valence", "arousal"]


def schema_keys(node: Any) -> set[str]:
    """Every JSON Schema keyword used in ``node``, at any depth (property names aside)."""
    if isinstance(node, list):
        return set().union(*map(schema_keys, node)) if node else set()
    if not isinstance(node, dict):
        return set()
    keys = set(node) - {"properties"}
    for key, value in node.items():
        children = value.values() if key == "properties" else [value]
        keys |= set().union(*(schema_keys(child) for child in children))
    return keys


async def test_tool_schemas_hold_only_what_a_model_uses(anyio_backend: str, tmp_path: Path) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        listed = (await s.list_tools()).tools
    keys = set().union(*(schema_keys(tool.inputSchema) for tool in listed))
    # no titles, no null branches (leaving an argument out says "none"), no $defs to chase
    assert not keys & {"title", "anyOf", "$defs", "$ref", "default", "minLength", "maxLength"}
    assert keys <= {
        "type",
        "required",
        "enum",
        "items",
        "minimum",
        "maximum",
        "format",
        "description",
    }
    recall = next(tool for tool in listed if tool.name == "memory_recall").inputSchema
    assert recall["properties"]["limit"] == {"type": "integer", "minimum": 1, "maximum": 50}
    assert recall["properties"]["as_of"] == {"type": "string"}  # the instructions say ISO-8601


async def test_every_tool_takes_the_scope_and_names_an_unknown_argument(
    anyio_backend: str, tmp_path: Path
) -> None:
    texts = {}
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        for name in SPEC_ARGS:
            arguments = {"persona": PERSONA, "project": PROJECT, "colour": MARKER}
            texts[name] = text_of(await s.call_tool(name, arguments))
        typo = text_of(await s.call_tool("memory_recall", {"query": "茶", "limt": 3}))
        nested = text_of(
            await s.call_tool(
                "memory_add",
                {
                    "event_id": "e",
                    "memories": [draft("t", "q", kind="fact", basis="inference", colour=1)],
                },
            )
        )
        hidden = text_of(await s.call_tool("memory_status", {MARKER + " !": 1}))
    for name, text in texts.items():
        assert text.startswith("invalid_input: bad arguments: "), text
        assert "colour: unexpected field" in text
        assert "persona:" not in text  # accepted, though tools/list does not show it
        assert "project:" not in text
        takes = text.split(f"; {name} takes: ")[1].split(", ")
        assert set(takes) == SPEC_ARGS[name] | {"persona", "project"}, text
        assert takes[-2:] == ["persona", "project"], text  # the tool's own arguments first
        assert MARKER not in text  # the value is never shown
    assert typo.startswith("invalid_input: bad arguments: limt: unexpected field; memory_recall")
    assert nested.startswith("invalid_input: bad arguments: memories.0.colour: unexpected field")
    assert (
        hidden == "invalid_input: bad arguments: ?: unexpected field; memory_status takes: "
        "persona, project"
    )  # a name that is no plain name is not shown
    for text in (*texts.values(), typo, nested, hidden):
        assert_clean_error(text)


# --- 2. every tool, Chinese and English ---------------------------------------------------

BOOK_EVENT = "我昨天在书店买了一本书，是《三体》。"
HOME_EVENT = "I moved to Hangzhou last spring, and I love green tea."
REPLY_EVENT = "好的，我记住了：你住在杭州，喜欢绿茶。"


@server_backends
async def test_every_tool_in_a_bilingual_flow(
    anyio_backend: str, server_backend: str, tmp_path: Path
) -> None:
    beijing = timezone(timedelta(hours=8))
    yesterday = datetime.now(beijing).replace(microsecond=0) - timedelta(days=1)
    times = [(yesterday + timedelta(minutes=n)).isoformat() for n in range(3)]
    async with connect(tmp_path / "m.db", server_backend, tmp_path / "server.log") as s:

        def chat(text: str, role: str, event_id: str, at: str) -> dict[str, str]:
            """``event_submit``'s arguments for an event of session ``chat-1``."""
            return {
                "text": text,
                "role": role,
                "event_id": event_id,
                "session": "chat-1",
                "occurred_at": at,
            }

        # events: Chinese and English, with a UTC offset converted to UTC
        book = chat(BOOK_EVENT, "user", "zh-1", times[0]) | {"source": "wechat"}
        book_ev = await ok(s, "event_submit", **book)
        assert book_ev["event_id"] == "zh-1"
        assert (book_ev["persona"], book_ev["project"]) == (PERSONA, PROJECT)
        assert book_ev["status"] == "stored"  # no extraction endpoint configured
        assert book_ev["duplicate"] is False
        assert book_ev["memory_ids"] == []
        assert book_ev["occurred_at"].endswith("Z")
        assert datetime.fromisoformat(book_ev["occurred_at"]) == yesterday
        assert book_ev["session"] == "chat-1"
        home_ev = await ok(s, "event_submit", **chat(HOME_EVENT, "user", "en-1", times[1]))
        reply_ev = await ok(s, "event_submit", **chat(REPLY_EVENT, "assistant", "as-1", times[2]))
        assert book_ev["seq"] < home_ev["seq"] < reply_ev["seq"]
        again = await ok(s, "event_submit", **book)  # the same event again
        assert again["duplicate"] is True
        assert again["seq"] == book_ev["seq"]
        reference = await ok(
            s,
            "event_submit",
            text="Reference: the Great Wall is about 21,000 km long.",
            role="system",
            category="reference",
            event_id="ref-1",
        )
        assert reference["status"] == "stored"
        generated = await ok(s, "event_submit", text="tool output 工具输出", role="tool")
        assert generated["event_id"]  # an ID is made up when none is given

        # the host acts as extractor
        added = await ok(
            s,
            "memory_add",
            event_id="zh-1",
            memories=[
                draft("用户买了一本书《三体》", "买了一本书", kind="episode"),
            ],
        )
        [book_id] = added["memory_ids"]
        [book] = added["memories"]
        assert BOOK_EVENT[book["quote_start"] : book["quote_end"]] == "买了一本书"
        added = await ok(
            s,
            "memory_add",
            event_id="en-1",
            memories=[
                draft(
                    "User lives in Hangzhou",
                    "I moved to Hangzhou",
                    kind="fact",
                    subject="user",
                    fact_key="residence",
                ),
                draft("User loves green tea", "I love green tea"),
            ],
        )
        home_id, tea_id = added["memory_ids"]
        added = await ok(
            s,
            "memory_add",
            event_id="as-1",
            memories=[
                draft(
                    "助手答应记住用户喜欢绿茶",
                    "我记住了",
                    kind="agreement",
                    basis="assistant_expression",
                ),
            ],
        )
        [promise_id] = added["memory_ids"]

        # recall: a single Chinese character finds the word it is part of
        hits = await ok(s, "memory_recall", query="书")
        assert (hits["persona"], hits["project"]) == (PERSONA, PROJECT)
        by_id = {item["id"]: item for item in hits["items"]}
        assert book_id in by_id
        item = by_id[book_id]
        assert "一本书" in item["text"]
        assert (item["kind"], item["role"]) == ("episode", "user")
        assert datetime.fromisoformat(item["valid_at"]) == yesterday
        explained = await ok(s, "memory_recall", query="书", explain=True)
        item = {item["id"]: item for item in explained["items"]}[book_id]
        assert item["source_event_id"] == "zh-1"
        assert item["basis"] == "user_statement"
        assert item["quote"] == "买了一本书"
        assert set(item["components"]) >= {"lexical", "semantic", "link", "basis", "freshness"}
        hits = await ok(s, "memory_recall", query="Where does the user live? Hangzhou", limit=5)
        assert home_id in [item["id"] for item in hits["items"]]
        hits = await ok(s, "memory_recall", query="green tea 绿茶", kinds=["preference"])
        assert tea_id in [item["id"] for item in hits["items"]]
        assert {item["kind"] for item in hits["items"]} == {"preference"}
        hits = await ok(s, "memory_recall", query="量子计算机")
        assert hits["items"] == []  # no evidence, no items

        # read: page through a long original
        long_text = "".join(
            f"第{i}段：今天学习了 Python 和 SQLite。Paragraph {i} is about memory. "
            for i in range(300)
        )
        await ok(s, "event_submit", text=long_text, role="user", event_id="long-1")
        pages, offset = [], 0
        while offset is not None:
            page = await ok(s, "memory_read", id="long-1", offset=offset, limit=4000)
            assert page["total_chars"] == len(long_text)
            assert page["event"]["id"] == "long-1"
            assert page["memory"] is None
            assert len(page["text"]) <= 4000
            pages.append(page["text"])
            offset = page["next_offset"]
        assert "".join(pages) == long_text
        assert len(pages) == math.ceil(len(long_text) / 4000)
        page = await ok(s, "memory_read", id=book_id)
        assert page["text"] == BOOK_EVENT
        assert page["next_offset"] is None
        assert page["memory"]["id"] == book_id
        assert page["text"][page["memory"]["quote_start"] : page["memory"]["quote_end"]] == (
            "买了一本书"
        )
        assert [m["id"] for m in page["memories"]] == [book_id]

        # correct a mistake: the old memory is revoked for good
        fixed = await ok(
            s,
            "memory_correct",
            memory_id=home_id,
            text="User lives in Suzhou",
            reason="听错了 / misheard",
        )
        assert fixed["revoked_id"] == home_id
        assert fixed["amended_event_id"] == "en-1"
        suzhou_id = fixed["memory"]["id"]
        assert suzhou_id != home_id
        assert fixed["memory"]["text"] == "User lives in Suzhou"
        hits = await ok(s, "memory_recall", query="Suzhou")
        assert suzhou_id in [item["id"] for item in hits["items"]]
        hits = await ok(s, "memory_recall", query="Hangzhou", include_history=True)
        assert home_id not in [item["id"] for item in hits["items"]]
        page = await ok(s, "memory_read", id="en-1")
        assert page["event"]["status"] == "amended"
        assert page["text"] == HOME_EVENT

        # relate: finding one brings the other
        relation = await ok(s, "memory_relate", from_id=tea_id, to_id=book_id)
        assert (relation["from_id"], relation["to_id"], relation["kind"]) == (
            tea_id,
            book_id,
            "related",
        )
        await ok(s, "memory_relate", from_id=tea_id, to_id=book_id)  # idempotent
        hits = await ok(s, "memory_recall", query="green tea")
        ids = [item["id"] for item in hits["items"]]
        assert tea_id in ids
        assert book_id in ids

        # the graph around a memory: its message, that message's session, the linked memory
        graph = await ok(s, "memory_graph", seed=tea_id, depth=2, max_nodes=5)
        assert (graph["seeded_by"], graph["seeds"]) == ("memory", [tea_id])
        edges = {(e["from_id"], e["kind"], e["to_id"]) for e in graph["edges"]}
        assert {
            (tea_id, "derived_from", "en-1"),
            ("en-1", "in_session", "session:chat-1"),
            (tea_id, "related", book_id),
        } <= edges
        assert len(graph["nodes"]) == 5
        assert graph["coverage"]["truncated"] is True
        graph = await ok(s, "memory_graph", seed="三体")  # a query: fast recall's best
        assert graph["seeded_by"] == "query"
        assert book_id in graph["seeds"]

        # checkpoint and resume
        saved = await ok(
            s,
            "checkpoint_save",
            session="chat-1",
            goal="帮用户整理读书笔记 / reading notes",
            completed=["记录《三体》"],
            pending=["find the next book"],
            constraints=["answer in Chinese"],
            next_action="ask which chapter",
            covered_seq=reply_ev["seq"],
        )
        assert saved["covered_seq"] == reply_ev["seq"]
        assert saved["session"] == "chat-1"
        small = await ok(s, "session_resume", session="chat-1", budget_tokens=10)
        assert small["insufficient_budget"] is True
        assert small["context"] == ""
        assert small["included"] == []
        assert "persona" in small["omitted"]
        pack = await ok(s, "session_resume", session="chat-1", query="书", budget_tokens=8000)
        assert pack["insufficient_budget"] is False
        assert pack["tokens_used"] == amem.estimate_tokens(pack["context"]) <= 8000
        assert pack["included"][:2] == ["persona", "checkpoint"]
        assert "memories" in pack["included"]
        assert "recent_events" in pack["included"]
        context = json.loads(pack["context"])
        assert "never instructions" in context["notice"]
        assert context["scope"] == {"persona": PERSONA, "project": PROJECT}
        assert context["checkpoint"]["goal"] == "帮用户整理读书笔记 / reading notes"
        assert "一本书" in pack["context"]
        assert [a["id"] for a in context["agreements"]] == [promise_id]
        assert [e["id"] for e in context["recent_events"]][-1] == "as-1"

        # persona: read-only neutral default
        persona = await ok(s, "persona_get")
        assert persona["persona"] == PERSONA
        assert persona["version"] == 1
        assert persona["text"]
        assert persona["note"] == "neutral default"
        assert await ok(s, "persona_get") == persona  # reading creates nothing new
        assert await ok(s, "persona_get", persona=PERSONA, version=1) == persona
        stranger = await ok(s, "persona_get", persona="小助手")
        assert stranger["persona"] == "小助手"
        assert stranger["version"] == 1

        # delete: counts, and the text is gone from recall and read
        gone = await ok(s, "memory_delete", event_id="zh-1")
        assert gone["event_ids"] == ["zh-1"]
        assert gone["memory_ids"] == [book_id]
        assert gone["relations"] >= 1
        assert gone["search_rows"] >= 2
        assert gone["checkpoints_invalidated"] >= 1
        hits = await ok(
            s, "memory_recall", query="书", include_history=True, limit=50, explain=True
        )
        assert all("一本书" not in item["text"] for item in hits["items"])
        assert all(item["source_event_id"] != "zh-1" for item in hits["items"])
        assert await refused(s, "memory_read", {"id": "zh-1"}) == "erased"
        assert await refused(s, "memory_read", {"id": book_id}) == "not_found"
        hits = await ok(s, "memory_recall", query="green tea")
        assert tea_id in [item["id"] for item in hits["items"]]  # only linked: it stays
        gone = await ok(s, "memory_delete", memory_id=tea_id)
        assert "en-1" in gone["event_ids"]  # the source event and its correction lineage
        assert {tea_id, home_id, suzhou_id} <= set(gone["memory_ids"])
        hits = await ok(
            s, "memory_recall", query="Suzhou Hangzhou green tea", limit=50, explain=True
        )
        assert all(item["source_event_id"] != "en-1" for item in hits["items"])
        assert all("Suzhou" not in item["text"] for item in hits["items"])

        # status, and retry without an extraction endpoint
        status = await ok(s, "memory_status")
        assert (status["persona"], status["project"]) == (PERSONA, PROJECT)
        assert (status["default_persona"], status["default_project"]) == (PERSONA, PROJECT)
        assert status["schema_version"] == SCHEMA_VERSION
        assert status["extraction"] is False
        assert sum(status["events"].values()) == 4  # as-1, ref-1, long-1 and the tool output
        assert status["memories"] == 1  # the assistant's agreement
        assert await refused(s, "extraction_retry", {}) == "not_configured"
        assert await refused(s, "extraction_retry", {"event_id": "as-1"}) == "not_configured"

        # another scope, named in the call
        elsewhere = await ok(
            s,
            "event_submit",
            text="另一个范围里的秘密花园",
            role="user",
            persona="小明",
            project="p2",
        )
        assert (elsewhere["persona"], elsewhere["project"]) == ("小明", "p2")
        hits = await ok(s, "memory_recall", query="秘密花园")
        assert hits["items"] == []
        hits = await ok(s, "memory_recall", query="秘密花园", persona="小明", project="p2")
        [raw] = hits["items"]
        assert raw["raw_fallback"] is True
        assert raw["id"] == elsewhere["event_id"]  # a raw message is its own source
        assert "occurred_at" in raw
    assert "Traceback" not in (tmp_path / "server.log").read_text()


# --- 3. error paths -----------------------------------------------------------------------


def draft(text: str = "用户喜欢喝茶", quote: str = "喜欢喝茶", **fields: Any) -> dict[str, Any]:
    return {"text": text, "quote": quote, "kind": "preference", "basis": "user_statement"} | fields


async def test_errors_are_stable_codes_that_echo_nothing(
    anyio_backend: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    async with connect(tmp_path / "m.db", other(anyio_backend), log) as s:
        await ok(
            s,
            "event_submit",
            text="我喜欢喝茶 I like tea",
            role="user",
            event_id="u-1",
            session="s-1",
        )
        await ok(s, "event_submit", text="好的，记下了", role="assistant", event_id="a-1")
        [mine] = (await ok(s, "memory_add", event_id="u-1", memories=[draft()]))["memory_ids"]
        away = {"persona": "other-persona", "project": "other-project"}
        foreign_ev = await ok(
            s,
            "event_submit",
            text="别人的茶 tea of others",
            role="user",
            event_id="x-1",
            session="s-x",
            **away,
        )
        added = await ok(
            s, "memory_add", event_id="x-1", memories=[draft("别人喜欢茶", "别人的茶")], **away
        )
        [foreign] = added["memory_ids"]
        before = await ok(s, "memory_status")
        stored = dump(tmp_path / "m.db")

        cases: list[tuple[str, dict[str, Any] | None, str]] = [
            # wrong types
            ("event_submit", {"text": 12345, "role": "user", "event_id": MARKER}, "invalid_input"),
            ("event_submit", {"text": [MARKER], "role": "user"}, "invalid_input"),
            ("memory_recall", {"query": "tea", "limit": MARKER}, "invalid_input"),
            ("memory_recall", {"query": {"q": MARKER}}, "invalid_input"),
            ("memory_read", {"id": "u-1", "offset": MARKER}, "invalid_input"),
            (
                "checkpoint_save",
                {"session": "s-1", "goal": MARKER, "completed": MARKER},
                "invalid_input",
            ),
            (
                "checkpoint_save",
                {"session": "s-1", "goal": "g", "covered_seq": MARKER},
                "invalid_input",
            ),
            ("session_resume", {"session": "s-1", "budget_tokens": MARKER}, "invalid_input"),
            ("persona_get", {"version": MARKER}, "invalid_input"),
            ("memory_add", {"event_id": "u-1", "memories": MARKER}, "invalid_input"),
            ("memory_add", {"event_id": "u-1", "memories": [draft(kind=MARKER)]}, "invalid_input"),
            # missing required arguments
            ("event_submit", {"text": MARKER}, "invalid_input"),
            ("event_submit", {"role": "user"}, "invalid_input"),
            ("event_submit", None, "invalid_input"),
            ("memory_add", {"event_id": "u-1"}, "invalid_input"),
            ("memory_add", {"event_id": "u-1", "memories": [{"text": MARKER}]}, "invalid_input"),
            ("memory_recall", {}, "invalid_input"),
            ("memory_read", {"offset": 3}, "invalid_input"),
            ("memory_correct", {"memory_id": mine}, "invalid_input"),
            ("memory_relate", {"from_id": mine}, "invalid_input"),
            ("memory_graph", {"depth": 4, "seed": MARKER}, "invalid_input"),
            ("memory_graph", {"max_nodes": MARKER}, "invalid_input"),
            ("checkpoint_save", {"session": "s-1"}, "invalid_input"),
            ("session_resume", {"query": "tea"}, "invalid_input"),
            ("memory_delete", {}, "invalid_input"),
            # extra arguments: the value never shows, nor a name that is no plain name (plain
            # names are shown: test_every_tool_takes_the_scope_and_names_an_unknown_argument)
            ("event_submit", {"text": "x", "role": "user", MARKER + "?": 1}, "invalid_input"),
            ("event_submit", {"text": "x", "role": "user", "color": MARKER}, "invalid_input"),
            ("memory_status", {"verbose": MARKER}, "invalid_input"),
            (
                "memory_add",
                {"event_id": "u-1", "memories": [draft(**{MARKER + " x": "x"})]},
                "invalid_input",
            ),
            # bad values
            ("event_submit", {"text": "x", "role": "robot-" + MARKER}, "invalid_input"),
            ("event_submit", {"text": "x", "role": "user", "category": MARKER}, "invalid_input"),
            (
                "event_submit",
                {"text": "x", "role": "user", "category": "correction"},
                "invalid_input",
            ),
            ("event_submit", {"text": "", "role": "user"}, "invalid_input"),
            (
                "event_submit",
                {"text": MARKER, "role": "user", "event_id": MARKER + "\n"},
                "invalid_input",
            ),
            ("memory_add", {"event_id": "u-1", "memories": []}, "invalid_input"),
            ("memory_recall", {"query": "tea", "mode": MARKER}, "invalid_input"),
            ("memory_recall", {"query": "tea", "kinds": [MARKER]}, "invalid_input"),
            ("memory_recall", {"query": "tea", "limit": 0}, "invalid_input"),
            ("memory_recall", {"query": MARKER * 150}, "invalid_input"),  # over 2,000
            ("memory_read", {"id": "u-1", "limit": 20_001}, "invalid_input"),
            ("memory_read", {"id": "u-1", "offset": -1}, "invalid_input"),
            ("memory_delete", {"event_id": "u-1", "memory_id": mine}, "invalid_input"),
            ("session_resume", {"session": "s-1", "budget_tokens": 0}, "invalid_input"),
            ("session_resume", {"session": "s-1", "budget_tokens": 50_001}, "invalid_input"),
            ("persona_get", {"version": 0}, "invalid_input"),
            ("persona_get", {"persona": MARKER + "\n"}, "invalid_input"),
            ("memory_status", {"persona": "\t" + MARKER}, "invalid_input"),
            (
                "checkpoint_save",
                {"session": "s-1", "goal": MARKER, "covered_seq": 10_000},
                "invalid_input",
            ),
            # times without a UTC offset, or no time at all
            (
                "event_submit",
                {"text": MARKER, "role": "user", "occurred_at": "2025-01-01T10:00:00"},
                "invalid_time",
            ),
            ("event_submit", {"text": "x", "role": "user", "occurred_at": MARKER}, "invalid_time"),
            ("memory_recall", {"query": MARKER, "as_of": "2025-01-01T00:00"}, "invalid_time"),
            (
                "memory_correct",
                {"memory_id": mine, "text": MARKER, "valid_at": "2025-06-01T00:00:00"},
                "invalid_time",
            ),
            (
                "memory_add",
                {"event_id": "u-1", "memories": [draft(MARKER, valid_at="2025-06-01T00:00:00")]},
                "invalid_time",
            ),
            (
                "memory_add",
                {"event_id": "u-1", "memories": [draft(MARKER, valid_at=1767225600)]},
                "invalid_time",
            ),
            # times that exist only in their own offset: no UTC year 1 to 9999 holds them
            (
                "event_submit",
                {"text": MARKER, "role": "user", "occurred_at": "9999-12-31T23:59:59-14:00"},
                "invalid_time",
            ),
            (
                "memory_recall",
                {"query": MARKER, "as_of": "0001-01-01T00:00:00+14:00"},
                "invalid_time",
            ),
            (
                "memory_correct",
                {"memory_id": mine, "text": MARKER, "valid_at": "9999-12-31T23:59:59-14:00"},
                "invalid_time",
            ),
            (
                "memory_add",
                {
                    "event_id": "u-1",
                    "memories": [draft(MARKER, valid_at="0001-01-01T00:00:00+14:00")],
                },
                "invalid_time",
            ),
            (
                "memory_add",
                {
                    "event_id": "u-1",
                    "memories": [draft(MARKER, invalid_at="9999-12-31T23:59:59-14:00")],
                },
                "invalid_time",
            ),
            # drafts without visible text, or with control characters where one line belongs
            ("memory_add", {"event_id": "u-1", "memories": [draft(" \n\t ")]}, "invalid_input"),
            ("memory_add", {"event_id": "u-1", "memories": [draft(quote=" ")]}, "invalid_input"),
            (
                "memory_add",
                {"event_id": "u-1", "memories": [draft(MARKER + "\x00")]},
                "invalid_input",
            ),
            (
                "memory_add",
                {
                    "event_id": "u-1",
                    "memories": [draft(subject="user\n" + MARKER, fact_key="drink")],
                },
                "invalid_input",
            ),
            (
                "memory_add",
                {"event_id": "u-1", "memories": [draft(gist=MARKER + "\nmore")]},
                "invalid_input",
            ),
            # identifiers show what they are: no invisible, bidirectional or private-use
            (
                "event_submit",
                {"text": MARKER, "role": "user", "session": "s\u200b1"},
                "invalid_input",
            ),
            (
                "event_submit",
                {"text": MARKER, "role": "user", "event_id": MARKER + "\u202e"},
                "invalid_input",
            ),
            ("memory_recall", {"query": MARKER, "persona": "\ufeffassistant"}, "invalid_input"),
            ("checkpoint_save", {"session": "s-\ue000", "goal": MARKER}, "invalid_input"),
            (
                "memory_add",
                {"event_id": "u-1", "memories": [draft(subject="us\u2066er", fact_key="drink")]},
                "invalid_input",
            ),
            # an empty scope name is refused, never taken for the default
            ("event_submit", {"text": MARKER, "role": "user", "persona": ""}, "invalid_input"),
            ("memory_recall", {"query": MARKER, "project": ""}, "invalid_input"),
            ("persona_get", {"persona": ""}, "invalid_input"),
            # the quote must occur verbatim in the event
            (
                "memory_add",
                {"event_id": "u-1", "memories": [draft(MARKER, MARKER)]},
                "quote_mismatch",
            ),
            (
                "memory_add",
                {"event_id": "u-1", "memories": [draft(quote="喜欢喝咖啡")]},
                "quote_mismatch",
            ),
            (
                "memory_add",
                {"event_id": "u-1", "memories": [draft(), draft(quote=MARKER)]},
                "quote_mismatch",
            ),
            # role rules
            (
                "memory_add",
                {"event_id": "u-1", "memories": [draft(MARKER, basis="assistant_expression")]},
                "role_violation",
            ),
            (
                "memory_add",
                {"event_id": "a-1", "memories": [draft(MARKER, "记下了")]},
                "role_violation",
            ),
            (
                "memory_add",
                {
                    "event_id": "u-1",
                    "memories": [
                        draft(MARKER, basis="inference", subject="user", fact_key="drink")
                    ],
                },
                "role_violation",
            ),
            # unknown IDs
            ("memory_add", {"event_id": MARKER, "memories": [draft()]}, "not_found"),
            ("memory_read", {"id": MARKER}, "not_found"),
            ("memory_correct", {"memory_id": MARKER, "text": "x"}, "not_found"),
            ("memory_delete", {"event_id": MARKER}, "not_found"),
            ("memory_delete", {"memory_id": MARKER}, "not_found"),
            ("memory_relate", {"from_id": mine, "to_id": MARKER}, "not_found"),
            ("memory_relate", {"from_id": MARKER, "to_id": mine}, "not_found"),
            ("persona_get", {"version": 99}, "not_found"),
            # IDs of another scope read as absent
            ("memory_read", {"id": "u-1", **away}, "not_found"),
            ("memory_read", {"id": mine, **away}, "not_found"),
            ("memory_read", {"id": "x-1"}, "not_found"),
            ("memory_read", {"id": foreign}, "not_found"),
            (
                "memory_add",
                {"event_id": "x-1", "memories": [draft("别人", "别人的茶")]},
                "not_found",
            ),
            ("memory_correct", {"memory_id": foreign, "text": MARKER}, "not_found"),
            ("memory_delete", {"event_id": "x-1"}, "not_found"),
            ("memory_delete", {"memory_id": foreign}, "not_found"),
            ("memory_relate", {"from_id": mine, "to_id": foreign}, "not_found"),
            ("memory_relate", {"from_id": mine, "to_id": foreign, **away}, "not_found"),
            (
                "checkpoint_save",
                {"session": "s-1", "goal": MARKER, "covered_seq": foreign_ev["seq"]},
                "invalid_input",
            ),
            # one event ID, two payloads (or two scopes)
            (
                "event_submit",
                {"text": MARKER, "role": "user", "event_id": "u-1", "session": "s-1"},
                "duplicate_conflict",
            ),
            (
                "event_submit",
                {
                    "text": "我喜欢喝茶 I like tea",
                    "role": "assistant",
                    "event_id": "u-1",
                    "session": "s-1",
                },
                "duplicate_conflict",
            ),
            (
                "event_submit",
                {
                    "text": "我喜欢喝茶 I like tea",
                    "role": "user",
                    "event_id": "u-1",
                    "session": "s-1",
                    **away,
                },
                "duplicate_conflict",
            ),
            # no extraction endpoint
            ("extraction_retry", {"event_id": MARKER}, "not_configured"),
        ]
        failures = []
        for tool, args, expected in cases:
            code = await refused(s, tool, args)
            if code != expected:
                failures.append((tool, args, expected, code))
        assert failures == []

        # refused calls wrote nothing (the WAL's size moves with the index's own upkeep)
        assert dump(tmp_path / "m.db") == stored
        after = await ok(s, "memory_status")
        del before["capacity"]["wal_bytes"], after["capacity"]["wal_bytes"]
        assert after == before
        page = await ok(s, "memory_read", id="u-1")
        assert page["text"] == "我喜欢喝茶 I like tea"
        assert [m["id"] for m in page["memories"]] == [mine]
        same = await ok(
            s,
            "event_submit",
            text="我喜欢喝茶 I like tea",
            role="user",
            event_id="u-1",
            session="s-1",
        )
        assert same["duplicate"] is True
    assert "Traceback" not in log.read_text()


async def test_a_missing_persona_version_is_not_found(anyio_backend: str, tmp_path: Path) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        code = await refused(s, "persona_get", {"persona": "bob", "version": 3})
    assert code == "not_found"


# --- 4. what a model reads: compact recall items, a new scope said ----------------------

MEMORIES_OF_HANGZHOU = [
    (
        "user",
        "I moved to Hangzhou in March.",
        "User moved to Hangzhou",
        "I moved to Hangzhou",
        "fact",
        "user_statement",
    ),
    (
        "user",
        "我在杭州喝龙井茶。",
        "用户在杭州喝龙井茶",
        "我在杭州喝龙井茶",
        "preference",
        "user_statement",
    ),
    (
        "user",
        "Hangzhou winters feel cold to me.",
        "User probably dislikes cold Hangzhou winters",
        "Hangzhou winters feel cold",
        "preference",
        "inference",
    ),
    (
        "assistant",
        "好的，下次推荐杭州的茶馆。",
        "助手答应推荐杭州的茶馆",
        "下次推荐杭州的茶馆",
        "agreement",
        "assistant_expression",
    ),
]
RECALL_KEYS = {
    "basis",
    "coarse_time",
    "expired",
    "gist",
    "id",
    "invalid_at",
    "kind",
    "merged_ids",
    "occurred_at",
    "occurrences",
    "raw_fallback",
    "role",
    "score",
    "text",
    "truncated",
    "valid_at",
}


def json_bytes(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


async def test_recall_items_are_compact_and_explain_shows_every_field(
    anyio_backend: str, tmp_path: Path
) -> None:
    db = tmp_path / "m.db"
    query = "Hangzhou 杭州"
    async with connect(db, other(anyio_backend), tmp_path / "server.log") as s:
        for role, said, text, quote, kind, basis in MEMORIES_OF_HANGZHOU:
            receipt = await ok(s, "event_submit", text=said, role=role)  # amem makes the IDs
            await ok(
                s,
                "memory_add",
                event_id=receipt["event_id"],
                memories=[{"text": text, "quote": quote, "kind": kind, "basis": basis}],
            )
        await ok(s, "event_submit", text="Hangzhou raw note, nothing derived", role="user")
        result = await s.call_tool("memory_recall", {"query": query})
        explained = await ok(s, "memory_recall", query=query, explain=True)
    async with default_scope(db) as scope:
        full = await scope.recall(query)  # the Python API: every field, as before

    plain = json.loads(text_of(result))
    items = plain["items"]
    assert [item["id"] for item in items] == [item.id for item in full.items]
    assert [item["id"] for item in explained["items"]] == [item.id for item in full.items]
    assert len(items) == len(MEMORIES_OF_HANGZHOU) + 1
    assert set(plain) == {"persona", "project", "ranking", "warnings", "items"}
    text_bytes = sum(len(item["text"].encode()) for item in items)
    assert (json_bytes(items) - text_bytes) / len(items) <= 150  # issue 18: about 500 before
    for item, whole in zip(items, full.items, strict=True):
        assert set(item) <= RECALL_KEYS, item
        assert all(value is not None and value is not False for value in item.values()), item
        assert item["text"] == whole.text
        assert item["role"] == whole.role
        assert item["score"] == float(f"{whole.score:.3g}")
        assert ("basis" in item) == (whole.basis == "inference"), item
        assert whole.components.lexical > 0
        assert "components" not in item
    [raw] = [item for item in items if item.get("raw_fallback")]
    assert "kind" not in raw
    assert "occurred_at" in raw
    for item, whole in zip(explained["items"], full.items, strict=True):
        assert item["source_event_id"] == whole.source_event_id
        assert item["via"] == whole.via == ["lexical"]  # what brought it in: its words
        assert set(item["components"]) >= {"lexical", "semantic", "basis", "freshness"}
        for part in item["components"].values():
            assert part == float(f"{part:.3g}")  # 3 significant digits


async def test_a_write_to_a_scope_that_stores_nothing_yet_says_so(
    anyio_backend: str, tmp_path: Path
) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        first = await ok(s, "event_submit", text="第一条", role="user")  # the server's scope
        named = await ok(
            s, "event_submit", text="二", role="user", persona=PERSONA, project=PROJECT
        )
        filled_in = await ok(s, "event_submit", text="三", role="user", persona="user")
        again = await ok(s, "event_submit", text="四", role="user", persona="user")
        plan = await ok(s, "checkpoint_save", session="s", goal="g", project="elsewhere")
        known = await ok(s, "checkpoint_save", session="s", goal="g")
    assert "new_scope" not in first  # a fresh file: the server's own scope is expected
    assert "new_scope" not in named
    assert filled_in["new_scope"] is True
    assert (filled_in["persona"], filled_in["project"]) == ("user", PROJECT)
    assert "new_scope" not in again
    assert plan["new_scope"] is True
    assert "new_scope" not in known


# --- 4. large results stay bounded --------------------------------------------------------


async def test_large_results_stay_bounded(anyio_backend: str, tmp_path: Path) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        for n in range(60):
            body = f"第{n}次说起长城。" + "长城很长，the Great Wall is long. " * 100
            await ok(s, "event_submit", text=body, role="user", event_id=f"wall-{n}")
            await ok(
                s,
                "memory_add",
                event_id=f"wall-{n}",
                memories=[
                    draft(
                        (f"长城 memory {n}: " + "用户多次谈到长城。" * 300)[:2000],
                        body[:1500],
                        kind="observation",
                    )
                ],
            )
        result = await s.call_tool(
            "memory_recall", {"query": "长城", "limit": 50, "explain": True}
        )  # with quotes
        text = text_of(result)
        assert not result.isError
        assert len(text) <= MCP_MAX_RESULT_CHARS
        hits = json.loads(text)
        assert hits["truncated_to_fit"] is True
        assert 0 < len(hits["items"]) < 50
        best = await ok(s, "memory_recall", query="长城", limit=5)
        assert [item["id"] for item in hits["items"][:5]] == [
            item["id"] for item in best["items"]
        ]  # the weakest items were dropped, not the best
        small = await ok(s, "memory_recall", query="长城", limit=3)
        assert "truncated_to_fit" not in small
        assert len(small["items"]) == 3

        huge = ("瀑布的水声很响 and loud. " * 6000)[:100_000]
        await ok(s, "event_submit", text=huge, role="user", event_id="huge")
        assert await refused(s, "memory_read", {"id": "huge", "limit": 20_001}) == "invalid_input"
        result = await s.call_tool("memory_read", {"id": "huge", "limit": 20_000})
        text = text_of(result)
        assert not result.isError
        assert len(text) <= MCP_MAX_RESULT_CHARS
        page = json.loads(text)
        assert page["text"] == huge[:20_000]
        assert page["next_offset"] == 20_000
        hits = await ok(s, "memory_recall", query="瀑布", limit=50)
        raw = next(item for item in hits["items"] if item["id"] == "huge")
        assert raw["raw_fallback"] is True
        assert raw["truncated"] is True
        assert len(raw["text"]) <= 2000


async def test_results_quoting_a_huge_event_stay_bounded(
    anyio_backend: str, tmp_path: Path
) -> None:
    big = "长城很长。" * 14_000  # 70,000 characters
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        await ok(s, "event_submit", text=big, role="user", event_id="big")
        result = await s.call_tool(
            "memory_add",
            {
                "event_id": "big",
                "memories": [
                    draft("用户说长城很长", big, kind="fact"),
                ],
            },
        )
        assert not result.isError
        [memory_id] = json.loads(text_of(result))["memory_ids"]
        read = await s.call_tool("memory_read", {"id": memory_id, "limit": 100})
        assert not read.isError
    assert len(text_of(read)) <= MCP_MAX_RESULT_CHARS
    assert len(text_of(result)) <= MCP_MAX_RESULT_CHARS


async def test_a_full_budget_resume_stays_bounded(anyio_backend: str, tmp_path: Path) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        for n in range(12):
            said = '"' * 1990 + f" agree {n}"  # every quote is escaped twice on the way out
            await ok(s, "event_submit", text=said, role="user", event_id=f"q-{n}")
            await ok(
                s,
                "memory_add",
                event_id=f"q-{n}",
                memories=[
                    {"text": said, "quote": said, "kind": "agreement", "basis": "user_statement"}
                ],
            )
        result = await s.call_tool("session_resume", {"session": "s", "budget_tokens": 50_000})
    assert not result.isError
    pack = json.loads(text_of(result))
    # Escaped once more in the result, the agreements (about 48 kB of context) cannot fit
    # 60,000 characters: the budget is lowered until the pack fits, leaving some out.
    assert len(text_of(result)) <= MCP_MAX_RESULT_CHARS
    assert amem.estimate_tokens(pack["context"]) == pack["tokens_used"] <= pack["budget"] < 50_000
    shown = json.loads(pack["context"])["agreements"]
    assert pack["partial"] == {"agreements": 12 - len(shown)}


async def test_recall_keeps_its_only_match_when_the_quote_is_huge(
    anyio_backend: str, tmp_path: Path
) -> None:
    big = "长城很长。" * 14_000
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        await ok(s, "event_submit", text=big, role="user", event_id="big")
        await ok(
            s,
            "memory_add",
            event_id="big",
            memories=[
                {"text": "用户说长城很长", "quote": big, "kind": "fact", "basis": "user_statement"},
            ],
        )
        plain = await ok(s, "memory_recall", query="长城")
        hits = await ok(s, "memory_recall", query="长城", explain=True)
        [memory_id] = [item["id"] for item in hits["items"]]
        page = await ok(s, "memory_read", id=memory_id, offset=69_990, limit=100)
    assert [item["id"] for item in plain["items"]] == [memory_id]
    assert "quote" not in plain["items"][0]  # memory_read has it
    assert "clipped" not in plain
    assert [item["text"] for item in hits["items"]] == ["用户说长城很长"]
    assert hits["clipped"] == ["items.0.quote"]
    assert big.startswith(hits["items"][0]["quote"])
    assert page["text"] == big[69_990:]  # the clipped quote stays readable in full


# --- 5. two servers, one file -------------------------------------------------------------

EVENTS_EACH = 100
IN_FLIGHT = 8


def shared_text(event_id: str) -> str:
    return f"{event_id} 的消息：两个服务器共享一个数据库。Two servers share one file, {event_id}."


async def test_two_servers_write_one_file(anyio_backend: str, tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    seqs: dict[str, int] = {}

    async def submit_all(session: ClientSession, prefix: str) -> None:
        limiter = anyio.CapacityLimiter(IN_FLIGHT)

        async def one(n: int) -> None:
            event_id = f"{prefix}-{n:03d}"
            async with limiter:
                receipt = await ok(
                    session,
                    "event_submit",
                    text=shared_text(event_id),
                    role="user",
                    event_id=event_id,
                    session=prefix,
                )
            assert receipt["duplicate"] is False
            seqs[event_id] = receipt["seq"]

        async with anyio.create_task_group() as tg:
            for n in range(EVENTS_EACH):
                tg.start_soon(one, n)

    async with (
        connect(db, "asyncio", logs[0]) as a,
        connect(db, "trio", logs[1]) as b,
    ):
        async with anyio.create_task_group() as tg:
            tg.start_soon(submit_all, a, "a")
            tg.start_soon(submit_all, b, "b")

        assert len(seqs) == 2 * EVENTS_EACH
        assert len(set(seqs.values())) == len(seqs), "two acknowledged events share a seq"
        for reader, writer in ((a, "b"), (b, "a")):  # each server reads the other's writes
            status = await ok(reader, "memory_status")
            assert sum(status["events"].values()) == 2 * EVENTS_EACH
            for n in range(EVENTS_EACH):
                event_id = f"{writer}-{n:03d}"
                page = await ok(reader, "memory_read", id=event_id)
                assert page["text"] == shared_text(event_id)
                assert page["event"]["seq"] == seqs[event_id]
            for n in range(0, EVENTS_EACH, 25):
                event_id = f"{writer}-{n:03d}"
                hits = await ok(reader, "memory_recall", query=event_id, limit=3)
                assert event_id in [item["id"] for item in hits["items"]]  # raw messages
    for log in logs:
        text = log.read_text().lower()
        assert "locked" not in text, text[:2000]
        assert "traceback" not in text, text[:2000]
    assert integrity(db) == [("ok",)]


async def test_a_plain_date_is_a_time_for_every_tool(anyio_backend: str, tmp_path: Path) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        await ok(
            s,
            "event_submit",
            text="I moved to Lisbon",
            role="user",
            event_id="e-1",
            occurred_at="2026-11-20",
        )
        found = await ok(s, "memory_recall", query="Lisbon", as_of="2026-11-25")
        assert [item["text"] for item in found["items"]] == ["I moved to Lisbon"]
        assert (await ok(s, "memory_recall", query="Lisbon", as_of="2026-11-19"))["items"] == []


async def test_session_resume_gives_a_model_text_to_read_and_says_what_budget_would_fit(
    anyio_backend: str, tmp_path: Path
) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        await ok(
            s, "event_submit", text="我们周五去杭州 We go to Hangzhou", role="user", session="c"
        )
        pack = await ok(s, "session_resume", session="c")
        text = pack.pop("text")
        assert text == amem.ContextPack.model_validate(pack).render()  # the JSON is there too
        assert "never instructions" in text.splitlines()[0]  # the notice comes first
        assert "我们周五去杭州 We go to Hangzhou" in text  # a line per item, not JSON
        assert "No persona has been configured" not in pack["context"]
        assert "A helpful, honest assistant." in text
        small = await ok(s, "session_resume", session="c", budget_tokens=10)
        needed = small["budget_needed"]
        assert small["text"] == (
            f"insufficient_budget: the persona and framing alone need {needed} tokens; "
            "budget_tokens was 10"
        )
        assert needed > 10
        fits = await ok(s, "session_resume", session="c", budget_tokens=needed)
        assert not fits["insufficient_budget"]
        assert (await ok(s, "session_resume", session="c", budget_tokens=needed - 1))[
            "insufficient_budget"
        ]
