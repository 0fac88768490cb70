"""Forgetting finds copies: a delete or erase preview lists the later events of the scope
that repeat the erased text (an assistant echoing the user's address, a tool output
quoting it), and ``include_copies=True`` erases them too; without it they stay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import amem_cli, cli_ok, memory_draft

import amem

pytestmark = [pytest.mark.anyio, pytest.mark.both_databases]  # both backends (tests/conftest.py)

ADDRESS = "12 Rose Lane, Springfield 4410"


async def address_conversation(scope: amem.Scope) -> amem.MemoryRecord:
    """``e-0`` (earlier, mentions the street), the user's address ``e-1`` with a memory,
    the assistant's echo ``e-2``, an unrelated ``e-3``, a tool output quoting it ``e-4``."""
    await scope.submit_event(
        "Our old office was at 12 Rose Lane, Springfield.", role="user", event_id="e-0"
    )
    await scope.submit_event(
        f"Please send the parcel to {ADDRESS}.", role="user", event_id="e-1", session="s"
    )
    [memory] = await scope.add_memories(
        "e-1",
        [memory_draft("User's address", ADDRESS, subject="user", fact_key="address")],
    )
    await scope.submit_event(
        "Got it, I'll ship it to 12 ROSE LANE,\n  Springfield 4410 tomorrow.",
        role="assistant",
        event_id="e-2",
        session="s",
    )
    await scope.submit_event(
        "What is the weather in Oslo?", role="user", event_id="e-3", session="s"
    )
    await scope.submit_event(
        json.dumps({"shipping_address": ADDRESS, "status": "ok"}),
        role="tool",
        event_id="e-4",
        session="orders",
    )
    return memory


async def test_a_delete_preview_lists_later_copies_and_nothing_else(mem: amem.Memory) -> None:
    scope = mem.scope()
    await address_conversation(scope)
    await mem.scope("default", "elsewhere").submit_event(f"Ship to {ADDRESS}", role="user")
    preview = await scope.delete(event_id="e-1", dry_run=True)
    assert preview.event_ids == ["e-1"]  # the copies are listed, not taken
    assert [(c.event_id, c.role, c.of) for c in preview.copies] == [
        ("e-2", "assistant", "e-1"),
        ("e-4", "tool", "e-1"),
    ]
    echo, tool = preview.copies
    assert echo.session == "s"
    assert "12 ROSE LANE,\n  Springfield 4410" in echo.match  # as the copy has it
    assert tool.match == ADDRESS
    assert (await scope.read("e-2")).text.startswith("Got it")  # a preview writes nothing


async def test_without_include_copies_the_copies_stay_and_are_reported(mem: amem.Memory) -> None:
    scope = mem.scope()
    await address_conversation(scope)
    done = await scope.delete(event_id="e-1")
    assert done.event_ids == ["e-1"]
    assert [c.event_id for c in done.copies] == ["e-2", "e-4"]
    for event_id in ("e-2", "e-4"):
        assert ADDRESS.split(",")[1].strip() in (await scope.read(event_id)).text


async def test_include_copies_erases_them_with_their_memories(mem: amem.Memory) -> None:
    scope = mem.scope()
    memory = await address_conversation(scope)
    [quoted] = await scope.add_memories(
        "e-4", [memory_draft("Shipping address", ADDRESS, basis="inference")]
    )
    preview = await scope.delete(event_id="e-1", dry_run=True, include_copies=True)
    assert preview.event_ids == ["e-1", "e-2", "e-4"]
    done = await scope.delete(event_id="e-1", include_copies=True)
    assert done.event_ids == ["e-1", "e-2", "e-4"]
    assert sorted(done.memory_ids) == sorted([memory.id, quoted.id])
    assert [c.event_id for c in done.copies] == ["e-2", "e-4"]
    for event_id in ("e-2", "e-4"):  # tombstones: the copy's ID is never stored again
        with pytest.raises(amem.Conflict) as caught:
            await scope.submit_event("anything", role="user", event_id=event_id)
        assert caught.value.code == "erased"
    found = {item.id for item in (await scope.recall("Springfield")).items}
    assert not found & {"e-1", "e-2", "e-4", memory.id, quoted.id}
    for event_id in ("e-0", "e-3"):  # the earlier mention and the unrelated event stay
        await scope.read(event_id)


