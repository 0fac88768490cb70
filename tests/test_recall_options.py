"""Recall options for an agent answering a turn (issue 14): leaving out the turn just
submitted (by event ID or from a sequence number), identical texts as one item, and the
role of every item's source event; in Python, over MCP and on the command line.

Every event has an explicit time and every recall names its ``as_of``, so freshness (and
with it the order of equal matches) does not depend on the clock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import amem_cli, cli_ok, memory_draft
from mcp_client import MARKER, connect, ok, other, refused, tools_by_name

import amem
from amem.limits import MAX_EXCLUDED_EVENTS
from amem.testing import FakeOpenAI

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend, pytest.mark.both_databases]  # conftest.py

AS_OF = "2026-06-01T00:00:00Z"
EARLIER = ("2026-05-01T10:00:00Z", "2026-05-02T10:00:00Z", "2026-05-03T10:00:00Z")
NOW = "2026-05-31T10:00:00Z"
QUESTION = "Which green tea from Hangzhou did I say I love?"
"""The user's new message: it matches itself better than anything said before."""


async def earlier_turns(scope: amem.Scope) -> None:
    """Three earlier turns that mention green tea: two raw user messages and a reply."""
    await scope.submit_event(
        "I love Longjing green tea from Hangzhou",
        role="user",
        event_id="u-1",
        occurred_at=EARLIER[0],
    )
    await scope.submit_event(
        "Noted: Longjing green tea it is.", role="assistant", event_id="a-1", occurred_at=EARLIER[1]
    )
    await scope.submit_event(
        "Green tea in the morning, coffee never.",
        role="user",
        event_id="u-2",
        occurred_at=EARLIER[2],
    )


async def ids(scope: amem.Scope, query: str, **options: Any) -> list[str]:
    result = await scope.recall(query, as_of=AS_OF, **options)
    return [item.id for item in result.items]


# --- leaving out the current turn ----------------------------------------------------------


async def test_the_submitted_turn_does_not_answer_itself(scope: amem.Scope) -> None:
    await earlier_turns(scope)
    turn = await scope.submit_event(QUESTION, role="user", event_id="u-9", occurred_at=NOW)

    plain = await ids(scope, QUESTION)
    by_id = await ids(scope, QUESTION, exclude_event_ids=["u-9"])
    by_seq = await ids(scope, QUESTION, exclude_from_seq=turn.seq)

    assert plain[0] == "u-9"  # the problem: the agent's own message comes back first
    assert by_id == by_seq == [id for id in plain if id != "u-9"]
    assert set(by_id) == {"u-1", "a-1", "u-2"}


async def test_exclude_from_seq_leaves_out_every_later_event_too(scope: amem.Scope) -> None:
    await earlier_turns(scope)
    turn = await scope.submit_event(QUESTION, role="user", event_id="u-9", occurred_at=NOW)
    await scope.submit_event("green tea again", role="tool", event_id="t-9", occurred_at=NOW)
    before = await scope.submit_event("an unrelated later message", role="user", occurred_at=NOW)

    assert set(await ids(scope, QUESTION, exclude_from_seq=turn.seq)) == {"u-1", "a-1", "u-2"}
    assert "t-9" in await ids(scope, QUESTION, exclude_from_seq=before.seq)
    assert await ids(scope, QUESTION, exclude_from_seq=1) == []  # every event left out


async def test_the_limit_is_still_filled_after_exclusion(scope: amem.Scope) -> None:
    for n in range(6):  # older matches
        at = f"2026-04-0{n + 1}T10:00:00Z"
        await scope.submit_event(
            f"green tea note {n}", role="user", event_id=f"old-{n}", occurred_at=at
        )
    current = []
    for n in range(3):  # the newest, best-scored matches: the turn being answered
        r = await scope.submit_event(f"green tea turn {n}", role="user", occurred_at=NOW)
        current.append(r)

    by_id = await ids(scope, "green tea", limit=3, exclude_event_ids=[r.event_id for r in current])
    by_seq = await ids(scope, "green tea", limit=3, exclude_from_seq=current[0].seq)

    assert set(await ids(scope, "green tea", limit=3)) == {r.event_id for r in current}
    assert by_id == by_seq
    assert len(by_id) == 3
    assert set(by_id) <= {f"old-{n}" for n in range(6)}


