"""People from a model and from a shell: the MCP tools ``person_list``, ``person_upsert`` and
``person_assign`` and the ``person`` argument of ``event_submit``, ``memory_recall``,
``memory_list`` and ``session_resume``, driven through the MCP SDK's client over stdio
(``mcp_client``); and ``amem people`` with ``--person`` on ``submit``, ``remember``,
``recall`` and ``list``, run in process (``helpers.amem_cli``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import amem_cli, cli_ok, help_text, memory_draft, rows
from mcp_client import (
    MARKER,
    PERSONA,
    PROJECT,
    connect,
    ok,
    other,
    refused,
    server_backends,
    tools_by_name,
)

from amem.limits import MCP_MAX_RESULT_CHARS

# --- MCP ----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_people_tools_are_listed_with_what_they_do_to_the_store(
    anyio_backend: str, tmp_path: Path
) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        tools = await tools_by_name(s)
    hints = {name: tools[name].annotations for name in tools}
    assert hints["person_list"].readOnlyHint is True  # type: ignore[union-attr]
    upsert = hints["person_upsert"]
    assert upsert is not None
    assert not upsert.readOnlyHint
    assert upsert.destructiveHint is True  # with a person_id, omitted fields are cleared
    assert not upsert.idempotentHint  # without one, every call adds a person
    assign = hints["person_assign"]
    assert assign is not None
    assert not assign.readOnlyHint
    assert assign.destructiveHint is False
    assert assign.idempotentHint is True
    for name in ("event_submit", "memory_recall", "memory_list", "session_resume"):
        assert tools[name].inputSchema["properties"]["person"] == {"type": "string"}, name
        assert "person" not in tools[name].inputSchema.get("required", []), name
    assert tools["person_upsert"].inputSchema["required"] == ["display_name"]
    assert tools["person_assign"].inputSchema["required"] == ["event_id"]


@server_backends
@pytest.mark.anyio
async def test_a_model_files_messages_under_people_and_reads_only_theirs(
    anyio_backend: str, server_backend: str, tmp_path: Path
) -> None:
    async with connect(tmp_path / "m.db", server_backend, tmp_path / "server.log") as s:
        assert (await ok(s, "person_list"))["people"] == []
        anna = await ok(
            s,
            "person_upsert",
            display_name="Anna Li",
            aliases=["安娜", "Annie"],
            locale="zh-CN",
            timezone="Asia/Shanghai",
            notes="the user's sister",
        )
        assert anna["id"].startswith("per_")
        assert (anna["aliases"], anna["version"]) == (["安娜", "Annie"], 1)
        assert "new_scope" not in anna  # the server's own scope
        bob = await ok(s, "person_upsert", person_id="bob", display_name="Bob")
        assert bob["id"] == "bob"
        listed = await ok(s, "person_list")
        assert (listed["persona"], listed["project"]) == (PERSONA, PROJECT)
        assert [p["id"] for p in listed["people"]] == [anna["id"], "bob"]  # oldest first
        assert listed["people"][0]["display_name"] == "Anna Li"
        assert listed["people"][0]["notes"] == "the user's sister"

        # a message of Anna's: it and its memories are hers; one memory is about Bob
        said = "Bob 最喜欢茉莉花茶，我喜欢龙井茶。"
        receipt = await ok(
            s, "event_submit", text=said, role="user", event_id="anna-1", person=anna["id"]
        )
        assert receipt["person"] == anna["id"]
        added = await ok(
            s,
            "memory_add",
            event_id="anna-1",
            memories=[
                memory_draft(
                    "Bob 最喜欢茉莉花茶", "Bob 最喜欢茉莉花茶", "preference", about=["bob"]
                ),
                memory_draft("安娜喜欢龙井茶", "我喜欢龙井茶", "preference"),
            ],
        )
        jasmine, longjing = added["memory_ids"]
        await ok(s, "event_submit", text="我自己喜欢红茶。", role="user", event_id="mine-1")

        everyone = await ok(s, "memory_recall", query="茶")
        by_id = {item["id"]: item for item in everyone["items"]}
        assert {jasmine, longjing, "mine-1"} <= set(by_id)
        assert by_id[jasmine]["person"] == anna["id"]  # shown without explain
        assert by_id[jasmine]["about"] == ["bob"]
        assert by_id[longjing]["person"] == anna["id"]
        assert "about" not in by_id[longjing]  # about no one: left out
        assert "person" not in by_id["mine-1"]  # no one's: left out

        hers = await ok(s, "memory_recall", query="茶", person=anna["id"])
        assert {item["id"] for item in hers["items"]} == {jasmine, longjing}
        his = await ok(s, "memory_recall", query="茶", person="bob")
        assert [item["id"] for item in his["items"]] == [jasmine]  # about him

        events = await ok(s, "memory_list", what="events", person=anna["id"])
        assert [item["id"] for item in events["items"]] == ["anna-1"]
        about_bob = await ok(s, "memory_list", person="bob")
        assert [item["id"] for item in about_bob["items"]] == [jasmine]

        pack = await ok(s, "session_resume", session="chat-1", query="茶", person=anna["id"])
        assert "Anna Li" in pack["text"]
        assert "安娜喜欢龙井茶" in pack["text"]
        assert "红茶" not in pack["text"]  # not hers
        plain = await ok(s, "session_resume", session="chat-1", query="茶")
        assert "红茶" in plain["text"]

        # Bob said it after all: the message moves, with both memories
        moved = await ok(s, "person_assign", event_id="anna-1", person="bob", reason="Bob said it")
        assert (moved["person"], moved["previous"]) == ("bob", anna["id"])
        assert sorted(moved["memory_ids"]) == sorted([jasmine, longjing])
        assert moved["reason"] == "Bob said it"
        hers = await ok(s, "memory_recall", query="龙井", person=anna["id"])
        assert hers["items"] == []
        his = await ok(s, "memory_recall", query="龙井", person="bob")
        assert longjing in [item["id"] for item in his["items"]]
        again = await ok(s, "person_assign", event_id="anna-1", person="bob")
        assert again["previous"] == "bob"  # nothing more changed
        freed = await ok(s, "person_assign", event_id="anna-1")  # person omitted: no one's
        assert (freed["person"], freed["previous"]) == (None, "bob")
        page = await ok(s, "memory_list", what="events", person="bob")
        assert page["items"] == []
        read = await ok(s, "memory_read", id="anna-1")
        assert (read["text"], read["event"]["role"]) == (said, "user")  # the words stay


@pytest.mark.anyio
async def test_person_upsert_makes_a_person_exactly_what_it_is_given(
    anyio_backend: str, tmp_path: Path
) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        first = await ok(
            s, "person_upsert", person_id="tom", display_name="Tom", aliases=["汤姆"], notes="n"
        )
        same = await ok(
            s, "person_upsert", person_id="tom", display_name="Tom", aliases=["汤姆"], notes="n"
        )
        assert same["version"] == first["version"] == 1  # unchanged: no new version
        changed = await ok(s, "person_upsert", person_id="tom", display_name="Tommy")
        assert changed["version"] == 2
        assert (changed["aliases"], changed["notes"]) == ([], None)  # omitted: cleared
        twin = await ok(s, "person_upsert", display_name="Tommy")  # names need not be unique
        assert twin["id"] != "tom"
        listed = await ok(s, "person_list")
        assert [p["id"] for p in listed["people"]] == ["tom", twin["id"]]

        elsewhere = await ok(s, "person_upsert", display_name="Tom", project="other-project")
        assert elsewhere["new_scope"] is True  # a scope that held nothing before
        assert elsewhere["project"] == "other-project"
        assert [p["id"] for p in (await ok(s, "person_list"))["people"]] == ["tom", twin["id"]]


@pytest.mark.anyio
async def test_person_list_stays_within_the_result_cap_oldest_first(
    anyio_backend: str, tmp_path: Path
) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        for n in range(70):  # about 70,000 characters of notes
            await ok(
                s, "person_upsert", person_id=f"p-{n:02}", display_name=f"P{n}", notes="n" * 990
            )
        result = await s.call_tool("person_list", {})
    text = result.content[0].text  # type: ignore[union-attr]
    listed = json.loads(text)
    assert len(text) <= MCP_MAX_RESULT_CHARS
    assert listed["truncated_to_fit"] is True
    shown = [p["id"] for p in listed["people"]]
    assert 40 < len(shown) < 70
    assert shown == [f"p-{n:02}" for n in range(len(shown))]  # the oldest, whole
    assert all(len(p["notes"]) == 990 for p in listed["people"])


@pytest.mark.anyio
async def test_people_tools_refuse_unknown_people_and_bad_fields_and_store_nothing(
    anyio_backend: str, tmp_path: Path
) -> None:
    async with connect(tmp_path / "m.db", other(anyio_backend), tmp_path / "server.log") as s:
        await ok(s, "person_upsert", person_id="ann", display_name="Ann")
        await ok(s, "event_submit", text="hello", role="user", event_id="e-1")
        stranger = "per_" + MARKER
        for tool, args in (
            ("event_submit", {"text": "hi", "role": "user", "event_id": "e-2"}),
            ("memory_recall", {"query": "hello"}),
            ("memory_list", {}),
            ("session_resume", {"session": "chat"}),
            ("person_assign", {"event_id": "e-1"}),
        ):
            assert await refused(s, tool, args | {"person": stranger}) == "not_found", tool
        # a person of another scope is a stranger here
        await ok(s, "person_upsert", person_id="zoe", display_name="Zoe", project="other")
        assert await refused(s, "memory_recall", {"query": "hello", "person": "zoe"}) == (
            "not_found"
        )
        assert await refused(s, "person_assign", {"event_id": "e-1", "person": "zoe"}) == (
            "not_found"
        )
        assert await refused(s, "person_assign", {"event_id": MARKER, "person": "ann"}) == (
            "not_found"
        )
        for args in (
            {"display_name": ""},
            {"display_name": " Ann"},
            {"display_name": "Ann", "aliases": [f"a{n}" for n in range(51)]},
            {"display_name": "Ann", "aliases": [MARKER + "\u200b"]},
            {"display_name": "Ann", "person_id": MARKER + "\n"},
            {"display_name": "x" * 101},
            {"display_name": "Ann", "notes": "n" * 1_001},
            {"aliases": ["Ann"]},
        ):
            assert await refused(s, "person_upsert", args) == "invalid_input", args
        listed = await ok(s, "person_list")
        events = await ok(s, "memory_list", what="events")
    assert [p["id"] for p in listed["people"]] == ["ann"]
    assert [item["id"] for item in events["items"]] == ["e-1"]  # e-2 was never stored
    assert events["items"][0].get("person") is None  # the refused assignment changed nothing


# --- the command line ---------------------------------------------------------------------


def test_people_help_names_every_action_and_option() -> None:
    expected = {
        ("people",): ["list", "add", "find", "assign", "remove", "PERSON", "alias"],
        ("people", "add"): ["NAME", "--id", "--alias", "--locale", "--timezone", "--notes"],
        ("people", "find"): ["NAME", "alias"],
        ("people", "assign"): ["EVENT_ID", "PERSON", "--nobody", "--reason"],
        ("people", "remove"): ["PERSON", "person_in_use"],
        ("submit",): ["--person"],
        ("remember",): ["--person"],
        ("recall",): ["--person"],
        ("list",): ["--person"],
    }
    for words, texts in expected.items():
        out = help_text(*words)
        assert out.startswith(f"usage: amem {' '.join(words)}")
        for text in [*texts, "--db", "--persona", "--project", "--json"]:
            assert text in out, (words, text)
    assert "people" in amem_cli("--help").stdout


def test_amem_people_adds_finds_lists_and_removes(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "m.db")]
    assert cli_ok("people", *db, "add", "--id", "ann", "Ann").strip() == "saved ann: Ann (v1)"
    added = cli_ok(
        "people",
        "add",
        "Wang Fang",
        "--alias",
        "小芳",
        "--alias",
        "Fang",
        "--locale",
        "zh-CN",
        "--timezone",
        "Asia/Shanghai",
        "--notes",
        "a colleague",
        *db,
    )
    fang = added.split()[1].rstrip(":")
    assert fang.startswith("per_")
    listed = cli_ok("people", *db).splitlines()
    assert listed[0] == "ann  Ann  (v1)"
    assert listed[1] == (
        f"{fang}  Wang Fang  (aka 小芳, Fang; locale zh-CN; timezone Asia/Shanghai; v1)"
    )
    assert listed[2] == "    notes: a colleague"
    assert cli_ok("people", "list", *db).splitlines() == listed
    assert cli_ok("people", "find", "ＦＡＮＧ", *db).splitlines()[0].startswith(fang)  # folded
    assert cli_ok("people", "find", "小芳", *db).startswith(fang)
    assert cli_ok("people", "find", "Nobody", *db).strip() == "(no one goes by that name)"

    shown = json.loads(cli_ok("people", "--json", *db))
    assert [p["id"] for p in shown["people"]] == ["ann", fang]
    assert shown["people"][1]["aliases"] == ["小芳", "Fang"]
    found = json.loads(cli_ok("people", "find", "fang", "--json", *db))
    assert [p["id"] for p in found["people"]] == [fang]

    # --id of a person already there: exactly what is given, the rest cleared
    replaced = cli_ok("people", "add", "Fang Wang", "--id", fang, *db)
    assert replaced.strip() == f"saved {fang}: Fang Wang (v2)"
    assert cli_ok("people", "find", "小芳", *db).strip() == "(no one goes by that name)"

    assert cli_ok("people", "remove", "Fang Wang", *db).strip() == f"removed {fang}: Fang Wang"
    assert cli_ok("people", "remove", "ann", *db).strip() == "removed ann: Ann"
    assert cli_ok("people", *db).strip() == ("(no people yet; add one with 'amem people add NAME')")


def test_person_options_take_an_id_or_a_name_only_one_person_goes_by(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    db = ["--db", str(path), "--backend", "trio"]
    cli_ok("people", "add", "Anna", "--alias", "安娜", "--id", "anna", *db)
    cli_ok("people", "add", "Bob", "--id", "bob-1", *db)
    cli_ok("people", "add", "Bob", "--id", "bob-2", *db)

    stored = cli_ok("submit", "安娜喜欢龙井茶", "--event-id", "e-1", "--person", "安娜", *db)
    assert stored.startswith("stored e-1")
    cli_ok("submit", "I like black tea", "--event-id", "e-2", *db)
    remembered = cli_ok("remember", "Bob-1 likes oolong tea", "--person", "bob-1", *db)
    assert remembered.startswith("remembered mem_")
    assert rows(path, "select id, person from events order by seq")[:2] == [
        ("e-1", "anna"),
        ("e-2", None),
    ]
    assert rows(path, "select person from memories") == [("bob-1",)]

    ambiguous = amem_cli("submit", "hi", "--event-id", "e-3", "--person", "bob", *db)
    assert ambiguous.returncode == 1
    assert ambiguous.stderr.startswith("amem: error: invalid_input: 2 people go by that name")
    unknown = amem_cli("submit", "hi", "--event-id", "e-3", "--person", "Carol", *db)
    assert unknown.returncode == 1
    assert unknown.stderr.startswith("amem: error: not_found: ")
    assert "Carol" not in unknown.stderr
    assert len(rows(path, "select id from events")) == 3  # neither refusal stored anything

    hers = cli_ok("recall", "tea 茶", "--person", "Anna", *db)
    assert "安娜喜欢龙井茶" in hers
    assert "black tea" not in hers
    assert "oolong" not in hers
    everyone = cli_ok("recall", "tea 茶", *db)
    assert "black tea" in everyone
    listed = cli_ok("list", "events", "--person", "anna", *db)
    assert "安娜喜欢龙井茶" in listed
    assert "black tea" not in listed
    listed = json.loads(cli_ok("list", "--person", "bob-1", "--json", *db))
    assert [item["text"] for item in listed["items"]] == ["Bob-1 likes oolong tea"]
    scopes = amem_cli("list", "scopes", "--person", "anna", *db)
    assert scopes.returncode == 1
    assert "takes no filters" in scopes.stderr


def test_amem_people_assign_moves_an_event_and_remove_waits_until_nothing_is_theirs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.db"
    db = ["--db", str(path)]
    cli_ok("people", "add", "Anna", "--id", "anna", *db)
    cli_ok("people", "add", "Bob", "--id", "bob", *db)
    remembered = cli_ok("remember", "I like green tea", *db)
    event_id = remembered.split("from event ")[1].split()[0]

    moved = cli_ok("people", "assign", event_id, "Anna", "--reason", "she said it", *db)
    assert moved.strip() == (
        f"event {event_id} now belongs to anna (before: no one); 1 memory moved with it"
    )
    assert rows(path, "select person from memories") == [("anna",)]
    assert rows(path, "select from_person, to_person, reason from assignments") == [
        (None, "anna", "she said it")
    ]
    again = cli_ok("people", "assign", event_id, "anna", *db)
    assert again.strip() == f"event {event_id} already belongs to anna; nothing changed"

    in_use = amem_cli("people", "remove", "anna", *db)
    assert in_use.returncode == 1
    assert in_use.stderr.startswith("amem: error: person_in_use: ")

    neither = amem_cli("people", "assign", event_id, *db)
    both = amem_cli("people", "assign", event_id, "bob", "--nobody", *db)
    for refusal in (neither, both):
        assert refusal.returncode == 1
        assert "give PERSON or --nobody" in refusal.stderr
    done = json.loads(cli_ok("people", "assign", event_id, "--nobody", "--json", *db))
    assert (done["person"], done["previous"]) == (None, "anna")
    assert rows(path, "select person from events") == [(None,)]
    assert cli_ok("people", "remove", "anna", *db).strip() == "removed anna: Anna"


def test_amem_people_reads_the_db_it_is_given_and_never_creates_one(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    for words in (["people"], ["people", "list"], ["people", "find", "Anna"]):
        missing = amem_cli(*words, "--db", str(path))
        assert missing.returncode == 1
        assert "no_database" in missing.stderr
    assert not path.exists()
    # the common options count before the ACTION too
    cli_ok("people", "--db", str(path), "add", "Anna", "--id", "anna")
    assert rows(path, "select id from people") == [("anna",)]
    assert cli_ok("people", "--db", str(path), "find", "anna").startswith("anna  Anna")
