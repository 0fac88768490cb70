"""Peers bench: the same write-then-search workload over MCP stdio, with the official MCP
client, against amem and the memory servers a user would otherwise install, in one run.

Servers (each a subprocess of this script, spoken to with ``stdio_client`` +
``ClientSession``; tool names and argument schemas are read with ``list_tools`` at run
time and the workload is mapped onto them; only arguments a tool declares are sent):

- **floor**: a few lines of Python that answer every request at once and only note the
  keys written (``FLOOR_SERVER``): what the client and the pipes cost, which no server can
  beat. Its hit rates are 0: it finds nothing.
- **amem**: ``python -m amem serve --db FILE`` (this checkout). ``event_submit`` (the item
  as a user event, the item key as ``event_id``) / ``memory_recall`` (``limit`` 5).
- **server-memory**: npm ``@modelcontextprotocol/server-memory`` (the MCP reference memory
  server, one JSONL file). ``create_entities`` (one entity per item, the text as its
  observation) / ``search_nodes``.
- **memory-keeper**: npm ``mcp-memory-keeper`` (SQLite through better-sqlite3).
  ``context_save`` (key, value) / ``context_search`` (``limit`` 5).
- **basic-memory**: PyPI ``basic-memory`` (markdown files + SQLite FTS5), in its own
  Python >= 3.12 environment. ``write_note`` (title = key, directory ``bench``) /
  ``search_notes`` (``search_type`` text, ``page_size`` 5, JSON output).

Peers are never vendored: ``--install`` puts them into ``--peers-dir`` (default
``~/.cache/amem-bench/peers``): ``npm install`` of the pinned npm packages into
``PEERS/npm`` (better-sqlite3's build script allowed there), and a ``uv venv`` with
basic-memory in ``PEERS/basic-memory-venv`` on the first Python >= 3.12 found without
downloading one (``uv python find``, pyenv, ``python3.1x`` on PATH). A peer that is not
installed is reported as unavailable, with the reason.

Workload, per size (``--sizes``, default 1,000 and 10,000 items): items are short
English sentences and unspaced Chinese sentences (alternating), each with a unique
(topic, city) pair, keyed ``item-NNNNNN``. For every server and size:

1. **seq**: a fresh store; one write call per item, one at a time. Then the searches on
   that store: ``--queries`` per kind, targets drawn from the acknowledged items:
   ``phrase`` (an exact English span of the item: adjective, topic, "in", city),
   ``keywords`` (city, name and topic of an English item, out of order) and ``zh``
   (topic and city of a Chinese item, keywords that sit inside an unspaced compound, out
   of order, space-separated). hit@5: the target item's key is among the first five
   distinct item keys of the answer, in the order the server returned them.
2. **c16**: a fresh store; the same writes with 16 calls in flight on one session.

A write counts as acknowledged when the call returns without ``isError``. After each
phase the server is stopped and what it really kept is counted from its own files
(amem: ``events`` rows; server-memory: entity lines of the JSONL file; memory-keeper:
``context_items`` rows; basic-memory: the markdown files): ``kept`` is acknowledged items
found there. Peak RSS is the server process's ``VmHWM`` (with its child processes',
summed) read just before it stops, the larger of the two phases. On-disk size is
everything in the seq store's directory after the server stopped.

A write phase that exceeds ``--phase-cap`` seconds stops issuing writes (calls in flight
finish); the row then says how many items were measured ("capped"), and the searches run
on the items that store holds. Ratios are amem's against each peer, same run, same size.

Prints one table per size, then one JSON line per server and size.

Run:  uv run python bench/peers.py --install            # once: peers into the cache dir
      uv run python bench/peers.py [--sizes 1000,10000] [--servers amem,server-memory,...]
      [--queries 100] [--phase-cap 60] [--peers-dir DIR] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import get_default_environment, stdio_client
from reporting import add_results_argument, print_header, recorded
from reporting import percentile_ms as pct

NPM_PACKAGES = ("@modelcontextprotocol/server-memory@2026.8.31", "mcp-memory-keeper@0.14.1")
BASIC_MEMORY = "basic-memory==0.24.1"
SERVERS = ("floor", "amem", "server-memory", "memory-keeper", "basic-memory")
IN_FLIGHT = 16
TOP = 5
CALL_TIMEOUT = 120.0
KEY = re.compile(r"item-(\d{6})")
KINDS = ("phrase", "keywords", "zh")
WARM_UP = "绿茶 warm-up"
"""One untimed search on the empty store before the writes (amem loads jieba then)."""

# fmt: off
EN_NAMES = (
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
    "mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter",
    "yvonne", "zara", "oscar", "quentin", "ursula", "xavier", "bianca", "cedric", "delia",
    "emeric", "fiona", "gideon", "hazel", "isidore", "jasper", "kendra", "leopold",
)
EN_VERBS = (
    "booked", "mentioned", "recommended", "cancelled", "reviewed", "planned", "praised",
    "visited", "described", "photographed", "compared", "remembered",
)
EN_ADJS = ("quiet", "famous", "tiny", "crowded", "new", "old", "cheap", "lovely", "strange")
EN_TOPICS = (
    "bakery", "museum", "ferry", "gallery", "library", "brewery", "stadium", "aquarium",
    "observatory", "vineyard", "bookshop", "teahouse", "cathedral", "lighthouse", "harbour",
    "orchard", "monastery", "theatre", "planetarium", "greenhouse", "marketplace", "bistro",
    "hostel", "pharmacy", "laundromat", "arcade", "boathouse", "conservatory", "distillery",
    "dojo", "gymnasium", "kiosk", "lagoon", "mansion", "noodlebar", "opera", "pagoda",
    "quarry", "rooftop", "sauna", "tannery", "university", "velodrome", "waterfall",
    "zoo", "bridge", "canal", "dairy", "embassy", "fortress", "glacier", "hammock",
    "icefield", "jetty", "karaoke", "lounge", "mill", "nursery", "oasis", "pier",
    "ranch", "skatepark", "tavern", "vault", "workshop", "atelier", "boulevard",
    "cinema", "deli", "estuary", "fairground", "garage", "hotspring", "inn", "junkyard",
    "kitchen", "levee", "marina", "nightclub", "outpost", "pavilion", "reef", "salon",
    "terrace", "uplands", "villa", "wharf", "yard", "barbershop", "cafeteria", "dockyard",
)
EN_CITIES = (
    "lisbon", "oslo", "kyoto", "lima", "quito", "hanoi", "dakar", "tunis", "riga", "tallinn",
    "vilnius", "zagreb", "sofia", "porto", "seville", "bergen", "turku", "gdansk", "krakow",
    "brno", "graz", "lyon", "nantes", "bilbao", "malaga", "palermo", "bologna", "verona",
    "ghent", "utrecht", "aarhus", "malmo", "reykjavik", "cork", "galway", "leeds", "bristol",
    "cardiff", "glasgow", "dundee", "halifax", "calgary", "tucson", "omaha", "boise", "fresno",
    "osaka", "sapporo", "busan", "cebu", "penang", "medan", "perth", "hobart", "nelson",
    "dunedin", "mombasa", "arusha", "windhoek", "durban",
)
EN_WHEN = ("yesterday", "last week", "on friday", "this morning", "last summer", "in may")
ZH_NAMES = (
    "王芳", "李伟", "张敏", "刘洋", "陈静", "杨磊", "赵丽", "黄强", "周杰", "吴娟", "徐涛", "孙明",
    "胡超", "朱霞", "高平", "林刚", "何英", "郭华", "马兰", "罗萍", "梁红", "宋鹏", "郑飞", "谢宇",
)
ZH_WHEN = ("上周", "昨天", "今年春天", "前天", "去年夏天", "周末")
ZH_VERBS = ("预订了", "参观了", "推荐了", "取消了", "提到了", "拍了", "喜欢", "打听了")
ZH_ADJS = ("", "", "一家", "那家", "新开的", "有名的")
ZH_TOPICS = (
    "寿司店", "博物馆", "美术馆", "图书馆", "啤酒厂", "体育馆", "水族馆", "天文台", "葡萄园",
    "书店",
    "茶馆", "教堂", "灯塔", "码头", "果园", "寺庙", "剧院", "温室", "菜市场", "火锅店",
    "烤鸭店", "面馆", "咖啡馆", "药店", "游乐场", "船屋", "酒厂", "武馆", "健身房", "报亭",
    "湖泊", "庄园", "戏院", "宝塔", "采石场", "屋顶花园", "桑拿房", "大学", "瀑布", "动物园",
    "大桥", "运河", "牧场", "城堡", "冰川", "滑板公园", "客栈", "酒吧", "工作室", "电影院",
    "熟食店", "游船", "集市", "温泉", "旅馆", "夜市", "小吃街", "画廊", "琴行", "花店",
    "甜品店", "包子铺", "饺子馆", "拉面馆", "烧烤店", "奶茶店", "书法馆", "陶艺馆", "古镇",
    "植物园", "科技馆", "海洋馆", "滑雪场", "高尔夫球场", "网球场", "游泳馆", "马场", "射箭馆",
    "棋院", "相声馆",
)
ZH_CITIES = (
    "杭州", "苏州", "成都", "重庆", "西安", "南京", "武汉", "长沙", "厦门", "青岛", "大连", "昆明",
    "贵阳", "南宁", "桂林", "拉萨", "兰州", "银川", "西宁", "乌鲁木齐", "哈尔滨", "长春", "沈阳",
    "天津", "济南", "郑州", "太原", "石家庄", "合肥", "南昌", "福州", "海口", "三亚", "珠海",
    "汕头", "宁波", "温州", "绍兴", "无锡", "常州", "扬州", "徐州", "洛阳", "开封", "大理",
    "丽江", "敦煌", "喀什", "延吉", "丹东", "烟台", "威海", "泉州", "漳州", "景德镇", "九江",
    "岳阳", "株洲", "柳州", "北海", "秦皇岛", "张家界", "黄山", "婺源", "凤凰", "平遥", "阳朔",
    "腾冲", "香格里拉", "呼伦贝尔",
)
# fmt: on


@dataclass(frozen=True, slots=True)
class Item:
    key: str
    text: str
    zh: bool
    phrase: str  # an exact span of the text (English items)
    keywords: str  # out-of-order keywords (English: city name topic; Chinese: topic city)


def make_items(n: int, seed: int) -> list[Item]:
    """Alternating English and Chinese items, each language with unique (topic, city)."""
    rng = random.Random(seed)
    en_pairs = [(t, c) for t in EN_TOPICS for c in EN_CITIES]
    zh_pairs = [(t, c) for t in ZH_TOPICS for c in ZH_CITIES]
    if (n + 1) // 2 > len(en_pairs) or n // 2 > len(zh_pairs):
        raise SystemExit(f"at most {2 * min(len(en_pairs), len(zh_pairs))} items")
    rng.shuffle(en_pairs)
    rng.shuffle(zh_pairs)
    items = []
    for i in range(n):
        key = f"item-{i:06d}"
        if i % 2 == 0:
            topic, city = en_pairs[i // 2]
            name, verb, adj = rng.choice(EN_NAMES), rng.choice(EN_VERBS), rng.choice(EN_ADJS)
            phrase = f"{adj} {topic} in {city}"
            text = f"{name.title()} {verb} the {phrase} {rng.choice(EN_WHEN)}."
            items.append(Item(key, text, False, phrase, f"{city} {name} {topic}"))
        else:
            topic, city = zh_pairs[i // 2]
            name, verb, adj = rng.choice(ZH_NAMES), rng.choice(ZH_VERBS), rng.choice(ZH_ADJS)
            text = f"{name}{rng.choice(ZH_WHEN)}在{city}{verb}{adj}{topic}。"
            items.append(Item(key, text, True, "", f"{topic} {city}"))
    return items


def make_queries(
    items: list[Item], acked: set[str], per_kind: int, seed: int
) -> list[tuple[str, str, str]]:
    """(kind, query, target key) for items the store acknowledged."""
    rng = random.Random(seed + 1)
    en = [it for it in items if not it.zh and it.key in acked]
    zh = [it for it in items if it.zh and it.key in acked]
    out = []
    for it in rng.sample(en, min(per_kind, len(en))):
        out.append(("phrase", it.phrase, it.key))
    for it in rng.sample(en, min(per_kind, len(en))):
        out.append(("keywords", it.keywords, it.key))
    for it in rng.sample(zh, min(per_kind, len(zh))):
        out.append(("zh", it.keywords, it.key))
    rng.shuffle(out)
    return out


def first_column(path: Path, sql: str) -> set[str]:
    """The first column of ``sql``'s rows, read from the SQLite file at ``path``."""
    with closing(sqlite3.connect(path)) as conn:
        return {row[0] for row in conn.execute(sql)}


