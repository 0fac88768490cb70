"""People through the operations: archives and backups carry the registry, whom every
event and memory belongs to, whom a memory is about, the assignments and the states;
``doctor`` checks that ownership; ``erase(person=...)`` forgets one relationship, after
which the person can leave the registry."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from helpers import amem_cli, derive, dump, rows, value

import amem

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]  # see tests/conftest.py

PERSONA, PROJECT = "assistant", "support"
SCOPE = ("--persona", PERSONA, "--project", PROJECT)

OWNERSHIP = """
select 'event', id, person, null from events
union all
select 'memory', id, person, about from memories
order by 1, 2
"""
"""Whom every event and memory belongs to (and is about), as stored."""


@dataclass(frozen=True)
class World:
    tom: str
    anna: str
    about_tom: str
    """The memory of Anna's event that is about Tom."""


async def acquaint(mem: amem.Memory) -> World:
    """Two people with their own events and memories, one event of no one's moved to Tom
    (an assignment), a memory of Anna's about Tom, and states of the scope and of Tom."""
    s = mem.scope(PERSONA, PROJECT)
    tom = await s.upsert_person(display_name="Tom", aliases=["Tommy"], locale="en")
    anna = await s.upsert_person(display_name="安娜", aliases=["Anna"], notes="tea")
    await derive(s, "I moved to Hangzhou last spring", event_id="t-1", session="a", person=tom.id)
    await derive(s, "My sister visits in June", event_id="t-2", session="b", person=tom.id)
    await s.submit_event("Walnut the cat is mine", role="user", event_id="t-3", session="a")
    await s.assign("t-3", tom.id, reason="said in Tom's chat")
    await derive(s, "安娜喜欢喝龙井茶", event_id="a-1", session="a", person=anna.id)
    about = await derive(
        s, "Tom fixed my bicycle", event_id="a-2", session="a", person=anna.id, about=[tom.id]
    )
    await s.submit_event("Opening hours are 9 to 5", role="user", event_id="n-1")
    await s.save_state({"topic": "tea"})
    await s.save_person_state(tom.id, {"mood": "cheerful"})
    await s.save_person_state(tom.id, {"mood": "tired"}, expected_version=1)
    return World(tom.id, anna.id, about.id)


@pytest.fixture
async def world(mem: amem.Memory) -> World:
    """``acquaint`` in the test's open file (the ``mem`` fixture, scope ``scope``)."""
    return await acquaint(mem)


def stored(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Everything people-related a file holds, and the index documents (with their person
    tokens), as plain rows."""
    return {
        "people": rows(path, "select * from people order by persona, project, id"),
        "names": rows(path, "select * from person_names order by 1, 2, 3, 4"),
        "ownership": rows(path, OWNERSHIP),
        "assignments": rows(path, "select * from assignments order by num"),
        "states": rows(path, "select * from states order by 1, 2, 3"),
        "docs": rows(path, "select doc_kind, ref, tokens from search_docs order by 1, 2"),
    }


async def copy_by(way: str, mem: amem.Memory, target: Path) -> None:
    if way == "archive":
        await mem.export(target)
    else:
        await mem.backup(target)


async def load_by(way: str, mem: amem.Memory, source: Path) -> amem.ArchiveResult:
    if way == "archive":
        return await mem.import_archive(source)
    return await mem.restore(source)


# --- archives and backups ----------------------------------------------------------------


@pytest.mark.parametrize("way", ["archive", "backup"])
async def test_people_ownership_states_and_assignments_survive_a_round_trip(
    tmp_path: Path, way: str
) -> None:
    source, target, copy = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "copy"
    async with amem.open(source) as mem:
        world = await acquaint(mem)
        before_people = await mem.scope(PERSONA, PROJECT).people()
        await copy_by(way, mem, copy)
    async with amem.open(target) as mem:
        loaded = await load_by(way, mem, copy)
        s = mem.scope(PERSONA, PROJECT)
        assert (loaded.counts["people"], loaded.counts["assignments"]) == (2, 1)
        assert loaded.counts["states"] == 2
        assert await s.people() == before_people
        assert [p.id for p in await s.find_person("tommy")] == [world.tom]  # names rebuilt
        assert (await s.person_state(world.tom)).data == {"mood": "tired"}
        assert (await s.person_state(world.tom)).version == 2
        assert (await s.state()).data == {"topic": "tea"}

        # the person's own search still finds their events and memories after the load
        hits = await s.recall("Hangzhou", person=world.tom)
        assert "t-1" in {item.source_event_id for item in hits.items}
        assert not (await s.recall("Hangzhou", person=world.anna)).items
        owned = await s.list("events", person=world.tom)
        assert sorted(item.id for item in owned.items) == ["t-1", "t-2", "t-3"]

        report = await mem.doctor()
        assert report.ok, report.checks
    assert stored(target) == stored(source)  # person tokens included: carried, not lost


async def test_an_export_of_an_import_is_the_same_archive(tmp_path: Path) -> None:
    async with amem.open(tmp_path / "a.db") as mem:
        await acquaint(mem)
        await mem.export(tmp_path / "a.jsonl")
    async with amem.open(tmp_path / "b.db") as mem:
        await mem.import_archive(tmp_path / "a.jsonl")
        await mem.export(tmp_path / "b.jsonl")
    first, second = (
        (tmp_path / name).read_text().splitlines()[1:] for name in ("a.jsonl", "b.jsonl")
    )
    assert first == second
    tables = [json.loads(line).get("table") for line in first[:-1]]
    assert tables.index("people") < tables.index("events")  # the registry comes first
    tom_event = next(json.loads(line)["row"] for line in first if '"id":"t-1"' in line)
    assert tom_event["person"] is not None


async def test_an_archive_from_before_people_imports_with_nothing_owned(tmp_path: Path) -> None:
    fixture = Path(__file__).parent / "fixtures" / "archive_v2.jsonl"
    async with amem.open(tmp_path / "b.db") as mem:
        loaded = await mem.import_archive(fixture)
        assert loaded.counts["events"] > 0
        assert (loaded.counts["people"], loaded.counts["states"]) == (0, 0)
        assert (await mem.doctor()).ok
    assert rows(tmp_path / "b.db", "select count(*) from events where person is not null") == [(0,)]


def spoil(path: Path, table: str, pick: str, **values: object) -> None:
    """Change the row of ``table`` whose ``id`` (or ``person``) is ``pick``."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    row = next(
        line["row"]
        for line in lines
        if line.get("table") == table and pick in (line["row"].get("id"), line["row"].get("person"))
    )
    row.update(values)
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))


