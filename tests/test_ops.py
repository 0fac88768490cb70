"""Export, import, backup, restore and doctor, through the Python API and the CLI.

An archive is the canonical dump of a database: exporting, importing into an empty file
and exporting again gives the same lines. A bad archive or backup is refused whole
(``archive_invalid``) and the destination stays as it was. Files amem writes never replace
anything, never leave a temporary file behind and stay inside the directory they were
aimed at.
"""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import amem_cli, dump, memory_draft

import amem
from amem.db.schema import SCHEMA_VERSION, V1, V2

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]  # see tests/conftest.py

FIXTURES = Path(__file__).parent / "fixtures"
PERSONA, PROJECT = "assistant", "support"
HANGZHOU = "我搬到杭州了，喜欢喝龙井茶。"


# --- helpers ---------------------------------------------------------------------------


def settings() -> amem.Settings:
    return amem.Settings()


async def populate(mem: amem.Memory) -> None:
    """One of everything an archive carries: events of every category, memories with
    emotions, a correction, a relation, a checkpoint, persona versions, a capture cursor."""
    s = mem.scope(persona=PERSONA, project=PROJECT)
    await s.submit_event(
        HANGZHOU,
        role="user",
        event_id="e1",
        session="chat",
        occurred_at="2026-01-01T09:00:00+08:00",
    )
    r2 = await s.submit_event("太好了，我很开心！", role="assistant", event_id="e2", session="chat")
    await s.submit_event(
        "Support hours are 9 to 5.", role="system", event_id="e3", category="reference"
    )
    fact, tea = await s.add_memories(
        "e1",
        [
            amem.MemoryDraft(
                text="用户住在杭州",
                quote="我搬到杭州了",
                kind="fact",
                basis="user_statement",
                subject="user",
                fact_key="residence",
            ),
            amem.MemoryDraft(
                text="User likes Longjing tea",
                quote="喜欢喝龙井茶",
                kind="preference",
                basis="user_statement",
            ),
        ],
    )
    await s.add_memories(
        "e2",
        [
            amem.MemoryDraft(
                text="Assistant felt happy",
                quote="我很开心",
                kind="emotion",
                basis="assistant_expression",
                emotion=amem.Emotion(label="joy", valence=0.8, arousal=0.5),
            ),
        ],
    )
    await s.relate(fact.id, tea.id)
    await s.correct(tea.id, "User likes green tea", reason="misheard")
    await s.save_checkpoint(
        "chat", goal="settle in", completed=["flat"], pending=["tea"], covered_seq=r2.seq
    )
    await mem.set_persona(PERSONA, "You are kind.")
    await mem.set_persona(PERSONA, "You are kind and brief.", note="shorter")
    await s.host_ingest("host-1", [{"event_id": "h1", "text": "hello there", "role": "user"}])
    other = mem.scope(persona="other", project=PROJECT)
    await other.submit_event("another scope's words", role="user", event_id="o1")


