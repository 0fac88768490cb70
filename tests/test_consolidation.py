"""Consolidation runs: the host's model tidies memory through a durable prepare/apply pair.

A run freezes the new messages and the memories they touch; a patch applies whole or not
at all; a memory changed meanwhile refuses it; the same patch twice is a duplicate; an
erased source takes its text out of every run. Through ``Scope``, over MCP with the SDK's
client, in ``AgentSession``, across export and import, and under ``kill -9``.
"""

from __future__ import annotations

import itertools
import random
import signal
import sqlite3
from collections import Counter
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from children import common
from helpers import file_bytes, inspector_client
from mcp_client import connect, ok, refused, server_backends, tools_by_name

import amem

pytestmark = [pytest.mark.both_databases, pytest.mark.anyio]

HOME = "I live in Hangzhou with my cat Mochi, who sleeps all day."
MOVE = "Big news: I moved to Shanghai last week for the new job."
TEA = "I drink green tea every morning."


def add(source: str, text: str, quote: str, **fields: Any) -> dict[str, Any]:
    return {
        "op": "add",
        "source": source,
        "text": text,
        "quote": quote,
        "kind": "fact",
        "basis": "user_statement",
        **fields,
    }


def residence(source: str, text: str, quote: str) -> dict[str, Any]:
    return add(source, text, quote, subject="user", fact_key="residence")


async def said(scope: amem.Scope, *texts: str, session: str = "chat") -> list[str]:
    return [(await scope.submit_event(t, role="user", session=session)).event_id for t in texts]


def stored(db_path: Path, sql: str, *args: object) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(db_path)) as conn:
        return conn.execute(sql, args).fetchall()


async def test_a_run_freezes_new_messages_and_survives_a_restart(db_path: Path) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope("assistant", "support")
        home, move = await said(scope, HOME, MOVE)
        [lives] = await scope.add_memories(
            home,
            [
                {
                    "text": "User lives in Hangzhou",
                    "quote": "I live in Hangzhou",
                    "kind": "fact",
                    "basis": "user_statement",
                    "subject": "user",
                    "fact_key": "residence",
                }
            ],
        )
        run = await scope.prepare_consolidation(session="chat")
        assert run.status == "prepared"
        assert [(e.id, e.text, e.offset, e.end, e.total) for e in run.input.events] == [
            (home, HOME, 0, len(HOME), len(HOME)),
            (move, MOVE, 0, len(MOVE), len(MOVE)),
        ]
        assert [m.id for m in run.input.memories] == [lives.id]
        assert run.input.memories[0].version
        assert (await scope.prepare_consolidation(session="chat")).id == run.id
    async with amem.open(db_path, settings=amem.Settings()) as mem:  # a restart
        scope = mem.scope("assistant", "support")
        assert [r.id for r in await scope.consolidation_runs(status="prepared")] == [run.id]
        assert (await scope.consolidation_run(run.id)).input == run.input
        assert (await scope.prepare_consolidation(session="chat")).id == run.id
        with pytest.raises(amem.NotFound):
            await mem.scope("assistant", "other").consolidation_run(run.id)


async def test_a_patch_adds_supersedes_relates_and_the_next_run_starts_after_it(
    scope: amem.Scope,
) -> None:
    home, move = await said(scope, HOME, MOVE)
    run = await scope.prepare_consolidation(session="chat")
    done = await scope.apply_consolidation(
        run.id,
        {
            "entries": [
                residence(home, "User lives in Hangzhou", "I live in Hangzhou"),
                residence(move, "User moved to Shanghai", "I moved to Shanghai"),
                add(home, "User has a cat named Mochi", "my cat Mochi"),
                {"op": "relate", "from": "new:2", "to": "new:0"},
            ]
        },
    )
    assert not done.duplicate
    hangzhou, shanghai, cat = (entry.memory_id for entry in done.entries[:3])
    found = [item.id for item in (await scope.recall("User Hangzhou Shanghai")).items]
    assert shanghai in found, "the newer residence closed the older"
    assert hangzhou not in found, "the newer residence closed the older"
    history = await scope.recall("Hangzhou", include_history=True)
    assert hangzhou in [item.id for item in history.items]
    applied = await scope.consolidation_run(run.id)
    assert applied.status == "applied"
    assert [e.text for e in applied.input.events] == [None, None], "the run keeps no copy"
    assert applied.result == done
    [tea] = await said(scope, TEA)
    following = await scope.prepare_consolidation(session="chat")
    assert following.id != run.id
    assert [e.id for e in following.input.events] == [tea]
    assert cat not in [m.id for m in following.input.memories]