async def test_memories_derived_from_an_excluded_event_are_left_out(scope: amem.Scope) -> None:
    await earlier_turns(scope)
    kept_memory = await add_fact(
        scope, "u-1", "User loves Longjing green tea", "Longjing green tea"
    )
    turn = await scope.submit_event(
        "Actually I love Biluochun green tea now", role="user", event_id="u-9", occurred_at=NOW
    )
    new = await add_fact(scope, "u-9", "User loves Biluochun green tea", "Biluochun green tea")

    plain = await ids(scope, "green tea Biluochun", limit=20)
    by_id = await ids(scope, "green tea Biluochun", limit=20, exclude_event_ids=["u-9"])
    by_seq = await ids(scope, "green tea Biluochun", limit=20, exclude_from_seq=turn.seq)

    assert new.id in plain
    assert new.id not in by_id + by_seq
    assert kept_memory.id in by_id
    assert kept_memory.id in by_seq
    assert "u-9" not in by_id + by_seq


async def test_a_linked_memory_of_an_excluded_event_is_left_out(scope: amem.Scope) -> None:
    await earlier_turns(scope)
    kept = await add_fact(scope, "u-1", "User loves Longjing green tea", "Longjing green tea")
    await scope.submit_event(
        "I keep a cat named Mochi", role="user", event_id="u-9", occurred_at=NOW
    )
    cat = await add_fact(scope, "u-9", "User has a cat named Mochi", "a cat named Mochi")
    await scope.relate(kept.id, cat.id)

    linked = await scope.recall("Longjing", as_of=AS_OF)
    excluded = await scope.recall("Longjing", as_of=AS_OF, exclude_event_ids=["u-9"])

    assert cat.id in [item.id for item in linked.items]  # through the link only
    assert [item.id for item in excluded.items] == [kept.id, "a-1"]


async def test_semantic_recall_leaves_out_excluded_events(db_path: Path) -> None:
    with FakeOpenAI() as api:
        settings = amem.Settings(embed_base_url=api.base_url, embed_model="fake")
        async with amem.open(db_path, settings=settings) as mem:
            scope = mem.scope(persona="assistant", project="support")
            await earlier_turns(scope)
            kept = await add_fact(
                scope, "u-1", "User loves Longjing green tea", "Longjing green tea"
            )
            await scope.submit_event(
                "green tea, Longjing please", role="user", event_id="u-9", occurred_at=NOW
            )
            gone = await add_fact(
                scope, "u-9", "User asks for Longjing green tea", "Longjing please"
            )
            await scope.reindex()
            plain = await scope.recall("Longjing green tea", mode="deep", as_of=AS_OF)
            excluded = await scope.recall(
                "Longjing green tea", mode="deep", as_of=AS_OF, exclude_event_ids=["u-9"]
            )
    assert {kept.id, gone.id} <= {item.id for item in plain.items}
    assert excluded.warnings == []
    assert kept.id in [item.id for item in excluded.items]
    assert gone.id not in [item.id for item in excluded.items]
    assert all(item.components.semantic > 0 for item in excluded.items if not item.raw_fallback)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"exclude_from_seq": "3"}, "exclude_from_seq"),
        ({"exclude_from_seq": 2.0}, "exclude_from_seq"),
        ({"exclude_from_seq": True}, "exclude_from_seq"),
        ({"exclude_from_seq": -1}, "exclude_from_seq"),
        ({"exclude_from_seq": 0}, "exclude_from_seq"),
        ({"exclude_event_ids": "u-9"}, "exclude_event_ids"),  # one string, not a list
        ({"exclude_event_ids": 9}, "exclude_event_ids"),
        ({"exclude_event_ids": {"u-9": 1}}, "exclude_event_ids"),
        ({"exclude_event_ids": [9]}, "exclude_event_ids[0]"),
        ({"exclude_event_ids": ["ok", ""]}, "exclude_event_ids[1]"),
        ({"exclude_event_ids": ["u-9\n" + MARKER]}, "exclude_event_ids[0]"),
        (
            {"exclude_event_ids": [f"e-{n}" for n in range(MAX_EXCLUDED_EVENTS + 1)]},
            "exclude_event_ids",
        ),
    ],
)
async def test_bad_exclusions_are_invalid_input(
    scope: amem.Scope, options: dict[str, Any], field: str
) -> None:
    with pytest.raises(amem.InvalidInput) as raised:
        await scope.recall("green tea", **options)
    assert raised.value.code == "invalid_input"
    assert raised.value.message.startswith(f"{field} ")
    assert MARKER not in str(raised.value)


