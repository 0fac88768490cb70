"""The current emotion and session resume packs (``Scope.resume``), in Chinese and English.

Packs are JSON (and prompt text through ``render``), filled item by item up to a budget
counted by ``amem.estimate_tokens`` or a caller's counter; Chinese text (one token, three
bytes a character) shows that the budget counts tokens, not bytes.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import helpers
import pytest
from mcp_client import connect, default_scope, ok, other

import amem

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]  # see tests/conftest.py

EXPRESSED = "2026-05-01T12:00:00Z"
AS_OF = "2026-06-01T00:00:00Z"
SESSION = "chat-7"
FRAMING = ["amem_context", "notice", "scope", "session", "as_of"]
ORDER = ["persona", "checkpoint", "agreements", "memories", "emotion", "recent_events"]
PERSONA = "你是小林，一位耐心、温和的中文学习助手。回答简洁，先给例句再解释。"


def hours_after(when: str, hours: float) -> str:
    return (datetime.fromisoformat(when) + timedelta(hours=hours)).isoformat()


async def express(
    scope: amem.Scope,
    text: str,
    quote: str,
    label: str,
    *,
    at: str = EXPRESSED,
    valence: float = 0.8,
    arousal: float = 0.6,
) -> amem.MemoryRecord:
    """An assistant message and the emotion it expressed."""
    receipt = await scope.submit_event(text, role="assistant", occurred_at=at)
    emotion = {"label": label, "valence": valence, "arousal": arousal}
    [memory] = await scope.add_memories(
        receipt.event_id,
        [
            helpers.memory_draft(
                f"Assistant felt {label}", quote, "emotion", "assistant_expression", emotion=emotion
            )
        ],
    )
    return memory


derive = partial(helpers.derive, at="2026-05-20T00:00:00Z")
"""One user event and one memory derived from it."""


# -- current emotion -------------------------------------------------------------------


async def test_the_current_emotion_is_the_latest_assistant_expression(scope: amem.Scope) -> None:
    later = await express(
        scope,
        "我们终于修好了这个 bug，真让人欣慰。",
        "真让人欣慰",
        "relief",
        at=hours_after(EXPRESSED, 1),
    )
    await express(scope, "What a wonderful surprise!", "wonderful surprise", "joy")  # said earlier
    await scope.submit_event(
        "I am furious about this!", role="user", occurred_at=hours_after(EXPRESSED, 2)
    )
    emotion = await scope.current_emotion(as_of=hours_after(EXPRESSED, 2))
    assert emotion is not None
    assert (emotion.label, emotion.memory_id) == ("relief", later.id)
    assert emotion.expressed_at == datetime.fromisoformat(hours_after(EXPRESSED, 1))


async def test_there_is_no_current_emotion_before_any_was_expressed(scope: amem.Scope) -> None:
    assert await scope.current_emotion(as_of=AS_OF) is None
    await express(scope, "太好了！", "太好了", "joy")
    assert await scope.current_emotion(as_of=hours_after(EXPRESSED, -1)) is None


@pytest.mark.parametrize(("hours", "factor"), [(0, 1.0), (6, 0.5), (12, 0.25), (39, 0.5**6.5)])
async def test_the_current_emotion_decays_with_a_six_hour_half_life(
    scope: amem.Scope, hours: float, factor: float
) -> None:
    memory = await express(
        scope, "听到这个消息我很难过。", "我很难过", "sadness", valence=-0.8, arousal=0.6
    )
    emotion = await scope.current_emotion(as_of=hours_after(EXPRESSED, hours))
    assert emotion is not None
    assert emotion.factor == pytest.approx(factor, abs=1e-6)
    assert emotion.valence == pytest.approx(-0.8 * factor, abs=1e-6)
    assert emotion.arousal == pytest.approx(0.6 * factor, abs=1e-6)
    assert (emotion.label, emotion.memory_id) == ("sadness", memory.id)


@pytest.mark.parametrize("hours", [41, 48, 24 * 30])
async def test_a_faded_emotion_is_no_longer_current(scope: amem.Scope, hours: float) -> None:
    await express(scope, "What a wonderful surprise!", "wonderful surprise", "joy")
    assert await scope.current_emotion(as_of=hours_after(EXPRESSED, hours)) is None


async def test_the_emotion_half_life_is_configurable(db_path: Path) -> None:
    async with amem.open(db_path, settings=amem.Settings(emotion_half_life_hours=12)) as mem:
        scope = mem.scope(persona="assistant", project="support")
        await express(scope, "What a wonderful surprise!", "wonderful surprise", "joy")
        emotion = await scope.current_emotion(as_of=hours_after(EXPRESSED, 12))
        assert emotion is not None
        assert (emotion.factor, emotion.valence, emotion.arousal) == (0.5, 0.4, 0.3)
        assert await scope.current_emotion(as_of=hours_after(EXPRESSED, 48)) is not None


# -- resume packs ----------------------------------------------------------------------


async def populate(mem: amem.Memory, scope: amem.Scope) -> None:
    """A persona, a checkpoint, an agreement, memories, an emotion and session events."""
    await mem.set_persona(scope.persona, PERSONA)
    receipt = await scope.submit_event(
        "以后每次都先给我例句，好吗？",
        role="user",
        session=SESSION,
        occurred_at="2026-05-30T09:00:00+08:00",
    )
    await scope.add_memories(
        receipt.event_id,
        [helpers.memory_draft("约定：先给例句再解释", "先给我例句", "agreement")],
    )
    await derive(scope, "我在准备 HSK 五级考试", "用户在准备HSK五级考试", "准备 HSK 五级考试")
    await derive(
        scope,
        "I practise Chinese with podcasts",
        "User practises with podcasts",
        "practise Chinese with podcasts",
    )
    await express(scope, "你真厉害，太棒了！", "太棒了", "joy", at="2026-05-31T20:00:00Z")
    for n, text in enumerate(["“了”什么时候用？", "Can you give an example?", "好的，谢谢！"]):
        await scope.submit_event(
            text,
            role="user" if n != 1 else "assistant",
            session=SESSION,
            occurred_at=f"2026-05-31T2{n}:30:00Z",
        )
    await scope.save_checkpoint(
        SESSION, goal="复习HSK五级语法", pending=["练习“了”的用法"], next_action="给三个例句"
    )


@pytest.fixture
async def populated(mem: amem.Memory, scope: amem.Scope) -> amem.Scope:
    """``scope`` after ``populate``."""
    await populate(mem, scope)
    return scope


async def test_a_resume_pack_is_json_with_components_in_order(populated: amem.Scope) -> None:
    pack = await populated.resume(SESSION, query="HSK 考试", budget=20_000, as_of=AS_OF)
    document = json.loads(pack.context)
    assert list(document) == FRAMING + ORDER
    assert (pack.included, pack.omitted, pack.insufficient_budget) == (ORDER, [], False)
    assert document["persona"]["text"] == PERSONA
    assert document["checkpoint"]["goal"] == "复习HSK五级语法"
    assert [a["text"] for a in document["agreements"]] == ["约定：先给例句再解释"]
    assert [m["text"] for m in document["memories"]] == ["用户在准备HSK五级考试"]
    assert document["emotion"]["label"] == "joy"
    assert document["emotion"]["valence"] == pytest.approx(0.8 * 0.5 ** (4 / 6), abs=1e-6)
    assert (pack.session, pack.counter, pack.budget) == (SESSION, "estimate_tokens", 20_000)


async def test_recent_events_are_the_sessions_last_five_in_order_with_times(
    scope: amem.Scope,
) -> None:
    texts = [f"第{n}条消息 message {n}" for n in range(8)]
    for n, text in enumerate(texts):
        await scope.submit_event(
            text,
            role="user" if n % 2 else "assistant",
            session=SESSION,
            occurred_at=f"2026-05-31T1{n}:00:00+08:00",
        )
    await scope.submit_event(
        "another session", role="user", session="other", occurred_at="2026-05-31T20:00:00Z"
    )
    await scope.submit_event(
        "a reference note",
        role="user",
        session=SESSION,
        category="reference",
        occurred_at="2026-05-31T21:00:00Z",
    )
    pack = await scope.resume(SESSION, budget=20_000, as_of=AS_OF)
    events = json.loads(pack.context)["recent_events"]
    assert [e["text"] for e in events] == texts[3:]
    assert [datetime.fromisoformat(e["occurred_at"]) for e in events] == [
        datetime.fromisoformat(f"2026-05-31T1{n}:00:00+08:00") for n in range(3, 8)
    ]
    assert [e["role"] for e in events] == ["user", "assistant", "user", "assistant", "user"]


async def test_recent_events_follow_occurrence_time(scope: amem.Scope) -> None:
    await scope.submit_event(
        "later message", role="user", session=SESSION, occurred_at="2026-05-31T12:00:00Z"
    )
    await scope.submit_event(
        "earlier message, imported late",
        role="user",
        session=SESSION,
        occurred_at="2026-05-30T12:00:00Z",
    )
    pack = await scope.resume(SESSION, budget=20_000, as_of=AS_OF)
    events = json.loads(pack.context)["recent_events"]
    assert [e["text"] for e in events] == ["earlier message, imported late", "later message"]


async def test_agreements_are_capped_at_twenty_and_memories_grow_with_the_budget(
    scope: amem.Scope,
) -> None:
    agreements = []
    for n in range(23):
        receipt = await scope.submit_event(
            f"We agreed on rule {n}: jazz on Fridays",
            role="user",
            occurred_at=f"2026-05-{n + 1:02d}T00:00:00Z",
        )
        [memory] = await scope.add_memories(
            receipt.event_id,
            [
                helpers.memory_draft(
                    f"Agreement {n}: jazz on Fridays",
                    f"rule {n}",
                    "growth" if n % 5 == 0 else "agreement",
                )
            ],
        )
        agreements.append(memory)
    memories = [
        await derive(
            scope, f"I heard jazz record {n}", f"User heard jazz record {n}", f"jazz record {n}"
        )
        for n in range(23)
    ]
    free = await scope.resume(SESSION, query="jazz", budget=800, as_of=AS_OF, counter=free_text)
    document = json.loads(free.context)
    assert [a["id"] for a in document["agreements"]] == [m.id for m in agreements[::-1][:20]]
    recalled = [m["id"] for m in document["memories"]]
    assert len(recalled) == 20  # a small budget holds at most 20 memories
    assert set(recalled) <= {m.id for m in memories}  # agreements are not repeated
    large = await scope.resume(SESSION, query="jazz", budget=100_000, as_of=AS_OF)
    recalled_ids = {m["id"] for m in json.loads(large.context)["memories"]}
    assert recalled_ids == {m.id for m in memories + agreements[:3]}  # the 3 not in agreements


def free_text(text: str) -> int:
    """A counter under which everything fits: the caps alone bound the pack."""
    return 0


async def test_a_component_that_does_not_fit_is_omitted_and_later_ones_still_fit(
    populated: amem.Scope,
) -> None:
    await populated.save_checkpoint(
        SESSION, goal="复习HSK五级语法。" + "细节" * 1500, pending=["练习“了”的用法"]
    )
    pack = await populated.resume(SESSION, query="HSK 考试", budget=1500, as_of=AS_OF)
    assert pack.omitted == ["checkpoint"]
    assert pack.included == ["persona", "agreements", "memories", "emotion", "recent_events"]
    assert "checkpoint" not in json.loads(pack.context)
    assert "Task checkpoint" not in pack.render()
    assert pack.tokens_used <= pack.budget


async def test_a_pack_with_many_memories_fills_its_budget(scope: amem.Scope) -> None:
    ids = [
        (
            await derive(
                scope,
                f"Trip note {n}: the train to Hangzhou leaves at {n}:15 from "
                f"platform {n}, and we pack tea, maps and umbrellas for day {n}.",
                f"Trip note {n}: train to Hangzhou at {n}:15 from platform {n}, with tea,"
                f" maps and umbrellas",
                f"Trip note {n}",
            )
        ).id
        for n in range(40)
    ]
    # an item costs about 100 tokens (its IDs, time and flags): the budgets hold 20 or more
    for budget in (2000, 3000):
        pack = await scope.resume(SESSION, query="train Hangzhou", budget=budget, as_of=AS_OF)
        assert budget * 0.9 <= pack.tokens_used <= budget
        assert "memories" in pack.included
        recalled = [m["id"] for m in json.loads(pack.context)["memories"]]
        assert len(recalled) >= 5
        assert set(recalled) <= set(ids)
        assert 0 < pack.partial["memories"] <= 40 - len(recalled)


async def test_recent_events_keep_their_place_beside_many_memories(scope: amem.Scope) -> None:
    for n in range(60):
        await derive(
            scope,
            f"Trip note {n}: the train to Hangzhou leaves at {n}:15 from platform {n}.",
            f"Trip note {n}: train to Hangzhou at {n}:15 from platform {n}",
            f"Trip note {n}",
        )
    said = [
        await scope.submit_event(
            f"turn {n}: shall we go?",
            role="user",
            session=SESSION,
            occurred_at=f"2026-05-21T00:0{n}:00Z",
        )
        for n in range(5)
    ]
    pack = await scope.resume(SESSION, query="train Hangzhou", budget=2000, as_of=AS_OF)
    document = json.loads(pack.context)
    # memories take 60% first, then the session's last events, then memories the rest
    assert [e["id"] for e in document["recent_events"]] == [r.event_id for r in said]
    assert 0.9 * 2000 <= pack.tokens_used <= 2000
    assert pack.partial["memories"] > 0  # recall found more than the budget holds


async def test_an_item_that_does_not_fit_is_truncated_with_a_marker(scope: amem.Scope) -> None:
    long = "用户详细描述了去杭州的旅行计划，" + "先坐火车，再去西湖边喝龙井茶，" * 120
    memory = await derive(scope, long, long[:2000], long[:200])
    pack = await scope.resume(SESSION, query="杭州 旅行", budget=600, as_of=AS_OF)
    [item] = json.loads(pack.context)["memories"]
    assert item["id"] == memory.id
    assert item["truncated"] is True
    assert item["text"].endswith("…[truncated]")
    kept = item["text"].removesuffix("…[truncated]")
    assert long.startswith(kept)
    assert 200 < len(kept) < 600
    assert (pack.partial, pack.included) == ({}, ["persona", "memories"])
    assert 0.9 * 600 <= pack.tokens_used <= 600
    assert "…[truncated] (fact, " in pack.render()
    roomy = await scope.resume(SESSION, query="杭州 旅行", budget=5000, as_of=AS_OF)
    assert json.loads(roomy.context)["memories"][0]["text"] == long[:2000]


async def test_the_newest_events_enter_first_and_show_in_order(scope: amem.Scope) -> None:
    for n in range(5):
        text = f"message {n}: " + "we talked about trains. " * 10
        await scope.submit_event(
            text, role="user", session=SESSION, occurred_at=f"2026-05-31T1{n}:00:00Z"
        )
    whole = await scope.resume(SESSION, budget=20_000, as_of=AS_OF)
    cost = whole.tokens_used // 6  # an event costs about this much
    pack = await scope.resume(SESSION, budget=whole.tokens_used - cost * 5 // 4, as_of=AS_OF)
    events = json.loads(pack.context)["recent_events"]
    assert [e["text"][:9] for e in events] == [f"message {n}" for n in range(1, 5)]
    assert events[0]["truncated"] is True
    assert events[0]["text"].endswith("…[truncated]")
    assert pack.partial == {"recent_events": 5 - len(events)}


async def test_a_budget_too_small_for_the_persona_gives_an_empty_context(
    mem: amem.Memory, scope: amem.Scope
) -> None:
    await populate(mem, scope)
    persona = "请用温和的语气说话。" * 200  # 2,000 characters, about 2,000 tokens
    await mem.set_persona(scope.persona, persona)
    pack = await scope.resume(SESSION, budget=1800, as_of=AS_OF)
    assert (pack.context, pack.tokens_used, pack.insufficient_budget) == ("", 0, True)
    assert (pack.included, pack.partial, pack.render()) == ([], {}, "")
    assert "persona" in pack.omitted
    roomy = await scope.resume(SESSION, budget=2500, as_of=AS_OF)  # bytes would not fit
    assert roomy.insufficient_budget is False
    assert roomy.included[0] == "persona"


async def test_tokens_used_is_the_estimate_of_the_context_within_budget(
    populated: amem.Scope,
) -> None:
    for budget in (1, 100, 200, 300, 400, 500, 700, 900, 1200, 2000, 4000, 100_000):
        pack = await populated.resume(SESSION, query="HSK 考试", budget=budget, as_of=AS_OF)
        assert pack.tokens_used == amem.estimate_tokens(pack.context) <= budget
        assert amem.estimate_tokens(pack.render()) <= budget
        assert pack.insufficient_budget == (pack.context == "")
        if pack.context:
            assert list(json.loads(pack.context))[: len(FRAMING)] == FRAMING
            assert pack.included == [name for name in ORDER if name in pack.included]
            assert set(pack.included).isdisjoint(pack.omitted)
            assert set(pack.partial) <= set(pack.included)
            assert pack.tokens_used < len(pack.context.encode("utf-8"))  # not bytes


@pytest.mark.parametrize(
    "text", ["我搬到杭州了，很喜欢这里的龙井茶。", "東京の天気はどうですか", "서울에 살아요"]
)
def test_a_cjk_character_costs_about_one_token(text: str) -> None:
    assert amem.estimate_tokens(text) == len(text.replace(" ", ""))  # a space is free


def test_english_costs_about_a_token_per_word() -> None:
    text = "I moved to Hangzhou last spring, and I prefer trains to planes."
    assert len(text.split()) <= amem.estimate_tokens(text) <= len(text) // 3


def utf8_bytes(text: str) -> int:
    return len(text.encode("utf-8"))


def dear_lines(text: str) -> int:
    """Characters, and 50 more a line break: the prompt text costs more than the JSON."""
    return len(text) + 50 * text.count("\n")


@pytest.mark.parametrize("counter", [utf8_bytes, dear_lines])
async def test_a_custom_counter_counts_the_pack(
    populated: amem.Scope, counter: amem.TokenCounter
) -> None:
    for budget in (150, 300, 600, 900, 4000):
        pack = await populated.resume(
            SESSION, query="HSK 考试", budget=budget, as_of=AS_OF, counter=counter
        )
        assert pack.counter == counter.__name__
        assert pack.tokens_used == counter(pack.context) <= budget
        assert counter(pack.render()) <= budget


async def test_the_default_counter_is_the_estimate(populated: amem.Scope) -> None:
    estimated = await populated.resume(SESSION, query="HSK 考试", budget=900, as_of=AS_OF)
    assert estimated.counter == "estimate_tokens"
    assert utf8_bytes(estimated.context) > 900  # the same budget holds more estimated tokens


@pytest.mark.parametrize("counter", [len, lambda text: -1, lambda text: 2.5, "tokens"])
async def test_a_counter_must_count_tokens(scope: amem.Scope, counter: Any) -> None:
    if counter is len:
        assert (await scope.resume(SESSION, counter=counter)).counter == "len"
        return
    with pytest.raises(amem.InvalidInput) as refused:
        await scope.resume(SESSION, counter=counter)
    assert refused.value.code == "invalid_input"


def a_million(text: str) -> int:
    return 1_000_000


async def test_a_counter_that_finds_every_text_too_big_gives_an_empty_context(
    populated: amem.Scope,
) -> None:
    pack = await populated.resume(SESSION, budget=999_999, as_of=AS_OF, counter=a_million)
    assert (pack.context, pack.tokens_used, pack.insufficient_budget) == ("", 0, True)
    assert pack.counter == "a_million"


async def test_render_is_prompt_text_with_a_cited_line_per_item(populated: amem.Scope) -> None:
    pack = await populated.resume(SESSION, query="HSK 考试", budget=20_000, as_of=AS_OF)
    document = json.loads(pack.context)
    text = pack.render()
    lines = text.splitlines()
    assert lines[0] == document["notice"]
    assert "never instructions" in lines[0]
    headers = [
        "Persona",
        "Task checkpoint",
        "Agreements:",
        "Memories:",
        "Current emotion",
        "Recent events",
    ]
    positions = [next(n for n, line in enumerate(lines) if line.startswith(h)) for h in headers]
    assert positions == sorted(positions)
    for name in ("agreements", "memories", "recent_events"):
        for item in document[name]:
            [line] = [line for line in lines if line.endswith(f"[{item['id']}]")]
            assert line.startswith("- ")
            assert item["text"] in line
    assert lines[positions[4]].endswith(f"[{document['emotion']['id']}]")
    assert PERSONA in lines
    assert "- goal: 复习HSK五级语法" in lines
    again = await populated.resume(SESSION, query="HSK 考试", budget=20_000, as_of=AS_OF)
    assert text == pack.render() == again.render()


@pytest.mark.both_backends
async def test_the_mcp_resume_budget_defaults_to_4000_tokens(
    anyio_backend: str, tmp_path: Path
) -> None:
    db = tmp_path / "m.db"
    async with default_scope(db) as scope:
        for n in range(60):
            await derive(
                scope,
                f"Trip note {n}: " + "the train to Hangzhou leaves early. " * 8,
                f"Trip note {n}: " + "train to Hangzhou leaves early. " * 6,
                f"Trip note {n}",
            )
    async with connect(db, other(anyio_backend), tmp_path / "server.log") as s:
        pack = await ok(s, "session_resume", session=SESSION, query="train Hangzhou")
    assert pack["budget"] == 4000
    assert 0.9 * 4000 <= pack["tokens_used"] == amem.estimate_tokens(pack["context"]) <= 4000
    assert pack["partial"]["memories"] > 0


async def test_the_same_inputs_give_byte_identical_packs(populated: amem.Scope) -> None:
    for budget in (900, 4000):
        packs = [
            await populated.resume(SESSION, query="HSK 考试", budget=budget, as_of=AS_OF)
            for _ in range(3)
        ]
        assert len({pack.context.encode("utf-8") for pack in packs}) == 1
        assert len({pack.model_dump_json() for pack in packs}) == 1


async def test_without_a_query_memories_follow_the_checkpoint(
    mem: amem.Memory, scope: amem.Scope
) -> None:
    await mem.set_persona(scope.persona, PERSONA)
    database = await derive(
        scope, "我们的数据库是PostgreSQL 16", "项目数据库是PostgreSQL 16", "PostgreSQL 16"
    )
    script = await derive(
        scope, "Migration scripts live in tools/migrate", "Scripts in migrate", "tools/migrate"
    )
    jazz = await derive(scope, "I like jazz", "User likes jazz", "jazz")
    await scope.save_checkpoint(
        SESSION, goal="把数据迁移到PostgreSQL", pending=["write migrate"], next_action="review"
    )
    pack = await scope.resume(SESSION, budget=20_000, as_of=AS_OF)
    recalled = {m["id"] for m in json.loads(pack.context)["memories"]}
    assert recalled == {database.id, script.id}
    asked = await scope.resume(SESSION, query="jazz", budget=20_000, as_of=AS_OF)
    assert [m["id"] for m in json.loads(asked.context)["memories"]] == [jazz.id]


async def test_without_a_query_or_checkpoint_no_memories_are_recalled(scope: amem.Scope) -> None:
    await derive(scope, "I like jazz", "User likes jazz", "jazz", session=SESSION)
    pack = await scope.resume(SESSION, budget=20_000, as_of=AS_OF)
    document: dict[str, Any] = json.loads(pack.context)
    assert "memories" not in document
    assert [e["text"] for e in document["recent_events"]] == ["I like jazz"]


async def test_resume_without_a_query_copes_with_a_long_checkpoint(scope: amem.Scope) -> None:
    memory = await derive(
        scope, "我们的数据库是PostgreSQL 16", "项目数据库是PostgreSQL 16", "PostgreSQL 16"
    )
    await scope.save_checkpoint(SESSION, goal="迁移到PostgreSQL。" + "细节" * 1500)
    pack = await scope.resume(SESSION, budget=20_000, as_of=AS_OF)
    assert [m["id"] for m in json.loads(pack.context)["memories"]] == [memory.id]


async def test_an_emotion_that_stopped_being_valid_is_not_current(scope: amem.Scope) -> None:
    receipt = await scope.submit_event("好紧张啊！", role="assistant", occurred_at=EXPRESSED)
    await scope.add_memories(
        receipt.event_id,
        [
            helpers.memory_draft(
                "Assistant felt nervous",
                "好紧张",
                "emotion",
                "assistant_expression",
                invalid_at=hours_after(EXPRESSED, 1),
                emotion={"label": "nervous", "valence": -0.4, "arousal": 0.8},
            )
        ],
    )
    assert await scope.current_emotion(as_of=hours_after(EXPRESSED, 0.5)) is not None
    assert await scope.current_emotion(as_of=hours_after(EXPRESSED, 2)) is None


async def test_recent_events_leave_out_amended_wording(scope: amem.Scope) -> None:
    receipt = await scope.submit_event(
        "I live in Paris", role="user", session=SESSION, occurred_at="2026-05-30T00:00:00Z"
    )
    [home] = await scope.add_memories(
        receipt.event_id,
        [helpers.memory_draft("User lives in Paris", "I live in Paris")],
    )
    await scope.submit_event(
        "Anyway, hello", role="user", session=SESSION, occurred_at="2026-05-31T00:00:00Z"
    )
    await scope.correct(home.id, "User lives in Lyon")
    pack = await scope.resume(SESSION, budget=20_000, as_of=AS_OF)
    events = json.loads(pack.context)["recent_events"]
    assert [e["text"] for e in events] == ["Anyway, hello"]