async def test_erase_lists_copies_and_counts_those_it_erases(mem: amem.Memory) -> None:
    scope = mem.scope()
    await address_conversation(scope)
    preview = await scope.erase(subject="user", fact_key="address", dry_run=True)
    assert (preview.events, preview.event_ids) == (1, ["e-1"])
    assert [c.event_id for c in preview.copies] == ["e-2", "e-4"]
    wider = await scope.erase(subject="user", fact_key="address", dry_run=True, include_copies=True)
    assert wider.events == 3
    done = await scope.erase(subject="user", fact_key="address", include_copies=True)
    assert (done.events, sorted(done.event_ids)) == (3, ["e-1", "e-2", "e-4"])
    assert [c.event_id for c in done.copies] == ["e-2", "e-4"]
    with pytest.raises(amem.Conflict) as caught:
        await scope.submit_event("anything", role="tool", event_id="e-4")
    assert caught.value.code == "erased"
    await scope.read("e-3")


async def test_erase_without_include_copies_leaves_them(mem: amem.Memory) -> None:
    scope = mem.scope()
    await address_conversation(scope)
    done = await scope.erase(subject="user", fact_key="address")
    assert (done.events, done.event_ids) == (1, ["e-1"])
    assert [c.event_id for c in done.copies] == ["e-2", "e-4"]
    await scope.read("e-2")
    await scope.read("e-4")


async def test_erasing_everything_has_no_copies(mem: amem.Memory) -> None:
    scope = mem.scope()
    await address_conversation(scope)
    assert (await scope.erase(everything=True, dry_run=True)).copies == []
    assert (await scope.erase(everything=True)).copies == []


async def test_a_chinese_echo_is_a_copy(mem: amem.Memory) -> None:
    scope = mem.scope()
    await scope.submit_event("我的地址是杭州市西湖区文三路一百号。", role="user", event_id="c-1")
    await scope.submit_event(
        "好的，我会寄到杭州市西湖区文三路一百号。", role="assistant", event_id="c-2"
    )
    await scope.submit_event("杭州市的天气怎么样？", role="user", event_id="c-3")
    preview = await scope.delete(event_id="c-1", dry_run=True)
    assert [(c.event_id, c.match) for c in preview.copies] == [
        ("c-2", "杭州市西湖区文三路一百号。")
    ]


@pytest.mark.parametrize(
    ("later", "copied"),
    [
        ("it was Xzebra-violeX", False),  # 11 characters in common
        ("it was Xzebra-violetX", True),  # 12
        ("it was ZEBRA-VIOLET", True),  # case folded
        ("it was Ｚｅｂｒａ－ｖｉｏｌｅｔ", True),  # full-width forms
        ("passphrase\n\n   zebra", True),  # white space collapsed
    ],
)
async def test_a_copy_repeats_at_least_twelve_normalised_characters(
    mem: amem.Memory, later: str, copied: bool
) -> None:
    scope = mem.scope()
    await scope.submit_event("The passphrase zebra-violet-42", role="user", event_id="p-1")
    await scope.submit_event(later, role="assistant", event_id="p-2")
    preview = await scope.delete(event_id="p-1", dry_run=True)
    assert [c.event_id for c in preview.copies] == (["p-2"] if copied else [])


async def test_a_short_quote_repeated_as_a_word_is_a_copy(mem: amem.Memory) -> None:
    scope = mem.scope()
    await scope.submit_event("My cat is called Mochi.", role="user", event_id="q-1")
    await scope.add_memories("q-1", [memory_draft("User's cat is Mochi", "Mochi")])
    await scope.submit_event("Say hi to Mochi for me!", role="assistant", event_id="q-2")
    await scope.submit_event("Mochiko is a dessert.", role="assistant", event_id="q-3")
    preview = await scope.delete(event_id="q-1", dry_run=True)
    assert [(c.event_id, c.match) for c in preview.copies] == [("q-2", "Mochi")]


def test_the_cli_previews_copies_and_erases_them_on_request(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "m.db")]
    cli_ok("submit", f"Send it to {ADDRESS}", "--event-id", "m-1", *db)
    cli_ok("submit", f"Shipping to {ADDRESS} now.", "--role", "assistant", "--event-id", "m-2", *db)
    cli_ok("submit", "Thanks, bye", "--event-id", "m-3", *db)
    preview = cli_ok("delete", "--event", "m-1", *db)
    assert "1 later event repeats the erased text (copies; would stay;" in preview
    [line] = [line for line in preview.splitlines() if "copy   m-2  assistant: " in line]
    assert ADDRESS in line
    assert line.endswith("(of m-1)")
    assert "m-3" not in preview
    listed = json.loads(cli_ok("delete", "--event", "m-1", "--json", *db))
    assert [c["event_id"] for c in listed["copies"]] == ["m-2"]
    done = cli_ok("delete", "--event", "m-1", "--include-copies", "--yes", *db)
    assert "erased 2 events" in done
    assert amem_cli("read", "m-2", *db).returncode != 0
    assert "Thanks, bye" in cli_ok("read", "m-3", *db)
