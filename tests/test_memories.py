"""Derived memories: the one validation path, provenance, and recall eligibility."""

from __future__ import annotations

import pytest
from helpers import memory_draft

import amem

# what the markers mean: tests/conftest.py
pytestmark = [pytest.mark.both_databases, pytest.mark.anyio, pytest.mark.one_backend]

T = "2026-03-01T10:00:00+08:00"


def fact(text: str, quote: str, **extra: object) -> amem.MemoryDraft:
    return amem.MemoryDraft.model_validate(
        {"text": text, "quote": quote, "kind": "fact", "basis": "user_statement", **extra}
    )


async def test_memory_keeps_the_exact_quote_span(scope: amem.Scope) -> None:
    text = "你好！我最近搬到杭州了，离西湖很近。"
    await scope.submit_event(text, role="user", event_id="e-1", occurred_at=T)
    [memory] = await scope.add_memories("e-1", [fact("User lives in Hangzhou", "搬到杭州")])
    assert text[memory.quote_start : memory.quote_end] == "搬到杭州"
    assert (memory.event_id, memory.persona, memory.project) == ("e-1", "assistant", "support")
    assert memory.valid_at.isoformat() == "2026-03-01T02:00:00+00:00"  # the event's time
    assert memory.invalid_at is None


@pytest.mark.parametrize(
    ("source", "quote", "span"),
    [
        ("I said it’s my cat’s bowl", "it's my cat's bowl", "it’s my cat’s bowl"),
        ("He called it “the best” ever", '"the best"', "“the best”"),
        ("Flights 9–11 am — daily", "9-11 am - daily", "9–11 am — daily"),
        ("用户的电话是１３８００１３８０００。", "13800138000", "１３８００１３８０００"),
        ("我住在杭州，离西湖很近", "杭州,离西湖", "杭州，离西湖"),
        ("I moved  to\n  Hangzhou last year", " moved to Hangzhou ", "moved  to\n  Hangzhou"),
    ],
)
async def test_a_quote_copied_with_plain_punctuation_or_spacing_stores_the_sources_span(
    scope: amem.Scope, source: str, quote: str, span: str
) -> None:
    await scope.submit_event(source, role="user", event_id="e-1")
    [memory] = await scope.add_memories("e-1", [fact("User said something", quote)])
    assert memory.quote == span
    assert source[memory.quote_start : memory.quote_end] == span
    assert (await scope.read("e-1")).memories[0].quote == span


async def test_folding_forgives_form_never_words(scope: amem.Scope) -> None:
    await scope.submit_event("It’s my cat’s bowl", role="user", event_id="e-1")
    for quote in ("it's my cat's bowl", "Its my cats bowl", "It's my dog's bowl"):
        with pytest.raises(amem.InvalidInput) as caught:  # case and letters stay exact
            await scope.add_memories("e-1", [fact("User has a bowl", quote)])
        assert caught.value.code == "quote_mismatch"


async def test_a_quote_not_in_the_source_refuses_the_whole_batch(scope: amem.Scope) -> None:
    await scope.submit_event("I moved to Hangzhou", role="user", event_id="e-1")
    drafts = [fact("User moved", "moved to Hangzhou"), fact("User lives in Suzhou", "Suzhou")]
    with pytest.raises(amem.InvalidInput) as caught:
        await scope.add_memories("e-1", drafts)
    assert caught.value.code == "quote_mismatch"
    assert "memories[1].quote" in caught.value.message
    assert "Suzhou" not in str(caught.value)
    page = await scope.read("e-1")
    assert page.memories == []
    assert page.event.status == "stored"


@pytest.mark.parametrize(
    ("role", "draft", "message"),
    [
        ("assistant", {"kind": "fact", "basis": "user_statement"}, "user event"),
        ("user", {"kind": "observation", "basis": "assistant_expression"}, "assistant event"),
        ("user", {"kind": "growth", "basis": "inference"}, "growth"),
        (
            "user",
            {"kind": "fact", "basis": "inference", "subject": "user", "fact_key": "job"},
            "fact_key",
        ),
        (
            "user",
            {"kind": "episode", "basis": "user_statement", "subject": "user", "fact_key": "x"},
            "fact_key",
        ),
        (
            "assistant",
            {"kind": "fact", "basis": "assistant_expression", "subject": "u", "fact_key": "x"},
            "fact_key",
        ),
        (
            "user",
            {
                "kind": "emotion",
                "basis": "user_statement",
                "emotion": {"label": "joy", "valence": 0.8, "arousal": 0.5},
            },
            "emotion",
        ),
        (
            "user",
            {
                "kind": "episode",
                "basis": "inference",
                "emotion": {"label": "joy", "valence": 0.8, "arousal": 0.5},
            },
            "emotion",
        ),
    ],
)
async def test_basis_must_fit_the_event_role(
    scope: amem.Scope, role: str, draft: dict[str, object], message: str
) -> None:
    await scope.submit_event("I am so happy today", role=role, event_id="e-1")
    with pytest.raises(amem.InvalidInput) as caught:
        await scope.add_memories("e-1", [{"text": "t", "quote": "happy", **draft}])
    assert caught.value.code == "role_violation"
    assert message in caught.value.message
    assert (await scope.read("e-1")).memories == []