def archive_lines(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The header (without ``exported_at``) and every later line of an archive."""
    first, *rest = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(first)
    assert header.pop("exported_at").endswith("Z")
    return header, rest


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture(scope="module")
def good_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An archive of ``populate``'s data, written once for the tests that spoil it."""
    directory = tmp_path_factory.mktemp("good")

    async def build() -> None:
        async with amem.open(directory / "source.db", settings=settings()) as mem:
            await populate(mem)
            await mem.export(directory / "good.jsonl")

    anyio.run(build)
    return directory / "good.jsonl"


# --- export and import -----------------------------------------------------------------


async def test_export_then_import_reproduces_the_same_archive(tmp_path: Path) -> None:
    async with amem.open(tmp_path / "a.db", settings=settings()) as mem:
        await populate(mem)
        s = mem.scope(PERSONA, PROJECT)
        run = await s.prepare_consolidation()
        await s.record_attempt(run.id, {"entries": []}, "nothing to tidy yet")
        exported = await mem.export(tmp_path / "a.jsonl")
    assert exported.counts == {
        "erased_events": 0,
        "people": 0,
        "events": 6,
        "personas": 2,
        "memories": 4,
        "relations": 2,
        "checkpoints": 1,
        "capture_cursors": 1,
        "assignments": 0,
        "states": 0,
        "consolidation_runs": 1,
        "consolidation_sources": 3,
    }
    async with amem.open(tmp_path / "b.db", settings=settings()) as mem:
        imported = await mem.import_archive(tmp_path / "a.jsonl")
        assert imported.counts == exported.counts
        again = await mem.export(tmp_path / "b.jsonl")
        assert again.counts == exported.counts

        report = await mem.doctor()
        assert report.ok, report.checks
        s = mem.scope(persona=PERSONA, project=PROJECT)
        hits = await s.recall("住在哪里 杭州")
        assert [item.text for item in hits.items][:1] == ["用户住在杭州"]
        page = await s.read(hits.items[0].id)
        assert page.text == HANGZHOU
        assert await s.capture_cursor("host-1") == 1
        assert (await mem.persona(PERSONA)).text == "You are kind and brief."
        assert (await s.checkpoint("chat")) is not None
        assert [i.text for i in (await s.recall("green tea")).items] == ["User likes green tea"]

    header_a, rows_a = archive_lines(tmp_path / "a.jsonl")
    header_b, rows_b = archive_lines(tmp_path / "b.jsonl")
    assert (
        header_a
        == header_b
        == {"format": "amem-archive", "format_version": 1, "schema_version": SCHEMA_VERSION}
    )
    assert rows_a == rows_b
    assert rows_a[-1] == json.dumps({"end": True, "rows": 20}, separators=(",", ":"))


@pytest.mark.both_backends
@pytest.mark.both_databases
async def test_export_and_backup_are_one_snapshot_each_while_a_writer_runs(
    target: str, tmp_path: Path
) -> None:
    async with amem.open(target, settings=settings()) as mem:
        s = mem.scope(persona=PERSONA, project=PROJECT)
        acked: list[int] = []

        async def write() -> None:
            for n in range(10_000):
                r = await s.submit_event(f"第{n}条消息 message {n}", role="user", session="s")
                acked.append(r.seq)

        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            while len(acked) < 30:
                await anyio.sleep(0.01)
            before = len(acked)
            result = await mem.export(tmp_path / "live.jsonl")
            backup = await mem.backup(tmp_path / "live.backup")
            tg.cancel_scope.cancel()
    seqs = [
        json.loads(line)["row"]["seq"]
        for line in archive_lines(tmp_path / "live.jsonl")[1]
        if '"table":"events"' in line
    ]
    assert seqs == list(range(1, len(seqs) + 1))  # a committed prefix, nothing torn
    assert before <= len(seqs) == result.counts["events"]
    with closing(sqlite3.connect(backup.path)) as conn:  # a backup is a SQLite file
        copied = [seq for (seq,) in conn.execute("select seq from events order by seq")]
    assert copied == list(range(1, len(copied) + 1))  # a later snapshot, as whole
    assert len(copied) >= len(seqs)
    assert leftovers(tmp_path) == []
    async with amem.open(tmp_path / "b.db", settings=settings()) as mem:
        assert (await mem.import_archive(tmp_path / "live.jsonl")).counts["events"] == len(seqs)


async def test_import_refuses_a_destination_that_holds_data(
    tmp_path: Path, good_archive: Path
) -> None:
    db = tmp_path / "busy.db"
    async with amem.open(db, settings=settings()) as mem:
        await mem.scope().submit_event("already here", role="user", event_id="x")
        before = dump(db)
        with pytest.raises(amem.StorageError) as caught:
            await mem.import_archive(good_archive)
        assert caught.value.code == "target_exists"
        assert "new file" in caught.value.message
        assert dump(db) == before


Spoil = Callable[[list[dict[str, Any]]], list[str]]


def rows_of(lines: list[dict[str, Any]], table: str) -> list[dict[str, Any]]:
    return [line["row"] for line in lines if line.get("table") == table]


def memory_quoting(lines: list[dict[str, Any]], quote: str) -> dict[str, Any]:
    return next(row for row in rows_of(lines, "memories") if row["quote"] == quote)


def encoded(lines: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(line, ensure_ascii=False) for line in lines]  # NaN stays NaN


def changed(fn: Callable[[list[dict[str, Any]]], object]) -> Spoil:
    def spoil(lines: list[dict[str, Any]]) -> list[str]:
        fn(lines)
        return encoded(lines)

    return spoil


def truncated_mid_line(lines: list[dict[str, Any]]) -> list[str]:
    text = encoded(lines)
    return [*text[:5], text[5][: len(text[5]) // 2]]


def set_row(table: str, pick: Callable[[dict[str, Any]], bool], **values: Any) -> Spoil:
    return changed(lambda lines: next(r for r in rows_of(lines, table) if pick(r)).update(values))


def spoil_quote(lines: list[dict[str, Any]]) -> None:
    memory_quoting(lines, "我搬到杭州了")["quote"] = "我搬到苏州了"


def spoil_relation(lines: list[dict[str, Any]]) -> None:
    rows_of(lines, "relations")[0]["to_id"] = "mem_missing"


def spoil_basis(lines: list[dict[str, Any]]) -> None:
    memory_quoting(lines, "我很开心")["basis"] = "user_statement"


def cover_another_scope(lines: list[dict[str, Any]]) -> None:
    other = next(row for row in rows_of(lines, "events") if row["id"] == "o1")
    rows_of(lines, "checkpoints")[0]["covered_seq"] = other["seq"]


def duplicate_event(lines: list[dict[str, Any]]) -> None:
    lines.insert(2, lines[1])
    lines[-1]["rows"] += 1


BAD_ARCHIVES: dict[str, tuple[Spoil, str]] = {
    "truncated (no end line)": (lambda lines: encoded(lines)[:-1], "truncated"),
    "truncated mid-line": (truncated_mid_line, "line 6 is not valid JSON"),
    "row count differs": (changed(lambda lines: lines[-1].update(rows=3)), "truncated"),
    "future format version": (
        changed(lambda lines: lines[0].update(format_version=2)),
        "format version is newer",
    ),
    "future schema version": (
        changed(lambda lines: lines[0].update(schema_version=SCHEMA_VERSION + 1)),
        "schema version is newer",
    ),
    "not an archive": (changed(lambda lines: lines[0].update(format="x")), "not an amem archive"),
    "NaN confidence": (
        set_row("memories", lambda r: r["num"] == 1, confidence=float("nan")),
        "NaN",
    ),
    "infinite valence": (
        set_row("memories", lambda r: r["emotion"] is not None, valence=float("inf")),
        "NaN",
    ),
    "quote not in its event": (changed(spoil_quote), "quote does not occur in its event"),
    "memory of a missing event": (
        set_row("memories", lambda r: r["num"] == 1, event_id="gone"),
        "source event is missing",
    ),
    "memory in another scope than its event": (
        set_row("memories", lambda r: r["num"] == 1, persona="other"),
        "in another scope",
    ),
    "relation to a missing memory": (changed(spoil_relation), "relation links a missing memory"),
    "bad role": (
        set_row("events", lambda r: r["id"] == "e1", role="robot"),
        "(events): role: Input",
    ),
    "basis does not fit the role": (changed(spoil_basis), "basis does not fit"),
    "naive timestamp": (
        set_row("events", lambda r: r["id"] == "e1", occurred_at="2026-01-01T09:00:00"),
        "occurred_at: Value error, not an ISO-8601 time with a UTC offset",
    ),
    "checkpoint covering another session": (
        set_row("checkpoints", lambda r: True, session="elsewhere"),
        "covers an event outside its session",
    ),
    "checkpoint covering another scope's event": (
        changed(cover_another_scope),
        "covers an event outside its session",
    ),
    "unknown field": (
        set_row("events", lambda r: r["id"] == "e1", secret="x"),
        "?: unexpected field",
    ),
    "unknown table": (changed(lambda lines: lines[1].update(table="config")), "known table"),
    "event id twice": (changed(duplicate_event), "appears twice"),
}


@pytest.mark.parametrize("case", list(BAD_ARCHIVES))
async def test_a_bad_archive_is_refused_whole(
    tmp_path: Path, good_archive: Path, case: str
) -> None:
    spoil, expected = BAD_ARCHIVES[case]
    lines = [json.loads(line) for line in good_archive.read_text(encoding="utf-8").splitlines()]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(spoil(lines)) + "\n", encoding="utf-8")
    db = tmp_path / "empty.db"
    async with amem.open(db, settings=settings()) as mem:
        before = dump(db)
        with pytest.raises(amem.StorageError) as caught:
            await mem.import_archive(bad)
        assert dump(db) == before
    error = caught.value
    assert error.code == "archive_invalid"
    assert expected in error.message
    for secret in (HANGZHOU, "我搬到苏州了", "robot", "2026-01-01T09:00:00", "config", "gone"):
        assert secret not in error.message  # names the rule, never the stored values


async def test_a_file_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"format": "amem-archive"}\n\xff\xfe\n')
    async with amem.open(tmp_path / "empty.db", settings=settings()) as mem:
        with pytest.raises(amem.StorageError, match=r"archive_invalid: .*not UTF-8"):
            await mem.import_archive(bad)
        with pytest.raises(amem.InvalidInput, match="does not exist"):
            await mem.import_archive(tmp_path / "missing.jsonl")


@pytest.mark.parametrize("version", [1, 2])
async def test_archives_of_older_schema_versions_import(tmp_path: Path, version: int) -> None:
    source = FIXTURES / f"archive_v{version}.jsonl"
    async with amem.open(tmp_path / "new.db", settings=settings()) as mem:
        result = await mem.import_archive(source)
        assert result.counts["events"] == 4
        assert result.counts["capture_cursors"] == 0
        s = mem.scope(persona=PERSONA, project=PROJECT)
        report = await mem.doctor()
        assert all(c.ok for c in report.checks if c.name.startswith("search")), report.checks
        assert report.schema_version == SCHEMA_VERSION
        if version == 1:
            hits = await s.recall("杭州")
            assert hits.items[0].text == "用户住在杭州"
            assert (await s.read(hits.items[0].id)).text.startswith("我搬到杭州了")
            assert (await s.checkpoint("chat-1")) is not None
        else:
            hits = await s.recall("milk")
            assert [item.text for item in hits.items] == ["User drinks soy milk"]  # revoked gone
            assert (await mem.persona(PERSONA)).version == 2
        await mem.export(tmp_path / "again.jsonl")
    header, rows = archive_lines(tmp_path / "again.jsonl")
    assert header["schema_version"] == SCHEMA_VERSION
    memories = {row["id"]: row for table, row in map(table_row, rows) if table == "memories"}
    if version == 1:  # old fading memories get the cue keys schema 2 introduced
        assert memories["v1-m2"]["cue_key"] == "周末 西湖 划船"
        assert memories["v1-m1"]["cue_key"] is None  # facts do not fade
    else:
        assert memories["v2-m2"]["gist"] == "泰山日出徒步"


def table_row(line: str) -> tuple[str | None, dict[str, Any]]:
    data = json.loads(line)
    return data.get("table"), data.get("row", {})


# --- backup and restore ----------------------------------------------------------------


@pytest.mark.both_backends
async def test_backup_while_a_writer_runs_restores_a_consistent_copy(tmp_path: Path) -> None:
    source = tmp_path / "live.db"
    async with amem.open(source, settings=settings()) as mem:
        s = mem.scope(persona=PERSONA, project=PROJECT)
        await populate(mem)
        acked: list[str] = []

        async def write() -> None:
            for n in range(100_000):
                event_id = f"w{n}"
                await s.submit_event(f"后台写入第{n}条 西湖", role="user", event_id=event_id)
                acked.append(event_id)

        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            while len(acked) < 30:
                await anyio.sleep(0.01)
            before = list(acked)
            await mem.backup(tmp_path / "copy.db")
            while len(acked) < len(before) + 30:  # the writer kept going during the backup
                await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    assert leftovers(tmp_path) == []
    with closing(sqlite3.connect(tmp_path / "copy.db")) as conn:
        assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]
        assert conn.execute("pragma journal_mode").fetchone() == ("delete",)
        seqs = [row[0] for row in conn.execute("select seq from events order by seq")]
        ids = {row[0] for row in conn.execute("select id from events")}
    assert seqs == list(range(1, len(seqs) + 1))
    assert set(before) <= ids
    copied = bytes((tmp_path / "copy.db").read_bytes())

    restored = tmp_path / "restored.db"
    async with amem.open(restored, settings=settings()) as mem:
        result = await mem.restore(tmp_path / "copy.db")
        assert result.counts["events"] == len(seqs)
        assert (await mem.doctor()).ok
        s = mem.scope(persona=PERSONA, project=PROJECT)
        assert [i.text for i in (await s.recall("杭州")).items][:1] == ["用户住在杭州"]
        assert await s.capture_cursor("host-1") == 1
        raw = await s.recall(before[-1].removeprefix("w") + "条")
        assert raw.items  # written events are searchable again (raw fallback)
    assert (tmp_path / "copy.db").read_bytes() == copied  # restore never writes to the backup
    with closing(sqlite3.connect(restored)) as conn:
        indexed = conn.execute("select count(*) from search_docs").fetchone()[0]
    assert indexed == len(seqs) - 1 + 3  # not the reference event; the current memories