async def test_exclusions_accept_any_collection_and_unknown_ids(scope: amem.Scope) -> None:
    await earlier_turns(scope)
    every = await ids(scope, "green tea")
    assert await ids(scope, "green tea", exclude_event_ids=("u-1",)) == [
        i for i in every if i != "u-1"
    ]
    assert (
        await ids(scope, "green tea", exclude_event_ids={"nope"}, exclude_from_seq=2**62) == every
    )
    assert await ids(scope, "green tea", exclude_event_ids=[]) == every


# --- identical texts as one item ----------------------------------------------------------


async def test_a_message_said_five_times_is_one_item(scope: amem.Scope) -> None:
    said = []
    for n in range(5):
        at = f"2026-05-0{n + 1}T10:00:00Z"
        r = await scope.submit_event("Remind me to buy green tea", role="user", occurred_at=at)
        said.append(r.event_id)
    await scope.submit_event(
        "green tea is sold out", role="assistant", event_id="a-1", occurred_at=NOW
    )

    result = await scope.recall("buy green tea", as_of=AS_OF)

    [merged] = [item for item in result.items if item.text == "Remind me to buy green tea"]
    assert len(result.items) == 2
    assert merged.id == said[-1]  # the best scored: the newest of equal matches
    assert merged.occurrences == 5
    assert sorted(merged.merged_ids) == sorted(said[:-1])
    [single] = [item for item in result.items if item.id == "a-1"]
    assert (single.occurrences, single.merged_ids) == (1, [])


async def test_texts_differing_only_in_whitespace_merge_but_case_does_not(
    scope: amem.Scope,
) -> None:
    for n, text in enumerate(["Green tea,  please", "Green tea, please\n", "green tea, please"]):
        await scope.submit_event(text, role="user", event_id=f"u-{n}", occurred_at=EARLIER[n])

    items = (await scope.recall("green tea please", as_of=AS_OF)).items

    assert sorted((item.occurrences, sorted([item.id, *item.merged_ids])) for item in items) == [
        (1, ["u-2"]),
        (2, ["u-0", "u-1"]),
    ]


async def test_identical_memories_merge_and_the_best_scored_stands_for_them(
    scope: amem.Scope,
) -> None:
    await earlier_turns(scope)
    older = await add_fact(scope, "u-1", "User loves green tea", "green tea")
    newer = await add_fact(scope, "u-2", "User loves green tea", "Green tea")

    [item] = (await scope.recall("loves green tea", as_of=AS_OF, kinds=["fact"])).items

    assert (item.id, item.merged_ids, item.occurrences) == (newer.id, [older.id], 2)


