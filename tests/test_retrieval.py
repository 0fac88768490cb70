"""Recall: the lexical index, literal queries, ranking, source-event keys, related links,
raw fallback and fading presentation, in Chinese and English.

Every memory here is derived from its own user or assistant event with explicit times, and
every recall names its ``as_of``, so ages (freshness, fading) do not depend on the clock.
"""

from __future__ import annotations

import itertools
import sqlite3
import uuid
from contextlib import closing
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import NamedTuple

import anyio
import helpers
import pytest
from helpers import memory_draft, undo_v9
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amem
from amem.recall.lexical import KnownTerms, Term, TermCounts, term_stats
from amem.recall.tuning import PER_TERM, PRIOR_WEIGHTS, SCORED_CHARS, WEIGHTS
from amem.search.text import STOP_WORDS

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend, pytest.mark.both_databases]  # conftest.py

AS_OF = "2026-06-01T00:00:00Z"
RECENT = "2026-05-01T00:00:00Z"  # 31 days before AS_OF
OLD = "2025-11-01T00:00:00Z"  # 212 days: faded, time still exact
ANCIENT = "2015-03-01T00:00:00Z"  # over two years: faded, time coarsened to the decade

FUZZ = settings(
    max_examples=100,
    deadline=None,
    # one database per test function on purpose; each example works in a fresh scope
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

IN_BOTH_LANGUAGES = pytest.mark.parametrize(
    ("event", "text", "quote"),
    [("I like jazz", "User likes jazz", "jazz"), ("我喜欢爵士乐", "用户喜欢爵士乐", "爵士乐")],
)
"""The same preference said in English and in Chinese: ranking must not depend on which."""

derive = partial(helpers.derive, at=RECENT)
"""One event and one memory derived from it, said ``RECENT``ly unless ``at`` says when."""


async def found(scope: amem.Scope, query: str) -> list[str]:
    """IDs recalled for ``query`` at ``AS_OF``, best first."""
    result = await scope.recall(query, as_of=AS_OF, limit=50)
    return [item.id for item in result.items]


async def item_for(scope: amem.Scope, query: str, item_id: str) -> amem.RecallItem:
    """The recalled item ``item_id`` (exactly one) for ``query`` at ``AS_OF``."""
    result = await scope.recall(query, as_of=AS_OF, limit=50)
    [item] = [item for item in result.items if item.id == item_id]
    return item


# -- the lexical index -----------------------------------------------------------------


async def test_a_single_character_finds_the_word_containing_it(scope: amem.Scope) -> None:
    memory = await derive(scope, "我昨天读完了本书的第一章", "用户读完了本书的第一章", "读完了本书")
    assert await found(scope, "书") == [memory.id]
    assert await found(scope, "本书") == [memory.id]


async def test_the_characters_of_a_function_word_match_nothing(scope: amem.Scope) -> None:
    """Every memory about the user says 用户; the query's own 用户 is a function word,
    and its characters, each a token of its own, are not searched either: they matched
    every memory and ranked the shortest first."""
    for n, text in enumerate(["用户对花生过敏", "用户住在杭州", "用户喜欢喝茶"]):
        await scope.submit_event(text, role="user", event_id=f"zh-{n}")
    found = await scope.recall("用户对什么过敏", mode="fast")
    assert [item.text for item in found.items] == ["用户对花生过敏"]
    alone = await scope.recall("用户", mode="fast")  # nothing else: the word is searched
    assert len(alone.items) == 3


@pytest.mark.parametrize(
    "query", ["Python3.11", "python", "PYTHON", "版本", "3.11", "Python3.11版本"]
)
async def test_mixed_chinese_and_latin_text_is_found_by_its_parts(
    scope: amem.Scope, query: str
) -> None:
    memory = await derive(
        scope, "我们的项目升级到Python3.11版本了", "项目使用Python3.11版本", "Python3.11版本"
    )
    await derive(scope, "我喜欢喝乌龙茶", "用户喜欢乌龙茶", "乌龙茶")
    assert await found(scope, query) == [memory.id]


async def test_english_words_are_found_case_insensitively(scope: amem.Scope) -> None:
    memory = await derive(
        scope, "We migrated to PostgreSQL 16", "Team uses PostgreSQL 16", "PostgreSQL 16"
    )
    await derive(scope, "I like oolong tea", "User likes oolong tea", "oolong tea")
    assert await found(scope, "postgresql") == [memory.id]
    assert await found(scope, "POSTGRESQL") == [memory.id]


@pytest.mark.parametrize(
    "query",
    [
        '"jazz"',
        "jazz-",
        "-jazz",
        "jazz*",
        "NEAR(jazz",
        "jazz OR",
        "OR jazz",
        "jazz AND",
        "NOT jazz",
        "text:jazz",
        "(jazz)",
        "^jazz",
        "jazz 🎷",
        '"jazz',
        "jazz}",
        "jazz +",
    ],
)
async def test_query_syntax_around_a_word_is_just_text(scope: amem.Scope, query: str) -> None:
    jazz = await derive(scope, "I like jazz", "User likes jazz", "jazz")
    await derive(scope, "I like jazzy shirts", "User likes jazzy shirts", "jazzy shirts")
    assert jazz.id in await found(scope, query)


@pytest.mark.parametrize(
    "query", ['"书"', "书*", "-书", "NEAR(书", "书 OR", "书 AND 书", "(书)", "^书", "书：", "“书”"]
)
async def test_query_syntax_around_a_chinese_word_is_just_text(
    scope: amem.Scope, query: str
) -> None:
    book = await derive(scope, "我在读一本书", "用户在读一本书", "在读一本书")
    assert book.id in await found(scope, query)


@pytest.mark.parametrize("query", ["NEAR", "OR", "AND", "NOT"])
async def test_operator_words_are_searched_as_words(scope: amem.Scope, query: str) -> None:
    words = await derive(
        scope,
        "NEAR, OR, AND and NOT are just words",
        "Words: NEAR OR AND NOT",
        "NEAR, OR, AND and NOT",
    )
    await derive(scope, "I like jazz", "User likes jazz", "jazz")
    assert await found(scope, query) == [words.id]


@pytest.mark.parametrize("query", ['"', '""', "-", "*", ":", "(", ")", "^", "🎷", "+", "'", "—"])
async def test_punctuation_only_queries_find_nothing_without_error(
    scope: amem.Scope, query: str
) -> None:
    await derive(scope, 'I like "jazz" (a lot) :-) ^_^ 🎷', "User likes jazz", "jazz")
    assert await found(scope, query) == []


@pytest.mark.parametrize("query", ["", "   ", "\n\t", "\u3000", "x" * 2001, "书" * 2001])
async def test_empty_or_overlong_queries_are_invalid_input(scope: amem.Scope, query: str) -> None:
    with pytest.raises(amem.InvalidInput):
        await scope.recall(query)


async def test_an_index_error_is_raised_not_reported_as_no_results(
    scope: amem.Scope, db_path: Path
) -> None:
    memory = await derive(
        scope, "I adopted a cat named Mochi", "User has a cat named Mochi", "cat named Mochi"
    )
    assert await found(scope, "Mochi") == [memory.id]
    with sqlite3.connect(db_path) as conn:  # lose the FTS index's segment pages
        conn.execute("delete from search_fts_data where id > 10")
    conn.close()
    with pytest.raises(amem.StorageError):
        await scope.recall("Mochi", as_of=AS_OF)


# Hypothesis: arbitrary query text never raises, and query syntax never hides a word.

FTS_NOISE = [
    '"',
    '""',
    "-",
    "*",
    "NEAR",
    "NEAR(",
    "OR",
    "AND",
    "NOT",
    ":",
    "col:",
    "(",
    ")",
    "^",
    "+",
    "{",
    "}",
    "'",
    "\\",
    "~",
    "🎷",
    "😀",
    "，",
    "。",
    "“",
    "”",
    "【",
    "】",
]
QUERIES = st.one_of(
    st.text(max_size=60),  # any surrogate-free unicode, NUL and whitespace included
    st.lists(
        st.sampled_from(FTS_NOISE) | st.text(alphabet="书本杭州jazPy3.1 ", max_size=6),
        max_size=10,
    ).map("".join),
    st.integers(min_value=2001, max_value=2100).map(lambda n: "书" * n),
)
NOISE = st.lists(st.sampled_from(FTS_NOISE), max_size=4)
WORDS = st.text(
    alphabet=st.characters(categories=["L", "N"]),
    min_size=1,
    max_size=12,
).filter(lambda word: word.lower() not in STOP_WORDS)  # function words give way to others


@FUZZ
@given(query=QUERIES)
async def test_any_query_text_is_safe(mem: amem.Memory, query: str) -> None:
    scope = mem.scope(persona="fuzz", project=uuid.uuid4().hex)
    await derive(
        scope, "我在读一本书 and play jazz on Python3.11", "用户在读书，喜欢 jazz", "读一本书"
    )
    await scope.submit_event('NEAR OR AND NOT: (杭州) ^ * "quoted" 🎷', role="user")
    invalid = not query.strip() or "\x00" in query or len(query) > 2000
    if invalid:
        with pytest.raises(amem.InvalidInput):
            await scope.recall(query, as_of=AS_OF)
    else:
        result = await scope.recall(query, as_of=AS_OF)
        assert all(item.score > 0 for item in result.items)


@FUZZ
@given(word=WORDS, before=NOISE, after=NOISE)
async def test_a_word_is_found_whatever_syntax_surrounds_it(
    mem: amem.Memory, word: str, before: list[str], after: list[str]
) -> None:
    scope = mem.scope(persona="fuzz", project=uuid.uuid4().hex)
    memory = await derive(scope, f"memo: {word}.", f"Remember {word}!", word)
    await derive(scope, "I like jazz", "User likes jazz", "jazz")
    assert memory.id in await found(scope, " ".join([*before, word, *after]))


async def test_a_word_of_new_tai_lue_vowel_letters_is_found(scope: amem.Scope) -> None:
    """Letters SQLite's Unicode 6.1 tables still call combining marks (schema v4)."""
    memory = await derive(scope, "memo: ᦰᦱ.", "Remember ᦰᦱ!", "ᦰᦱ")
    assert await found(scope, "ᦰᦱ") == [memory.id]


# -- evidence or nothing ---------------------------------------------------------------


@pytest.mark.parametrize("query", ["火山爆发", "volcano eruption", "Vulkan"])
async def test_a_query_without_evidence_returns_nothing(scope: amem.Scope, query: str) -> None:
    await derive(scope, "我喜欢爵士乐", "用户喜欢爵士乐", "爵士乐")
    await derive(scope, "I like jazz", "User likes jazz", "jazz")
    await scope.submit_event("今天天气很好", role="user", occurred_at=RECENT)  # raw, underived
    await scope.submit_event("Lovely weather today", role="user", occurred_at=RECENT)
    assert await found(scope, query) == []


# -- ranking ---------------------------------------------------------------------------


async def test_items_report_their_score_components(scope: amem.Scope) -> None:
    await derive(scope, "我喜欢爵士乐", "用户喜欢爵士乐", "爵士乐", confidence=0.7)
    await derive(
        scope, "我爵士乐和摇滚都听", "用户听爵士乐和摇滚", "爵士乐和摇滚", basis="inference"
    )
    items = (await scope.recall("爵士乐", as_of=AS_OF)).items
    assert len(items) == 2
    for item in items:
        parts = item.components.model_dump()
        assert parts.pop("fusion") is None  # fast ranking: no rank fusion
        assert set(parts) == set(WEIGHTS)
        assert all(0 <= value <= 1 for value in parts.values())
        evidence = 0.40 * parts["lexical"] + 0.25 * parts["semantic"] + 0.10 * parts["link"]
        shortfall = sum(w * (1 - parts[k]) for k, w in PRIOR_WEIGHTS.items())
        assert item.score == pytest.approx(evidence * (1 - shortfall), abs=1e-6)
        assert parts["lexical"] > 0
        assert parts["freshness"] == pytest.approx(0.5 ** (31 / 180))
    assert {item.components.confidence for item in items} == {0.7, 1.0}
    assert {item.components.basis for item in items} == {1.0, 0.5}


@pytest.mark.parametrize(
    ("both", "one", "query"),
    [
        (
            ("I play jazz piano", "User plays jazz piano", "jazz piano"),
            ("I play jazz drums", "User plays jazz drums", "jazz drums"),
            "jazz piano",
        ),
        (
            ("我会弹爵士钢琴", "用户会弹爵士钢琴", "爵士钢琴"),
            ("我会打爵士鼓", "用户会打爵士鼓", "爵士鼓"),
            "爵士钢琴",
        ),
    ],
)
async def test_matching_more_query_terms_ranks_higher(
    scope: amem.Scope, both: tuple[str, str, str], one: tuple[str, str, str], query: str
) -> None:
    fewer = await derive(scope, *one)
    more = await derive(scope, *both)
    ranked = await found(scope, query)
    assert ranked == [more.id, fewer.id]


@pytest.mark.parametrize(
    ("rare", "common", "fillers", "query"),
    [
        (
            ("I own an oboe", "User owns oboe", "oboe"),
            ("I collect jazz", "User collects jazz", "jazz"),
            ["jazz on the radio", "jazz at the club", "jazz all night", "jazz records"],
            "jazz oboe",
        ),
        (
            ("我有一支双簧管", "用户有双簧管", "双簧管"),
            ("我有一张唱片", "用户有唱片", "唱片"),
            ["唱片店开门了", "唱片很旧", "唱片机坏了", "买了唱片"],
            "唱片 双簧管",
        ),
    ],
)
async def test_matching_a_rarer_term_ranks_higher(
    scope: amem.Scope,
    rare: tuple[str, str, str],
    common: tuple[str, str, str],
    fillers: list[str],
    query: str,
) -> None:
    for text in fillers:
        await derive(scope, text, text, text)
    common_memory = await derive(scope, *common)
    rare_memory = await derive(scope, *rare)
    ranked = await found(scope, query)
    assert ranked.index(rare_memory.id) < ranked.index(common_memory.id)


@IN_BOTH_LANGUAGES
async def test_a_user_statement_ranks_above_an_inference(
    scope: amem.Scope, event: str, text: str, quote: str
) -> None:
    await scope.submit_event(event, role="user", event_id="e-1", occurred_at=RECENT)
    # the texts differ by a full stop: identical texts would be one item
    inferred, stated = await scope.add_memories(
        "e-1",
        [
            {"text": f"{text}.", "quote": quote, "kind": "preference", "basis": "inference"},
            {"text": text, "quote": quote, "kind": "preference", "basis": "user_statement"},
        ],
    )
    assert await found(scope, quote) == [stated.id, inferred.id]


@IN_BOTH_LANGUAGES
async def test_higher_confidence_ranks_first(
    scope: amem.Scope, event: str, text: str, quote: str
) -> None:
    unsure = await derive(scope, event, f"{text}.", quote, confidence=0.3)  # not identical
    sure = await derive(scope, event, text, quote, confidence=0.9)
    assert await found(scope, quote) == [sure.id, unsure.id]


@IN_BOTH_LANGUAGES
async def test_newer_memories_rank_above_older_ones(
    scope: amem.Scope, event: str, text: str, quote: str
) -> None:
    newer = await derive(scope, event, text, quote, at=RECENT)
    older = await derive(scope, event, f"{text}.", quote, at="2025-06-01T00:00:00Z")
    assert await found(scope, quote) == [newer.id, older.id]
    old = await item_for(scope, quote, older.id)
    assert old.components.freshness == pytest.approx(0.5 ** (365 / 180))


@pytest.mark.parametrize(
    ("match", "neighbour", "two_hops", "unrelated", "query"),
    [
        (
            ("I adopted a cat named Mochi", "User has a cat named Mochi", "cat named Mochi"),
            ("I buy salmon treats every week", "User buys salmon treats", "salmon treats"),
            ("My vet is in Oakland", "User's vet is in Oakland", "vet is in Oakland"),
            ("I enjoy hiking", "User enjoys hiking", "hiking"),
            "Mochi",
        ),
        (
            ("我养了一只猫，叫年糕", "用户的猫叫年糕", "叫年糕"),
            ("我每周都买三文鱼零食", "用户每周买三文鱼零食", "三文鱼零食"),
            ("我的兽医在杭州", "用户的兽医在杭州", "兽医在杭州"),
            ("我喜欢爬山", "用户喜欢爬山", "爬山"),
            "年糕",
        ),
    ],
)
async def test_a_related_memory_joins_its_match_with_a_link_score(
    scope: amem.Scope,
    match: tuple[str, str, str],
    neighbour: tuple[str, str, str],
    two_hops: tuple[str, str, str],
    unrelated: tuple[str, str, str],
    query: str,
) -> None:
    hit = await derive(scope, *match)
    near = await derive(scope, *neighbour)
    far = await derive(scope, *two_hops)
    other = await derive(scope, *unrelated)
    await scope.relate(near.id, hit.id)  # links work in both directions
    await scope.relate(far.id, near.id)
    assert await found(scope, query) == [hit.id, near.id]
    linked = await item_for(scope, query, near.id)
    assert linked.components.link > 0
    assert linked.components.lexical == 0
    assert (await item_for(scope, query, hit.id)).components.link == 0
    assert other.id not in await found(scope, query)


# -- source-event keys -----------------------------------------------------------------


@pytest.mark.parametrize("word", ["piano", "钢琴"])
async def test_many_newer_matches_do_not_hide_what_was_true_at_as_of(
    scope: amem.Scope, word: str
) -> None:
    """A common term's newest documents are not yet valid at an earlier as_of; the older
    ones that were must still be found (the per-term cap counts only eligible ones)."""
    then = [
        await derive(scope, f"我学{word} {n}", f"学{word} {n}", f"我学{word} {n}", at=OLD)
        for n in range(3)
    ]
    for n in range(PER_TERM + 20):  # all after AS_OF: not yet true then
        await derive(
            scope,
            f"{word} later {n}",
            f"{word} later {n}",
            f"{word} later {n}",
            at="2026-07-01T00:00:00Z",
        )
    result = await scope.recall(word, as_of=AS_OF, limit=10)
    assert sorted(item.id for item in result.items) == sorted(m.id for m in then)
    later = await scope.recall(word, as_of="2026-08-01T00:00:00Z", limit=10)
    assert len(later.items) == 10


@pytest.mark.parametrize(
    ("event", "text", "quote", "query"),
    [
        ("我搬到杭州了", "User moved to Hangzhou", "搬到杭州", "杭州"),
        ("Last spring I moved to Hangzhou", "用户搬到了杭州", "moved to Hangzhou", "Hangzhou"),
    ],
)
async def test_a_memory_is_found_through_its_source_event(
    scope: amem.Scope, event: str, text: str, quote: str, query: str
) -> None:
    memory = await derive(scope, event, text, quote)
    await derive(scope, "I like jazz", "User likes jazz", "jazz")
    [item] = (await scope.recall(query, as_of=AS_OF)).items
    assert (item.id, item.text, item.raw_fallback) == (memory.id, text, False)
    assert item.components.lexical > 0


# -- raw fallback ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "query"),
    [("我下周三要去北京出差", "北京"), ("I fly to Berlin next Wednesday", "berlin")],
)
async def test_an_underived_event_comes_back_as_raw_fallback(
    scope: amem.Scope, text: str, query: str
) -> None:
    receipt = await scope.submit_event(text, role="user", occurred_at=RECENT)
    [item] = (await scope.recall(query, as_of=AS_OF)).items
    assert item.raw_fallback is True
    assert item.kind is None
    assert (item.id, item.source_event_id, item.text) == (receipt.event_id, receipt.event_id, text)
    assert item.truncated is False
    assert item.occurred_at == receipt.occurred_at
    assert not item.gist