@pytest.mark.parametrize(
    ("table", "change", "message"),
    [
        ("events", {"person": "per_stranger"}, "names a person not in its scope's registry"),
        ("memories", {"person": "per_stranger"}, "belongs to another person than its source event"),
        ("memories", {"about": ["per_stranger"]}, "names a person not in its scope's registry"),
        ("states", {"person": "per_stranger"}, "names a person not in its scope's registry"),
    ],
)
async def test_an_archive_naming_a_stranger_is_refused_whole(
    tmp_path: Path, table: str, change: dict[str, object], message: str
) -> None:
    async with amem.open(tmp_path / "a.db") as mem:
        world = await acquaint(mem)
        await mem.export(tmp_path / "a.jsonl")
    pick = {"events": "t-1", "memories": world.about_tom, "states": world.tom}[table]
    spoil(tmp_path / "a.jsonl", table, pick, **change)
    async with amem.open(tmp_path / "b.db") as mem:
        with pytest.raises(amem.StorageError) as caught:
            await mem.import_archive(tmp_path / "a.jsonl")
        assert caught.value.code == "archive_invalid"
        assert message in caught.value.message
        assert await mem.scope(PERSONA, PROJECT).people() == []  # nothing was committed


# --- doctor --------------------------------------------------------------------------------


def check(report: amem.DoctorReport, name: str) -> amem.DoctorCheck:
    return next(c for c in report.checks if c.name == name)


async def test_doctor_is_clean_with_people_and_a_rebuild_keeps_person_tokens(
    mem: amem.Memory, scope: amem.Scope, db_path: Path, world: World
) -> None:
    report = await mem.doctor()
    assert report.ok, report.checks
    assert check(report, "ownership").ok
    assert check(report, "person names").ok
    assert report.counts["people"] == 2
    before = stored(db_path)
    rebuilt = await mem.doctor(rebuild_index=True)
    assert rebuilt.ok, rebuilt.checks
    assert stored(db_path) == before  # the rebuilt documents carry the same person tokens
    hits = await scope.recall("Hangzhou", person=world.tom)
    assert "t-1" in {item.source_event_id for item in hits.items}


BREAKS = {
    "an event of a stranger": (
        "update events set person = 'per_ghost' where id = 't-2'",
        "1 events belonging to a person not in their scope's registry (first: t-2)",
    ),
    "a memory of another person than its event": (
        "update memories set person = null where event_id = 't-1'",
        "1 memories belonging to another person than their source event",
    ),
    "a memory about a stranger": (
        """update memories set about = '["per_ghost"]' where event_id = 'a-1'""",
        "1 memories about a person not in their scope's registry",
    ),
    "a state of a stranger": (
        "update states set person = 'per_ghost' where person != ''",
        "1 states of a person not in their scope's registry (first: per_ghost)",
    ),
}


@pytest.mark.parametrize("case", list(BREAKS))
async def test_doctor_reports_broken_ownership(tmp_path: Path, case: str) -> None:
    db = tmp_path / "a.db"
    async with amem.open(db) as mem:
        await acquaint(mem)
    sql, detail = BREAKS[case]
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(sql)
        conn.commit()
    async with amem.open(db) as mem:
        report = await mem.doctor()
    assert not report.ok
    ownership = check(report, "ownership")
    assert not ownership.ok
    assert detail in ownership.detail
    assert "assign" in (ownership.fix or "")
    assert not check(report, "archive").ok  # an export of it would not import either