# --- servers -------------------------------------------------------------------------------


@dataclass
class Peer:
    """How to start one server, map the workload onto its tools, and count what it kept."""

    name: str
    package: str
    write_tool: str
    search_tool: str
    params: Callable[[Path], StdioServerParameters]
    write_args: Callable[[Item], dict[str, Any]]
    search_args: Callable[[str], dict[str, Any]]
    kept: Callable[[Path], set[str]]
    missing: str | None = None  # why it cannot run here, if it cannot


def peers_dir_default() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "amem-bench" / "peers"


def base_env() -> dict[str, str]:
    return get_default_environment()  # the SDK's safe default: no AMEM_* settings leak in


FLOOR_SERVER = """
import json, sys
def schema(*names):
    return {"type": "object", "properties": {name: {"type": "string"} for name in names}}
TOOLS = [{"name": "write", "inputSchema": schema("key", "text")},
         {"name": "search", "inputSchema": schema("query")}]
kept = open(sys.argv[1], "a", encoding="utf-8")
for line in sys.stdin:
    request = json.loads(line)
    if "id" not in request:
        continue  # a notification
    method, params = request["method"], request.get("params") or {}
    result = {}
    if method == "initialize":
        result = {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "floor", "version": "0"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        if params["name"] == "write":
            kept.write(params["arguments"]["key"] + "\\n")
            kept.flush()
        result = {"content": [{"type": "text", "text": "[]"}], "isError": False}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}) + "\\n")
    sys.stdout.flush()
"""
"""A server that does nothing but answer (and note the keys written): what the client and
the stdio pipes cost, which no server can beat."""