async def test_the_limit_counts_distinct_texts(scope: amem.Scope) -> None:
    # only raw events: the best matches are read first and weaker ones may be left unread;
    # five copies of the best match must not leave out the next distinct texts
    for n in range(5):
        await scope.submit_event("green tea", role="user", event_id=f"dup-{n}", occurred_at=NOW)
    for n in range(3):
        text = f"we had green tea with friends at the old station, day {n}"
        await scope.submit_event(text, role="user", event_id=f"other-{n}", occurred_at=EARLIER[n])

    items = (await scope.recall("green tea", as_of=AS_OF, limit=3)).items

    assert [item.occurrences for item in items] == [5, 1, 1]
    assert items[0].text == "green tea"
    assert len({item.text for item in items}) == 3


async def test_recall_fills_its_limit_after_eighty_copies_of_one_text(
    scope: amem.Scope,
) -> None:
    """Eighty copies of one text crowded out every other candidate, which then merged
    into one item (``occurrences`` 50): recall gathers more candidates until ``limit``
    distinct texts come back, each counted exactly."""
    for n in range(10):
        text = f"the trains were late on the line to the old harbour, day {n}"
        await scope.submit_event(text, role="user", event_id=f"other-{n}", occurred_at=NOW)
    for n in range(80):  # the newest: they take every place among the first candidates
        await scope.submit_event("trains again", role="user", event_id=f"copy-{n}", occurred_at=NOW)

    items = (await scope.recall("trains", as_of=AS_OF, limit=5)).items

    assert len(items) == 5
    assert len({item.text for item in items}) == 5
    [copies] = [item for item in items if item.text == "trains again"]
    assert copies.occurrences == 80
    assert sorted([copies.id, *copies.merged_ids]) == sorted(f"copy-{n}" for n in range(80))


async def test_a_pack_fills_past_faded_episodes_that_show_one_cue(scope: amem.Scope) -> None:
    """Sixty old episodes fade to one topic cue and merge into one item; they crowded out
    forty matching agreements, and a pack of 4,000 tokens held one memory."""
    old = "2024-03-01T10:00:00Z"
    for n in range(60):
        said = f"I walked the dog Rex in the park, day {n}"
        await scope.submit_event(said, role="user", event_id=f"walk-{n}", occurred_at=old)
        draft = memory_draft(f"User walked the dog Rex in the park, day {n}", said, "episode")
        await scope.add_memories(f"walk-{n}", [draft])
    for n in range(40):
        said = f"I agree to take Rex out on weekday {n}"
        await scope.submit_event(said, role="user", event_id=f"deal-{n}", occurred_at=NOW)
        draft = memory_draft(f"User agreed to take Rex out on weekday {n}", said, "agreement")
        await scope.add_memories(f"deal-{n}", [draft])

    pack = await scope.resume("chat", query="walked the dog Rex in the park", as_of=AS_OF)

    memories = json.loads(pack.context)["memories"]
    cues = [memory for memory in memories if memory["gist"]]
    assert len(cues) == 1  # the sixty, as one
    assert len(memories) >= 15


# --- roles --------------------------------------------------------------------------------


async def test_every_item_carries_its_source_events_role(scope: amem.Scope) -> None:
    for role in ("user", "assistant", "system", "tool"):
        await scope.submit_event(f"green tea by {role}", role=role, event_id=role, occurred_at=NOW)
    await scope.submit_event(
        "Longjing green tea", role="assistant", event_id="a-1", occurred_at=NOW
    )
    memory = await add_fact(
        scope, "a-1", "Assistant recommended Longjing", "Longjing", basis="assistant_expression"
    )

    items = (await scope.recall("green tea Longjing", as_of=AS_OF)).items
    roles = {item.id: item.role for item in items}

    assert roles == {
        "user": "user",
        "assistant": "assistant",
        "system": "system",
        "tool": "tool",
        memory.id: "assistant",
        "a-1": "assistant",  # "green tea", which its memory does not say: the message itself
    }
    assert all(item.raw_fallback for item in items if item.id != memory.id)