async def test_merge_supersede_retract_and_summarise_keep_their_lineage(
    scope: amem.Scope, db_path: Path
) -> None:
    home, move = await said(scope, HOME, MOVE)
    drafts = [
        {
            "text": "User has a cat",
            "quote": "my cat Mochi",
            "kind": "fact",
            "basis": "user_statement",
        },
        {
            "text": "User owns a cat called Mochi",
            "quote": "cat Mochi",
            "kind": "fact",
            "basis": "user_statement",
        },
        {
            "text": "User lives in Hangzhou",
            "quote": "I live in Hangzhou",
            "kind": "fact",
            "basis": "user_statement",
        },
    ]
    first, second, city = await scope.add_memories(home, drafts)
    run = await scope.prepare_consolidation()
    done = await scope.apply_consolidation(
        run.id,
        {
            "entries": [
                {"op": "merge", "ids": [first.id, second.id], "text": "User has a cat named Mochi"},
                add(move, "User lives in Shanghai", "I moved to Shanghai"),
                {"op": "supersede", "id": city.id, "by": "new:1"},
                {
                    "op": "summarise",
                    "source": move,
                    "text": "User moved for a new job",
                    "quote": "moved to Shanghai last week for the new job",
                },
                {"op": "retract", "id": "new:3", "reason": "too vague"},
            ]
        },
    )
    merged, shanghai, _, summary, _ = done.entries
    assert merged.ids == [first.id, second.id]
    assert merged.memory_id not in (first.id, second.id)
    assert await scope.recall("cat") is not None
    cats = [item.text for item in (await scope.recall("cat Mochi")).items]
    assert cats[0] == "User has a cat named Mochi"
    assert "User has a cat" not in cats
    assert "User owns a cat called Mochi" not in cats
    links = set(stored(db_path, "select from_id, to_id, kind from relations"))
    assert (first.id, merged.memory_id, "merged_into") in links
    assert (second.id, merged.memory_id, "merged_into") in links
    assert (shanghai.memory_id, city.id, "supersedes") in links
    [(ended,)] = stored(db_path, "select invalid_at from memories where id = ?", city.id)
    assert ended is not None, "the successor closed the old city's interval"
    [(tier, kind, revoked)] = stored(
        db_path, "select tier, kind, revoke_reason from memories where id = ?", summary.memory_id
    )
    assert (tier, kind, revoked) == ("episodic", "episode", "too vague")


async def test_a_bad_patch_writes_nothing_and_the_run_can_be_retried(
    scope: amem.Scope, db_path: Path
) -> None:
    [home] = await said(scope, HOME)
    run = await scope.prepare_consolidation()
    patch = {
        "entries": [
            add(home, "User has a cat", "my cat Mochi"),
            add(home, "User lives in Paris", "I live in Paris"),  # not in the message
        ]
    }
    with pytest.raises(amem.InvalidInput) as refusal:
        await scope.apply_consolidation(run.id, patch)
    assert refusal.value.code == "quote_mismatch"
    assert stored(db_path, "select count(*) from memories") == [(0,)]
    kept = await scope.record_attempt(run.id, patch, {"code": refusal.value.code})
    assert kept.candidate == patch
    assert kept.error == {"code": "quote_mismatch"}
    for bad, problem in [
        ({"entries": [{"op": "merge", "ids": ["a"]}]}, "at least two"),
        ({"entries": [{"op": "relate", "from": "new:0", "to": "x"}]}, "earlier add"),
        ({"entries": [{"op": "retract", "id": "mem_unknown"}]}, "not in this run"),
        ({"entries": [{"op": "upsert"}]}, "op is one of"),
        ({"entries": [], "evict": ["evt_elsewhere"]}, "not a source"),
    ]:
        with pytest.raises(amem.InvalidInput, match=problem):
            await scope.apply_consolidation(run.id, bad)
    fixed = {"entries": patch["entries"][:1]}
    done = await scope.apply_consolidation(run.id, fixed)
    assert (await scope.consolidation_run(run.id)).candidate is None
    again = await scope.apply_consolidation(run.id, fixed)
    assert again.duplicate
    assert again.entries == done.entries
    assert stored(db_path, "select count(*) from memories") == [(1,)], "nothing twice"
    with pytest.raises(amem.Conflict) as other:
        await scope.apply_consolidation(run.id, {"entries": patch["entries"][:1] * 2})
    assert other.value.code == "duplicate_conflict"