async def test_restore_validates_a_backup_like_an_archive(tmp_path: Path) -> None:
    async with amem.open(tmp_path / "a.db", settings=settings()) as mem:
        await populate(mem)
        await mem.backup(tmp_path / "copy.db")
    with closing(sqlite3.connect(tmp_path / "copy.db")) as conn:
        conn.execute("update memories set quote = '我搬到苏州了' where quote = '我搬到杭州了'")
        conn.commit()
    db = tmp_path / "b.db"
    async with amem.open(db, settings=settings()) as mem:
        before = dump(db)
        with pytest.raises(amem.StorageError) as caught:
            await mem.restore(tmp_path / "copy.db")
        assert caught.value.code == "archive_invalid"
        assert "quote does not occur" in caught.value.message
        assert dump(db) == before
        (tmp_path / "junk.db").write_bytes(b"this is not sqlite" * 100)
        with pytest.raises(amem.StorageError, match="archive_invalid"):
            await mem.restore(tmp_path / "junk.db")
        with pytest.raises(amem.StorageError, match="archive_invalid"):
            await mem.restore(FIXTURES / "archive_v1.jsonl")  # an archive is not a backup
        assert dump(db) == before


@pytest.mark.parametrize("version", [1, 2])
async def test_sqlite_backups_of_older_schema_versions_restore(
    tmp_path: Path, version: int
) -> None:
    """A backup file written by amem at schema 1 or 2, rebuilt from the fixture's rows."""
    backup = tmp_path / f"v{version}.db"
    lines = (FIXTURES / f"archive_v{version}.jsonl").read_text(encoding="utf-8").splitlines()
    with closing(sqlite3.connect(backup)) as conn:
        for statement in V1 + (V2 if version == 2 else ()):
            conn.execute(statement)
        conn.execute(f"pragma user_version = {version}")
        for table, row in map(table_row, lines[1:-1]):
            assert table is not None
            if table == "checkpoints":
                row = {k: json.dumps(v) if isinstance(v, list) else v for k, v in row.items()}
            names = ", ".join(row)
            marks = ", ".join(f":{name}" for name in row)
            conn.execute(f"insert into {table} ({names}) values ({marks})", row)
        conn.commit()
    async with amem.open(tmp_path / "new.db", settings=settings()) as mem:
        result = await mem.restore(backup)
        assert result.counts["memories"] == 3
        s = mem.scope(persona=PERSONA, project=PROJECT)
        query, expected = (
            ("杭州", "用户住在杭州") if version == 1 else ("milk", "User drinks soy milk")
        )
        assert (await s.recall(query)).items[0].text == expected