def floor_peer() -> Peer:
    def params(d: Path) -> StdioServerParameters:
        args = ["-c", FLOOR_SERVER, str(d / "floor.keys")]
        return StdioServerParameters(command=sys.executable, args=args, env=base_env(), cwd=d)

    def kept(d: Path) -> set[str]:
        path = d / "floor.keys"
        return set(path.read_text(encoding="utf-8").split()) if path.exists() else set()

    return Peer(
        "floor",
        "the client round trip",
        "write",
        "search",
        params,
        lambda it: {"key": it.key, "text": it.text},
        lambda q: {"query": q},
        kept,
    )


def amem_peer() -> Peer:
    def params(d: Path) -> StdioServerParameters:
        args = [
            "-m",
            "amem",
            "serve",
            "--db",
            str(d / "amem.db"),
            "--persona",
            "bench",
            "--project",
            "peers",
        ]
        return StdioServerParameters(command=sys.executable, args=args, env=base_env(), cwd=d)

    def kept(d: Path) -> set[str]:
        return first_column(d / "amem.db", "select id from events")

    return Peer(
        "amem",
        "this checkout",
        "event_submit",
        "memory_recall",
        params,
        lambda it: {"text": it.text, "role": "user", "event_id": it.key, "session": "peers"},
        lambda q: {"query": q, "limit": TOP},
        kept,
    )