@pytest.mark.parametrize("category", ["reference", "persona"])
async def test_archived_events_are_never_a_source(scope: amem.Scope, category: str) -> None:
    await scope.submit_event("I live in Paris", role="user", event_id="e-1", category=category)
    with pytest.raises(amem.InvalidInput) as caught:
        await scope.add_memories("e-1", [fact("User lives in Paris", "Paris")])
    assert caught.value.code == "role_violation"


async def test_assistant_expressed_emotion_is_kept(scope: amem.Scope) -> None:
    await scope.submit_event("太好了，我真为你高兴！", role="assistant", event_id="e-1")
    emotion = {"label": "joy", "valence": 0.9, "arousal": 0.6}
    draft = {"text": "Assistant felt joy", "quote": "我真为你高兴", "kind": "emotion"}
    [memory] = await scope.add_memories(
        "e-1", [{**draft, "basis": "assistant_expression", "emotion": emotion}]
    )
    assert memory.emotion == amem.Emotion(label="joy", valence=0.9, arousal=0.6)
    with pytest.raises(amem.InvalidInput, match="emotion"):
        await scope.add_memories("e-1", [{**draft, "basis": "assistant_expression"}])


async def test_confidence_is_kept_as_ranking_metadata(scope: amem.Scope) -> None:
    await scope.submit_event("I might like jazz", role="user", event_id="e-1")
    [memory] = await scope.add_memories(
        "e-1",
        [memory_draft("User may like jazz", "like jazz", "preference", confidence=0.4)],
    )
    [item] = (await scope.recall("jazz")).items
    assert memory.confidence == item.confidence == item.components.confidence == 0.4


@pytest.mark.parametrize(
    "draft",
    [
        {"text": "t", "quote": "jazz", "kind": "fact", "basis": "user_statement", "x": 1},
        {"text": "t", "quote": "jazz", "kind": "fact", "basis": "user_statement", "confidence": 2},
        {"text": "t", "quote": "jazz", "kind": "opinion-SECRET", "basis": "user_statement"},
        {"text": "", "quote": "jazz", "kind": "fact", "basis": "user_statement"},
        {"text": "t", "quote": "jazz", "kind": "fact", "basis": "user_statement", "fact_key": "k"},
    ],
)
async def test_malformed_drafts_are_invalid_input(
    scope: amem.Scope, draft: dict[str, object]
) -> None:
    await scope.submit_event("I like jazz", role="user", event_id="e-1")
    with pytest.raises(amem.InvalidInput) as caught:
        await scope.add_memories("e-1", [draft])
    assert caught.value.code == "invalid_input"
    assert "SECRET" not in str(caught.value)


@pytest.mark.parametrize(
    "times",
    [
        {"valid_at": "2026-03-01T10:00:00"},
        {"valid_at": "2026-03-01T10:00:00Z", "invalid_at": "2026-03-01T09:00:00Z"},
    ],
)
async def test_bad_validity_is_invalid_time(scope: amem.Scope, times: dict[str, str]) -> None:
    await scope.submit_event("I like jazz", role="user", event_id="e-1")
    with pytest.raises(amem.InvalidInput) as caught:
        await scope.add_memories("e-1", [fact("User likes jazz", "jazz", **times)])
    assert caught.value.code == "invalid_time"


async def test_deriving_the_same_memory_twice_returns_the_existing_one(scope: amem.Scope) -> None:
    await scope.submit_event("I like jazz", role="user", event_id="e-1")
    [first] = await scope.add_memories("e-1", [fact("User likes jazz", "jazz")])
    [again] = await scope.add_memories("e-1", [fact("User likes jazz", "jazz")])
    assert first == again
    receipt = await scope.submit_event("I like jazz", role="user", event_id="e-1")
    assert receipt.memory_ids == [first.id]
    assert receipt.status == "extracted"