# --- files: never overwritten, atomic, confined ----------------------------------------


@pytest.mark.both_databases
@pytest.mark.parametrize("operation", ["export", "backup"])
async def test_an_existing_target_is_never_overwritten(
    mem: amem.Memory, tmp_path: Path, operation: str
) -> None:
    await mem.scope().submit_event("something", role="user")
    target = tmp_path / "precious.out"
    target.write_bytes(b"keep me")
    with pytest.raises(amem.StorageError) as caught:
        await getattr(mem, operation)(target)
    assert caught.value.code == "target_exists"
    assert target.read_bytes() == b"keep me"
    assert leftovers(tmp_path) == []


@pytest.mark.both_databases
async def test_a_target_created_during_the_export_is_not_overwritten(
    mem: amem.Memory, tmp_path: Path
) -> None:
    await mem.scope().submit_event("something", role="user")
    target = tmp_path / "race.jsonl"

    def someone_else_writes(done: int, total: int) -> None:
        if done == total:
            target.write_text("theirs")

    with pytest.raises(amem.StorageError) as caught:
        await mem.export(target, progress=someone_else_writes)
    assert caught.value.code == "target_exists"
    assert target.read_text() == "theirs"
    assert leftovers(tmp_path) == []


@pytest.mark.both_databases
async def test_a_failed_export_leaves_no_file(mem: amem.Memory, tmp_path: Path) -> None:
    for n in range(3):
        await mem.scope().submit_event(f"event {n}", role="user")
    target = tmp_path / "out" / "archive.jsonl"
    target.parent.mkdir()

    def fail(done: int, total: int) -> None:
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        await mem.export(target, progress=fail)
    assert list(target.parent.iterdir()) == []
    result = await mem.export(target)
    assert result.counts["events"] == 3
    assert [p.name for p in target.parent.iterdir()] == ["archive.jsonl"]
    assert target.stat().st_mode & 0o777 == 0o600  # plaintext at rest: owner only