@pytest.mark.parametrize(
    ("head", "filler"),
    [("北京出差记录：", "今天开了很长的会。"), ("Berlin trip notes: ", "long meeting. ")],
)
async def test_raw_fallback_text_is_capped_at_2000_characters(
    scope: amem.Scope, head: str, filler: str
) -> None:
    text = head + filler * (3000 // len(filler))
    receipt = await scope.submit_event(text, role="user", occurred_at=RECENT)
    [item] = (await scope.recall(head[:6], as_of=AS_OF)).items
    assert (item.raw_fallback, item.truncated) == (True, True)
    assert item.text == text[:2000]
    page = await scope.read(receipt.event_id, limit=100_000)
    assert page.text == text  # the original is untouched


async def test_an_event_with_derived_memories_is_not_returned_raw(scope: amem.Scope) -> None:
    receipt = await scope.submit_event("我搬到杭州了，离西湖很近", role="user", occurred_at=RECENT)
    [raw] = (await scope.recall("西湖", as_of=AS_OF)).items
    assert raw.raw_fallback
    hangzhou, west_lake = await scope.add_memories(
        receipt.event_id,
        [
            memory_draft("User lives in Hangzhou", "搬到杭州"),
            memory_draft("User lives near West Lake", "离西湖很近"),
        ],
    )
    # the message's words are the memories' now, each taking the words it quotes
    [item] = (await scope.recall("西湖", as_of=AS_OF)).items
    assert (item.id, item.raw_fallback) == (west_lake.id, False)
    both = (await scope.recall("杭州 西湖", as_of=AS_OF)).items
    assert {item.id for item in both} == {west_lake.id, hangzhou.id}
    assert not any(item.raw_fallback for item in both)


@pytest.mark.parametrize(
    ("said", "kept", "quote", "other", "cat_query"),
    [
        (
            "I have a cat named Mochi, and I'm allergic to peanuts",
            "User has a cat named Mochi",
            "I have a cat named Mochi",
            "peanuts",
            "Mochi",
        ),
        (
            "我养了一只叫麻薯的猫，而且我对花生过敏",
            "用户养了一只叫麻薯的猫",
            "我养了一只叫麻薯的猫",
            "花生",
            "麻薯",
        ),
    ],
)
async def test_words_no_memory_says_bring_back_the_message_not_its_memory(
    scope: amem.Scope, said: str, kept: str, quote: str, other: str, cat_query: str
) -> None:
    """A message may say more than its memories keep: the memory of the cat says nothing
    about peanuts, so a recall of peanuts finds the message itself, never the cat."""
    receipt = await scope.submit_event(said, role="user", occurred_at=RECENT)
    [cat] = await scope.add_memories(receipt.event_id, [memory_draft(kept, quote)])
    [item] = (await scope.recall(other, as_of=AS_OF)).items
    assert (item.id, item.text, item.raw_fallback) == (receipt.event_id, said, True)
    [item] = (await scope.recall(cat_query, as_of=AS_OF)).items
    assert (item.id, item.raw_fallback) == (cat.id, False)
    both = (await scope.recall(f"{cat_query} {other}", as_of=AS_OF)).items
    assert {item.id for item in both} == {cat.id, receipt.event_id}


async def test_a_word_of_a_fact_that_ended_brings_back_neither_message_nor_sibling(
    scope: amem.Scope,
) -> None:
    """The words of a memory that is no longer valid are still that memory's: a message
    that said where the user lived and what pet they have does not come back for the old
    city once the residence changed, and neither does the pet."""
    receipt = await scope.submit_event(
        "I live in Berlin and I have a cat named Mochi", role="user", occurred_at=OLD
    )
    berlin, _ = await scope.add_memories(
        receipt.event_id,
        [
            memory_draft(
                "User lives in Berlin", "I live in Berlin", subject="user", fact_key="residence"
            ),
            memory_draft("User has a cat named Mochi", "I have a cat named Mochi"),
        ],
    )
    await derive(
        scope,
        "I moved to Lisbon",
        "User lives in Lisbon",
        "I moved to Lisbon",
        subject="user",
        fact_key="residence",
    )
    assert (await scope.recall("Berlin", as_of=AS_OF)).items == []
    history = await scope.recall("Berlin", as_of=AS_OF, include_history=True)
    assert [(item.id, item.expired) for item in history.items] == [(berlin.id, True)]


@pytest.mark.parametrize(
    ("event", "text", "quote", "fixed", "old_word"),
    [
        ("I live in Paris", "User lives in Paris", "Paris", "User lives in Parma", "Paris"),
        ("我住在北京", "用户住在北京", "北京", "用户住在上海", "北京"),
    ],
)
async def test_a_corrected_fact_comes_back_through_raw_text_only_as_history(
    scope: amem.Scope, event: str, text: str, quote: str, fixed: str, old_word: str
) -> None:
    wrong = await derive(scope, event, text, quote, subject="user", fact_key="residence")
    done = await scope.correct(wrong.id, fixed)
    assert (await scope.recall(old_word, as_of=AS_OF)).items == []
    [said] = (await scope.recall(old_word, as_of=AS_OF, include_history=True)).items
    assert (said.id, said.text, said.expired, said.raw_fallback, said.corrected_by) == (
        wrong.event_id,
        event,
        True,
        True,
        [done.memory.id],
    )


async def paris_and_jazz(
    scope: amem.Scope, home_quote: str, jazz_quote: str
) -> list[amem.MemoryRecord]:
    """A recent event saying "I live in Paris and I like jazz", with a fact and a preference
    quoting ``home_quote`` and ``jazz_quote`` from it."""
    receipt = await scope.submit_event(
        "I live in Paris and I like jazz", role="user", occurred_at=RECENT
    )
    return await scope.add_memories(
        receipt.event_id,
        [
            memory_draft("User lives in Paris", home_quote),
            memory_draft("User likes jazz", jazz_quote, "preference"),
        ],
    )


async def test_a_sibling_of_a_corrected_fact_does_not_bring_back_its_wording(
    scope: amem.Scope,
) -> None:
    paris, _ = await paris_and_jazz(scope, "live in Paris", "like jazz")
    await scope.correct(paris.id, "User lives in Parma")
    result = await scope.recall("Paris", as_of=AS_OF)
    assert not any("Paris" in item.text for item in result.items)
    assert not any(item.raw_fallback for item in result.items)
    # as history, the message is what was said then: itself, expired, not its sibling
    history = await scope.recall("Paris", as_of=AS_OF, include_history=True)
    assert [(i.id, i.expired) for i in history.items] == [(paris.event_id, True)]


@pytest.mark.parametrize(
    ("old", "new", "query"),
    [
        (
            ("I live in Beijing", "User lives in Beijing", "Beijing"),
            ("I live in Shanghai", "User lives in Shanghai", "Shanghai"),
            "Beijing",
        ),
        (("我住在北京", "用户住在北京", "北京"), ("我住在杭州", "用户住在杭州", "杭州"), "北京"),
    ],
)
async def test_an_expired_facts_source_is_not_returned_raw(
    scope: amem.Scope, old: tuple[str, str, str], new: tuple[str, str, str], query: str
) -> None:
    key = {"subject": "user", "fact_key": "residence"}
    before = await derive(scope, *old, at=OLD, **key)
    await derive(scope, *new, at=RECENT, **key)
    assert await found(scope, query) == []
    [item] = (await scope.recall(query, as_of=AS_OF, include_history=True)).items
    assert (item.id, item.expired, item.raw_fallback) == (before.id, True, False)


@pytest.mark.parametrize("category", ["reference", "persona"])
async def test_archived_events_are_never_raw_fallback(scope: amem.Scope, category: str) -> None:
    await scope.submit_event("Berlin 北京 出差", role="user", category=category, occurred_at=RECENT)
    assert await found(scope, "Berlin") == []
    assert await found(scope, "北京") == []


async def test_raw_fallback_respects_as_of(scope: amem.Scope) -> None:
    await scope.submit_event(
        "我下周三要去北京出差", role="user", occurred_at="2026-07-01T00:00:00Z"
    )
    assert await found(scope, "北京") == []  # said after AS_OF


async def test_read_pages_the_original_evidence_unaltered(scope: amem.Scope) -> None:
    text = "".join(f"第{n}行：Line {n} of the log.\n" for n in range(400))  # ~9,700 chars
    receipt = await scope.submit_event(text, role="user", occurred_at=RECENT)
    first = await scope.read(receipt.event_id)
    assert (first.text, first.offset, first.limit) == (text[:4000], 0, 4000)
    assert (first.total_chars, first.next_offset) == (len(text), 4000)
    pages = [first.text]
    offset = first.next_offset
    while offset is not None:
        page = await scope.read(receipt.event_id, offset=offset)
        pages.append(page.text)
        offset = page.next_offset
    assert "".join(pages) == text
    assert len(pages) == 3
    await scope.recall("Line", as_of=AS_OF)
    assert (await scope.read(receipt.event_id, limit=100_000)).text == text


# -- fading ----------------------------------------------------------------------------


class Fading(NamedTuple):
    """A memory of a kind that fades with age, and a query that finds it."""

    event: str
    text: str
    quote: str
    role: str
    kind: str
    basis: str
    extra: dict[str, object]
    query: str

    async def derive(self, scope: amem.Scope, at: str, **draft: object) -> amem.MemoryRecord:
        return await derive(
            scope,
            self.event,
            self.text,
            self.quote,
            at=at,
            role=self.role,
            kind=self.kind,
            basis=self.basis,
            **draft,
            **self.extra,
        )


FADING = [
    Fading(
        "I went hiking in the Alps with Anna",
        "User went hiking in the Alps with Anna",
        "hiking in the Alps",
        "user",
        "episode",
        "user_statement",
        {},
        "Alps",
    ),
    Fading(
        "我和小王去西湖划船了",
        "用户和小王去西湖划船",
        "去西湖划船",
        "user",
        "episode",
        "user_statement",
        {},
        "西湖",
    ),
    Fading(
        "You seem tired after the marathon",
        "User seemed tired after the marathon",
        "tired after the marathon",
        "assistant",
        "observation",
        "assistant_expression",
        {},
        "marathon",
    ),
    Fading(
        "听到你升职了，我真为你高兴！",
        "助手为用户升职感到高兴",
        "我真为你高兴",
        "assistant",
        "emotion",
        "assistant_expression",
        {"emotion": {"label": "joy", "valence": 0.9, "arousal": 0.6}},
        "升职",
    ),
]
FADING_IDS = ["episode-en", "episode-zh", "observation", "emotion"]


@pytest.mark.parametrize("case", FADING, ids=FADING_IDS)
async def test_old_episodes_show_their_authored_gist(scope: amem.Scope, case: Fading) -> None:
    gist = f"gist: {case.kind} 要点"
    old = await case.derive(scope, OLD, gist=gist)
    item = await item_for(scope, case.query, old.id)
    assert (item.text, item.gist, item.coarse_time) == (gist, True, None)
    assert item.valid_at == old.valid_at


@pytest.mark.parametrize("case", FADING, ids=FADING_IDS)
async def test_old_episodes_without_a_gist_show_a_labelled_topic_cue(
    scope: amem.Scope, case: Fading
) -> None:
    old = await case.derive(scope, OLD)
    item = await item_for(scope, case.query, old.id)
    assert item.text.startswith("[topic cue]")
    assert item.text != case.text
    assert len(item.text.removeprefix("[topic cue]").strip()) > 0
    assert item.gist is True


@pytest.mark.parametrize("case", FADING, ids=FADING_IDS)
async def test_recent_episodes_stay_detailed(scope: amem.Scope, case: Fading) -> None:
    recent = await case.derive(scope, RECENT, gist="short gist")
    item = await item_for(scope, case.query, recent.id)
    assert (item.text, item.gist, item.coarse_time) == (case.text, False, None)


@pytest.mark.parametrize(("at", "decade"), [(ANCIENT, "2010s"), ("2009-12-31T23:00:00Z", "2000s")])
async def test_episodes_older_than_two_years_show_only_their_decade(
    scope: amem.Scope, at: str, decade: str
) -> None:
    old = await derive(
        scope,
        "我和小王去西湖划船了",
        "用户和小王去西湖划船",
        "去西湖划船",
        at=at,
        kind="episode",
        gist="和朋友划船",
    )
    item = await item_for(scope, "西湖", old.id)
    assert (item.text, item.gist, item.coarse_time) == ("和朋友划船", True, decade)


@pytest.mark.parametrize(
    ("kind", "role"),
    [("fact", "user"), ("preference", "user"), ("agreement", "assistant"), ("growth", "user")],
)
async def test_facts_preferences_agreements_and_growth_never_fade(
    scope: amem.Scope, kind: str, role: str
) -> None:
    """Each on the basis its role gives (``derive``: a user statement, an assistant
    expression)."""
    chinese = await derive(
        scope,
        "我们约定每周五复盘",
        "每周五一起复盘项目",
        "每周五复盘",
        at=ANCIENT,
        role=role,
        kind=kind,
        gist="复盘",
    )
    english = await derive(
        scope,
        "We review the sprint every Friday",
        "Sprint review every Friday",
        "every Friday",
        at=ANCIENT,
        role=role,
        kind=kind,
        gist="reviews",
    )
    for query, memory in (("复盘", chinese), ("Friday", english)):
        item = await item_for(scope, query, memory.id)
        assert (item.text, item.gist, item.coarse_time) == (memory.text, False, None)


async def test_a_faded_memory_still_reads_in_full(scope: amem.Scope) -> None:
    event = "我和小王去西湖划船了，还吃了醋鱼"
    old = await derive(
        scope,
        event,
        "用户和小王去西湖划船，还吃了醋鱼",
        "去西湖划船",
        at=ANCIENT,
        kind="episode",
        gist="划船",
    )
    assert (await item_for(scope, "西湖", old.id)).gist
    page = await scope.read(old.id)
    assert page.text == event
    assert page.memory is not None
    assert page.memory.text == "用户和小王去西湖划船，还吃了醋鱼"


async def test_fading_windows_are_configurable(db_path: Path) -> None:
    windows = amem.Settings(fade_after_days=10, coarsen_after_days=20)
    async with amem.open(db_path, settings=windows) as mem:
        scope = mem.scope(persona="assistant", project="support")
        fresh, faded, coarse = [
            await derive(
                scope,
                f"I went hiking day {n}",
                f"User hiked, day {n}",
                "hiking",
                at=at,
                kind="episode",
                gist=f"hike {n}",
            )
            for n, at in enumerate(["2026-05-25T00:00:00Z", "2026-05-17T00:00:00Z", RECENT])
        ]
        items = {item.id: item for item in (await scope.recall("hiking", as_of=AS_OF)).items}
    assert (items[fresh.id].gist, items[fresh.id].coarse_time) == (False, None)
    assert (items[faded.id].text, items[faded.id].coarse_time) == ("hike 1", None)
    assert (items[coarse.id].text, items[coarse.id].coarse_time) == ("hike 2", "2020s")


# -- function words and corrected wording are no evidence --------------------------------


@pytest.mark.parametrize(
    ("event", "query"),
    [("我搬到杭州了", "我的猫叫什么名字"), ("The user moved to Oslo", "what is the user's cat")],
)
async def test_function_words_alone_are_no_evidence(
    scope: amem.Scope, event: str, query: str
) -> None:
    await derive(scope, event, "User moved", event.split()[-1] if " " in event else "杭州")
    assert await found(scope, query) == []


async def test_an_amended_events_wording_is_no_search_key(scope: amem.Scope) -> None:
    home, jazz = await paris_and_jazz(scope, "I live in Paris", "I like jazz")
    await scope.correct(home.id, "User lives in Lyon")
    assert await found(scope, "Paris") == []
    assert await found(scope, "jazz") == [jazz.id]


async def test_old_episodes_get_a_decade_label_even_before_they_fade(db_path: Path) -> None:
    settings = amem.Settings(fade_after_days=5000, coarsen_after_days=730)
    async with amem.open(db_path, settings=settings) as mem:
        scope = mem.scope()
        memory = await derive(
            scope,
            "We hiked Huangshan",
            "User hiked Huangshan",
            "hiked Huangshan",
            at=ANCIENT,
            kind="episode",
        )
        item = await item_for(scope, "Huangshan", memory.id)
    assert (item.coarse_time, item.gist, item.text) == ("2010s", False, "User hiked Huangshan")


async def test_recall_finds_only_its_own_scope_however_many_scopes_share_the_file(
    mem: amem.Memory,
) -> None:
    """One scope alone in the file, then scopes sorting before and after it."""
    ours = mem.scope("assistant", "m")
    mine = await derive(ours, "我在杭州喝龙井", "用户在杭州喝龙井", "在杭州喝龙井")
    assert await found(ours, "杭州 龙井") == [mine.id]
    for persona, project in [("assistant", "a"), ("assistant", "z"), ("a", "m"), ("z", "m")]:
        other = mem.scope(persona, project)
        theirs = await derive(other, "我在杭州喝龙井", "用户在杭州喝龙井", "在杭州喝龙井")
        assert await found(other, "杭州 龙井") == [theirs.id]
        assert await found(ours, "杭州 龙井") == [mine.id]


# -- a small limit is a prefix of a large one, raw events or memories alike ------------

VOCABULARY = ["tea", "jazz", "杭州", "茶馆"]
"""Few words: many events match a query equally, and their times decide the order."""


@FUZZ
@given(
    texts=st.lists(
        st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=3).map(" ".join),
        min_size=20,
        max_size=45,  # with 5 memories, RANKED (50) documents: a large limit reads no deeper
    ),
    days=st.lists(st.integers(min_value=0, max_value=3000), min_size=45, max_size=45),
    derived=st.sets(st.integers(min_value=0, max_value=44), max_size=5),
    query=st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=2).map(" ".join),
    limit=st.integers(min_value=1, max_value=12),
)
async def test_a_small_limit_returns_the_top_of_a_large_one(
    mem: amem.Memory,
    texts: list[str],
    days: list[int],
    derived: set[int],
    query: str,
    limit: int,
) -> None:
    """Recall reads only the candidates that can reach the top ``limit`` (when nothing but
    raw events is in play); what it returns must be exactly the top of a full read, links
    between memories included. A scope of at most ``RANKED`` (50) matches is read whole
    at any limit; past that, a limit that copies of one text leave unfilled reads deeper
    (``test_recall_fills_its_limit_after_eighty_copies_of_one_text``) and may find a
    fresher copy."""
    scope = mem.scope(persona="fuzz", project=uuid.uuid4().hex)
    event_ids = [""] * len(texts)

    async def submit(n: int, text: str) -> None:
        when = (datetime.fromisoformat(AS_OF) - timedelta(days=days[n])).isoformat()
        event_ids[n] = (await scope.submit_event(text, role="user", occurred_at=when)).event_id

    # submitted at once, so a scope is a few commits: 100 examples of up to 45 events
    # one commit each outlasted the test timeout where fsync was slow
    async with anyio.create_task_group() as tg:
        for n, text in enumerate(texts):
            tg.start_soon(submit, n, text)
    memories: list[str] = []
    for n in sorted(derived & set(range(len(texts)))):  # some scopes have memories too, linked
        draft = memory_draft(f"User said {texts[n]}", texts[n])
        [memory] = await scope.add_memories(event_ids[n], [draft])
        memories.append(memory.id)
    for first, second in itertools.pairwise(memories):
        await scope.relate(first, second)
    small = await scope.recall(query, as_of=AS_OF, limit=limit)
    large = await scope.recall(query, as_of=AS_OF, limit=50)
    assert [(i.id, i.score) for i in small.items] == [(i.id, i.score) for i in large.items[:limit]]


