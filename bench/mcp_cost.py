"""MCP context cost: the bytes amem puts into a model's context before and during a recall.

- **tools/list**: the JSON-RPC answer to ``tools/list`` exactly as ``amem serve`` writes it
  (one line of UTF-8 JSON), in total and per tool (each tool's entry as compact JSON). A
  host puts this into every conversation.
- **recall**: ``memory_recall`` results as ``amem serve`` answers them (the tool's text),
  over a small scope written the way a host's model writes it: ``event_submit`` without an
  ``event_id`` (amem makes the IDs up, 36 characters each) and ``memory_add``, with Chinese
  and English memories. For each query: the items, the UTF-8 bytes of their texts, the
  whole result, and the bytes per item beyond the item's own text (each item's compact
  JSON minus its text's bytes, averaged), plus the result's envelope (everything outside
  ``items``); once as a model gets it by default, once with ``explain``.
- **instructions**: the ``initialize`` instructions (hosts that show them to the model
  show them once per conversation).

Everything runs in this process through the server's own tool dispatch (``call``), so
the numbers are the bytes a client receives. No network, no model.

Run:  uv run python bench/mcp_cost.py [--json] [--results]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from reporting import add_results_argument, write_results

import amem
from amem.server import session
from amem.server.tools import call
from amem.tools.instructions import INSTRUCTIONS
from amem.tools.table import TOOLS, Served, tool_schema

EVENTS: list[tuple[str, str, list[tuple[str, str, str]]]] = [
    # (role, text, [(memory text, quote, kind)])
    (
        "user",
        "I moved to Hangzhou last spring, and I drink green tea every morning.",
        [
            ("User lives in Hangzhou", "I moved to Hangzhou", "fact"),
            (
                "User drinks green tea every morning",
                "I drink green tea every morning",
                "preference",
            ),
        ],
    ),
    (
        "user",
        "我最近在读一本书，叫《三体》，在杭州的西湖边读。",
        [
            ("用户在读《三体》", "我最近在读一本书，叫《三体》", "episode"),
            ("用户喜欢在杭州西湖边读书", "在杭州的西湖边读", "preference"),
        ],
    ),
    (
        "assistant",
        "好的，我会记住你喜欢龙井茶，下次推荐杭州的茶馆。",
        [
            ("助手答应推荐杭州的茶馆", "下次推荐杭州的茶馆", "agreement"),
            ("用户喜欢龙井茶", "你喜欢龙井茶", "preference"),
        ],
    ),
    (
        "user",
        "My sister visits me in Hangzhou in December; she is allergic to cats.",
        [
            (
                "User's sister visits Hangzhou in December",
                "My sister visits me in Hangzhou",
                "fact",
            ),
            ("User's sister is allergic to cats", "she is allergic to cats", "fact"),
        ],
    ),
    (
        "user",
        "杭州的冬天很冷，我买了一件新外套，也开始喝红茶。",
        [
            ("用户觉得杭州的冬天很冷", "杭州的冬天很冷", "observation"),
            ("用户开始喝红茶", "也开始喝红茶", "episode"),
        ],
    ),
]
QUERIES = ("Hangzhou 杭州", "tea 茶", "sister")
BASIS = {"user": "user_statement", "assistant": "assistant_expression"}


def tools_list_bytes() -> tuple[int, dict[str, int]]:
    """The ``tools/list`` answer line as the session writes it, and each tool's entry."""
    tools = [tool_schema(tool) for tool in TOOLS.values()]
    line = session.encode({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}})
    per_tool = {entry["name"]: len(compact(entry).encode()) for entry in tools}
    return len(line), per_tool


def compact(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


async def tool(served: Served, name: str, **arguments: Any) -> Any:
    result = await call(served, name, arguments)
    [content] = result["content"]
    if result["isError"]:
        raise RuntimeError(f"{name}: {content['text']}")
    return content["text"]


async def recall_costs() -> dict[str, list[dict[str, Any]]]:
    """Per query: the default answer's costs, and with ``explain``."""
    with tempfile.TemporaryDirectory() as tmp:
        async with amem.open(Path(tmp) / "m.db") as memory:
            served = Served(memory, "assistant", "bench")
            for role, text, drafts in EVENTS:
                receipt = json.loads(await tool(served, "event_submit", text=text, role=role))
                memories = [
                    {"text": said, "quote": quote, "kind": kind, "basis": BASIS[role]}
                    for said, quote, kind in drafts
                ]
                await tool(served, "memory_add", event_id=receipt["event_id"], memories=memories)
            costs: dict[str, list[dict[str, Any]]] = {"default": [], "explain": []}
            for query in QUERIES:
                for shape, extra in (("default", {}), ("explain", {"explain": True})):
                    text = await tool(served, "memory_recall", query=query, limit=10, **extra)
                    costs[shape].append(measure(query, text))
            return costs


def measure(query: str, text: str) -> dict[str, Any]:
    result = json.loads(text)
    items = result["items"]
    text_bytes = sum(len(item["text"].encode()) for item in items)
    item_bytes = sum(len(compact(item).encode()) for item in items)
    envelope = len(compact({key: value for key, value in result.items() if key != "items"}))
    return {
        "query": query,
        "items": len(items),
        "text_bytes": text_bytes,
        "result_bytes": len(text.encode()),
        "per_item_beyond_text": round((item_bytes - text_bytes) / max(1, len(items))),
        "envelope_bytes": envelope,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON line instead of tables")
    add_results_argument(parser)
    options = parser.parse_args()
    total, per_tool = tools_list_bytes()
    recall = await recall_costs()
    instructions = len(INSTRUCTIONS.encode())
    if options.json:
        report = {
            "tools_list_bytes": total,
            "per_tool": per_tool,
            "recall": recall,
            "instructions_bytes": instructions,
        }
        sys.stdout.write(compact(report) + "\n")
        return
    lines = [f"tools/list answer: {total:,} bytes ({len(per_tool)} tools)", ""]
    lines += [f"  {name:<18} {size:>6,}" for name, size in per_tool.items()]
    lines += ["", f"initialize instructions: {instructions:,} bytes"]
    header = ("query", "items", "text B", "result B", "B/item", "envelope")
    for shape, rows in recall.items():
        lines += ["", f"memory_recall, limit 10, {shape}:", ""]
        lines.append("  {:<14} {:>5} {:>7} {:>9} {:>7} {:>8}".format(*header))
        lines += [
            f"  {row['query']:<14} {row['items']:>5} {row['text_bytes']:>7} "
            f"{row['result_bytes']:>9,} {row['per_item_beyond_text']:>7} {row['envelope_bytes']:>8}"
            for row in rows
        ]
    sys.stdout.write("\n".join(lines) + "\n")
    if options.results:
        write_results("mcp_cost", "\n".join(lines))


if __name__ == "__main__":
    anyio.run(main)