async def test_a_memory_changed_after_prepare_fails_the_run(
    scope: amem.Scope, db_path: Path
) -> None:
    [home] = await said(scope, HOME)
    draft = {
        "text": "User has a cat",
        "quote": "my cat Mochi",
        "kind": "fact",
        "basis": "user_statement",
    }
    [cat] = await scope.add_memories(home, [draft])
    run = await scope.prepare_consolidation()
    await scope.pin(cat.id)  # someone else changed it meanwhile
    with pytest.raises(amem.Conflict) as refusal:
        await scope.apply_consolidation(run.id, {"entries": [{"op": "retract", "id": cat.id}]})
    assert refusal.value.code == "version_conflict"
    assert stored(db_path, "select revoked_at from memories") == [(None,)]
    assert (await scope.consolidation_run(run.id)).status == "failed"
    fresh = await scope.prepare_consolidation()
    assert fresh.id != run.id
    assert [e.id for e in fresh.input.events] == [home]
    await scope.apply_consolidation(fresh.id, {"entries": [{"op": "retract", "id": cat.id}]})


async def test_an_empty_patch_closes_a_run_with_nothing_to_change(scope: amem.Scope) -> None:
    [home] = await said(scope, HOME)
    run = await scope.prepare_consolidation()
    assert [event.id for event in run.input.events] == [home]
    done = await scope.apply_consolidation(run.id, {})  # reviewed: nothing to tidy
    assert (done.entries, done.evicted, done.duplicate) == ([], [], False)
    assert (await scope.consolidation_run(run.id)).status == "applied"
    [tea] = await said(scope, TEA)
    following = await scope.prepare_consolidation()
    assert [event.id for event in following.input.events] == [tea], "it read on after it"


async def test_an_oversized_message_is_paged_over_runs(scope: amem.Scope) -> None:
    long = " ".join(f"Sentence {n} of a very long message about the garden." for n in range(60))
    [event] = await said(scope, long)
    pages = []
    while True:
        run = await scope.prepare_consolidation(max_chars=1_000)
        if not run.input.events:
            break
        [page] = run.input.events
        assert page.id == event
        assert page.total == len(long)
        assert page.end - page.offset <= 1_000
        assert page.text == long[page.offset : page.end]
        pages.append((page.offset, page.end))
        quote = page.text.split(".")[1].strip() if "." in page.text else page.text[:20]
        draft = add(event, "User wrote about the garden", quote, kind="episode", basis="inference")
        await scope.apply_consolidation(run.id, {"entries": [draft]})
    assert pages[0][0] == 0
    assert pages[-1][1] == len(long)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(pages)), pages