@pytest.mark.both_databases
@pytest.mark.parametrize("operation", ["export", "backup"])
async def test_paths_are_confined(mem: amem.Memory, tmp_path: Path, operation: str) -> None:
    write = getattr(mem, operation)
    inside = tmp_path / "inside"
    outside = tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    (inside / "sub").mkdir()
    (inside / "link-out").symlink_to(outside, target_is_directory=True)
    (inside / "file-link").symlink_to(outside / "victim")
    (outside / "existing").write_text("theirs")
    (inside / "existing-link").symlink_to(outside / "existing")

    refused = {
        inside / "file-link": "symlink",  # dangling: amem would create the file outside
        inside / "existing-link": "symlink",
        inside / "missing-dir" / "x": "directory does not exist",
    }
    for path, why in refused.items():
        with pytest.raises(amem.InvalidInput) as caught:
            await write(path)
        assert caught.value.code == "path_not_allowed", path
        assert why in caught.value.message
    climbing = inside / "sub" / ".." / ".." / "outside" / "x"
    for path in (inside / "link-out" / "x", outside / "x", climbing):
        with pytest.raises(amem.InvalidInput) as caught:
            await write(path, root=inside)
        assert caught.value.code == "path_not_allowed"
        assert "outside the allowed directory" in caught.value.message
    assert sorted(p.name for p in outside.iterdir()) == ["existing"]
    assert (outside / "existing").read_text() == "theirs"
    assert leftovers(inside) == []
    result = await write(inside / "sub" / "ok", root=inside)
    assert Path(result.path) == (inside / "sub" / "ok").resolve()
    result = await write(inside / "sub" / ".." / "up", root=inside)  # '..' staying inside
    assert Path(result.path) == (inside / "up").resolve()
    result = await write(climbing)  # without root, '..' leads where it leads
    assert Path(result.path) == (outside / "x").resolve()