# -- finding the right memory however large the scope grows ----------------------------


async def said(scope: amem.Scope, texts: list[str], *, at: str) -> list[str]:
    """Conversation events (no memories: each comes back as itself), all at ``at``; their IDs."""
    entries = [
        {"event_id": f"e-{uuid.uuid4()}", "text": text, "role": "user", "occurred_at": at}
        for text in texts
    ]
    await scope.capture_transcript(f"tests-{uuid.uuid4()}", entries)  # a cursor of its own
    return [str(entry["event_id"]) for entry in entries]


async def test_an_old_message_holding_every_common_query_word_is_found(scope: amem.Scope) -> None:
    """Each word alone is in more documents than are read per term, all newer than the one
    message holding both; the conjunction finds it anyway."""
    [target] = await said(scope, ["the zebra learned to dance"], at=OLD)
    await said(scope, [f"zebra sighting {n}" for n in range(PER_TERM + 30)], at=RECENT)
    await said(scope, [f"dance lesson {n}" for n in range(PER_TERM + 30)], at=RECENT)
    assert (await found(scope, "dance zebra"))[0] == target


async def test_a_long_query_is_searched_by_its_most_informative_words(scope: amem.Scope) -> None:
    """Forty common words first, the one word that names the memory last."""
    chatter = [f"chatter{n}" for n in range(40)]
    await said(scope, [" ".join(chatter)] * 3, at=RECENT)
    [target] = await said(scope, ["we saw a quokka on the island"], at=OLD)
    assert target in await found(scope, " ".join([*chatter, "quokka"]))


