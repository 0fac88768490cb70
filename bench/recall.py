"""Recall scale bench: fast-mode recall latency and peak RSS at 10k / 100k / 1M memories.

Measures (SPEC section 8, "Scale"):

- **amem** (``fast``; ``semantic``/``deep`` only when an embedding endpoint is configured
  through ``AMEM_EMBED_BASE_URL``/``AMEM_EMBED_MODEL``): a fixed set of Chinese, English
  and mixed queries (rare, medium and very common terms, a single CJK character,
  multi-term, no match) through the public API, in-process (``async with amem.open(path)
  as mem: scope.recall(...)``), after a warm-up; each query timed ``--repeat`` times.
  p50/p99/max per size and mode, and per query.
- **fts5** (the baseline, same run, same file): plain ``sqlite3`` running
  ``select rowid from search_fts where search_fts match <OR of the quoted query tokens>
  order by bm25(search_fts) limit 10`` with the tokens amem's own ``text.query_tokens``
  gives for the query.
- **peak RSS** (``ru_maxrss``) of a fresh subprocess per size, after its amem queries
  (jieba's dictionary included), and after the baseline too.

The memory databases (one scope; mixed Chinese/English texts generated from word lists
with a seeded random, including very common terms such as "user", "today", "用户", "的"
and rare ones planted a fixed number of times) are built once and cached in ``--cache``
(default ``~/.cache/amem-bench``), keyed by size, seed and ``VERSION``; each file's
``.json`` sidecar records its build time and a digest of amem's write-path sources, and a
file built by other sources is reported (``--rebuild`` refreshes it). A query whose timed
runs exceed ``--query-budget`` seconds stops after ``MIN_RUNS`` runs (the ``runs`` column),
so a pathological slowdown still finishes.

How a database is built (equivalent to ``submit_event`` + ``add_memories`` per memory,
without the event loop): ``amem.open`` creates and migrates the file, then plain
``sqlite3`` (amem's own ``open_sqlite`` pragmas) runs, for each memory, exactly the
functions amem's writer actor runs for those two calls: ``events.insert_event`` with the
event's ``text.segment`` tokens (the event row and its search_docs + FTS5 row) and
``facts.derive_memories`` with the memory's ``text.segment`` tokens (validation, the memory
row, its search_docs + FTS5 row, its cue key, the event marked extracted), 10,000
memories per transaction instead of one writer batch per group of requests. Segmentation
runs in ``--build-workers`` helper processes, like amem's worker threads it happens
before the transaction. ``--check`` builds a small sample both ways (the public API and
this builder) and compares every stored row and index document.

Prints one table (one row per size, mode and query, and an ``ALL`` row per size and mode),
then one JSON line per (size, mode). Targets are printed, not asserted.

With ``--db postgresql://...`` each size is also loaded (by archive) into a database of that
server, kept for later runs, and amem's recall is measured there too (rows ``pg-<mode>``,
beside the same FTS5 baseline over the file).

Run:  uv run python bench/recall.py [--sizes 10000,100000,1000000] [--cache DIR]
      [--repeat 30] [--baseline-repeat 5] [--rebuild] [--check] [--build-only]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
from events import submit
from reporting import add_results_argument, percentile_ms, print_header, recorded

import amem
from amem.db.drivers import open_sqlite
from amem.db.times import db_time
from amem.models import MemoryDraft
from amem.search.text import match_any, query_tokens, segment
from amem.store import events, facts

VERSION = "1"
"""Bump when the generated texts or the build change: cached files are keyed by it."""
PERSONA, PROJECT = "bench", "recall"
CACHE = Path("~/.cache/amem-bench").expanduser()
"""Where built databases are kept (``--cache``); ``recall_quality.py`` and ``vectors.py``
read them there, ``quality.py`` keeps its embeddings in its ``quality`` folder."""
CHUNK = 10_000
"""Memories per build transaction."""
PLANTED = 10
"""Memories of each size that carry a planted rare term (half "quokka", half "敦煌壁画")."""
UNCOMMON_P = 1e-4
"""Share of memories carrying each uncommon word (1 at 10k, 100 at 1M)."""
START = datetime(2023, 1, 1, tzinfo=UTC)
SLOW_WARMUP_S = 1.0
MIN_RUNS = 3
TARGET_P99_MS = 25.0
TARGET_AT = 1_000_000
TARGET_RSS_GROWTH = 1.25
"""RSS "flat": the largest size's peak within this factor of the smallest size's."""

# fmt: off
EN_TOPICS = (
    "tea", "coffee", "meeting", "deadline", "project", "database", "backup", "python",
    "server", "travel", "flight", "hotel", "shanghai", "beijing", "tokyo", "paris", "berlin",
    "birthday", "gift", "sister", "brother", "mother", "father", "daughter", "dog", "cat",
    "garden", "running", "marathon", "yoga", "piano", "guitar", "novel", "book", "movie",
    "concert", "restaurant", "sushi", "noodles", "dumplings", "allergy", "peanuts", "doctor",
    "dentist", "appointment", "insurance", "salary", "budget", "invoice", "report",
    "presentation", "slides", "manager", "colleague", "team", "interview", "resume",
    "promotion", "vacation", "weekend", "holiday", "weather", "rain", "snow", "bicycle", "car",
    "train", "subway", "apartment", "rent", "kitchen", "recipe", "bread", "cheese", "wine",
    "beer", "juice", "milk", "sugar", "diet", "sleep", "headache", "medicine", "vitamins",
    "gym", "swimming", "hiking", "camping", "photography", "camera", "laptop", "phone",
    "keyboard", "monitor", "printer", "password", "email", "calendar", "reminder",
    "schedule", "chess", "tennis", "football", "basketball", "painting", "poetry", "history",
    "physics", "chemistry", "biology", "mathematics", "statistics", "economics",
    "philosophy", "japanese", "french", "spanish", "german", "podcast", "newsletter", "blog",
    "article", "paper", "research", "experiment", "dataset", "model", "training",
    "evaluation", "benchmark", "latency", "memory", "cache", "index", "query", "search",
    "sqlite", "postgres", "linux", "docker", "github", "review", "release", "bug", "feature",
    "refactor", "kubernetes", "deployment", "cluster", "pipeline", "dashboard", "invoice",
)
EN_ADJECTIVES = (
    "green", "black", "new", "old", "favourite", "quiet", "early", "late", "spicy", "sweet",
    "long", "short", "weekly", "monthly", "important", "urgent", "small", "big", "cheap",
)
EN_VERBS = (
    "prefers", "likes", "hates", "wants", "needs", "asked about", "mentioned", "booked",
    "cancelled", "finished", "started", "moved", "visited", "bought", "sold", "planned",
    "forgot", "remembered", "learned", "enjoys", "avoids", "scheduled", "reviewed", "wrote",
    "reads", "drinks", "eats", "talked about",
)
EN_SUBJECTS = (
    "my sister", "my manager", "alice", "bob", "the team", "my doctor", "we", "i", "carol",
    "the client", "my brother", "dave",
)
EN_TIMES = (
    "yesterday", "on friday", "last week", "next month", "every morning", "in the morning",
    "in the evening", "on weekends", "this year", "after lunch", "before bed",
)
EN_UNCOMMON = ("tardigrade", "zeppelin", "kumquat", "origami", "sauerkraut", "hieroglyph")
EN_CODES = ("apollo", "hermes", "atlas", "orion", "vega", "lyra")
EN_PREFIXES = ("", "", "Just so you know, ", "Note: ", "Hey, ", "By the way, ")
EN_SUFFIXES = ("", "", " Thanks!", " Please remember that.", " Does that make sense?")

ZH_TOPICS = (
    "绿茶", "咖啡", "会议", "截止日期", "项目", "数据库", "备份", "服务器", "部署", "出差", "航班",
    "酒店", "上海", "北京", "东京", "巴黎", "生日", "礼物", "姐姐", "哥哥", "妈妈", "爸爸", "女儿",
    "儿子", "小狗", "小猫", "花园", "跑步", "马拉松", "瑜伽", "钢琴", "吉他", "小说", "电影",
    "音乐会", "餐厅", "寿司", "面条", "饺子", "素食", "花生", "医生", "牙医", "预约", "保险",
    "工资", "预算", "发票", "报告", "演示", "经理", "同事", "团队", "面试", "简历", "升职", "假期",
    "周末", "天气", "自行车", "汽车", "火车", "地铁", "公寓", "房租", "搬家", "厨房", "菜谱",
    "面包", "奶酪", "红酒", "啤酒", "果汁", "牛奶", "睡眠", "头疼", "维生素", "健身房", "游泳",
    "爬山", "露营", "摄影", "相机", "电脑", "手机", "键盘", "显示器", "打印机", "密码", "邮件",
    "日历", "日程", "象棋", "网球", "足球", "篮球", "绘画", "诗歌", "历史", "物理", "化学", "数学",
    "统计", "经济", "哲学", "日语", "法语", "英语", "播客", "博客", "文章", "论文", "研究", "实验",
    "数据集", "模型", "训练", "评测", "延迟", "记忆", "缓存", "索引", "查询", "搜索", "红茶",
    "奶茶", "茶叶", "乌龙茶", "火锅", "烤鸭", "包子", "米饭",
)
ZH_ADJECTIVES = ("最喜欢", "新", "旧", "重要", "便宜", "好吃", "安静", "很贵", "热门", "周末")
ZH_VERBS = (
    "喜欢", "讨厌", "想要", "需要", "提到", "预订了", "取消了", "完成了", "开始", "改到了",
    "去了", "买了", "卖了", "计划", "忘了", "记得", "学习", "享受", "避免", "安排了", "检查了",
    "写了", "读了", "喝", "吃", "聊到",
)
ZH_SUBJECTS = ("我", "我们", "她", "他", "同事", "经理", "妈妈", "团队", "客户")
ZH_TIMES = ("昨天", "明天", "周五", "上周", "下个月", "每天早上", "晚上", "早上", "周末", "今年")
ZH_UNCOMMON = ("量子纠缠", "兵马俑", "甲骨文", "皮影戏")
ZH_SURNAMES = "王李张刘陈杨赵黄周吴徐孙胡朱高林何郭马罗梁宋郑谢韩唐冯于董萧程曹袁邓许傅沈曾彭吕"
ZH_GIVEN = "伟芳娜敏静丽强磊军洋勇艳杰娟涛明超秀霞平刚桂英华玉兰萍红鹏飞宇浩然欣怡子轩梓涵"
ZH_PREFIXES = ("", "", "顺便说一下，", "记住：", "对了，", "跟你说，")
ZH_SUFFIXES = ("", "", "谢谢！", "请记下来。", "你觉得呢？")

PLANTED_TERMS = ("quokka", "敦煌壁画")
QUERIES: tuple[tuple[str, str], ...] = (
    ("en_rare", "quokka"),
    ("zh_rare", "敦煌壁画"),
    ("en_uncommon", "tardigrade"),
    ("zh_uncommon", "兵马俑"),
    ("en_medium", "kubernetes deployment"),
    ("zh_medium", "数据库备份"),
    ("en_common", "user"),
    ("en_common_today", "today"),
    ("zh_common", "用户"),
    ("zh_char_的", "的"),
    ("zh_char_茶", "茶"),
    ("en_multi", "the user prefers green tea in the morning"),
    ("zh_multi", "用户今天早上喜欢喝绿茶"),
    ("mixed", "用户 today 喜欢 coffee 和 绿茶"),
    ("no_match", "xylophonist"),
)
# fmt: on


def cumulative(n: int) -> list[float]:
    """Zipf weights (rank^-1), cumulative, for ``random.choices``."""
    total, out = 0.0, []
    for rank in range(n):
        total += 1 / (rank + 1)
        out.append(total)
    return out


EN_CUM, ZH_CUM = cumulative(len(EN_TOPICS)), cumulative(len(ZH_TOPICS))


@dataclass(frozen=True, slots=True)
class Item:
    """One generated memory with its source event."""

    idx: int
    role: str
    event_text: str
    memory_text: str
    kind: str
    basis: str
    confidence: float

    @property
    def event_id(self) -> str:
        return f"evt_{self.idx:08d}"

    @property
    def session(self) -> str:
        return f"sess_{self.idx // 50:06d}"

    @property
    def occurred_at(self) -> str:
        return db_time(START + timedelta(minutes=self.idx))  # 1M memories: about 694 days

    def draft(self) -> MemoryDraft:
        return MemoryDraft(
            text=self.memory_text,
            quote=self.memory_text,
            kind=self.kind,  # type: ignore[arg-type]
            basis=self.basis,  # type: ignore[arg-type]
            confidence=self.confidence,
        )


def en_objects(rng: random.Random, zh_words: bool = False) -> str:
    words = rng.choices(
        ZH_TOPICS if zh_words else EN_TOPICS,
        cum_weights=ZH_CUM if zh_words else EN_CUM,
        k=rng.randint(1, 3),
    )
    if rng.random() < 0.4:
        words[0] = f"{rng.choice(EN_ADJECTIVES)} {words[0]}"
    return " and ".join(words)


def en_sentence(rng: random.Random, planted: str | None, zh_words: bool = False) -> str:
    r = rng.random()
    subject = "the user" if r < 0.45 else "user" if r < 0.5 else rng.choice(EN_SUBJECTS)
    r = rng.random()
    when = "today" if r < 0.3 else rng.choice(EN_TIMES) if r < 0.7 else ""
    parts = [subject, rng.choice(EN_VERBS), en_objects(rng, zh_words), when]
    r = rng.random()
    if r < 0.3:
        parts.append(f"for project {rng.choice(EN_CODES)}{rng.randrange(1000)}")
    elif r < 0.5:
        parts.append(f"ticket {rng.randrange(100_000)}")
    for word in EN_UNCOMMON:
        if rng.random() < UNCOMMON_P:
            parts.append(f"near the {word}")
    if planted:
        parts.append(f"about the {planted}")
    return " ".join(part for part in parts if part)


def zh_objects(rng: random.Random, en_words: bool = False) -> str:
    if en_words:
        words = [f" {w} " for w in rng.choices(EN_TOPICS, cum_weights=EN_CUM, k=rng.randint(1, 2))]
    else:
        words = rng.choices(ZH_TOPICS, cum_weights=ZH_CUM, k=rng.randint(1, 3))
    if rng.random() < 0.5:
        words[0] = f"{rng.choice(ZH_ADJECTIVES)}的{words[0]}"
    return "和".join(words)


def zh_sentence(rng: random.Random, planted: str | None, en_words: bool = False) -> str:
    r = rng.random()
    if r < 0.45:
        subject = "用户"
    elif r < 0.6:
        subject = rng.choice(ZH_SURNAMES) + "".join(rng.choices(ZH_GIVEN, k=rng.randint(1, 2)))
    else:
        subject = rng.choice(ZH_SUBJECTS)
    if rng.random() < 0.15:
        subject += "的" + rng.choice(("姐姐", "经理", "朋友", "医生"))
    r = rng.random()
    when = "今天" if r < 0.3 else rng.choice(ZH_TIMES) if r < 0.7 else ""
    text = subject + when + rng.choice(ZH_VERBS) + zh_objects(rng, en_words)
    r = rng.random()
    if r < 0.2:
        text += f"，项目编号{rng.randrange(1000)}"
    elif r < 0.3:
        text += "，这是一件很重要的事"
    for word in ZH_UNCOMMON:
        if rng.random() < UNCOMMON_P:
            text += f"，聊到了{word}"
    if planted:
        text += f"，关于{planted}"
    return text.strip()


def make_item(rng: random.Random, idx: int, size: int) -> Item:
    step = max(1, size // PLANTED)
    planted = PLANTED_TERMS[(idx // step) % 2] if idx % step == step // 2 else None
    r = rng.random()
    if planted == PLANTED_TERMS[0] or (planted is None and r < 0.45):
        memory = en_sentence(rng, planted, zh_words=False)
        zh = False
    elif planted == PLANTED_TERMS[1] or r < 0.9:
        memory = zh_sentence(rng, planted)
        zh = True
    elif r < 0.95:
        memory = en_sentence(rng, None, zh_words=True)  # "the user likes 绿茶 today"
        zh = False
    else:
        memory = zh_sentence(rng, None, en_words=True)  # "用户今天喜欢 coffee"
        zh = True
    memory = " ".join(memory.split())
    if zh:
        event = rng.choice(ZH_PREFIXES) + memory + "。" + rng.choice(ZH_SUFFIXES)
    else:
        event = rng.choice(EN_PREFIXES) + memory + "." + rng.choice(EN_SUFFIXES)
    if rng.random() < 0.8:
        role, basis = "user", ("user_statement" if rng.random() < 0.9 else "inference")
        kind = rng.choice(("fact", "preference", "episode", "observation"))
    else:
        role, basis = "assistant", "assistant_expression"
        kind = rng.choice(("agreement", "observation", "episode"))
    return Item(idx, role, event, memory, kind, basis, round(rng.uniform(0.5, 1.0), 2))


def make_chunk(seed: int, size: int, start: int, stop: int) -> list[Item]:
    """Items ``start..stop``; deterministic per ``CHUNK``-aligned block, whatever ``stop``."""
    items: list[Item] = []
    for block in range(start // CHUNK, (stop - 1) // CHUNK + 1):
        rng = random.Random(f"{seed}:{block}")
        for idx in range(block * CHUNK, min(stop, (block + 1) * CHUNK)):
            item = make_item(rng, idx, size)
            if idx >= start:
                items.append(item)
    return items


def segmented_chunk(seed: int, size: int, start: int, stop: int) -> list[tuple[Item, str, str]]:
    """A chunk with each event's and memory's ``text.segment`` (run in a helper process)."""
    return [
        (item, segment(item.event_text), segment(item.memory_text))
        for item in make_chunk(seed, size, start, stop)
    ]


# ---------------------------------------------------------------- building the databases


def db_path(cache: Path, size: int, seed: int) -> Path:
    return cache / f"recall-v{VERSION}-seed{seed}-{size}.db"


def create_schema(path: Path) -> None:
    """``amem.open`` creates the file and migrates it to the current schema."""

    async def run() -> None:
        async with amem.open(path, settings=quiet_settings()):
            pass

    anyio.run(run)


def quiet_settings() -> amem.Settings:
    """Env settings, with extraction off (the bench never waits for a model)."""
    return amem.Settings(extract_base_url=None, extract_model=None)


def insert_items(conn: sqlite3.Connection, rows: Sequence[tuple[Item, str, str]]) -> None:
    """What the writer actor runs for ``submit_event`` then ``add_memories``, per memory."""
    now = db_time(datetime.now(UTC))
    working_ttl = quiet_settings().working_ttl  # the bench's memories are never working notes
    conn.execute("begin immediate")
    try:
        for item, event_tokens, memory_tokens in rows:
            events.insert_event(
                conn,
                events.NewEvent(
                    id=item.event_id,
                    persona=PERSONA,
                    project=PROJECT,
                    session=item.session,
                    role=item.role,
                    category="conversation",
                    source=None,
                    text=item.event_text,
                    occurred_at=item.occurred_at,
                    occurred_at_given=True,
                    ingested_at=now,
                    status="stored",
                    person=None,
                    segmented=event_tokens,
                ),
            )
            facts.derive_memories(
                conn,
                PERSONA,
                PROJECT,
                item.event_id,
                [item.draft()],
                [memory_tokens],
                now,
                working_ttl=working_ttl,
            )
        conn.execute("commit")
    except BaseException:
        conn.execute("rollback")
        raise


def build(path: Path, size: int, seed: int, workers: int) -> float:
    """Build the database of ``size`` memories at ``path``; returns seconds taken."""
    t0 = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".building")
    for leftover in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
        leftover.unlink(missing_ok=True)
    create_schema(partial)
    conn = open_sqlite(str(partial), readonly=False)
    bounds = [(start, min(size, start + CHUNK)) for start in range(0, size, CHUNK)]
    done = 0
    try:
        for rows in segmented_chunks(seed, size, bounds, workers):
            insert_items(conn, rows)
            done += len(rows)
            elapsed = time.perf_counter() - t0
            eta = elapsed / done * (size - done)
            print(
                f"  build {size:,}: {done:,}/{size:,} memories, {done / elapsed:,.0f}/s, "
                f"{elapsed:,.0f} s elapsed, eta {eta:,.0f} s",
                file=sys.stderr,
                flush=True,
            )
        conn.execute("pragma wal_checkpoint(truncate)")
    finally:
        conn.close()
    os.replace(partial, path)
    seconds = time.perf_counter() - t0
    info = {
        "size": size,
        "seed": seed,
        "version": VERSION,
        "build_s": round(seconds, 1),
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "bytes": path.stat().st_size,
        "amem_write_path": write_path_digest(),
    }
    path.with_suffix(".json").write_text(json.dumps(info) + "\n")
    return seconds


def segmented_chunks(
    seed: int, size: int, bounds: list[tuple[int, int]], workers: int
) -> Iterator[list[tuple[Item, str, str]]]:
    """Chunks in order; with workers, segmented ahead in helper processes (bounded)."""
    if workers <= 0:
        for start, stop in bounds:
            yield segmented_chunk(seed, size, start, stop)
        return
    # spawn, not fork: a forked child would inherit jieba's loading lock held by the warm-up
    # thread ``amem.open`` leaves behind, and wait on it forever
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=spawn) as pool:
        ahead = 2 * workers
        futures = [pool.submit(segmented_chunk, seed, size, *b) for b in bounds[:ahead]]
        for n in range(len(bounds)):
            rows = futures[n].result()
            futures[n] = None  # type: ignore[call-overload]
            if n + ahead < len(bounds):
                futures.append(pool.submit(segmented_chunk, seed, size, *bounds[n + ahead]))
            yield rows


WRITE_PATH = (
    "search/text.py",
    "search/index.py",
    "store/events.py",
    "store/facts.py",
    "db/schema.py",
)
"""The amem sources that decide what a build writes."""


def write_path_digest() -> str:
    """A digest of amem's write-path sources, recorded with each build: a cached file built
    by other sources may differ from what this amem writes (``--rebuild``)."""
    digest = hashlib.sha256()
    for name in WRITE_PATH:
        digest.update((Path(amem.__file__).parent / name).read_bytes())
    return digest.hexdigest()[:12]


def ensure_db(args: argparse.Namespace, size: int) -> tuple[Path, dict[str, Any]]:
    path = db_path(args.cache, size, args.seed)
    info_path = path.with_suffix(".json")
    if args.rebuild or not path.exists() or not info_path.exists():
        print(f"building {size:,} memories into {path} ...", file=sys.stderr, flush=True)
        build(path, size, args.seed, args.build_workers)
        info = json.loads(info_path.read_text())
        print(f"built {size:,} in {info['build_s']:,.1f} s", file=sys.stderr, flush=True)
        info["cached"] = False
    else:
        info = json.loads(info_path.read_text())
        info["cached"] = True
        if info.get("amem_write_path") != write_path_digest():
            print(
                f"note: {path.name} was built by other amem write-path sources "
                f"({', '.join(WRITE_PATH)}) than the current ones; --rebuild to refresh",
                file=sys.stderr,
                flush=True,
            )
            info["stale"] = True
    return path, info


# ------------------------------------------------------------------------ equivalence check


def check_equivalence(seed: int, n: int = 300) -> list[str]:
    """Build ``n`` memories through the public API and through ``insert_items``; compare."""
    items = make_chunk(seed, n, 0, n)
    with tempfile.TemporaryDirectory(prefix="amem-recall-check-") as tmp:
        api, direct = Path(tmp) / "api.db", Path(tmp) / "direct.db"

        async def through_api() -> None:
            async with amem.open(api, settings=quiet_settings()) as mem:
                scope = mem.scope(PERSONA, PROJECT)
                for item in items:
                    await submit(scope, item)
                    await scope.add_memories(item.event_id, [item.draft()])

        anyio.run(through_api)
        create_schema(direct)
        conn = open_sqlite(str(direct), readonly=False)
        try:
            insert_items(conn, segmented_chunk(seed, n, 0, n))
        finally:
            conn.close()
        return [problem for query in CHECKS for problem in compare(api, direct, query)]


CHECKS = (
    "select id, persona, project, session, role, category, source, text, occurred_at, status,"
    " error from events order by seq",
    "select persona, project, event_id, text, quote, quote_start, quote_end, kind, basis,"
    " confidence, subject, fact_key, valid_at, invalid_at, chain_order, revoked_at, emotion,"
    " gist, cue_key from memories order by num",
    "select d.num, d.persona, d.project, d.doc_kind, coalesce(m.event_id, d.ref), d.tokens"
    " from search_docs d left join memories m on m.id = d.ref order by d.num",
    'select rowid, tokens from search_fts where search_fts match \'"user" OR "用户"\''
    " order by rowid",
    "select count(*) from search_fts where search_fts match '\"的\"'",
)


def compare(a: Path, b: Path, query: str) -> list[str]:
    rows = []
    for path in (a, b):
        conn = sqlite3.connect(path)
        try:
            conn.execute("insert into search_fts (search_fts) values ('integrity-check')")
            rows.append(conn.execute(query).fetchall())
        finally:
            conn.close()
    if rows[0] == rows[1]:
        return []
    return [f"differs ({len(rows[0])} vs {len(rows[1])} rows): {query[:60]}..."]


# ------------------------------------------------------------------------------- measuring


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def measure(
    path: Path,
    warmup: int,
    repeat: int,
    baseline_repeat: int,
    budget: float,
    on: str | None = None,
) -> dict[str, object]:
    """Run in a fresh subprocess per size: amem recall (on the PostgreSQL database ``on``
    when given, holding the same data), then the FTS5 baseline over the file."""
    out: dict[str, object] = {"rss_start_mb": rss_mb(), "amem_source": amem_source_digest()}
    settings = quiet_settings()
    modes = ["fast"] + (["semantic", "deep"] if settings.embedding_enabled else [])
    timings: dict[str, dict[str, list[float]]] = {mode: {} for mode in modes}
    hits: dict[str, dict[str, int]] = {mode: {} for mode in modes}
    warnings: dict[str, dict[str, list[str]]] = {mode: {} for mode in modes}

    async def run() -> None:
        async with amem.open(on or path, settings=settings) as mem:
            scope = mem.scope(PERSONA, PROJECT)
            for mode in modes:
                for name, query in QUERIES:  # warm-up (the first call waits for jieba)
                    for _ in range(warmup):
                        t0 = time.perf_counter()
                        result = await scope.recall(query, mode=mode, limit=10)
                        if time.perf_counter() - t0 > SLOW_WARMUP_S:
                            break  # already slow: no cache left to warm
                    hits[mode][name] = len(result.items)
                    warnings[mode][name] = result.warnings
                    timings[mode][name] = []
                for _ in range(repeat):
                    for name, query in QUERIES:
                        spent = timings[mode][name]
                        if len(spent) >= MIN_RUNS and sum(spent) > budget:
                            continue  # a slow query: fewer runs, so the bench ends
                        t0 = time.perf_counter()
                        await scope.recall(query, mode=mode, limit=10)
                        spent.append(time.perf_counter() - t0)

    anyio.run(run)
    out["rss_amem_mb"] = rss_mb()
    out["timings"], out["hits"], out["warnings"] = timings, hits, warnings
    base_t: dict[str, list[float]] = {}
    base_hits: dict[str, int] = {}
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        for name, query in QUERIES:
            sql = (
                "select rowid from search_fts where search_fts match ? "
                "order by bm25(search_fts) limit 10"
            )
            expr = match_any(query_tokens(query))
            base_hits[name] = len(conn.execute(sql, (expr,)).fetchall())  # warm-up
            base_t[name] = []
            for _ in range(baseline_repeat):
                t0 = time.perf_counter()
                conn.execute(sql, (expr,)).fetchall()
                base_t[name].append(time.perf_counter() - t0)
    finally:
        conn.close()
    out["baseline_timings"], out["baseline_hits"] = base_t, base_hits
    out["rss_end_mb"] = rss_mb()
    return out


async def loaded_into_postgres(path: Path, size: int, args: argparse.Namespace) -> str:
    """The URL of a database on ``args.db``'s server holding what the file ``path`` holds:
    loaded by export and import (amem's archive) unless a database of that name already
    holds its ``size`` memories."""
    import psycopg

    name = f"amem_recall_{size}_{args.seed}"
    url = str(urlunsplit(urlsplit(args.db)._replace(path=f"/{name}")))
    with psycopg.connect(args.db, autocommit=True) as admin:
        exists = admin.execute("select 1 from pg_database where datname = %s", [name]).fetchone()
    if exists:
        with psycopg.connect(url) as conn:
            held = conn.execute("select to_regclass('memories') is not null").fetchone()
            if (
                held
                and held[0]
                and conn.execute("select count(*) from memories").fetchone() == (size,)
            ):
                return url
    with psycopg.connect(args.db, autocommit=True) as admin:
        admin.execute(f'drop database if exists "{name}" with (force)')
        admin.execute(f'create database "{name}"')
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="amem-recall-") as folder:
        archive = Path(folder) / "memory.jsonl"
        async with amem.open(path, settings=quiet_settings()) as mem:
            await mem.export(archive)
        async with amem.open(url, settings=quiet_settings()) as mem:
            await mem.import_archive(archive)
    seconds = time.perf_counter() - started
    print(f"loaded {size:,} into PostgreSQL in {seconds:,.0f} s", file=sys.stderr, flush=True)
    return url


def measure_in_subprocess(
    path: Path, args: argparse.Namespace, on: str | None = None
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--measure",
        str(path),
        "--warmup",
        str(args.warmup),
        "--repeat",
        str(args.repeat),
        "--baseline-repeat",
        str(args.baseline_repeat),
        "--query-budget",
        str(args.query_budget),
        *(["--on", on] if on else []),
    ]
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


# ------------------------------------------------------------------------------- reporting


Json = dict[str, Any]


def amem_source_digest() -> str:
    """A digest of every amem source file, taken by the measuring process when it starts
    (amem may change while a long bench runs)."""
    digest = hashlib.sha256()
    for source in sorted(Path(amem.__file__).parent.rglob("*.py")):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:12]


def report(results: list[tuple[int, Json, Json]], args: argparse.Namespace) -> None:
    header = (
        f"{'size':>9} {'mode':<6} {'query':<16} {'hits':>4} {'runs':>5} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'max ms':>8} {'fts5 p50':>9} {'fts5 p99':>9} {'fts5/amem p50':>13} "
        f"{'rss MB':>7}"
    )
    print()
    print(
        f"recall: {len(QUERIES)} queries x {args.repeat} runs per mode (fts5 baseline x "
        f"{args.baseline_repeat}), warm-up {args.warmup}, seed {args.seed}, one scope"
    )
    for size, info, _ in results:
        built = "cached" if info.get("cached") else "built now"
        built += ", by older amem write-path sources" if info.get("stale") else ""
        print(
            f"  {size:>9,} memories: {info['bytes'] / 2**20:,.0f} MB file, build "
            f"{info['build_s']:,.1f} s ({built}, {info['built_at']})"
        )
    print_header(header)

    def row(
        size: int, mode: str, name: str, hits: str, ts: list[float], bs: list[float], rss: str
    ) -> None:
        p50, b50 = percentile_ms(ts, 0.5), percentile_ms(bs, 0.5)
        print(
            f"{size:>9,} {mode:<6} {name:<16} {hits:>4} {len(ts):>5} {p50:>8.2f} "
            f"{percentile_ms(ts, 0.99):>8.2f} {max(ts) * 1000:>8.2f} {b50:>9.2f} "
            f"{percentile_ms(bs, 0.99):>9.2f} {b50 / p50:>13.3g} {rss:>7}"
        )

    lines: list[Json] = []
    for size, info, m in results:
        base: dict[str, list[float]] = m["baseline_timings"]
        all_base = [t for ts in base.values() for t in ts]
        database = m.get("database", "sqlite")
        for mode, per_query in m["timings"].items():
            hits: dict[str, int] = m["hits"][mode]
            label = f"pg-{mode}" if database == "postgresql" else mode
            for name, _query in QUERIES:
                row(size, label, name, str(hits[name]), per_query[name], base[name], "")
            every = [t for ts in per_query.values() for t in ts]
            row(size, label, "ALL", "", every, all_base, f"{m['rss_amem_mb']:.0f}")
            print("-" * len(header))
            p50, p99 = percentile_ms(every, 0.5), percentile_ms(every, 0.99)
            b50, b99 = percentile_ms(all_base, 0.5), percentile_ms(all_base, 0.99)
            per = {
                name: {
                    "hits": hits[name],
                    "runs": len(per_query[name]),
                    "p50_ms": round(percentile_ms(per_query[name], 0.5), 3),
                    "p99_ms": round(percentile_ms(per_query[name], 0.99), 3),
                    "fts5_hits": m["baseline_hits"][name],
                    "fts5_p50_ms": round(percentile_ms(base[name], 0.5), 3),
                }
                for name, _ in QUERIES
            }
            lines.append(
                {
                    "bench": "recall",
                    "size": size,
                    "database": database,
                    "mode": label,
                    "queries": len(QUERIES),
                    "runs": len(every),
                    "p50_ms": round(p50, 3),
                    "p99_ms": round(p99, 3),
                    "max_ms": round(max(every) * 1000, 3),
                    "fts5_p50_ms": round(b50, 3),
                    "fts5_p99_ms": round(b99, 3),
                    "fts5_over_amem_p50": round(b50 / p50, 3),
                    "fts5_over_amem_p99": round(b99 / p99, 3),
                    "rss_mb": round(m["rss_amem_mb"], 1),
                    "rss_after_fts5_mb": round(m["rss_end_mb"], 1),
                    "target_p99_ms": TARGET_P99_MS if size == TARGET_AT else None,
                    "per_query": per,
                    "build_s": info["build_s"],
                    "file_mb": round(info["bytes"] / 2**20, 1),
                    "seed": args.seed,
                    "version": VERSION,
                    "amem_source": m["amem_source"],
                    "built_by_current_write_path": not info.get("stale"),
                }
            )
    if not quiet_settings().embedding_enabled:
        print(
            "semantic/deep: skipped (no embedding endpoint configured: set "
            "AMEM_EMBED_BASE_URL and AMEM_EMBED_MODEL)"
        )
    print()
    fast = {line["size"]: line for line in lines if line["mode"] == "fast"}
    target = f"target: fast p99 <= {TARGET_P99_MS:.0f} ms at {TARGET_AT:,}"
    if TARGET_AT in fast:
        p99 = fast[TARGET_AT]["p99_ms"]
        print(f"{target}: {p99:.2f} ms ({'ok' if p99 <= TARGET_P99_MS else 'MISS'})")
    else:
        print(f"{target}: not measured (size {TARGET_AT:,} not in --sizes)")
    if len(fast) > 1:
        sizes = sorted(fast)
        small, big = fast[sizes[0]]["rss_mb"], fast[sizes[-1]]["rss_mb"]
        growth = big / small
        print(
            f"target: RSS flat across sizes (x{TARGET_RSS_GROWTH} at most): {small:.0f} MB at "
            f"{sizes[0]:,} -> {big:.0f} MB at {sizes[-1]:,}, x{growth:.2f} "
            f"({'ok' if growth <= TARGET_RSS_GROWTH else 'MISS'})"
        )
    print()
    for line in lines:
        print(json.dumps(line, ensure_ascii=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="memory counts")
    parser.add_argument("--cache", type=Path, default=CACHE, help="where built databases are kept")
    parser.add_argument("--seed", type=int, default=1, help="seed for the generated texts")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs of each query")
    parser.add_argument("--repeat", type=int, default=30, help="timed runs of each query")
    parser.add_argument(
        "--baseline-repeat",
        type=int,
        default=5,
        help="timed runs of each query on the FTS5 baseline",
    )
    parser.add_argument(
        "--query-budget",
        type=float,
        default=15.0,
        help="seconds of timed runs per query and mode after which a slow "
        f"query stops (after at least {MIN_RUNS} runs)",
    )
    parser.add_argument(
        "--build-workers",
        type=int,
        default=1,
        help="helper processes segmenting texts while building",
    )
    parser.add_argument("--rebuild", action="store_true", help="ignore cached databases")
    parser.add_argument("--build-only", action="store_true", help="build, do not measure")
    parser.add_argument(
        "--check",
        action="store_true",
        help="first check the builder writes what the public API writes",
    )
    parser.add_argument(
        "--db",
        metavar="URL",
        help="also measure amem on PostgreSQL: each size loaded (by archive) into a database "
        "of the server of this postgresql:// URL, kept for later runs (rows pg-<mode>)",
    )
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the subprocess
    parser.add_argument("--on", help=argparse.SUPPRESS)  # the subprocess, on PostgreSQL
    add_results_argument(parser)
    args = parser.parse_args()
    if args.measure is not None:
        measured = measure(
            args.measure,
            args.warmup,
            args.repeat,
            args.baseline_repeat,
            args.query_budget,
            args.on,
        )
        print(json.dumps(measured))
        return
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()]
    if not sizes or min(sizes) < 1 or min(args.repeat, args.baseline_repeat, args.warmup) < 1:
        parser.error("--sizes, --repeat, --baseline-repeat and --warmup must be positive")
    if args.check:
        problems = check_equivalence(args.seed)
        print(
            f"builder vs public API: {problems or 'identical'}",
            file=sys.stderr,
            flush=True,
        )
        if problems:
            sys.exit(1)
    results = []
    for size in sizes:
        path, info = ensure_db(args, size)
        if args.build_only:
            continue
        print(f"measuring {size:,} ...", file=sys.stderr, flush=True)
        results.append((size, info, measure_in_subprocess(path, args)))
        if args.db:
            url = anyio.run(loaded_into_postgres, path, size, args)
            print(f"measuring {size:,} on PostgreSQL ...", file=sys.stderr, flush=True)
            on_postgres = measure_in_subprocess(path, args, on=url)
            results.append((size, info, {**on_postgres, "database": "postgresql"}))
    if results:
        with recorded("recall", args.results):
            report(results, args)


if __name__ == "__main__":
    main()