async def test_erasing_a_source_invalidates_the_run_and_scrubs_its_text(
    scope: amem.Scope, db_path: Path
) -> None:
    home, _ = await said(scope, HOME, MOVE)
    applied = await scope.prepare_consolidation()
    await scope.apply_consolidation(
        applied.id, {"entries": [add(home, "User has a cat", "my cat Mochi")]}
    )
    [tea] = await said(scope, TEA)
    waiting = await scope.prepare_consolidation()
    await scope.record_attempt(waiting.id, {"entries": [add(tea, "User drinks tea", TEA)]})
    await scope.erase(session="chat")
    assert (await scope.consolidation_run(waiting.id)).status == "invalidated"
    assert (await scope.consolidation_run(applied.id)).status == "applied"
    for frozen, candidate in stored(db_path, "select input, candidate from consolidation_runs"):
        for text in ("Hangzhou", "Shanghai", "green tea", "Mochi"):
            assert text not in frozen, text
            assert text not in (candidate or ""), text
    assert stored(db_path, "select count(*) from consolidation_sources") == [(0,)]
    with pytest.raises(amem.Conflict):
        await scope.apply_consolidation(waiting.id, {"entries": [{"op": "retract", "id": "x"}]})
    with anyio.fail_after(30):  # the words leave the file and its WAL once the writer idles
        while any(word in file_bytes(db_path) for word in (b"Hangzhou", b"green tea")):
            await anyio.sleep(0.2)


async def test_an_expired_working_note_leaves_no_copy_in_a_run(scope: amem.Scope) -> None:
    [home] = await said(scope, HOME)
    note = {"text": "Checking the cat's vaccination card", "quote": "my cat Mochi"}
    note |= {"kind": "observation", "basis": "inference", "tier": "working"}
    [working] = await scope.add_memories(home, [note])
    run = await scope.prepare_consolidation()
    assert [m.text for m in run.input.memories] == [note["text"]]
    assert working.expires_at is not None
    done = await scope.consolidate(as_of=working.expires_at + timedelta(seconds=1))
    assert done.deleted == [working.id]
    [kept] = (await scope.consolidation_run(run.id)).input.memories
    assert (kept.id, kept.text) == (working.id, None), "deleted for good, copies too"
    with pytest.raises(amem.Conflict) as refused:
        await scope.apply_consolidation(run.id, {"entries": [{"op": "retract", "id": working.id}]})
    assert refused.value.code == "version_conflict"


async def test_a_patch_evicts_the_raw_text_of_what_it_learned_from(
    scope: amem.Scope, db_path: Path
) -> None:
    home, move = await said(scope, HOME, MOVE)
    run = await scope.prepare_consolidation()
    with pytest.raises(amem.InvalidInput, match="cannot evict"):
        await scope.apply_consolidation(run.id, {"evict": [move]})  # nothing derived yet
    done = await scope.apply_consolidation(
        run.id,
        {"entries": [add(home, "User has a cat named Mochi", "my cat Mochi")], "evict": [home]},
    )
    assert done.evicted == [home]
    assert (await scope.read(home)).event.status == "evicted"
    assert (await scope.recall("cat")).items[0].quote == "my cat Mochi"
    assert stored(db_path, "select text from events where id = ?", home) == [("",)]


async def test_evicting_a_source_takes_its_text_out_of_a_waiting_run(scope: amem.Scope) -> None:
    home, move = await said(scope, HOME, MOVE)
    cat = {
        "text": "User has a cat",
        "quote": "my cat Mochi",
        "kind": "fact",
        "basis": "user_statement",
    }
    await scope.add_memories(home, [cat])
    run = await scope.prepare_consolidation()
    await scope.evict([home])
    waiting = await scope.consolidation_run(run.id)
    assert waiting.status == "prepared", "its memories are all there: the run can go on"
    assert [(e.id, e.text) for e in waiting.input.events] == [(home, None), (move, MOVE)]
    with pytest.raises(amem.InvalidInput) as refusal:
        await scope.apply_consolidation(
            run.id, {"entries": [add(home, "User lives in Hangzhou", "I live in Hangzhou")]}
        )
    assert refusal.value.code == "quote_mismatch", "nothing is left to quote"
    await scope.apply_consolidation(
        run.id, {"entries": [add(move, "User moved to Shanghai", "I moved to Shanghai")]}
    )