@pytest.mark.parametrize(
    ("phrase", "shuffled"),
    [("green tea before bed", "bed {n} before tea green"), ("吴娜会一起去", "去{n}会吴娜一起")],
)
async def test_a_phrase_ranks_the_message_that_holds_it_first(
    scope: amem.Scope, phrase: str, shuffled: str
) -> None:
    """More than the candidates scored hold every word of the phrase, in another order and
    newer; the one holding the phrase itself comes first."""
    [target] = await said(scope, [f"{phrase} again"], at=OLD)
    await said(scope, [shuffled.format(n=n) for n in range(80)], at=RECENT)
    assert (await found(scope, phrase))[0] == target


async def test_a_common_terms_counts_are_kept_until_a_document_leaves_the_index(
    scope: amem.Scope, db_path: Path
) -> None:
    """Readers keep a common term's oldest postings between queries: new documents leave
    them as they were; once a document leaves the index they are counted anew, and a
    reader still in an older snapshot does not use counts made after it."""
    oldest = await said(scope, [f"widget report {n}" for n in range(PER_TERM + 20)], at=OLD)
    counts = TermCounts()

    def count(conn: sqlite3.Connection) -> tuple[Term, Term, KnownTerms | None, int]:
        newest = conn.execute("select max(num) from search_docs").fetchone()[0]
        known = counts.for_snapshot(conn)
        [kept] = term_stats(conn, ["widget"], "", newest, known)
        [fresh] = term_stats(conn, ["widget"], "", newest)
        return kept, fresh, known, newest

    def counted() -> tuple[Term, Term, KnownTerms | None, int]:
        with closing(sqlite3.connect(db_path)) as conn, conn:
            return count(conn)

    kept, fresh, known, _ = counted()
    assert kept == fresh
    assert fresh.counted == PER_TERM
    assert known is not None
    assert ("", "widget") in known
    await said(scope, [f"widget note {n}" for n in range(50)], at=RECENT)
    kept, fresh, still, _ = counted()
    assert still is known
    assert kept == fresh
    with closing(sqlite3.connect(db_path, isolation_level=None)) as before:
        before.execute("begin")
        count(before)  # its snapshot starts here
        await scope.delete(event_id=oldest[0])
        kept, fresh, after, newest = counted()
        assert after is not known
        assert kept == fresh
        assert Term.from_count("widget", PER_TERM, *known[("", "widget")], newest) != fresh
        assert counts.for_snapshot(before) is None


