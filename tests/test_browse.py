"""Browsing what is stored: ``Scope.list`` (memories and events, filters, a cursor that new
writes never shift, totals), ``Memory.scopes``, the ``memory_list`` tool and ``amem list``."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import helpers
import pytest
from helpers import amem_cli, memory_draft
from mcp_client import MARKER, connect, ok, other, refused

import amem
from amem.limits import LIST_PREVIEW_CHARS, MCP_MAX_RESULT_CHARS

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]  # see tests/conftest.py

JAN = "2026-01-01T09:00:00Z"
FEB = "2026-02-01T09:00:00Z"
MAR = "2026-03-01T09:00:00Z"


derive = partial(helpers.derive, session="s1", at=JAN)
"""An event and one memory quoting all of it, in session ``s1`` in January unless told."""


async def every_page(scope: amem.Scope, what: str = "memories", **filters: Any) -> list[str]:
    ids, cursor = [], None
    while True:
        page = await scope.list(what, cursor=cursor, **filters)
        ids += [item.id for item in page.items]
        if (cursor := page.next_cursor) is None:
            return ids


# --- memories ------------------------------------------------------------------------------


async def test_list_shows_current_memories_newest_first_with_totals(scope: amem.Scope) -> None:
    tea = await derive(scope, "I love green tea", event_id="e1", kind="preference")
    home = await derive(scope, "I live in Hangzhou", event_id="e2", subject="user", fact_key="home")
    said = await derive(
        scope, "我会提醒你喝水", event_id="e3", role="assistant", session="s2", kind="agreement"
    )
    await scope.submit_event("no memory from this one", role="user", event_id="e4")

    page = await scope.list()

    assert (page.persona, page.project, page.what) == ("assistant", "support", "memories")
    assert [item.id for item in page.items] == [said.id, home.id, tea.id]
    assert page.total == 3
    assert page.totals == {
        "fact": 1,
        "preference": 1,
        "agreement": 1,
        "growth": 0,
        "episode": 0,
        "observation": 0,
        "emotion": 0,
    }
    assert page.next_cursor is None
    item = page.items[1]
    assert isinstance(item, amem.ListedMemory)
    assert (item.text, item.kind, item.basis) == (
        "Memory of I live in Hangzhou",
        "fact",
        "user_statement",
    )
    assert (item.subject, item.fact_key, item.source_event_id) == ("user", "home", "e2")
    assert (item.role, item.session) == ("user", "s1")
    assert item.valid_at.isoformat() == "2026-01-01T09:00:00+00:00"
    assert item.invalid_at is None
    assert (item.revoked, item.expired) == (False, False)
    assert page.items[0].role == "assistant"


async def test_each_memory_filter(scope: amem.Scope) -> None:
    jan = await derive(scope, "January tea", event_id="e1", at=JAN, kind="preference")
    feb = await derive(scope, "February walk", event_id="e2", at=FEB, session="s2", kind="episode")
    mar = await derive(
        scope, "March promise", event_id="e3", at=MAR, role="assistant", kind="agreement"
    )

    async def ids(**filters: Any) -> list[str]:
        page = await scope.list(**filters)
        assert page.total == len(page.items)
        return [item.id for item in page.items]

    assert await ids(kinds=["preference", "agreement"]) == [mar.id, jan.id]
    assert await ids(kinds=("episode",)) == [feb.id]
    assert await ids(roles=["assistant"]) == [mar.id]
    assert await ids(roles={"user"}) == [feb.id, jan.id]
    assert await ids(session="s2") == [feb.id]
    assert await ids(since=FEB) == [mar.id, feb.id]  # since is inclusive
    assert await ids(until=FEB) == [jan.id]  # until is exclusive
    assert await ids(since="2026-01-15T00:00:00+08:00", until=MAR) == [feb.id]
    assert await ids(session="s1", roles=["user"]) == [jan.id]
    assert await ids(session="nobody") == []
    totals = (await scope.list(roles=["user"])).totals
    assert (totals["preference"], totals["episode"], totals["agreement"]) == (1, 1, 0)


async def test_revoked_and_expired_memories_only_when_asked(scope: amem.Scope) -> None:
    old = await derive(
        scope, "I live in Beijing", event_id="e1", at=JAN, subject="user", fact_key="home"
    )
    new = await derive(
        scope, "I live in Shanghai", event_id="e2", at=FEB, subject="user", fact_key="home"
    )
    wrong = await derive(scope, "I like coffee", event_id="e3", at=FEB, kind="preference")
    fixed = await scope.correct(wrong.id, "User likes tea", reason="misheard")

    current = await scope.list()
    assert [item.id for item in current.items] == [fixed.memory.id, new.id]
    assert current.total == 2

    expired = await scope.list(include_expired=True)
    assert [item.id for item in expired.items] == [fixed.memory.id, new.id, old.id]
    assert [item.expired for item in expired.items] == [False, False, True]
    assert expired.items[2].invalid_at == new.valid_at
    assert expired.totals["fact"] == 2

    revoked = await scope.list(include_revoked=True)
    assert [item.id for item in revoked.items] == [fixed.memory.id, wrong.id, new.id]
    assert [item.revoked for item in revoked.items] == [False, True, False]

    everything = await scope.list(include_revoked=True, include_expired=True)
    assert everything.total == 4


async def test_a_future_fact_is_listed_and_not_expired(scope: amem.Scope) -> None:
    soon = await derive(
        scope, "I will move to Berlin", event_id="e1", valid_at="2999-01-01T00:00:00Z"
    )
    [item] = (await scope.list()).items
    assert (item.id, item.expired) == (soon.id, False)


# --- events --------------------------------------------------------------------------------


async def test_list_events_with_filters_and_role_totals(scope: amem.Scope) -> None:
    await scope.submit_event("hello", role="user", event_id="u1", session="s1", occurred_at=JAN)
    await scope.submit_event("你好", role="assistant", event_id="a1", session="s1", occurred_at=FEB)
    await scope.submit_event(
        "rules", role="system", event_id="r1", category="reference", occurred_at=MAR
    )
    await scope.submit_event("later", role="user", event_id="u2", session="s2", occurred_at=MAR)

    page = await scope.list("events")
    assert [item.id for item in page.items] == ["u2", "r1", "a1", "u1"]
    assert page.totals == {"user": 2, "assistant": 1, "system": 1, "tool": 0}
    first = page.items[2]
    assert isinstance(first, amem.ListedEvent)
    assert (first.text, first.chars, first.truncated) == ("你好", 2, False)
    assert (first.role, first.category) == ("assistant", "conversation")
    assert (first.session, first.status) == ("s1", "stored")
    assert first.occurred_at.isoformat() == "2026-02-01T09:00:00+00:00"
    assert [item.seq for item in page.items] == sorted((i.seq for i in page.items), reverse=True)

    async def ids(**filters: Any) -> list[str]:
        return [item.id for item in (await scope.list("events", **filters)).items]

    assert await ids(roles=["user"]) == ["u2", "u1"]
    assert await ids(session="s1") == ["a1", "u1"]
    assert await ids(since=FEB, until=MAR) == ["a1"]
    assert await ids(since=MAR) == ["u2", "r1"]


async def test_a_long_event_is_shown_cut_and_read_whole(scope: amem.Scope) -> None:
    text = "长" * (LIST_PREVIEW_CHARS + 100)
    await scope.submit_event(text, role="user", event_id="long")
    [item] = (await scope.list("events")).items
    assert isinstance(item, amem.ListedEvent)
    assert item.text == text[:LIST_PREVIEW_CHARS]
    assert (item.chars, item.truncated) == (len(text), True)


# --- the cursor ----------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["memories", "events"])
async def test_pages_neither_repeat_nor_skip_while_new_rows_are_written(
    scope: amem.Scope, what: str
) -> None:
    for n in range(23):
        await derive(scope, f"fact number {n}", event_id=f"e{n}")
    before = await every_page(scope, what, limit=100)
    assert len(before) == 23

    seen, cursor, n = [], None, 100
    while True:
        page = await scope.list(what, cursor=cursor, limit=5)
        assert page.total >= 23  # counted when each page is read
        seen += [item.id for item in page.items]
        if (cursor := page.next_cursor) is None:
            break
        for _ in range(3):  # writes between pages land before the first page
            await derive(scope, f"written while paging {n}", event_id=f"e{n}")
            n += 1
    assert seen == before
    assert len(set(seen)) == len(seen)


async def test_a_cursor_only_continues_its_own_listing(mem: amem.Memory) -> None:
    scope = mem.scope("assistant", "support")
    for n in range(3):
        await derive(scope, f"fact {n}", event_id=f"e{n}")
    cursor = (await scope.list(limit=1)).next_cursor
    assert cursor is not None
    assert len((await scope.list(cursor=cursor, limit=1)).items) == 1
    assert len((await scope.list(cursor=cursor, limit=10)).items) == 2  # page size may change

    for call in (
        scope.list(cursor=cursor, kinds=["fact"]),
        scope.list("events", cursor=cursor),
        scope.list(cursor=cursor, include_expired=True),
        mem.scope("assistant", "other").list(cursor=cursor),
    ):
        with pytest.raises(amem.InvalidInput, match="another listing"):
            await call
    for bad in ("", "!!!", MARKER, "MTIz", cursor[:-2], cursor + "A"):
        with pytest.raises(amem.InvalidInput) as caught:
            await scope.list(cursor=bad)
        assert caught.value.code == "invalid_input"
        assert MARKER not in str(caught.value)


# --- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "field"),
    [
        ({"what": "people"}, "invalid_input", "what"),
        ({"what": "events", "kinds": ["fact"]}, "invalid_input", "memories only"),
        ({"what": "events", "include_revoked": True}, "invalid_input", "memories only"),
        ({"kinds": "fact"}, "invalid_input", "kinds"),
        ({"kinds": ["fact", MARKER]}, "invalid_input", "kinds"),
        ({"roles": ["user", "robot"]}, "invalid_input", "roles"),
        ({"session": ""}, "invalid_input", "session"),
        ({"since": "2026-01-01T00:00:00"}, "invalid_time", "since"),
        ({"until": MARKER}, "invalid_time", "until"),
        ({"since": FEB, "until": JAN}, "invalid_time", "until"),
        ({"since": FEB, "until": FEB}, "invalid_time", "until"),
        ({"include_expired": "yes"}, "invalid_input", "include_expired"),
        ({"limit": 0}, "invalid_input", "limit"),
        ({"limit": 501}, "invalid_input", "limit"),
        ({"limit": True}, "invalid_input", "limit"),
        ({"cursor": 7}, "invalid_input", "cursor"),
    ],
)
async def test_bad_list_arguments_are_refused_without_echo(
    scope: amem.Scope, args: dict[str, Any], code: str, field: str
) -> None:
    args = dict(args)  # the same dict serves both backends
    what = args.pop("what", "memories")
    with pytest.raises(amem.InvalidInput) as caught:
        await scope.list(what, **args)
    assert caught.value.code == code
    assert field in caught.value.message
    assert MARKER not in str(caught.value)
    assert "robot" not in str(caught.value)


# --- scopes --------------------------------------------------------------------------------


async def test_scopes_count_events_and_current_memories(mem: amem.Memory) -> None:
    assert await mem.scopes() == []
    a, b = mem.scope("alice", "chat"), mem.scope("bob", "chat")
    wrong = await derive(a, "I like coffee", event_id="a1")
    await a.correct(wrong.id, "User likes tea")  # a correction event; one memory revoked
    await a.submit_event("just words", role="user", event_id="a2")
    await derive(b, "I like cats", event_id="b1")
    await mem.scope("carol", "x").submit_event("to be deleted", role="user", event_id="c1")
    await mem.scope("carol", "x").delete(event_id="c1")

    scopes = await mem.scopes()

    assert [(s.persona, s.project, s.events, s.memories) for s in scopes] == [
        ("alice", "chat", 3, 1),
        ("bob", "chat", 1, 1),
    ]


# --- MCP -----------------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_memory_list_through_the_mcp_client(anyio_backend: str, tmp_path: Path) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "log") as s:
        for n in range(5):
            await ok(
                s,
                "event_submit",
                text=f"我喜欢第{n}种茶",
                role="user",
                event_id=f"e{n}",
                session="chat",
                occurred_at=JAN,
            )
            await ok(
                s,
                "memory_add",
                event_id=f"e{n}",
                memories=[memory_draft(f"用户喜欢第{n}种茶", f"我喜欢第{n}种茶", "preference")],
            )

        first = await ok(s, "memory_list", limit=2)
        assert [item["text"] for item in first["items"]] == ["用户喜欢第4种茶", "用户喜欢第3种茶"]
        assert first["total"] == 5
        assert first["totals"]["preference"] == 5
        assert first["items"][0]["role"] == "user"
        rest = await ok(s, "memory_list", limit=10, cursor=first["next_cursor"])
        assert [item["text"][-3] for item in rest["items"]] == ["2", "1", "0"]
        assert rest["next_cursor"] is None

        events = await ok(s, "memory_list", what="events", roles=["user"], session="chat")
        assert [item["id"] for item in events["items"]] == [f"e{n}" for n in (4, 3, 2, 1, 0)]
        assert events["totals"] == {"user": 5, "assistant": 0, "system": 0, "tool": 0}

        assert await refused(s, "memory_list", {"cursor": MARKER}) == "invalid_input"
        assert await refused(s, "memory_list", {"kinds": [MARKER]}) == "invalid_input"
        assert await refused(s, "memory_list", {"since": MARKER}) == "invalid_time"
        assert await refused(s, "memory_list", {"limit": 101}) == "invalid_input"
        assert await refused(s, "memory_list", {"what": "events", "kinds": ["fact"]}) == (
            "invalid_input"
        )


@pytest.mark.both_backends
async def test_memory_list_pages_fit_the_result_cap_without_gaps(
    anyio_backend: str, tmp_path: Path
) -> None:
    db = tmp_path / "m.db"
    async with amem.open(db, settings=amem.Settings()) as memory:
        scope = memory.scope("assistant", "mcp-tests")
        for n in range(150):
            await scope.submit_event(f"{n:04d}" + "字" * 1_000, role="user", event_id=f"e{n}")
    async with connect(db, other(anyio_backend), tmp_path / "log") as s:
        seen: list[str] = []
        cursor = None
        while True:
            args: dict[str, Any] = {"what": "events", "limit": 100}
            if cursor is not None:
                args["cursor"] = cursor
            result = await s.call_tool("memory_list", args)
            [content] = result.content
            text = content.text  # type: ignore[union-attr]
            assert len(text) <= MCP_MAX_RESULT_CHARS
            page = json.loads(text)
            assert 0 < len(page["items"]) < 100  # fewer items, so the page fits
            assert all(item["truncated"] for item in page["items"])
            seen += [item["id"] for item in page["items"]]
            if (cursor := page["next_cursor"]) is None:
                break
    assert seen == [f"e{n}" for n in reversed(range(150))]


# --- the CLI -------------------------------------------------------------------------------


async def fill(db: Path) -> None:
    async with amem.open(db, settings=amem.Settings()) as memory:
        scope = memory.scope()
        await derive(scope, "I live in\nHangzhou", event_id="e1", subject="user", fact_key="home")
        await derive(scope, "I love tea", event_id="e2", kind="preference", at=FEB)
        await scope.submit_event("hello there", role="assistant", event_id="e3", session="s9")
        await memory.scope("bob", "work").submit_event("bob's note", role="user")


def test_cli_list_prints_a_table_pages_and_json(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    anyio.run(fill, db)

    result = amem_cli("list", "--db", str(db))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "2 memories in default/default: fact 1, preference 1"
    assert "preference" in lines[1]
    assert "Memory of I love tea" in lines[1]
    assert "Memory of I live in Hangzhou" in lines[2]  # one line per item
    assert len(lines) == 3

    result = amem_cli("list", "events", "--db", str(db), "--limit", "1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "3 events in default/default: user 2, assistant 1"
    assert "hello there" in lines[1]
    assert "(e3)" in lines[1]
    cursor = lines[-1].split("--cursor ")[1].split()[0]
    result = amem_cli("list", "events", "--db", str(db), "--limit", "5", "--cursor", cursor)
    assert [line.split("(")[-1] for line in result.stdout.splitlines()[1:]] == ["e2)", "e1)"]

    result = amem_cli("list", "--db", str(db), "--kind", "fact", "--json")
    page = json.loads(result.stdout)
    assert [item["source_event_id"] for item in page["items"]] == ["e1"]
    assert page["items"][0]["text"] == "Memory of I live in\nHangzhou"  # JSON: unaltered

    result = amem_cli("list", "scopes", "--db", str(db))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:4] == ["persona", "project", "events", "memories"]
    assert result.stdout.split()[4:] == ["bob", "work", "1", "0", "default", "default", "3", "2"]


def test_cli_list_refuses_clearly_and_echoes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    anyio.run(fill, db)
    for args in (
        [MARKER],
        ["--role", MARKER],
        ["--cursor", MARKER],
        ["--kind", MARKER],
        ["--since", MARKER],
        ["events", "--kind", "fact"],
        ["scopes", "--session", MARKER],
        ["--limit", "0"],
    ):
        result = amem_cli("list", "--db", str(db), *args)
        assert result.returncode == 1, args
        assert result.stderr.startswith("amem: error: "), args
        assert MARKER not in result.stderr
        assert result.stdout == ""
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("select count(*) from events").fetchone()[0] == 4