async def test_an_agent_session_prepares_a_run_every_few_turns(scope: amem.Scope) -> None:
    session = amem.AgentSession(scope, "loop", prepare_every=2)
    await session.remember_turn([{"role": "user", "text": HOME}])
    assert (await session.end_turn()).run is None
    await session.remember_turn([{"role": "user", "text": MOVE}])
    run = (await session.end_turn()).run
    assert run is not None
    assert [e.text for e in run.input.events] == [HOME, MOVE]
    assert {e.session for e in run.input.events} == {"loop"}
    with pytest.raises(amem.InvalidInput):
        amem.AgentSession(scope, "loop", prepare_every=0)


async def test_runs_travel_in_archives(tmp_path: Path) -> None:
    async with amem.open(tmp_path / "a.db", settings=amem.Settings()) as mem:
        scope = mem.scope("assistant", "support")
        [home] = await said(scope, HOME)
        run = await scope.prepare_consolidation()
        await scope.apply_consolidation(
            run.id, {"entries": [add(home, "User has a cat", "my cat Mochi")]}
        )
        await said(scope, TEA)
        waiting = await scope.record_attempt(
            (await scope.prepare_consolidation()).id, {"entries": []}, "empty patch"
        )
        exported = await mem.export(tmp_path / "out.jsonl")
    assert exported.counts["consolidation_runs"] == 2
    async with amem.open(tmp_path / "b.db", settings=amem.Settings()) as mem:
        await mem.import_archive(tmp_path / "out.jsonl")
        scope = mem.scope("assistant", "support")
        assert await scope.consolidation_run(waiting.id) == waiting
        assert (await scope.consolidation_run(run.id)).status == "applied"
        assert (await scope.prepare_consolidation()).id == waiting.id


@pytest.mark.one_backend
@pytest.mark.sqlite_only  # the inspector reads a SQLite file
async def test_the_inspector_shows_runs_what_they_froze_and_what_they_did(
    mem: amem.Memory, scope: amem.Scope
) -> None:
    [home] = await said(scope, HOME)
    applied = await scope.prepare_consolidation()
    await scope.apply_consolidation(
        applied.id, {"entries": [add(home, "User has a cat", "my cat Mochi")], "evict": [home]}
    )
    [tea] = await said(scope, "I drink <script>alert(1)</script> green tea every morning.")
    waiting = await scope.prepare_consolidation()
    await scope.record_attempt(waiting.id, {"entries": []}, {"code": "quote_mismatch"})
    where = {"persona": scope.persona, "project": scope.project}
    async with inspector_client(Path(mem.path)) as client:
        listed = (await client.get("/runs", params=where)).text
        assert listed.index(waiting.id) < listed.index(applied.id), "newest first"
        assert "prepared" in listed
        assert "applied" in listed
        page = (await client.get("/run", params=where | {"id": waiting.id})).text
        assert tea in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert "<script>alert" not in page
        assert "quote_mismatch" in page
        done = (await client.get("/run", params=where | {"id": applied.id})).text
        assert "not kept" in done
        assert HOME not in done
        assert f"Evicted: {home}" in done
        missing = await client.get("/run", params=where | {"id": "run_nope"})
        assert missing.status_code == 404


# --- MCP ----------------------------------------------------------------------------------


@server_backends
async def test_a_model_tidies_memory_over_mcp(
    anyio_backend: str, server_backend: str, tmp_path: Path
) -> None:
    async with connect(tmp_path / "m.db", server_backend, tmp_path / "server.log") as s:
        tools = await tools_by_name(s)
        assert tools["consolidation_apply"].annotations.destructiveHint is True  # type: ignore[union-attr]
        assert "version_conflict" in (tools["consolidation_apply"].description or "")
        event = (await ok(s, "event_submit", text=HOME, role="user", session="chat"))["event_id"]
        run = await ok(s, "consolidation_prepare", session="chat")
        assert run["status"] == "prepared"
        assert run["input"]["events"][0]["text"] == HOME
        patch = {"entries": [add(event, "User has a cat named Mochi", "my cat Mochi")]}
        done = await ok(s, "consolidation_apply", run_id=run["id"], patch=patch)
        assert done["duplicate"] is False
        assert done["entries"][0]["memory_id"].startswith("mem_")
        again = await ok(s, "consolidation_apply", run_id=run["id"], patch=patch)
        assert again["duplicate"] is True
        found = await ok(s, "memory_recall", query="cat")
        assert found["items"][0]["text"] == "User has a cat named Mochi"
        assert await refused(s, "consolidation_apply", {"run_id": run["id"]}) == "invalid_input"
        assert await refused(s, "consolidation_prepare", {"max_chars": 10}) == "invalid_input"