def server_memory_peer(peers: Path) -> Peer:
    script = peers / "npm/node_modules/@modelcontextprotocol/server-memory/dist/index.js"

    def params(d: Path) -> StdioServerParameters:
        env = {**base_env(), "MEMORY_FILE_PATH": str(d / "memory.jsonl")}
        return StdioServerParameters(command="node", args=[str(script)], env=env, cwd=d)

    def kept(d: Path) -> set[str]:
        found = set()
        path = d / "memory.jsonl"
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a torn line is not a kept item
                if record.get("type") == "entity":
                    found.add(record.get("name"))
        return found

    return Peer(
        "server-memory",
        NPM_PACKAGES[0],
        "create_entities",
        "search_nodes",
        params,
        lambda it: {
            "entities": [{"name": it.key, "entityType": "memory", "observations": [it.text]}]
        },
        lambda q: {"query": q},
        kept,
        None if script.exists() else f"not installed ({script} missing; run --install)",
    )


def memory_keeper_peer(peers: Path) -> Peer:
    script = peers / "npm/node_modules/mcp-memory-keeper/dist/index.js"

    def params(d: Path) -> StdioServerParameters:
        env = {**base_env(), "DATA_DIR": str(d), "HOME": str(d)}
        return StdioServerParameters(command="node", args=[str(script)], env=env, cwd=d)

    def kept(d: Path) -> set[str]:
        return first_column(d / "context.db", "select key from context_items")

    return Peer(
        "memory-keeper",
        NPM_PACKAGES[1],
        "context_save",
        "context_search",
        params,
        lambda it: {"key": it.key, "value": it.text, "category": "note"},
        lambda q: {"query": q, "limit": TOP},
        kept,
        None if script.exists() else f"not installed ({script} missing; run --install)",
    )