async def test_a_v8_file_counts_removals_once_migrated(db_path: Path) -> None:
    """A file from before the count (schema 8) starts it when it migrates: kept term
    counts are dropped by the first document to leave its index."""
    async with amem.open(db_path) as mem:
        old = await said(mem.scope("p", "q"), ["one widget", "two widgets"], at=OLD)
    with closing(sqlite3.connect(db_path)) as conn:
        undo_v9(conn)
        conn.execute("pragma user_version = 8")
        conn.commit()
    counts = TermCounts()
    async with amem.open(db_path) as mem:
        with closing(sqlite3.connect(db_path)) as conn:
            known = counts.for_snapshot(conn)
            await mem.scope("p", "q").delete(event_id=old[0])
            assert known is not None
            assert counts.for_snapshot(conn) is not known


# --- long documents ------------------------------------------------------------------------


def long_text(ending: str) -> str:
    """An event near the largest (about 99,000 characters) whose last words are ``ending``."""
    filler = " ".join(f"filler{n % 97}" for n in range(10_800))
    return f"{filler} {ending}"[-99_000:]


async def test_a_long_event_matched_only_past_its_start_is_found_and_ranked(
    scope: amem.Scope,
) -> None:
    """BM25 reads a long document only so far (``SCORED_CHARS``): one whose match lies past
    that is still found, with evidence, and ranked below a short one saying the same."""
    long = await scope.submit_event(long_text("the zanzibar ferry leaves at noon"), role="user")
    short = await scope.submit_event("the zanzibar ferry leaves at noon", role="user")
    assert len(long_text("")) > SCORED_CHARS
    hits = await scope.recall("zanzibar ferry")
    assert [item.id for item in hits.items] == [short.event_id, long.event_id]
    assert all(item.components.lexical > 0 for item in hits.items)
    assert hits.items[1].truncated  # raw fallback shows the first 2,000 characters


async def test_a_word_matched_only_without_its_accents_is_not_evidence(mem: amem.Memory) -> None:
    """The index folds accents away (``año`` finds ``ano``); a document holding the query's
    word only in that folded form holds none of its words as written: it is not a match,
    never one scored 0."""
    scope = mem.scope(persona="fold", project="p")
    await scope.submit_event("Mi tío toca el saxofón", role="user")
    assert (await scope.recall("saxofon")).items == []
    found = await scope.recall("saxofón")
    assert [item.text for item in found.items] == ["Mi tío toca el saxofón"]
