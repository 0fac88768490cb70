"""People (issue 31): a registry per scope, who each event belongs to, person-scoped
recall, lists and packs, and versioned states with compare-and-set, through the Python
API. Tools, command line, archives and capture have their own files (test_people_*.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from children import common  # tests/children/common.py
from helpers import derive, memory_draft

import amem

pytestmark = [pytest.mark.both_databases, pytest.mark.anyio]

NOW = datetime.now(UTC).isoformat()


async def said(scope: amem.Scope, text: str, person: str | None, **draft: Any) -> amem.MemoryRecord:
    """An event of ``person`` saying ``text`` now, and one memory of it quoting all of it."""
    return await derive(scope, text, text, person=person, at=NOW, **draft)


async def tom_and_anna(scope: amem.Scope) -> tuple[amem.Person, amem.Person]:
    tom = await scope.upsert_person("tom", display_name="Tom", aliases=["Tommy"])
    anna = await scope.upsert_person("anna", display_name="Anna", aliases=["安娜"])
    return tom, anna


@pytest.mark.one_backend
async def test_the_registry_adds_updates_and_finds_people(scope: amem.Scope) -> None:
    lily = await scope.upsert_person(display_name="Lily", aliases=["Lil", "莉莉"], locale="zh-CN")
    assert lily.id.startswith("per_")
    assert lily.version == 1
    assert (lily.display_name, lily.aliases, lily.locale) == ("Lily", ["Lil", "莉莉"], "zh-CN")

    same = await scope.upsert_person(
        lily.id, display_name="Lily", aliases=["Lil", "莉莉"], locale="zh-CN"
    )
    assert same.version == 1, "an unchanged person keeps its version"
    moved = await scope.upsert_person(
        lily.id, display_name="Lily Chen", aliases=["莉莉"], timezone="Asia/Shanghai"
    )
    assert moved.version == 2
    assert moved.locale is None
    assert moved.timezone == "Asia/Shanghai"

    for name in ("lily chen", "ＬＩＬＹ　ＣＨＥＮ", "莉莉", "  Lily   Chen "):
        assert [p.id for p in await scope.find_person(name.strip())] == [lily.id], name
    assert await scope.find_person("Lil") == [], "an alias taken away no longer finds her"
    assert await scope.find_person("莉") == [], "a Chinese name is matched as written, whole"

    other = await scope.upsert_person(display_name="Lily")
    await scope.upsert_person(lily.id, display_name="Lily", aliases=["莉莉"])
    found = await scope.find_person("lily")
    assert [p.id for p in found] == [lily.id, other.id], "both, never a guess between them"
    assert [p.id for p in await scope.people()] == [lily.id, other.id]

    elsewhere = scope._memory.scope(persona="assistant", project="elsewhere")
    assert await elsewhere.people() == []
    assert await elsewhere.find_person("Lily") == []


@pytest.mark.one_backend
@pytest.mark.parametrize(
    "fields",
    [
        {"display_name": ""},
        {"display_name": " Tom"},
        {"display_name": "Tom", "aliases": "Tommy"},
        {"display_name": "Tom", "aliases": ["ok", "\u200bhidden"]},
        {"display_name": "Tom", "aliases": ["a"] * 51},
    ],
)
async def test_bad_names_are_refused_and_nothing_is_stored(
    scope: amem.Scope, fields: dict[str, object]
) -> None:
    with pytest.raises(amem.InvalidInput):
        await scope.upsert_person(**fields)  # type: ignore[arg-type]
    assert await scope.people() == []


async def test_events_and_their_memories_belong_to_a_person(scope: amem.Scope) -> None:
    tom, _ = await tom_and_anna(scope)
    receipt = await scope.submit_event("I moved to Hangzhou", role="user", person=tom.id)
    assert receipt.person == tom.id
    again = await scope.submit_event(
        "I moved to Hangzhou", role="user", event_id=receipt.event_id, person=tom.id
    )
    assert again.duplicate
    assert again.person == tom.id
    [memory] = await scope.add_memories(
        receipt.event_id, [memory_draft("Tom lives in Hangzhou", "moved to Hangzhou")]
    )
    assert memory.person == tom.id
    page = await scope.read(receipt.event_id)
    assert page.event.person == tom.id

    with pytest.raises(amem.NotFound):
        await scope.submit_event("hello", role="user", person="nobody")
    listed = await scope.list("events")
    assert [e.id for e in listed.items] == [receipt.event_id], "a refused event stores nothing"


@pytest.mark.one_backend
async def test_assign_moves_an_event_and_its_memories_without_copying(
    scope: amem.Scope, db_path: Path
) -> None:
    tom, anna = await tom_and_anna(scope)
    reply = await said(scope, "Glad you like tea!", None, role="assistant", kind="observation")
    moved = await scope.assign(reply.event_id, anna.id, reason="she was addressed")
    assert (moved.person, moved.previous, moved.memory_ids) == (anna.id, None, [reply.id])

    page = await scope.read(reply.event_id)
    assert page.event.person == anna.id
    assert page.event.role == "assistant", "an assistant's words stay the assistant's"
    assert page.text == "Glad you like tea!"
    [memory] = page.memories
    assert memory.person == anna.id
    assert memory.basis == "assistant_expression"
    listed = await scope.list("events")
    assert len(listed.items) == 1, "moved, not copied"
    assert [i.id for i in (await scope.recall("tea", person=anna.id)).items] == [reply.id]
    assert (await scope.recall("tea", person=tom.id)).items == []

    back = await scope.assign(reply.event_id, None)
    assert (back.person, back.previous) == (None, anna.id)
    assert (await scope.recall("tea", person=anna.id)).items == []
    with pytest.raises(amem.NotFound):
        await scope.assign(reply.event_id, "stranger")
    with pytest.raises(amem.NotFound):
        await scope.assign("evt_missing", anna.id)


@pytest.mark.one_backend
async def test_about_names_people_of_the_registry(scope: amem.Scope) -> None:
    tom, anna = await tom_and_anna(scope)
    memory = await said(scope, "Anna is my sister", tom.id, about=[anna.id])
    assert memory.about == [anna.id]
    assert memory.person == tom.id
    found = await scope.recall("sister", person=anna.id)
    assert [i.id for i in found.items] == [memory.id], "a memory about her is hers to recall"
    assert found.items[0].about == [anna.id]
    listed = await scope.list("memories", person=anna.id)
    assert [m.id for m in listed.items] == [memory.id]

    receipt = await scope.submit_event("Bob is my cousin", role="user", person=tom.id)
    with pytest.raises(amem.NotFound):  # an ID the registry does not hold
        await scope.add_memories(
            receipt.event_id,
            [memory_draft("Bob is Tom's cousin", "Bob is my cousin", about=["bob"])],
        )
    assert (await scope.read(receipt.event_id)).memories == [], "the batch stored nothing"


@pytest.mark.one_backend
async def test_a_query_naming_one_person_is_never_answered_by_another(
    scope: amem.Scope,
) -> None:
    tom, anna = await tom_and_anna(scope)
    tea = await said(scope, "I like tea", tom.id, kind="preference")
    coffee = await said(scope, "I like coffee", anna.id, kind="preference")
    await said(scope, "I drink water after running", None)

    for query in ("What does Anna drink?", "what does anna like", "安娜喜欢喝什么"):
        found = await scope.recall(query, mode="fast")
        ids = [item.id for item in found.items]
        assert ids[:1] == [coffee.id], query
        assert tea.id not in ids[:1], query
        assert found.items[0].person == anna.id
    found = await scope.recall("what does Tommy like", mode="fast")
    assert [i.id for i in found.items][:1] == [tea.id]
    both = await scope.recall("tea or coffee", mode="fast")
    assert {i.id for i in both.items} == {tea.id, coffee.id}, "naming no one keeps both"


@pytest.mark.one_backend
async def test_a_single_valued_fact_ends_only_the_same_persons_value(scope: amem.Scope) -> None:
    tom, anna = await tom_and_anna(scope)
    keyed = {"kind": "fact", "subject": "user", "fact_key": "residence"}
    toms = await said(scope, "I live in Paris", tom.id, valid_at="2026-01-01T00:00:00Z", **keyed)
    annas = await said(scope, "I live in Rome", anna.id, valid_at="2026-02-01T00:00:00Z", **keyed)
    moved = await said(scope, "I live in Oslo", tom.id, valid_at="2026-03-01T00:00:00Z", **keyed)
    current = {
        i.id: i.invalid_at for i in (await scope.list("memories", include_expired=True)).items
    }
    assert current[annas.id] is None, "Tom's move does not end Anna's residence"
    assert current[toms.id] is not None
    assert current[moved.id] is None


async def test_reassigning_a_fact_moves_it_between_the_peoples_fact_chains(
    scope: amem.Scope,
) -> None:
    tom, anna = await tom_and_anna(scope)
    keyed = {"kind": "fact", "subject": "user", "fact_key": "residence"}
    berlin = await said(scope, "I live in Berlin", tom.id, valid_at="2026-01-01T00:00:00Z", **keyed)
    rome = await said(scope, "I live in Rome", anna.id, valid_at="2026-02-01T00:00:00Z", **keyed)
    oslo = await said(scope, "I live in Oslo", anna.id, valid_at="2026-03-01T00:00:00Z", **keyed)
    paris = await said(scope, "I live in Paris", anna.id, valid_at="2026-04-01T00:00:00Z", **keyed)

    def ends(listing: amem.Listing) -> dict[str, str | None]:
        return {i.id: i.invalid_at and i.invalid_at.date().isoformat() for i in listing.items}

    before = ends(await scope.list("memories", include_expired=True))
    assert (before[rome.id], before[oslo.id], before[paris.id]) == (
        "2026-03-01",
        "2026-04-01",
        None,
    )
    await scope.assign(oslo.event_id, tom.id, reason="Tom said it in the group chat")
    after = ends(await scope.list("memories", include_expired=True))
    assert after[rome.id] == "2026-04-01", "Oslo no longer ends Anna's Rome; her Paris does"
    assert after[paris.id] is None
    assert after[berlin.id] == "2026-03-01", "Oslo ends Tom's Berlin"
    assert after[oslo.id] is None, "nothing of Tom's follows Oslo"
    hits = await scope.recall("where does Tom live", person=tom.id)
    assert [item.id for item in hits.items][:1] == [oslo.id]


async def test_person_scoped_recall_list_and_pack(scope: amem.Scope) -> None:
    tom, anna = await tom_and_anna(scope)
    await said(scope, "My favourite colour is green", tom.id, kind="preference")
    annas = await said(scope, "My favourite colour is blue", anna.id, kind="preference")
    await scope.submit_event("what colour should the poster be?", role="user", session="s1")

    found = await scope.recall("favourite colour", person=anna.id)
    assert [i.id for i in found.items] == [annas.id]
    events = await scope.list("events", person=anna.id)
    assert [e.id for e in events.items] == [annas.event_id]
    assert events.items[0].person == anna.id
    with pytest.raises(amem.NotFound):
        await scope.recall("colour", person="stranger")

    await scope.save_person_state(anna.id, {"mood": "cheerful"})
    pack = await scope.resume("s1", person=anna.id, query="colour")
    assert pack.included[:3] == ["persona", "person", "profile"]
    text = pack.render()
    assert "Person: Anna (also 安娜) [anna]" in text
    assert '"mood": "cheerful"' in text
    assert "blue" in text
    assert "green" not in text, "only her memories"
    everyone = await scope.resume("s1", query="colour")
    assert "person" not in everyone.included
    assert "green" in everyone.render()


@pytest.mark.one_backend
async def test_states_compare_and_set(scope: amem.Scope) -> None:
    tom, _ = await tom_and_anna(scope)
    empty = await scope.state()
    assert (empty.data, empty.version, empty.updated_at) == ({}, 0, None)

    first = await scope.save_state({"mode": "chat", "cursor": 1}, expected_version=0)
    assert first.version == 1
    with pytest.raises(amem.Conflict) as stale:
        await scope.save_state({"mode": "sleep"}, expected_version=0)
    assert stale.value.code == "version_conflict"
    assert (await scope.state()).data == {"mode": "chat", "cursor": 1}, "nothing changed"

    # patch: only the keys this caller changed; another caller's change elsewhere is kept
    other = await scope.patch_state(first, {**first.data, "cursor": 2})
    mine = await scope.patch_state(first, {"mode": "sleep", "cursor": 1, "new": [1]})
    assert mine.data == {"mode": "sleep", "cursor": 2, "new": [1]}
    assert mine.version == 3
    assert other.version == 2
    with pytest.raises(amem.Conflict) as clash:
        await scope.patch_state(first, {**first.data, "cursor": 5})
    assert clash.value.code == "version_conflict"
    removed = await scope.patch_state(mine, {"mode": "sleep", "cursor": 2})
    assert removed.data == {"mode": "sleep", "cursor": 2}

    assert (await scope.person_state(tom.id)).version == 0, "a person's state is their own"
    saved = await scope.save_person_state(tom.id, {"likes": "tea"}, expected_version=0)
    assert (await scope.person_state(tom.id)).data == {"likes": "tea"} == saved.data
    with pytest.raises(amem.NotFound):
        await scope.save_person_state("stranger", {})
    for bad in ([1, 2], {"x": float("nan")}, {1: "x"}, {"x": object()}):
        with pytest.raises(amem.InvalidInput):
            await scope.save_state(bad)  # type: ignore[arg-type]
    assert (await scope.state()).version == 4


@pytest.mark.one_backend
async def test_removing_a_person_is_refused_while_they_own_anything(scope: amem.Scope) -> None:
    tom, anna = await tom_and_anna(scope)
    memory = await said(scope, "hello", tom.id)
    with pytest.raises(amem.Conflict) as refused:
        await scope.remove_person(tom.id)
    assert refused.value.code == "person_in_use"
    await scope.assign(memory.event_id, None)
    removed = await scope.remove_person(tom.id)
    assert removed.id == tom.id
    assert [p.id for p in await scope.people()] == [anna.id]
    assert await scope.find_person("Tommy") == []
    with pytest.raises(amem.NotFound):
        await scope.remove_person(tom.id)


async def race(
    anyio_backend: str, tmp_path: Path, target: str, runs: list[tuple[str, str, str]], version: str
) -> list[common.Child]:
    """A ``state_racer.py`` child for each of ``runs`` (HOW KEY VALUE) over ``target``:
    every one reads the state (at ``version``) before any writes."""
    async with common.spawner(anyio_backend, tmp_path) as spawn:
        children = [await spawn.start("state_racer.py", target, *run) for run in runs]
        for child in children:
            await child.go()
        for child in children:
            assert await child.marked("read") == [version], child.describe()
        for child in children:
            await child.send("write")
        for child in children:
            await child.finish()
    return children


@pytest.mark.both_backends
@pytest.mark.parametrize("how", ["save", "patch"])
async def test_racing_processes_one_wins_the_other_gets_the_conflict(
    anyio_backend: str, tmp_path: Path, target: str, how: str
) -> None:
    async with amem.open(target, settings=amem.Settings()) as mem:
        await mem.scope(common.PERSONA, common.PROJECT).save_state({"turn": "0"})
    runs = [(how, "turn", str(n)) for n in (1, 2)]
    children = await race(anyio_backend, tmp_path, target, runs, "1")
    results = sorted(
        " ".join(mark) for child in children for mark in child.marks if mark[0] != "read"
    )
    assert results == ["conflict version_conflict", "saved 2"], [c.describe() for c in children]
    async with amem.open(target, settings=amem.Settings()) as mem:
        state = await mem.scope(common.PERSONA, common.PROJECT).state()
    winner = next(n for n, c in zip((1, 2), children, strict=False) if ["saved", "2"] in c.marks)
    assert state.data == {"turn": str(winner)}
    assert state.version == 2


@pytest.mark.both_backends
async def test_racing_patches_of_different_keys_both_land(
    anyio_backend: str, tmp_path: Path, target: str
) -> None:
    runs = [("patch", key, "v") for key in "ab"]
    children = await race(anyio_backend, tmp_path, target, runs, "0")
    saved = sorted(mark[1] for child in children for mark in child.marks if mark[0] == "saved")
    assert saved == ["1", "2"], [c.describe() for c in children]
    async with amem.open(target, settings=amem.Settings()) as mem:
        state = await mem.scope(common.PERSONA, common.PROJECT).state()
    assert state.data == {"a": "v", "b": "v"}, "nothing is lost"
    assert state.version == 2