# --- doctor ----------------------------------------------------------------------------


async def test_doctor_finds_a_healthy_database_healthy(tmp_path: Path) -> None:
    async with amem.open(tmp_path / "a.db", settings=settings()) as mem:
        await populate(mem)
        report = await mem.doctor()
    assert report.ok
    assert report.schema_version == SCHEMA_VERSION
    assert all(check.ok for check in report.checks), report.checks
    assert report.counts["events"] == 6
    assert report.counts["memories"] == 4
    assert report.counts["search_docs"] == 8  # 5 conversation or correction events, 3 memories


@pytest.mark.both_backends
async def test_doctor_reports_what_has_no_vector_and_the_next_open_fills_it(
    tmp_path: Path,
) -> None:
    from amem.testing import FakeOpenAI

    path = tmp_path / "a.db"
    async with amem.open(path, settings=settings()) as mem:  # no embeddings: as a CLI
        s = mem.scope(persona=PERSONA, project=PROJECT)  # submit that exited before them
        await s.submit_event(HANGZHOU, role="user", event_id="e1")
        await s.submit_event("太好了！", role="assistant", event_id="e2")
        await s.add_memories(
            "e1",
            [memory_draft("用户住在杭州", "我搬到杭州了")],
        )
        await mem.scope(persona=PERSONA, project="other").submit_event("Hi", role="user")
    with FakeOpenAI() as api:
        embedding = amem.Settings(embed_base_url=api.base_url, embed_model="fake")
        api.fail_status = 500  # down: nothing is filled while doctor looks
        async with amem.open(path, settings=embedding) as mem:
            report = await mem.doctor()
        api.fail_status = None
        async with amem.open(path, settings=embedding) as mem:
            with anyio.fail_after(10):  # the backfill starts a second after open
                while not (after := vector_coverage(await mem.doctor())).ok:
                    await anyio.sleep(0.05)
    check = vector_coverage(report)
    assert (check.ok, check.severity, report.ok) == (False, "warning", True)  # exit 0
    assert check.detail == (
        "0 of 4 memories and events have a vector of the configured model; 4 have none: "
        "assistant/support 3; assistant/other 1"
    )
    assert check.fix is not None
    assert "the next process that opens the file with embeddings configured" in check.fix
    assert "`amem reindex --persona P --project Q`" in check.fix
    assert after.fix is None
    assert after.detail == "4 of 4 memories and events have a vector of the configured model"