def basic_memory_peer(peers: Path) -> Peer:
    exe = peers / "basic-memory-venv/bin/basic-memory"

    def params(d: Path) -> StdioServerParameters:
        env = {
            **base_env(),
            "HOME": str(d),
            "BASIC_MEMORY_HOME": str(d / "notes"),
            "BASIC_MEMORY_AUTO_UPDATE": "false",
            "BASIC_MEMORY_CLOUD_PROMO_OPT_OUT": "true",
            "NO_COLOR": "1",
        }
        return StdioServerParameters(command=str(exe), args=["mcp"], env=env, cwd=d)

    def kept(d: Path) -> set[str]:
        # Notes in its database (with their content); the markdown files are written
        # asynchronously, and those not yet written when the client stops it are counted
        # apart (``files``), as the row's note says.
        return first_column(d / ".basic-memory/memory.db", "select title from entity")

    reason = None
    if not exe.exists():
        reason = f"not installed ({exe} missing; run --install, needs a Python >= 3.12)"
    return Peer(
        "basic-memory",
        BASIC_MEMORY,
        "write_note",
        "search_notes",
        params,
        lambda it: {"title": it.key, "content": it.text, "directory": "bench"},
        lambda q: {"query": q, "page_size": TOP, "search_type": "text", "output_format": "json"},
        kept,
        reason,
    )


# --- measuring -----------------------------------------------------------------------------


@dataclass
class Phase:
    items: int = 0  # writes issued
    acked: list[str] = field(default_factory=list)
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    capped: bool = False
    kept: int = 0
    rss: int = 0
    disk: int = 0
    files: int | None = None  # basic-memory: markdown files on disk when it stopped

    @property
    def rate(self) -> float:
        return len(self.acked) / self.elapsed if self.elapsed else math.nan


@dataclass
class Row:
    server: str
    size: int
    unavailable: str | None = None
    seq: Phase = field(default_factory=Phase)
    c16: Phase = field(default_factory=Phase)
    latencies: list[float] = field(default_factory=list)
    hits: dict[str, list[bool]] = field(default_factory=lambda: {k: [] for k in KINDS})
    search_errors: int = 0
    stored_for_search: int = 0


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