# --- MCP -----------------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_mcp_recall_leaves_out_the_turn_merges_and_names_roles(
    anyio_backend: str, tmp_path: Path
) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        for n in range(3):
            await ok(s, "event_submit", text="我喜欢龙井茶", role="user", occurred_at=EARLIER[n])
        await ok(
            s,
            "event_submit",
            text="好的，龙井茶",
            role="assistant",
            event_id="a-1",
            occurred_at=NOW,
        )
        turn = await ok(
            s,
            "event_submit",
            text="我喜欢什么茶？龙井茶吗",
            role="user",
            event_id="u-9",
            occurred_at=NOW,
        )
        query = "我喜欢什么茶？龙井茶吗"
        plain = await ok(s, "memory_recall", query=query, as_of=AS_OF)
        by_id = await ok(s, "memory_recall", query=query, as_of=AS_OF, exclude_event_ids=["u-9"])
        by_seq = await ok(
            s, "memory_recall", query=query, as_of=AS_OF, exclude_from_seq=turn["seq"]
        )
        codes = [
            await refused(s, "memory_recall", {"query": "茶", **bad})
            for bad in (
                {"exclude_from_seq": MARKER},
                {"exclude_from_seq": -1},
                {"exclude_from_seq": 0},
                {"exclude_event_ids": MARKER},
                {"exclude_event_ids": [MARKER + "\n"]},
                {"exclude_event_ids": [f"e-{n}" for n in range(MAX_EXCLUDED_EVENTS + 1)]},
            )
        ]
        listed = await tools_by_name(s)

    schema = listed["memory_recall"].inputSchema["properties"]
    assert {"exclude_event_ids", "exclude_from_seq"} <= set(schema)
    description = listed["memory_recall"].description or ""
    assert "exclude_event_ids" in description
    assert "exclude_from_seq" in description
    assert "not an error" in description
    assert "u-9" in [item["id"] for item in plain["items"]]
    assert by_id["items"] == by_seq["items"]
    # MCP leaves out what is at its default: occurrences 1
    assert [(i["role"], i.get("occurrences", 1)) for i in by_id["items"]] == [
        ("user", 3),
        ("assistant", 1),
    ]
    assert len(by_id["items"][0]["merged_ids"]) == 2
    assert codes == ["invalid_input"] * 6


# --- CLI -----------------------------------------------------------------------------------


def test_cli_recall_leaves_out_the_turn_and_shows_role_and_occurrences(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "m.db"), "--persona", "assistant", "--project", "support"]
    for n in range(3):
        cli_ok("submit", "green tea, please", "--occurred-at", EARLIER[n], *db)
    cli_ok("submit", "Longjing green tea", "--role", "assistant", "--event-id", "a-1", *db)
    turn = json.loads(cli_ok("submit", "which green tea?", "--event-id", "u-9", "--json", *db))

    plain = cli_ok("recall", "green tea", *db).splitlines()
    by_id = cli_ok("recall", "green tea", "--exclude-event", "u-9", "--exclude-event", "x", *db)
    by_seq = cli_ok("recall", "green tea", "--exclude-from-seq", str(turn["seq"]), *db)
    bad = amem_cli("recall", "tea", "--exclude-from-seq", "-2", *db)

    assert any(line.endswith("(u-9)") for line in plain)
    assert by_id == by_seq
    lines = by_id.splitlines()
    assert len(lines) == 2
    assert not any("u-9" in line for line in lines)
    [merged] = [line for line in lines if "green tea, please" in line]
    assert " user " in merged
    assert "green tea, please [×3]" in merged
    [reply] = [line for line in lines if line.endswith("(a-1)")]
    assert " assistant raw event " in reply
    assert "×" not in reply
    assert bad.returncode != 0
    assert "exclude_from_seq" in bad.stderr


# --- helpers -------------------------------------------------------------------------------


async def add_fact(
    scope: amem.Scope, event_id: str, text: str, quote: str, *, basis: str = "user_statement"
) -> amem.MemoryRecord:
    draft = {"text": text, "quote": quote, "kind": "fact", "basis": basis}
    [memory] = await scope.add_memories(event_id, [draft])
    return memory