def vector_coverage(report: amem.DoctorReport) -> amem.DoctorCheck:
    [check] = [c for c in report.checks if c.name == "vector coverage"]
    return check


FTS_DRIFT = {
    "content row deleted": "delete from search_docs where num = (select min(num) from search_docs)",
    "bogus index row": "insert into search_fts (rowid, tokens) values (99999, 'bogus token')",
}


@pytest.mark.parametrize("drift", list(FTS_DRIFT))
async def test_doctor_sees_fts_drift_and_rebuild_repairs_it(tmp_path: Path, drift: str) -> None:
    db = tmp_path / "a.db"
    async with amem.open(db, settings=settings()) as mem:
        await populate(mem)
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(FTS_DRIFT[drift])
        conn.commit()
        assert conn.execute("pragma integrity_check").fetchall() == [("ok",)]  # blind to it
    async with amem.open(db, settings=settings()) as mem:
        report = await mem.doctor()
        assert not report.ok
        failed = {check.name: check for check in report.checks if not check.ok}
        assert "search index" in failed
        assert failed["search index"].fix is not None
        assert "amem doctor --rebuild-index" in failed["search index"].fix
        repaired = await mem.doctor(rebuild_index=True)
        assert repaired.ok, repaired.checks
        assert (await mem.doctor()).ok
        s = mem.scope(persona=PERSONA, project=PROJECT)
        assert [i.text for i in (await s.recall("杭州")).items][:1] == ["用户住在杭州"]


# --- the CLI ---------------------------------------------------------------------------