# --- several processes --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("texts", "outcomes"),
    [
        (("User planted tomatoes",) * 3, ["applied 0", "applied 1", "applied 1"]),
        (("User planted tomatoes", "User gardens"), ["applied 0", "refused duplicate_conflict"]),
    ],
)
async def test_processes_racing_over_one_run_apply_it_once(
    anyio_backend: str, tmp_path: Path, texts: tuple[str, ...], outcomes: list[str]
) -> None:
    """Processes that prepare the same session at once get one run; applying it at once,
    the first patch applies, the same patch again is a duplicate, another is refused."""
    db_path = tmp_path / "memory.db"
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        scope = mem.scope(common.PERSONA, common.PROJECT)
        await scope.submit_event("I planted tomatoes today.", role="user", session="race")
    async with common.spawner(anyio_backend, tmp_path) as spawn:
        children = [await spawn.start("consolidation_racer.py", db_path, text) for text in texts]
        for child in children:
            await child.go()
        runs = {tuple(await child.marked("prepared") or ()) for child in children}
        assert len(runs) == 1, [child.describe() for child in children]
        for child in children:
            await child.send("apply")
        for child in children:
            await child.finish()
    results = sorted(" ".join(m) for child in children for m in child.marks if m[0] != "prepared")
    assert results == outcomes, [child.describe() for child in children]
    [(count,)] = stored(db_path, "select count(*) from memories")
    assert count == 1, "one memory, whoever won"
    assert stored(db_path, "select status from consolidation_runs") == [("applied",)]


# --- kill -9 ------------------------------------------------------------------------------

ROUNDS = 8


async def test_runs_killed_mid_prepare_or_apply_are_whole_or_absent(
    anyio_backend: str, tmp_path: Path, db_path: Path
) -> None:
    rng = random.Random(f"consolidation/{anyio_backend}")
    acked: set[str] = set()
    async with common.spawner(anyio_backend, tmp_path) as spawn:
        for number in range(ROUNDS):
            child = await spawn.start("consolidator.py", db_path, f"r{number}")
            await child.go()
            await child.marked("applied")
            await anyio.sleep(rng.uniform(0, 0.3))
            child.kill()
            assert await child.finish() == -signal.SIGKILL, child.describe()
            assert not child.errors, child.describe()
            assert not child.unexpected, child.describe()
            acked.update(mark[1] for mark in child.marks if mark[0] == "applied")
    assert acked
    runs = dict(stored(db_path, "select id, status from consolidation_runs"))
    assert all(runs[run_id] == "applied" for run_id in acked), "an acknowledged apply is kept"
    applied = "select result from consolidation_runs where result is not null"
    results = [amem.ConsolidationResult.model_validate_json(r) for (r,) in stored(db_path, applied)]
    made = Counter(e.memory_id for result in results for e in result.entries)
    memories = {memory_id for (memory_id,) in stored(db_path, "select id from memories")}
    assert set(made) == memories, "each memory from one whole apply"
    assert set(made.values()) == {1}, "each memory from one whole apply"
    evicted = {event for result in results for event in result.evicted}
    assert evicted == {
        e for (e,) in stored(db_path, "select id from events where evicted_at is not null")
    }
    waiting = "select session from consolidation_runs where status = 'prepared'"
    prepared = Counter(session for (session,) in stored(db_path, waiting))
    assert all(count == 1 for count in prepared.values()), prepared
    assert stored(db_path, "pragma integrity_check") == [("ok",)]
