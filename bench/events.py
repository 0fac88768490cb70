"""What the benches submit as events: the short mixed Chinese and English texts of the
write benches (``bench/ingest.py``, ``bench/stress.py``, ``bench/import_rss.py``), LoCoMo's
turns as plain texts, and one event submitted with its own ID, session, role and time
(``submit``). Standard library only, so that measuring subprocesses load nothing more for
it."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import amem

EN_WORDS = (
    "the",
    "user",
    "prefers",
    "green",
    "tea",
    "in",
    "morning",
    "and",
    "reads",
    "papers",
    "about",
    "memory",
    "project",
    "deadline",
    "moved",
    "to",
    "friday",
    "please",
    "remind",
    "me",
    "meeting",
    "with",
    "alice",
    "database",
    "backup",
    "finished",
    "without",
    "errors",
    "travel",
    "shanghai",
    "next",
    "week",
)
ZH_WORDS = (
    "我",
    "喜欢",
    "早上",
    "喝",
    "绿茶",
    "项目",
    "截止",
    "日期",
    "改到",
    "周五",
    "请",
    "提醒",
    "开会",
    "数据库",
    "备份",
    "完成",
    "下周",
    "去",
    "上海",
    "出差",
    "记忆",
    "用户",
    "偏好",
    "今天",
    "天气",
    "很好",
    "我们",
    "讨论",
    "方案",
)


def locomo_texts(path: Path) -> list[str]:
    """The text of every turn of every session in LoCoMo's ``locomo10.json``, in order."""
    samples = json.loads(path.read_text(encoding="utf-8"))
    return [
        turn["text"]
        for sample in samples
        for key, turns in sample["conversation"].items()
        if key.startswith("session_") and isinstance(turns, list)
        for turn in turns
    ]


def mixed_text(
    rng: random.Random,
    shortest: int,
    longest: int,
    en: tuple[str, ...] = EN_WORDS,
    zh: tuple[str, ...] = ZH_WORDS,
) -> str:
    """English words, Chinese words, or Chinese-English pairs: ``n`` words (pairs: ``n // 2 +
    1``) for ``n`` drawn from ``shortest`` to ``longest``."""
    kind = rng.randrange(3)
    n = rng.randint(shortest, longest)
    if kind == 0:
        return " ".join(rng.choices(en, k=n))
    if kind == 1:
        return "".join(rng.choices(zh, k=n))
    return " ".join(rng.choice(zh) + rng.choice(en) for _ in range(n // 2 + 1))


async def submit(scope: amem.Scope, event: Any) -> None:
    """``event``: anything with ``event_text``, ``role``, ``event_id``, ``session`` and
    ``occurred_at``."""
    await scope.submit_event(
        event.event_text,
        role=event.role,
        event_id=event.event_id,
        session=event.session,
        occurred_at=event.occurred_at,
    )