def peak_rss(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def disk_usage(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def result_text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def schema_args(tool: types.Tool, args: dict[str, Any]) -> dict[str, Any]:
    """Only the arguments the tool declares (a peer's schema may differ by version)."""
    props = tool.inputSchema.get("properties", {})
    missing = [a for a in tool.inputSchema.get("required", []) if a not in args]
    if missing:
        raise SystemExit(f"{tool.name} requires {missing}: the workload mapping needs updating")
    return {k: v for k, v in args.items() if k in props}


class Server:
    """One running server with an initialized client session."""

    def __init__(self, peer: Peer, data: Path, log: Path) -> None:
        self.peer, self.data, self.log = peer, data, log
        self.tools: dict[str, types.Tool] = {}
        self.pids: list[int] = []

    async def __aenter__(self) -> Server:
        self._stack = AsyncExitStack()
        errlog = self._stack.enter_context(self.log.open("a"))
        before = set(descendants(os.getpid()))
        read, write = await self._stack.enter_async_context(
            stdio_client(self.peer.params(self.data), errlog=errlog)
        )
        self.session = await self._stack.enter_async_context(ClientSession(read, write))
        with anyio.fail_after(180):
            await self.session.initialize()
            listed = await self.session.list_tools()
        self.tools = {t.name: t for t in listed.tools}
        for name in (self.peer.write_tool, self.peer.search_tool):
            if name not in self.tools:
                raise SystemExit(f"{self.peer.name}: no tool {name!r} in {sorted(self.tools)}")
        self.pids = [p for p in descendants(os.getpid()) if p not in before]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    def rss(self) -> int:
        return peak_rss(self.pids)

    async def call(self, tool: str, args: dict[str, Any]) -> tuple[bool, str]:
        with anyio.fail_after(CALL_TIMEOUT):
            result = await self.session.call_tool(tool, schema_args(self.tools[tool], args))
        return not result.isError, result_text(result)


async def write_phase(server: Server, items: list[Item], in_flight: int, cap: float) -> Phase:
    phase = Phase()
    queue: Iterator[Item] = iter(items)
    deadline = time.perf_counter() + cap

    async def worker() -> None:
        for item in queue:
            if time.perf_counter() > deadline:
                phase.capped = True
                return
            phase.items += 1
            try:
                ok, text = await server.call(server.peer.write_tool, server.peer.write_args(item))
            except Exception as exc:  # counted: a peer failing a write is a result
                ok, text = False, f"{type(exc).__name__}: {exc}"
            if ok:
                phase.acked.append(item.key)
            else:
                phase.errors += 1
                if len(phase.error_samples) < 3:
                    phase.error_samples.append(text[:200])

    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(in_flight):
            tg.start_soon(worker)
    phase.elapsed = time.perf_counter() - t0
    return phase


async def search_phase(server: Server, row: Row, queries: list[tuple[str, str, str]]) -> None:
    for _, query, _ in queries[:3]:  # warm-up, not timed
        await server.call(server.peer.search_tool, server.peer.search_args(query))
    for kind, query, target in queries:
        t0 = time.perf_counter()
        try:
            ok, text = await server.call(server.peer.search_tool, server.peer.search_args(query))
        except Exception:
            ok, text = False, ""
        row.latencies.append(time.perf_counter() - t0)
        if not ok:
            row.search_errors += 1
        keys = list(dict.fromkeys(m.group(0) for m in KEY.finditer(text)))
        row.hits[kind].append(target in keys[:TOP])


async def measure(
    peer: Peer, size: int, items: list[Item], args: argparse.Namespace, tmp: Path
) -> Row:
    row = Row(peer.name, size)
    log = tmp / f"{peer.name}-{size}.log"
    for mode in ("seq", "c16"):
        data = tmp / f"{peer.name}-{size}-{mode}"
        data.mkdir()
        print(f"  {peer.name} {size} {mode} ...", file=sys.stderr, flush=True)
        async with Server(peer, data, log) as server:
            await server.call(peer.search_tool, peer.search_args(WARM_UP))  # start-up, untimed
            phase = await write_phase(
                server, items, 1 if mode == "seq" else IN_FLIGHT, args.phase_cap
            )
            if mode == "seq":
                acked = set(phase.acked)
                queries = make_queries(items, acked, args.queries, args.seed)
                await search_phase(server, row, queries)
            phase.rss = server.rss()
        phase.kept = len(set(phase.acked) & peer.kept(data))
        phase.disk = disk_usage(data)
        if (data / "notes").is_dir():
            phase.files = sum(1 for _ in (data / "notes").rglob("*.md"))
        if mode == "seq":
            row.seq = phase
            row.stored_for_search = phase.kept
        else:
            row.c16 = phase
        if not args.keep:
            shutil.rmtree(data, ignore_errors=True)
    return row


# --- reporting -----------------------------------------------------------------------------


def hit(row: Row, kind: str) -> float:
    found = row.hits[kind]
    return sum(found) / len(found) if found else math.nan


def f(value: float, spec: str) -> str:
    return "-" if value is None or math.isnan(value) else format(value, spec)


def per_item(r: Row) -> float:
    return r.seq.disk / r.seq.kept if r.seq.kept else math.nan


def report(rows: list[Row], args: argparse.Namespace) -> None:
    for size in args.sizes:
        these = [r for r in rows if r.size == size]
        print()
        print(
            f"peers: {size:,} items, {args.queries} queries per kind, hit@{TOP}, "
            f"phase cap {args.phase_cap:.0f} s, {os.cpu_count()} cores"
        )
        header = (
            f"{'server':<14} {'seq w/s':>8} {'c16 w/s':>8} {'kept seq':>11} {'kept c16':>11} "
            f"{'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'phrase':>6} {'keywd':>6} {'zh':>6} "
            f"{'RSS MiB':>7} {'disk MiB':>8} {'B/item':>7}"
        )
        print_header(header)
        for r in these:
            if r.unavailable:
                print(f"{r.server:<14} unavailable: {r.unavailable}")
                continue
            rss = max(r.seq.rss, r.c16.rss) / 2**20
            print(
                f"{r.server:<14} {f(r.seq.rate, ',.0f'):>8} {f(r.c16.rate, ',.0f'):>8} "
                f"{r.seq.kept:>5}/{len(r.seq.acked):<5} {r.c16.kept:>5}/{len(r.c16.acked):<5} "
                f"{f(pct(r.latencies, 0.5), '.2f'):>7} {f(pct(r.latencies, 0.95), '.2f'):>7} "
                f"{f(pct(r.latencies, 0.99), '.2f'):>7} {f(hit(r, 'phrase'), '.2f'):>6} "
                f"{f(hit(r, 'keywords'), '.2f'):>6} {f(hit(r, 'zh'), '.2f'):>6} "
                f"{rss:>7.0f} {r.seq.disk / 2**20:>8.1f} {f(per_item(r), ',.0f'):>7}"
            )
        for r in these:
            notes = []
            for name, p in (("seq", r.seq), ("c16", r.c16)):
                if p.capped:
                    notes.append(
                        f"{name} writes capped at {args.phase_cap:.0f} s: "
                        f"measured on the first {p.items:,} of {size:,} items"
                    )
                if p.files is not None and p.files < p.kept:
                    notes.append(
                        f"{name}: only {p.files:,} of the {p.kept:,} kept notes had "
                        "their markdown file written when the client stopped it"
                    )
                if p.errors:
                    notes.append(f"{name}: {p.errors} write errors, e.g. {p.error_samples[:1]}")
            if r.search_errors:
                notes.append(f"{r.search_errors} search errors")
            if r.seq.capped:
                notes.append(f"searches ran over the {r.stored_for_search:,} items that store kept")
            for note in notes:
                print(f"  {r.server}: {note}")
        amem = next((r for r in these if r.server == "amem" and not r.unavailable), None)
        if amem is None:
            continue
        print()
        print(f"amem's ratios at {size:,} (>1: amem better):")
        for r in these:
            if r is amem or r.unavailable:
                continue
            parts = [
                f"seq writes x{amem.seq.rate / r.seq.rate:.1f}",
                f"c16 writes x{amem.c16.rate / r.c16.rate:.1f}",
                f"search p50 x{pct(r.latencies, 0.5) / pct(amem.latencies, 0.5):.1f}",
                f"p99 x{pct(r.latencies, 0.99) / pct(amem.latencies, 0.99):.1f}",
                f"peak RSS x{max(r.seq.rss, r.c16.rss) / max(amem.seq.rss, amem.c16.rss):.2f}",
                f"disk/item x{per_item(r) / per_item(amem):.2f}",
            ]
            print(f"  vs {r.server}: " + ", ".join(parts))
        if size >= 10_000:
            c16_ok = amem.c16.rate >= 2500 and amem.c16.kept == size
            p50_ok = pct(amem.latencies, 0.5) <= 2.0
            hits_ok = all(hit(amem, k) >= 0.99 for k in KINDS)
            print(
                f"amem targets at {size:,}: c16 {amem.c16.rate:,.0f} writes/s, kept "
                f"{amem.c16.kept}/{size} (>= 2,500/s, all kept: {'ok' if c16_ok else 'MISS'}); "
                f"search p50 {pct(amem.latencies, 0.5):.2f} ms "
                f"(<= 2: {'ok' if p50_ok else 'MISS'}); "
                f"hit@5 "
                + "/".join(f"{hit(amem, k):.2f}" for k in KINDS)
                + f" (>= 0.99 each: {'ok' if hits_ok else 'MISS'})"
            )
    print()
    for r in rows:
        line: dict[str, Any] = {"bench": "peers", "server": r.server, "size": r.size}
        if r.unavailable:
            line["unavailable"] = r.unavailable
        else:
            for name, p in (("seq", r.seq), ("c16", r.c16)):
                line |= {
                    f"{name}_writes_per_s": round(p.rate, 1),
                    f"{name}_issued": p.items,
                    f"{name}_acked": len(p.acked),
                    f"{name}_kept": p.kept,
                    f"{name}_errors": p.errors,
                    f"{name}_capped": p.capped,
                    f"{name}_peak_rss_bytes": p.rss,
                    f"{name}_disk_bytes": p.disk,
                    f"{name}_files": p.files,
                }
            line |= {
                "search_p50_ms": round(pct(r.latencies, 0.5), 3),
                "search_p95_ms": round(pct(r.latencies, 0.95), 3),
                "search_p99_ms": round(pct(r.latencies, 0.99), 3),
                "searches": len(r.latencies),
                "search_errors": r.search_errors,
                "searched_items": r.stored_for_search,
            } | {f"hit5_{k}": round(hit(r, k), 4) for k in KINDS}
        print(json.dumps(line))


# --- installing ----------------------------------------------------------------------------


def find_python312() -> str | None:
    """A Python >= 3.12 already on this machine (no download)."""
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    for spec in ("3.12", "3.13", "3.14"):
        found = subprocess.run(
            ["uv", "python", "find", spec], capture_output=True, text=True, env=env
        )
        if found.returncode == 0 and found.stdout.strip():
            return found.stdout.strip()
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for version in sorted(pyenv.glob("3.1[2-9]*"), reverse=True):
        exe = version / "bin/python3"
        if exe.exists():
            return str(exe)
    for name in ("python3.14", "python3.13", "python3.12"):
        if path := shutil.which(name):
            return path
    return None


def install(peers: Path) -> None:
    """npm peers into PEERS/npm, basic-memory into its own venv: all outside the repo."""
    npm = peers / "npm"
    npm.mkdir(parents=True, exist_ok=True)
    package = npm / "package.json"
    if not package.exists():  # npm 11 runs no install scripts unless allowed by name
        package.write_text(json.dumps({"private": True, "allowScripts": {"better-sqlite3": True}}))
    run(["npm", "install", "--no-audit", "--no-fund", *NPM_PACKAGES], cwd=npm)
    check = ["node", "-e", "require('better-sqlite3')(':memory:').close()"]
    if subprocess.run(check, cwd=npm / "node_modules/mcp-memory-keeper").returncode != 0:
        nodedir = Path(shutil.which("node") or "/usr/bin/node").resolve().parent.parent
        run(["npm", "rebuild", "better-sqlite3", f"--nodedir={nodedir}"], cwd=npm)
    python = find_python312()
    if python is None:
        print("basic-memory: no Python >= 3.12 on this machine; it will be reported unavailable")
        return
    venv = peers / "basic-memory-venv"
    if not venv.exists():
        run(["uv", "venv", "--python", python, str(venv)], cwd=peers)
    run(["uv", "pip", "install", "--python", str(venv / "bin/python"), BASIC_MEMORY], cwd=peers)
    print(f"peers installed in {peers}")


def run(cmd: list[str], cwd: Path) -> None:
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, cwd=cwd, check=True)


# --- main ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000", help="item counts, comma-separated")
    parser.add_argument("--servers", default=",".join(SERVERS), help="which servers to run")
    parser.add_argument("--queries", type=int, default=100, help="queries per kind")
    parser.add_argument(
        "--phase-cap",
        type=float,
        default=60.0,
        help="seconds a write phase may take before it stops issuing writes",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed for the generated items")
    parser.add_argument(
        "--peers-dir",
        type=Path,
        default=peers_dir_default(),
        help="where --install puts the peers (outside the repository)",
    )
    parser.add_argument("--install", action="store_true", help="install the peers, then exit")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the stores")
    parser.add_argument("--keep", action="store_true", help="keep the stores (see --dir)")
    add_results_argument(parser)
    args = parser.parse_args()
    if args.install:
        install(args.peers_dir)
        return
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    servers = [s for s in args.servers.split(",") if s]
    peers = {
        "floor": floor_peer(),
        "amem": amem_peer(),
        "server-memory": server_memory_peer(args.peers_dir),
        "memory-keeper": memory_keeper_peer(args.peers_dir),
        "basic-memory": basic_memory_peer(args.peers_dir),
    }
    unknown = set(servers) - peers.keys()
    if unknown:
        parser.error(f"unknown servers: {sorted(unknown)}")
    if shutil.which("node") is None:
        for name in ("server-memory", "memory-keeper"):
            peers[name].missing = "node is not on PATH"

    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="amem-peers-", dir=args.dir) as tmp:
        for size in args.sizes:
            items = make_items(size, args.seed)
            for name in servers:
                peer = peers[name]
                if peer.missing:
                    rows.append(Row(name, size, unavailable=peer.missing))
                    continue
                rows.append(anyio.run(measure, peer, size, items, args, Path(tmp)))
        if args.keep:
            kept = Path(tempfile.mkdtemp(prefix="amem-peers-kept-", dir=args.dir))
            shutil.copytree(tmp, kept, dirs_exist_ok=True)
            print(f"stores kept in {kept}", file=sys.stderr)
    with recorded("peers", args.results):
        report(rows, args)


if __name__ == "__main__":
    main()
