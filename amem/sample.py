"""A small bilingual conversation shipped for ``amem demo`` (written for amem; no data set)."""

from __future__ import annotations

from typing import Final

SAMPLE_PERSONA: Final = "assistant"
SAMPLE_PROJECT: Final = "demo"
SAMPLE_SESSION: Final = "demo-chat"

# (event_id, role, occurred_at, text): a residence that changes twice (Beijing, Shanghai,
# Hangzhou), a book mentioned only inside a Chinese compound, a preference, and a detail
# a user may later ask to delete.
SAMPLE_CONVERSATION: Final[tuple[tuple[str, str, str, str], ...]] = (
    ("demo-1", "user", "2026-01-05T09:00:00+08:00",
     "Hi! I just moved to Beijing for a new job at a robotics startup."),
    ("demo-2", "assistant", "2026-01-05T09:00:20+08:00",
     "Congratulations on the move! Beijing winters are cold, so pack a warm coat."),
    ("demo-3", "user", "2026-03-10T21:15:00+08:00",
     "我最近在读一本书，叫《三体》，非常好看。"),
    ("demo-4", "assistant", "2026-03-10T21:15:30+08:00",
     "《三体》是很棒的科幻小说！读完可以聊聊你的感想。"),
    ("demo-5", "user", "2026-06-02T08:30:00+08:00",
     "Update: the startup relocated, so I live in Shanghai now."),
    ("demo-6", "user", "2026-06-02T08:31:00+08:00",
     "My spare phone number is 555-0199, keep it in case you need it."),
    ("demo-7", "user", "2026-09-15T19:00:00+08:00",
     "我又搬家了，现在住在杭州，离西湖很近。"),
    ("demo-8", "assistant", "2026-09-15T19:00:40+08:00",
     "杭州很美！周末可以去西湖边散步。"),
    ("demo-9", "user", "2026-11-28T10:00:00+08:00",
     "I prefer tea over coffee these days, especially 龙井."),
)  # fmt: skip