async def test_add_memories_to_a_foreign_or_missing_event_is_not_found(mem: amem.Memory) -> None:
    await mem.scope("a", "x").submit_event("I like jazz", role="user", event_id="e-1")
    for scope, event_id in ((mem.scope("a", "y"), "e-1"), (mem.scope("a", "x"), "nope")):
        with pytest.raises(amem.NotFound):
            await scope.add_memories(event_id, [fact("User likes jazz", "jazz")])


async def test_read_of_a_memory_pages_its_source_with_provenance(scope: amem.Scope) -> None:
    await scope.submit_event("I like jazz and I live in Oslo", role="user", event_id="e-1")
    jazz, oslo = await scope.add_memories(
        "e-1", [fact("User likes jazz", "like jazz"), fact("User lives in Oslo", "Oslo")]
    )
    page = await scope.read(oslo.id, limit=6)
    assert (page.id, page.memory, page.text) == (oslo.id, oslo, "I like")
    assert page.event.id == "e-1"
    assert page.memories == [jazz, oslo]


async def test_foreign_memory_ids_read_as_absent(mem: amem.Memory) -> None:
    home = mem.scope("a", "x")
    await home.submit_event("I like jazz", role="user", event_id="e-1")
    [memory] = await home.add_memories("e-1", [fact("User likes jazz", "jazz")])
    other = mem.scope("a", "y")
    with pytest.raises(amem.NotFound):
        await other.read(memory.id)
    with pytest.raises(amem.NotFound):
        await other.correct(memory.id, "User likes blues")
    with pytest.raises(amem.NotFound):
        await other.delete(memory_id=memory.id)
    assert (await other.recall("jazz")).items == []
    assert [item.id for item in (await home.recall("jazz")).items] == [memory.id]


async def test_recall_needs_evidence(scope: amem.Scope) -> None:
    await scope.submit_event("I like jazz", role="user", event_id="e-1")
    await scope.add_memories("e-1", [fact("User likes jazz", "jazz")])
    assert (await scope.recall("volcano")).items == []


async def test_a_single_chinese_character_finds_a_compound(scope: amem.Scope) -> None:
    await scope.submit_event("我最近在读一本书，叫《三体》", role="user", event_id="e-1")
    [memory] = await scope.add_memories(
        "e-1",
        [memory_draft("用户在读一本书《三体》", "在读一本书", "episode")],
    )
    assert [item.id for item in (await scope.recall("书")).items] == [memory.id]


@pytest.mark.parametrize("query", ['"', "jazz-", "*", "NEAR(jazz", "jazz OR", "text:jazz", "🎷"])
async def test_query_syntax_is_just_text(scope: amem.Scope, query: str) -> None:
    await scope.submit_event("I like jazz", role="user", event_id="e-1")
    await scope.add_memories("e-1", [fact("User likes jazz", "jazz")])
    result = await scope.recall(query)
    assert all(item.text == "User likes jazz" for item in result.items)


async def test_recall_filters_kinds_and_reports_score_parts(scope: amem.Scope) -> None:
    await scope.submit_event(
        "I like jazz; yesterday I went to a jazz club", role="user", event_id="e-1"
    )
    like, club = await scope.add_memories(
        "e-1",
        [
            memory_draft("User likes jazz", "like jazz", "preference"),
            memory_draft("User went to a jazz club", "went to a jazz club", "episode"),
        ],
    )
    result = await scope.recall("jazz", kinds=["episode"])
    assert [item.id for item in result.items] == [club.id]
    [item] = result.items
    parts = item.components
    assert 0 < parts.lexical <= 1
    assert (parts.semantic, parts.link, parts.basis) == (0.0, 0.0, 1.0)
    assert 0 < parts.freshness <= 1
    assert item.score > 0
    assert not item.raw_fallback
    both = await scope.recall("jazz")
    assert {i.id for i in both.items} == {like.id, club.id}


@pytest.mark.parametrize(
    "kwargs",
    [{"limit": -1}, {"limit": 10**9}, {"mode": "psychic"}, {"kinds": ["dream"]}, {"as_of": "x"}],
)
async def test_recall_rejects_bad_arguments(scope: amem.Scope, kwargs: dict[str, object]) -> None:
    with pytest.raises(amem.InvalidInput):
        await scope.recall("jazz", **kwargs)  # type: ignore[arg-type]
