"""Host capture: a host hands amem its transcript, in order, at its compaction boundary.

Each entry carries a stable ID; a cursor per scope and per host instance counts the entries
captured and advances in the same transaction as their writes and checkpoint; a
compare-and-set on it catches a competing writer; an interrupted run (cancelled, or the
process killed) replays without duplicates; and a replay never brings back an event
deleted since, also after a backup is restored.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import sys
from contextlib import closing
from functools import partial
from pathlib import Path
from subprocess import PIPE
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from helpers import cancel_ticks, cancelled_after

import amem
from amem.limits import MAX_CAPTURE_ENTRIES

pytestmark = pytest.mark.anyio

INSTANCE = "laptop-1"
SESSION = "s1"


def transcript(n: int, prefix: str = "host", session: str | None = SESSION) -> list[dict[str, Any]]:
    """``n`` entries, alternating roles, Chinese and English, each with a stable ID."""
    entries = []
    for i in range(n):
        text = (
            f"第{i}轮：我下周去杭州出差，想住在西湖边。"
            if i % 2 == 0
            else f"Turn {i}: noted, a hotel near West Lake."
        )
        entries.append(
            {
                "event_id": f"{prefix}-{i}",
                "role": "user" if i % 2 == 0 else "assistant",
                "text": text,
                "session": session,
                "occurred_at": f"2026-11-30T09:{i // 60 % 60:02d}:{i % 60:02d}+08:00",
            }
        )
    return entries


def ids(entries: list[dict[str, Any]]) -> list[str]:
    return [entry["event_id"] for entry in entries]


def _snapshot(db_path: Path, persona: str, project: str, instance: str) -> tuple[int, list[str]]:
    if not db_path.exists():
        return 0, []
    with closing(sqlite3.connect(db_path)) as conn:
        # One read transaction: a shielded write of a cancelled caller may commit meanwhile.
        conn.execute("begin")
        # A process killed while it created the file leaves it part-way through its
        # migrations (one transaction each): without some tables, and nothing captured.
        tables = {name for (name,) in conn.execute("select name from sqlite_master")}
        row = None
        if "capture_cursors" in tables:
            row = conn.execute(
                "select position from capture_cursors where persona = ? and project = ? "
                "and instance = ?",
                (persona, project, instance),
            ).fetchone()
        stored = []
        if "events" in tables:
            stored = [
                r[0]
                for r in conn.execute(
                    "select id from events where persona = ? and project = ? "
                    "and category != 'correction' order by seq",
                    (persona, project),
                )
            ]
    return (0 if row is None else row[0]), stored


async def snapshot(
    db_path: Path, project: str = "support", instance: str = INSTANCE
) -> tuple[int, list[str]]:
    """(the cursor, the scope's event IDs in seq order), read from the file by plain SQLite."""
    return await anyio.to_thread.run_sync(_snapshot, db_path, "assistant", project, instance)


async def test_transcript_is_stored_in_order_under_its_stable_ids(scope: amem.Scope) -> None:
    entries = transcript(6)
    result = await scope.host_ingest(INSTANCE, entries)
    assert (result.persona, result.project, result.instance) == ("assistant", "support", INSTANCE)
    assert result.stored == ids(entries)
    assert (result.duplicates, result.skipped, result.cursor) == ([], 0, 6)
    seqs = [receipt.seq for receipt in result.receipts]
    assert seqs == sorted(seqs)  # transcript order is seq order
    assert len(set(seqs)) == 6
    for entry, receipt in zip(entries, result.receipts, strict=True):
        page = await scope.read(entry["event_id"])
        assert page.text == entry["text"]  # unaltered, Chinese included
        assert (page.event.role, page.event.session, page.event.seq) == (
            entry["role"],
            SESSION,
            receipt.seq,
        )
    assert await scope.capture_cursor(INSTANCE) == 6

    hits = await scope.recall("杭州出差")
    assert hits.items
    assert hits.items[0].raw_fallback
    assert hits.items[0].source_event_id in ids(entries)


async def test_new_turns_continue_from_the_cursor(scope: amem.Scope) -> None:
    entries = transcript(5)
    first = await scope.host_ingest(INSTANCE, entries[:3], expected_cursor=0)
    assert first.cursor == 3
    cursor = await scope.capture_cursor(INSTANCE)
    second = await scope.host_ingest(
        INSTANCE, entries[cursor:], start=cursor, expected_cursor=cursor
    )
    assert (second.stored, second.skipped, second.cursor) == (ids(entries[3:]), 0, 5)
    third = await scope.host_ingest(INSTANCE, entries[2:], start=2)  # overlaps the cursor
    assert (third.stored, third.duplicates, third.skipped, third.cursor) == ([], [], 3, 5)


async def test_cursor_is_per_scope_and_per_instance(mem: amem.Memory) -> None:
    travel, work = mem.scope("assistant", "travel"), mem.scope("assistant", "work")
    await travel.host_ingest("laptop", transcript(3, "t"))
    assert await travel.capture_cursor("laptop") == 3
    assert await travel.capture_cursor("phone") == 0
    assert await work.capture_cursor("laptop") == 0
    assert await mem.scope("other", "travel").capture_cursor("laptop") == 0

    # a second installation of the same transcript stores nothing twice
    phone = await travel.host_ingest("phone", transcript(4, "t"))
    assert (phone.duplicates, phone.stored, phone.cursor) == (["t-0", "t-1", "t-2"], ["t-3"], 4)
    assert await travel.capture_cursor("laptop") == 3
    work_result = await work.host_ingest("laptop", transcript(2, "w"))
    assert work_result.cursor == 2
    assert await travel.capture_cursor("laptop") == 3


async def test_checkpoint_commits_with_the_entries(scope: amem.Scope) -> None:
    entries = transcript(4)
    result = await scope.host_ingest(
        INSTANCE,
        entries,
        checkpoint={"session": SESSION, "goal": "订西湖边的酒店", "pending": ["比较价格"]},
    )
    assert result.checkpoint is not None
    assert result.checkpoint.covered_seq == result.receipts[-1].seq
    saved = await scope.checkpoint(SESSION)
    assert saved is not None
    assert (saved.goal, saved.pending, saved.covered_seq) == (
        "订西湖边的酒店",
        ["比较价格"],
        result.receipts[-1].seq,
    )


async def test_checkpoint_covers_the_last_entry_of_its_own_session(scope: amem.Scope) -> None:
    """Entries of other sessions (or none) after the session's last turn do not break it."""
    entries = [*transcript(2, "a"), *transcript(2, "b", session=None)]
    result = await scope.host_ingest(
        INSTANCE, entries, checkpoint={"session": SESSION, "goal": "plan the trip"}
    )
    assert result.cursor == 4
    assert result.checkpoint is not None
    assert result.checkpoint.covered_seq == result.receipts[1].seq


async def test_failed_checkpoint_writes_nothing_and_keeps_the_cursor(
    scope: amem.Scope, db_path: Path
) -> None:
    await scope.host_ingest(INSTANCE, transcript(2))
    other = await scope.submit_event("elsewhere", role="user", session="another")
    with pytest.raises(amem.InvalidInput) as caught:
        await scope.host_ingest(
            INSTANCE,
            transcript(5),
            checkpoint={"session": SESSION, "goal": "g", "covered_seq": other.seq},
        )
    assert caught.value.code == "invalid_input"
    cursor, stored = await snapshot(db_path)
    assert cursor == 2
    assert stored == ["host-0", "host-1", other.event_id]
    assert await scope.checkpoint(SESSION) is None


async def test_conflicting_entry_fails_the_whole_slice(scope: amem.Scope, db_path: Path) -> None:
    await scope.submit_event("原来的文字", role="user", event_id="host-3", session=SESSION)
    with pytest.raises(amem.Conflict) as caught:
        await scope.host_ingest(INSTANCE, transcript(5))  # host-3 now has other text
    assert caught.value.code == "duplicate_conflict"
    assert "杭州" not in str(caught.value)
    assert await snapshot(db_path) == (0, ["host-3"])


async def test_events_stored_before_capture_come_back_as_duplicates(
    scope: amem.Scope, db_path: Path
) -> None:
    """An acknowledgment lost before the cursor moved: replaying the stable IDs is safe."""
    entries = transcript(4)
    for entry in entries[:2]:
        await scope.submit_event(**entry)
    result = await scope.host_ingest(INSTANCE, entries)
    assert (result.duplicates, result.stored, result.cursor) == (
        ids(entries[:2]),
        ids(entries[2:]),
        4,
    )
    assert await snapshot(db_path) == (4, ids(entries))


async def test_stale_expected_cursor_is_a_version_conflict(
    scope: amem.Scope, db_path: Path
) -> None:
    entries = transcript(4)
    await scope.host_ingest(INSTANCE, entries[:2], expected_cursor=0)
    with pytest.raises(amem.Conflict) as caught:
        await scope.host_ingest(INSTANCE, entries, expected_cursor=0)
    assert caught.value.code == "version_conflict"
    assert await snapshot(db_path) == (2, ids(entries[:2]))
    # the documented recovery: read the cursor again and resend from there
    cursor = await scope.capture_cursor(INSTANCE)
    done = await scope.host_ingest(INSTANCE, entries[cursor:], start=cursor, expected_cursor=cursor)
    assert (done.stored, done.cursor) == (ids(entries[2:]), 4)


async def test_slice_starting_after_the_cursor_is_refused(scope: amem.Scope, db_path: Path) -> None:
    entries = transcript(5)
    await scope.host_ingest(INSTANCE, entries[:2])
    with pytest.raises(amem.InvalidInput):
        await scope.host_ingest(INSTANCE, entries[3:], start=3)  # entry 2 would be lost
    assert await snapshot(db_path) == (2, ids(entries[:2]))


async def test_two_instances_sharing_an_id_are_caught(db_path: Path) -> None:
    """Two processes configured with one instance ID: compare-and-set lets exactly one win."""
    entries = transcript(6)
    async with (
        amem.open(db_path, settings=amem.Settings()) as one,
        amem.open(db_path, settings=amem.Settings()) as two,
    ):
        hosts = [m.scope("assistant", "support") for m in (one, two)]
        cursors = [await host.capture_cursor(INSTANCE) for host in hosts]
        assert cursors == [0, 0]
        outcomes: list[object] = [None, None]

        async def capture(n: int) -> None:
            try:
                outcomes[n] = await hosts[n].host_ingest(
                    INSTANCE, entries[: 3 + n], expected_cursor=cursors[n]
                )
            except amem.Conflict as exc:
                outcomes[n] = exc.code

        async with anyio.create_task_group() as tg:
            tg.start_soon(capture, 0)
            tg.start_soon(capture, 1)

        assert sorted(map(type, outcomes), key=str) == sorted([str, amem.CaptureResult], key=str)
        [winner] = [o for o in outcomes if isinstance(o, amem.CaptureResult)]
        assert "version_conflict" in outcomes
        cursor, stored = await snapshot(db_path)
        assert cursor == winner.cursor
        assert stored == ids(entries[:cursor])

        loser = hosts[outcomes.index("version_conflict")]
        cursor = await loser.capture_cursor(INSTANCE)
        done = await loser.host_ingest(
            INSTANCE, entries[cursor:], start=cursor, expected_cursor=cursor
        )
        assert done.cursor == 6
    assert await snapshot(db_path) == (6, ids(entries))


async def test_invalid_entries_are_refused_whole_without_echoing_them(
    scope: amem.Scope, db_path: Path
) -> None:
    good = transcript(2)
    bad_entries: list[tuple[dict[str, Any], str]] = [
        ({"role": "user", "text": "没有编号的秘密"}, "invalid_input"),
        ({**good[1], "role": "narrator", "text": "秘密"}, "invalid_input"),
        ({**good[1], "occurred_at": "2026-11-30T09:00:00", "text": "秘密"}, "invalid_time"),
        ({**good[1], "mood": "秘密"}, "invalid_input"),
        ({**good[1], "category": "correction", "text": "秘密"}, "invalid_input"),
    ]
    for bad, code in bad_entries:
        with pytest.raises(amem.InvalidInput) as caught:
            await scope.host_ingest(INSTANCE, [good[0], bad], expected_cursor=0)
        assert caught.value.code == code
        assert "秘密" not in str(caught.value)
        assert "narrator" not in str(caught.value)
    with pytest.raises(amem.InvalidInput):
        await scope.host_ingest("", good)
    with pytest.raises(amem.InvalidInput):
        await scope.host_ingest(INSTANCE, good, start=-1)
    assert await snapshot(db_path) == (0, [])


@pytest.mark.parametrize(
    "checkpoint", [{"session": SESSION}, {"session": SESSION, "goal": "g", "mood": "秘密"}]
)
async def test_invalid_checkpoint_is_invalid_input(
    scope: amem.Scope, db_path: Path, checkpoint: dict[str, Any]
) -> None:
    with pytest.raises(amem.InvalidInput) as caught:
        await scope.host_ingest(INSTANCE, transcript(2), checkpoint=checkpoint)
    assert caught.value.code == "invalid_input"
    assert "秘密" not in str(caught.value)
    assert await snapshot(db_path) == (0, [])


async def test_replay_does_not_resurrect_a_deleted_event(scope: amem.Scope, db_path: Path) -> None:
    entries = transcript(3)
    await scope.host_ingest(INSTANCE, entries)
    removed = await scope.delete(event_id="host-1")
    assert removed.event_ids == ["host-1"]

    again = await scope.host_ingest(INSTANCE, entries)  # the whole transcript, from the start
    assert (again.stored, again.duplicates, again.skipped, again.cursor) == ([], [], 3, 3)
    with pytest.raises(amem.NotFound):
        await scope.read("host-1")
    with pytest.raises(amem.Conflict) as caught:  # a stale host resending from 0 is caught
        await scope.host_ingest(INSTANCE, entries, expected_cursor=0)
    assert caught.value.code == "version_conflict"
    more = await scope.host_ingest(INSTANCE, transcript(4))  # the host went on talking
    assert more.stored == ["host-3"]
    assert await snapshot(db_path) == (4, ["host-0", "host-2", "host-3"])


async def test_restored_cursor_keeps_deleted_events_deleted(tmp_path: Path) -> None:
    entries = transcript(3)
    async with amem.open(tmp_path / "live.db", settings=amem.Settings()) as live:
        scope = live.scope("assistant", "support")
        await scope.host_ingest(INSTANCE, entries)
        await scope.delete(event_id="host-1")
        await live.backup(tmp_path / "backup.db")

    restored_path = tmp_path / "restored.db"
    async with amem.open(restored_path, settings=amem.Settings()) as restored:
        await restored.restore(tmp_path / "backup.db")
        scope = restored.scope("assistant", "support")
        assert await scope.capture_cursor(INSTANCE) == 3
        again = await scope.host_ingest(INSTANCE, entries)
        assert (again.stored, again.skipped) == ([], 3)
        with pytest.raises(amem.NotFound):
            await scope.read("host-1")
    assert await snapshot(restored_path) == (3, ["host-0", "host-2"])


async def test_cancelled_capture_is_all_or_nothing_and_replays(mem: amem.Memory) -> None:
    """Cancel a capture after 0, 1, 2, ... scheduler ticks, until one completes first."""
    db_path = Path(mem.path)
    outcomes: dict[str, int] = {"withdrawn": 0, "committed although cancelled": 0}
    for ticks in cancel_ticks():
        project = f"tick-{ticks}"
        scope = mem.scope("assistant", project)
        entries = transcript(12, prefix=project)
        capture = partial(
            scope.host_ingest,
            INSTANCE,
            entries,
            expected_cursor=0,
            checkpoint={"session": SESSION, "goal": "g"},
        )
        results = await cancelled_after(ticks, capture)

        cursor, stored = await snapshot(db_path, project)
        assert (cursor, stored) in ((0, []), (12, ids(entries)))  # never a part
        if results:
            assert (cursor, results[0].cursor) == (12, 12)

        # replay exactly as a host would after an interruption: whole transcript, no CAS
        again = await scope.host_ingest(INSTANCE, entries)
        assert again.cursor == 12
        assert again.skipped + len(again.stored) == 12
        assert again.duplicates == []
        assert await snapshot(db_path, project) == (12, ids(entries))
        committed = again.skipped == 12  # the cancelled call's outcome, now final
        assert (await scope.checkpoint(SESSION) is not None) == committed
        if results:
            break
        outcomes["committed although cancelled" if committed else "withdrawn"] += 1
    else:
        pytest.fail(f"no capture completed before the last tick: {outcomes}")
    assert sum(outcomes.values()) >= 1, outcomes


STARTED = """
import sys
from amem.cli import main
from amem.search.text import tokens
tokens("预热")  # the segmenter's dictionary, which the command would load first
print("started", flush=True)
sys.exit(main(sys.argv[1:]))
"""
"""``amem ARGS`` in a child that says on stdout when its imports are done, the segmenter's
dictionary is loaded (a second of the command's start otherwise) and the command starts:
the moment from which a kill lands in the command itself, not in Python's start."""

KILL_ROUNDS = 5
GROWTH = 200
"""The transcript grows by this many entries in each of the first ``KILL_ROUNDS`` runs,
then by 10 per run (1,200 entries in all, for the last run)."""
KILL_WINDOW = 0.5
"""Seconds after the command started within which a kill lands at first: about as long as
the command takes here unloaded. After each kill that came too late (the child had
committed), the window halves."""


def grown(number: int) -> int:
    """How many entries the transcript holds in kill round ``number``: always more than
    before, so that every run has something to commit."""
    if number < KILL_ROUNDS:
        return GROWTH * (number + 1)
    return GROWTH * KILL_ROUNDS + 10 * (number - KILL_ROUNDS + 1)


async def test_capture_killed_mid_ingest_replays_cleanly(
    anyio_backend: str, tmp_path: Path
) -> None:
    """``amem host-ingest`` killed with SIGKILL at random moments after it started, on a
    growing transcript.

    After every kill the file holds exactly the entries below its cursor, in order; the
    next run picks up from there, and the last one ends with each entry stored once. The
    kills continue until one has come before a commit (a loaded machine may be slow to
    get there; the window shrinks each time the child was faster), then the last run
    captures the whole transcript uninterrupted.
    """
    rng = random.Random(f"capture-kill/{anyio_backend}")
    db_path = tmp_path / "memory.db"
    path = tmp_path / "transcript.jsonl"
    entries = transcript(1200)
    outcomes: dict[str, int] = {"killed before commit": 0, "committed": 0}
    window, number = KILL_WINDOW, 0
    while True:
        final = number >= KILL_ROUNDS and outcomes["killed before commit"] > 0
        assert number < 4 * KILL_ROUNDS, f"no kill came before a commit: {outcomes}"
        size = len(entries) if final else grown(number)
        path.write_text(
            "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries[:size]),
            encoding="utf-8",
        )
        before, _ = await snapshot(db_path)
        command = [sys.executable, "-c", STARTED, "host-ingest", str(path), "--instance"]
        command += [INSTANCE, "--db", str(db_path), "--persona", "assistant"]
        command += ["--project", "support", "--backend", anyio_backend]
        async with await anyio.open_process(command, stdout=PIPE, stderr=PIPE) as process:
            assert process.stdout is not None
            with anyio.fail_after(60):  # a bound on the imports, not a timing assertion
                assert (
                    await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", 100)
                    == b"started"
                )
            if not final:
                with anyio.move_on_after(rng.uniform(0, window)):
                    await process.wait()
                if process.returncode is None:
                    process.send_signal(signal.SIGKILL)
            returncode = await process.wait()
            assert process.stderr is not None
            stderr = b"".join([chunk async for chunk in process.stderr]).decode()

        cursor, stored = await snapshot(db_path)
        assert stored == ids(entries[:cursor]), f"round {number}: not exactly the captured part"
        assert cursor in (before, size), f"round {number}: cursor {cursor}"
        if final:
            assert returncode == 0, stderr
            assert cursor == size
            break
        if returncode == -signal.SIGKILL and cursor == before:
            outcomes["killed before commit"] += 1
        else:
            assert returncode in (0, -signal.SIGKILL), stderr
            assert cursor == size
            outcomes["committed"] += 1
            window /= 2
        number += 1
    assert await snapshot(db_path) == (len(entries), ids(entries))
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope("assistant", "support")
        again = await scope.host_ingest(INSTANCE, entries)
        assert (again.stored, again.skipped) == ([], len(entries))
        page = await scope.read(entries[-2]["event_id"])
        assert page.text == entries[-2]["text"]


async def test_explicit_covered_seq_survives_a_batch_retry(scope: amem.Scope) -> None:
    """The writer reruns a batch request by request when one request fails; a capture in
    such a batch keeps the checkpoint it was given."""
    first = await scope.host_ingest(INSTANCE, transcript(2, "early"))
    covered = first.receipts[0].seq
    await scope.submit_event("taken", role="user", event_id="taken")
    results: list[amem.CaptureResult] = []

    done = anyio.Event()

    async def doomed() -> None:  # failing writes in flight until the capture is done
        while not done.is_set():
            with pytest.raises(amem.Conflict):
                await scope.submit_event("other text", role="user", event_id="taken")

    async def capture() -> None:
        await anyio.sleep(0.05)
        results.append(
            await scope.host_ingest(
                INSTANCE,
                transcript(3, "later"),
                checkpoint={"session": SESSION, "goal": "g", "covered_seq": covered},
            )
        )
        done.set()

    async with anyio.create_task_group() as tg:
        for _ in range(16):
            tg.start_soon(doomed)
        tg.start_soon(capture)
    [result] = results
    assert result.checkpoint is not None
    assert result.checkpoint.covered_seq == covered
    saved = await scope.checkpoint(SESSION)
    assert saved is not None
    assert saved.covered_seq == covered


async def test_a_whole_transcript_goes_in_slices_with_the_checkpoint_last(
    scope: amem.Scope,
) -> None:
    """``capture_transcript`` takes a transcript of any length: past ``MAX_CAPTURE_ENTRIES``
    it sends compare-and-set slices, the checkpoint with the last one, and a later call
    sends only what came after the cursor."""
    n = MAX_CAPTURE_ENTRIES + 5
    entries = transcript(n + 3)
    seen: list[tuple[int, int]] = []
    first = await scope.capture_transcript(
        INSTANCE,
        entries[:n],
        checkpoint={"session": SESSION, "goal": "book a hotel"},
        progress=lambda done, total: seen.append((done, total)),
    )
    assert (first.cursor, len(first.stored), first.skipped) == (n, n, 0)
    assert seen == [(MAX_CAPTURE_ENTRIES, n), (n, n)]
    assert first.checkpoint is not None
    assert first.checkpoint.covered_seq == first.receipts[-1].seq
    later = await scope.capture_transcript(INSTANCE, entries)
    assert (later.cursor, later.stored, later.skipped) == (n + 3, ids(entries[n:]), n)
    assert later.checkpoint is None