async def test_doctor_reports_person_names_out_of_step_and_a_rebuild_repairs_them(
    tmp_path: Path,
) -> None:
    db = tmp_path / "a.db"
    async with amem.open(db) as mem:
        world = await acquaint(mem)
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("delete from person_names where name = 'tommy'")
        conn.commit()
    async with amem.open(db) as mem:
        names = check(await mem.doctor(), "person names")
        assert (names.ok, names.detail) == (False, "1 people found by other names than they have")
        assert "--rebuild-index" in (names.fix or "")
        assert (await mem.doctor(rebuild_index=True)).ok
        found = await mem.scope(PERSONA, PROJECT).find_person("Tommy")
        assert [p.id for p in found] == [world.tom]


# --- erase(person=...) ---------------------------------------------------------------------


async def test_erasing_a_person_previews_then_erases_exactly_their_relationship(
    mem: amem.Memory, scope: amem.Scope, db_path: Path, world: World
) -> None:
    toms = {"t-1", "t-2", "t-3"}
    tom_memories = {
        m for (m,) in rows(db_path, "select id from memories where event_id in ('t-1', 't-2')")
    }
    before = dump(db_path)

    preview = await scope.erase(person=world.tom, dry_run=True)
    assert set(preview.event_ids) == toms
    assert set(preview.memory_ids) == tom_memories
    assert (preview.dry_run, preview.states) == (True, 1)
    assert dump(db_path) == before  # a preview changes nothing

    done = await scope.erase(person=world.tom)
    assert (set(done.event_ids), set(done.memory_ids)) == (toms, tom_memories)
    assert (done.dry_run, done.events, done.states) == (False, 3, 1)
    left = {e for (e,) in rows(db_path, "select id from events")}
    assert left == {"a-1", "a-2", "n-1"}  # Anna's and no one's stay
    assert value(db_path, "select count(*) from memories where person is not ?", world.anna) == 0
    assert value(db_path, "select count(*) from assignments") == 0
    assert (
        value(db_path, "select count(*) from search_docs where ref in ('t-1', 't-2', 't-3')") == 0
    )
    assert (await scope.person_state(world.tom)).version == 0  # their state went
    assert (await scope.state()).data == {"topic": "tea"}  # the scope's stays
    with pytest.raises(amem.Conflict) as caught:  # tombstones: never stored again
        await scope.submit_event("again", role="user", event_id="t-1")
    assert caught.value.code == "erased"

    # Anna's memory about Tom is hers, and keeps Tom in the registry
    with pytest.raises(amem.Conflict) as caught:
        await scope.remove_person(world.tom)
    assert caught.value.code == "person_in_use"
    await scope.delete(memory_id=world.about_tom)
    removed = await scope.remove_person(world.tom)
    assert removed.id == world.tom
    assert [p.id for p in await scope.people()] == [world.anna]
    assert (await mem.doctor()).ok


async def test_erasing_a_person_with_another_selector_takes_only_what_matches_both(
    scope: amem.Scope, db_path: Path, world: World
) -> None:
    done = await scope.erase(person=world.tom, session="a")
    assert sorted(done.event_ids) == ["t-1", "t-3"]  # not Anna's of session a
    assert done.states == 0  # part of the relationship: the state stays
    assert (await scope.person_state(world.tom)).data == {"mood": "tired"}
    assert {e for (e,) in rows(db_path, "select id from events")} == {"t-2", "a-1", "a-2", "n-1"}


async def test_erasing_a_stranger_is_not_found_and_no_selector_is_still_refused(
    scope: amem.Scope, world: World
) -> None:
    with pytest.raises(amem.NotFound):
        await scope.erase(person="per_nobody", dry_run=True)
    with pytest.raises(amem.InvalidInput) as caught:
        await scope.erase()
    assert "person" in caught.value.message
    with pytest.raises(amem.InvalidInput):
        await scope.erase(person="per_x", everything=True)


def test_cli_erase_by_person_is_a_preview_unless_yes(tmp_path: Path) -> None:
    db = tmp_path / "a.db"

    async def build() -> World:
        async with amem.open(db) as mem:
            return await acquaint(mem)

    world = anyio.run(build)
    base = ["--db", str(db), *SCOPE]
    before = dump(db)
    result = amem_cli("erase", "--person", "tommy", *base)  # an alias names him too
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith(f"{PERSONA}/{PROJECT}: would erase 3 events, 2 memories")
    assert ", 1 person state;" in first
    assert dump(db) == before
    result = amem_cli("erase", "--person", world.tom, "--yes", "--json", *base)
    assert result.returncode == 0, result.stderr
    receipt = json.loads(result.stdout)
    assert (receipt["events"], receipt["states"]) == (3, 1)
    assert rows(db, "select count(*) from events where person = ?", world.tom) == [(0,)]