def test_cli_export_import_backup_restore_doctor(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    anyio.run(open_and_populate, db)

    result = amem_cli("export", "--db", db, tmp_path / "a.jsonl")
    assert result.returncode == 0, result.stderr
    assert "exported 16 rows" in result.stdout
    assert "export: 16/16" in result.stderr  # progress goes to stderr

    result = amem_cli("import", "--db", tmp_path / "b.db", tmp_path / "a.jsonl")
    assert result.returncode == 0, result.stderr
    assert "imported 16 rows" in result.stdout
    assert "import: 16/16" in result.stderr

    result = amem_cli("import", "--db", tmp_path / "b.db", tmp_path / "a.jsonl")
    assert result.returncode == 1
    assert "target_exists" in result.stderr
    assert result.stdout == ""

    result = amem_cli("backup", "--db", db, tmp_path / "copy.db")
    assert result.returncode == 0, result.stderr
    assert str(tmp_path / "copy.db") in result.stdout
    result = amem_cli("backup", "--db", db, tmp_path / "copy.db")
    assert result.returncode == 1
    assert "target_exists" in result.stderr

    result = amem_cli("restore", "--db", tmp_path / "c.db", tmp_path / "copy.db", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["counts"]["memories"] == 4

    for path in (db, tmp_path / "b.db", tmp_path / "c.db"):
        result = amem_cli("doctor", "--db", path)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "FAIL" not in result.stdout
        assert "counts: 6 events" in result.stdout
    assert leftovers(tmp_path) == []

    result = amem_cli(
        "recall", "--db", tmp_path / "c.db", "--persona", PERSONA, "--project", PROJECT, "杭州"
    )
    assert result.returncode == 0, result.stderr
    assert "用户住在杭州" in result.stdout


def test_cli_export_and_backup_to_stdout(tmp_path: Path) -> None:
    """PATH '-' is stdout: the archive (or the database file) alone goes there, complete,
    and what the command says goes to stderr; no file named '-' appears."""
    db = tmp_path / "a.db"
    anyio.run(open_and_populate, db)
    amem_cli("export", "--db", db, tmp_path / "a.jsonl")

    result = amem_cli("export", "-", "--db", db, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    written = (tmp_path / "a.jsonl").read_text(encoding="utf-8").splitlines()
    printed = result.stdout.splitlines()
    assert printed[1:] == written[1:]  # the header differs only in its time
    assert json.loads(printed[0]).keys() == json.loads(written[0]).keys()
    assert "export: 16/16" in result.stderr
    assert "exported 16 rows to stdout" in result.stderr
    (tmp_path / "piped.jsonl").write_bytes(result.raw)
    assert amem_cli("import", "--db", tmp_path / "b.db", tmp_path / "piped.jsonl").returncode == 0
    assert dump(tmp_path / "b.db") == dump_import(tmp_path, "a.jsonl")

    result = amem_cli("backup", "-", "--db", db, "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.raw.startswith(b"SQLite format 3\x00")
    assert json.loads(result.stderr)["path"] == "-"
    (tmp_path / "piped.db").write_bytes(result.raw)
    restored = amem_cli("restore", "--db", tmp_path / "c.db", tmp_path / "piped.db", "--json")
    assert json.loads(restored.stdout)["counts"]["memories"] == 4
    assert not (tmp_path / "-").exists()
    assert leftovers(tmp_path) == []


def test_cli_import_from_stdin(tmp_path: Path) -> None:
    """PATH '-' reads the archive from stdin (``amem export - | amem import -``): the same
    database as from the file; a bad or empty stdin is refused and writes nothing."""
    db = tmp_path / "a.db"
    anyio.run(open_and_populate, db)
    archive = amem_cli("export", "-", "--db", db).stdout

    result = amem_cli("import", "--db", tmp_path / "b.db", "-", "--json", input=archive)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["path"] == "-"
    amem_cli("export", "--db", db, tmp_path / "a.jsonl")
    assert dump(tmp_path / "b.db") == dump_import(tmp_path, "a.jsonl")

    for bad in ("", '{"not": "an archive"}\n', archive[: len(archive) // 2]):
        refused = amem_cli("import", "--db", tmp_path / "c.db", "-", input=bad)
        assert refused.returncode == 1
        assert "archive_invalid" in refused.stderr
    with closing(sqlite3.connect(tmp_path / "c.db")) as conn:
        assert conn.execute("select count(*) from events").fetchone() == (0,)
    assert leftovers(tmp_path) == []


def test_backup_to_stdout_refuses_a_terminal() -> None:
    """A SQLite file is no text for a terminal: `amem backup -` there is refused before
    anything is read (`export -` to a terminal prints the JSONL)."""
    from amem.cli.archive import stdout_bytes

    class Terminal(io.TextIOWrapper):
        def isatty(self) -> bool:
            return True

    with contextlib.redirect_stdout(Terminal(io.BytesIO(), encoding="utf-8")):
        with pytest.raises(amem.InvalidInput, match="stdout is a terminal"):
            stdout_bytes(terminal=False)
        assert stdout_bytes(terminal=True) is sys.stdout.buffer


def dump_import(folder: Path, archive: str) -> list[str]:
    """What importing ``folder/archive`` into a new database gives (``dump``)."""
    fresh = folder / f"{archive}.db"
    assert amem_cli("import", "--db", fresh, folder / archive).returncode == 0
    return dump(fresh)


def test_cli_import_refuses_a_bad_archive(tmp_path: Path, good_archive: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(good_archive.read_text().splitlines(keepends=True)[:-1]))
    result = amem_cli("import", "--db", tmp_path / "new.db", bad)
    assert result.returncode == 1
    assert "archive_invalid" in result.stderr
    assert "truncated" in result.stderr
    assert result.stdout == ""
    with closing(sqlite3.connect(tmp_path / "new.db")) as conn:
        assert conn.execute("select count(*) from events").fetchone() == (0,)


def test_cli_doctor_reports_drift_says_how_to_fix_and_rebuilds(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    anyio.run(open_and_populate, db)
    with closing(sqlite3.connect(db)) as conn:
        conn.execute(FTS_DRIFT["content row deleted"])
        conn.commit()
    result = amem_cli("doctor", "--db", db)
    assert result.returncode == 1
    assert "FAIL  search index" in result.stdout
    assert "fix: run `amem doctor --rebuild-index`" in result.stdout
    result = amem_cli("doctor", "--db", db, "--rebuild-index")
    assert result.returncode == 0, result.stdout
    assert "FAIL" not in result.stdout
    assert amem_cli("doctor", "--db", db).returncode == 0


async def open_and_populate(path: Path) -> None:
    async with amem.open(path, settings=settings()) as mem:
        await populate(mem)
