"""People (issue 31) at the front doors: a capture files each speaker's events under a
person of the scope's registry (``host_ingest``, ``capture_transcript``, Claude Code and
their commands), and the inspector lists a scope's people and shows one person's events
and memories."""

from __future__ import annotations

import json
import re
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from helpers import (
    Ran,
    amem_cli,
    every_page,
    fingerprint,
    help_text,
    inspector_in_chromium,
    linked_ids,
    next_page,
    rows,
    text_of,
)

import amem
from amem import memory as memory_module
from amem.hosts import claude_code
from amem.limits import MAX_SPEAKERS

pytestmark = pytest.mark.anyio

SCOPE = {"persona": "assistant", "project": "dinner-club"}
SCRIPT = "<script>alert(1)</script>"
CHAT = [  # a group chat: Ana and Bo, the assistant, and a speaker whose name is markup
    {"event_id": "g-1", "role": "user", "speaker": "Ana", "text": "I'm vegetarian."},
    {"event_id": "g-2", "role": "user", "speaker": "Bo", "text": "我什么都吃，但安娜不吃肉。"},
    {"event_id": "g-3", "role": "assistant", "text": "A vegetarian menu, then."},
    {"event_id": "g-4", "role": "user", "speaker": "Ana", "text": "And no mushrooms, please."},
    {"event_id": "g-5", "role": "user", "speaker": SCRIPT, "text": "hello from a tag"},
]


async def registry(scope: amem.Scope) -> dict[str, str]:
    """Ana, Bo and a person whose name is markup, in the scope's registry: speaker to ID."""
    ana = await scope.upsert_person("per_ana", display_name="Ana", aliases=["Annie", "安娜"])
    bo = await scope.upsert_person("per_bo", display_name="Bo", locale="zh-CN")
    tag = await scope.upsert_person("per_tag", display_name=SCRIPT, aliases=["<b>bold</b>"])
    return {"Ana": ana.id, "Bo": bo.id, SCRIPT: tag.id}


async def persons(scope: amem.Scope) -> dict[str, str | None]:
    """Each event of the scope and whose it is."""
    listing = await scope.list("events", limit=100)
    return {event.id: event.person for event in listing.items}


# --- host capture ----------------------------------------------------------------------------


async def test_a_mapped_speaker_s_events_belong_to_their_person(scope: amem.Scope) -> None:
    people = await registry(scope)
    done = await scope.host_ingest("chat-1", CHAT, people=people)
    expected = {"g-1": "per_ana", "g-2": "per_bo", "g-3": None, "g-4": "per_ana", "g-5": "per_tag"}
    assert {r.event_id: r.person for r in done.receipts} == expected
    assert await persons(scope) == expected
    assert (await scope.read("g-1")).event.person == "per_ana"


async def test_without_a_speaker_the_role_is_the_speaker_and_an_entry_s_own_person_wins(
    scope: amem.Scope,
) -> None:
    people = await registry(scope)
    entries = [
        {"event_id": "r-1", "role": "user", "text": "one to one: the user is Ana"},
        {"event_id": "r-2", "role": "assistant", "text": "and my replies are hers too"},
        {"event_id": "r-3", "role": "user", "text": "Bo borrowed the phone", "person": "per_bo"},
        {"event_id": "r-4", "role": "user", "speaker": "ana", "text": "names are exact"},
    ]
    mapping = {"user": people["Ana"], "assistant": people["Ana"]}
    done = await scope.host_ingest("phone", entries, people=mapping)
    assert [r.person for r in done.receipts] == ["per_ana", "per_ana", "per_bo", None]


async def test_an_unknown_person_id_refuses_the_slice_and_writes_nothing(
    scope: amem.Scope,
) -> None:
    people = await registry(scope)
    checkpoint = {"session": "s1", "goal": "plan the dinner"}
    for mapping in (
        {**people, "Bo": "per_typo"},  # an entry's person
        {**people, "Cy": "per_nobody"},  # no entry is Cy's: refused all the same
    ):
        with pytest.raises(amem.NotFound) as refused:
            await scope.host_ingest(
                "chat-1", CHAT, expected_cursor=0, checkpoint=checkpoint, people=mapping
            )
        assert refused.value.code == "not_found"
        assert "people" in refused.value.message
        assert "per_" not in refused.value.message  # errors never echo the value
    with pytest.raises(amem.NotFound):
        await scope.capture_transcript("chat-1", CHAT, people={"Ana": "per_typo"})
    assert await scope.capture_cursor("chat-1") == 0
    assert await persons(scope) == {}
    assert await scope.checkpoint("s1") is None


async def test_a_long_transcript_is_refused_by_its_first_slice(
    scope: amem.Scope, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_module, "MAX_CAPTURE_ENTRIES", 2)  # three slices
    with pytest.raises(amem.NotFound):
        await scope.capture_transcript("chat-1", CHAT, people={"Ana": "per_typo"})
    assert (await scope.capture_cursor("chat-1"), await persons(scope)) == (0, {})
    people = await registry(scope)
    done = await scope.capture_transcript("chat-1", CHAT, people=people)
    assert done.cursor == len(CHAT)
    assert (await persons(scope))["g-4"] == "per_ana"  # the second slice's


async def test_a_replay_keeps_the_person_each_event_was_stored_with(scope: amem.Scope) -> None:
    people = await registry(scope)
    await scope.host_ingest("chat-1", CHAT[:2], people=people)
    swapped = {"Ana": people["Bo"], "Bo": people["Ana"]}
    again = await scope.host_ingest("chat-2", CHAT, people=swapped)  # a new cursor: replayed
    assert again.duplicates == ["g-1", "g-2"]  # not a conflict
    assert [r.person for r in again.receipts[:2]] == ["per_ana", "per_bo"]
    assert (await persons(scope))["g-4"] == "per_bo"  # stored now: the new mapping
    moved = await scope.assign("g-1", "per_bo", reason="it was Bo on Ana's phone")
    assert (moved.previous, moved.person) == ("per_ana", "per_bo")


@pytest.mark.one_backend
@pytest.mark.parametrize(
    ("people", "entries", "problem"),
    [
        (["Ana"], CHAT, "people must map"),
        ({f"s{n}": "per_ana" for n in range(MAX_SPEAKERS + 1)}, CHAT, "people must map"),
        ({"Ana\u202e": "per_ana"}, CHAT, "people (a speaker)"),
        ({"Ana": " per_ana"}, CHAT, "people (a person ID)"),
        ({"Ana": "per_ana"}, [{**CHAT[0], "speaker": 7}], "speaker must be a string"),
        ({"Ana": "per_ana"}, [{**CHAT[0], "spaeker": "Ana"}], "fields amem does not know"),
    ],
)
async def test_a_mapping_or_speaker_that_is_not_names_is_refused(
    scope: amem.Scope, people: Any, entries: list[dict[str, Any]], problem: str
) -> None:
    await registry(scope)
    with pytest.raises(amem.InvalidInput) as refused:
        await scope.host_ingest("chat-1", entries, people=people)
    assert problem in refused.value.message
    assert await scope.capture_cursor("chat-1") == 0


# --- Claude Code -----------------------------------------------------------------------------

FIXTURES = Path(__file__).parent / "fixtures" / "claude_code"
SESSION = "7c2f3b1e-5a4d-4e8f-9b6a-2d1c0e9f8a7b"  # the session of the fixtures


def transcript_file(tmp_path: Path) -> Path:
    path = tmp_path / f"{SESSION}.jsonl"
    path.write_bytes((FIXTURES / "session.jsonl").read_bytes())
    return path


def roles(path: Path) -> dict[str, str]:
    """Each event a capture of the transcript stores, and its role."""
    with closing(claude_code.open_transcript(path, SESSION)) as transcript:
        return {
            e["event_id"]: e["role"] for e in claude_code.entries(transcript, claude_code.LeftOut())
        }


async def capture(scope: amem.Scope, path: Path, **options: Any) -> claude_code.Captured:
    with closing(claude_code.open_transcript(path, SESSION)) as transcript:
        return await claude_code.capture(scope, transcript, **options)


async def test_claude_code_files_the_user_s_lines_under_their_person(
    scope: amem.Scope, tmp_path: Path
) -> None:
    people = await registry(scope)
    path = transcript_file(tmp_path)
    said = roles(path)
    assert set(said.values()) == {"user", "assistant"}
    await capture(scope, path, people={"user": people["Ana"]})
    owner = {"user": "per_ana", "assistant": None}
    assert await persons(scope) == {event: owner[role] for event, role in said.items()}


async def test_claude_code_files_the_whole_conversation_when_both_speakers_are_mapped(
    scope: amem.Scope, tmp_path: Path
) -> None:
    people = await registry(scope)
    await capture(
        scope, transcript_file(tmp_path), people=dict.fromkeys(claude_code.SPEAKERS, people["Ana"])
    )
    assert set((await persons(scope)).values()) == {"per_ana"}


async def test_claude_code_refuses_a_speaker_it_never_has_and_an_unknown_person(
    scope: amem.Scope, tmp_path: Path
) -> None:
    people = await registry(scope)
    path = transcript_file(tmp_path)
    with pytest.raises(amem.InvalidInput) as refused:
        await capture(scope, path, people={"Ana": people["Ana"]})
    assert "user and assistant" in refused.value.message
    with pytest.raises(amem.NotFound):
        await capture(scope, path, people={"user": "per_typo"})
    instance = claude_code.instance_for(SESSION)
    assert (await scope.capture_cursor(instance), await persons(scope)) == (0, {})


# --- the commands ----------------------------------------------------------------------------

CLI_SCOPE = ("--persona", SCOPE["persona"], "--project", SCOPE["project"])


def registered(db: Path) -> dict[str, str]:
    async def add() -> dict[str, str]:
        async with amem.open(db, settings=amem.Settings()) as mem:
            return await registry(mem.scope(**SCOPE))

    return anyio.run(add)


def hook(db: Path, path: Path, *options: str) -> Ran:
    """``claude-code-hook`` on ``path``, run as Claude Code runs it."""
    fields = {"session_id": SESSION, "transcript_path": str(path), "hook_event_name": "Stop"}
    return amem_cli("claude-code-hook", "--db", db, *CLI_SCOPE, *options, input=json.dumps(fields))


def event_people(db: Path) -> dict[str, str | None]:
    return dict(rows(db, "select id, person from events order by seq"))


def test_the_hook_and_the_backfill_take_person_options(tmp_path: Path) -> None:
    db, path = tmp_path / "memory.db", transcript_file(tmp_path)
    registered(db)
    said = roles(path)
    ran = hook(db, path, "--person", "user=per_ana", "--person", "assistant=ａｎｎｉｅ")
    assert (ran.returncode, ran.stdout) == (0, "")
    assert event_people(db) == dict.fromkeys(said, "per_ana")  # an ID, or a name only she has
    other = tmp_path / "other" / f"{SESSION}.jsonl"  # the same lines again: duplicates
    other.parent.mkdir()
    other.write_bytes(path.read_bytes())
    result = amem_cli(
        "claude-code-capture", other, "--db", db, *CLI_SCOPE, "--person", "user=per_bo", "--json"
    )
    assert result.returncode == 0, result.stderr
    [captured] = json.loads(result.stdout)["captures"]
    assert captured["skipped"] == len(said)  # the hook's cursor: nothing is refiled
    assert set(event_people(db).values()) == {"per_ana"}


def test_the_hook_refuses_an_unknown_person_and_writes_nothing(tmp_path: Path) -> None:
    db, path = tmp_path / "memory.db", transcript_file(tmp_path)
    registered(db)
    ran = hook(db, path, "--person", "user=per_typo")
    assert (ran.returncode, ran.stdout) == (1, "")  # 1, never 2: Claude Code goes on
    assert ran.stderr.startswith("amem: error: not_found: no person with that ID or name")
    assert event_people(db) == {}
    assert rows(db, "select count(*) from capture_cursors") == [(0,)]


def test_a_name_several_people_go_by_is_refused_never_guessed(tmp_path: Path) -> None:
    db, path = tmp_path / "memory.db", transcript_file(tmp_path)
    registered(db)

    async def another_ana() -> None:
        async with amem.open(db, settings=amem.Settings()) as mem:
            await mem.scope(**SCOPE).upsert_person("per_ana_2", display_name="ana")

    anyio.run(another_ana)
    ran = hook(db, path, "--person", "user=Ana")
    assert (ran.returncode, ran.stdout) == (1, "")
    assert "2 people go by that name" in ran.stderr
    assert event_people(db) == {}


@pytest.mark.parametrize(
    ("option", "problem", "status"),
    [
        ("per_ana", "must be SPEAKER=PERSON", 2),  # no speaker: a usage error
        ("user=", "must be SPEAKER=PERSON", 2),
        ("ana=per_ana", "speakers are user and assistant", 1),  # Claude Code names no one
    ],
)
def test_a_person_option_claude_code_cannot_use_is_refused_before_the_file_opens(
    tmp_path: Path, option: str, problem: str, status: int
) -> None:
    db, path = tmp_path / "memory.db", transcript_file(tmp_path)
    ran = hook(db, path, "--person", option)
    assert (ran.returncode, ran.stdout) == (1, "")  # the hook: never 2
    assert problem in ran.stderr
    ran = amem_cli("claude-code-capture", path, "--db", db, "--person", option)
    assert ran.returncode == status
    assert problem in ran.stderr
    assert not db.exists()


def test_one_speaker_given_two_people_is_refused(tmp_path: Path) -> None:
    db, path = tmp_path / "memory.db", transcript_file(tmp_path)
    ran = hook(db, path, "--person", "user=per_ana", "--person", "user=per_bo")
    assert ran.returncode == 1
    assert "one speaker two different people" in ran.stderr
    assert not db.exists()


def test_host_ingest_takes_person_options(tmp_path: Path) -> None:
    db, chat = tmp_path / "memory.db", tmp_path / "chat.jsonl"
    registered(db)
    chat.write_text("".join(json.dumps(entry) + "\n" for entry in CHAT), encoding="utf-8")
    options = ["--person", "Ana=安娜", "--person", f"{SCRIPT}=per_tag"]  # a name, an ID
    result = amem_cli("host-ingest", chat, "--instance", "chat-1", "--db", db, *CLI_SCOPE, *options)
    assert result.returncode == 0, result.stderr
    assert event_people(db) == {
        "g-1": "per_ana",
        "g-2": None,
        "g-3": None,
        "g-4": "per_ana",
        "g-5": "per_tag",
    }


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("claude-code-hook", ["--person SPEAKER=PERSON", "user or assistant", "their ID"]),
        ("claude-code-capture", ["--person SPEAKER=PERSON", "user or assistant"]),
        ("host-ingest", ["--person SPEAKER=PERSON", "speaker, else its role", "repeat"]),
    ],
)
def test_the_person_option_explains_itself(command: str, words: list[str]) -> None:
    text = help_text(command)
    for word in words:
        assert word in text, word


# --- the inspector ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    path: Path
    ana_own: str
    """A memory of Ana's own event."""
    bo_about_ana: str
    """A memory of Bo's event, about Ana."""


async def fill(path: Path) -> Sample:
    """The group chat captured with its speakers mapped, a memory of each of Ana's and Bo's
    events (Bo's about Ana), and more of Ana's events than one page holds."""
    async with amem.open(path, settings=amem.Settings()) as mem:
        s = mem.scope(**SCOPE)
        people = await registry(s)
        await s.host_ingest("chat-1", CHAT, people=people)
        draft = {"kind": "preference", "basis": "user_statement"}
        [own] = await s.add_memories(
            "g-1", [{**draft, "text": "Ana is vegetarian", "quote": "I'm vegetarian."}]
        )
        [about] = await s.add_memories(
            "g-2",
            [{**draft, "text": "安娜不吃肉", "quote": "安娜不吃肉", "about": [people["Ana"]]}],
        )
        for n in range(3):
            await s.submit_event(f"Ana again {n}", role="user", event_id=f"a-{n}", person="per_ana")
    return Sample(path, own.id, about.id)


@pytest.fixture
async def sample(db_path: Path) -> Sample:
    return await fill(db_path)


def table_rows(page: str) -> list[list[str]]:
    """The text of each cell of each body row."""
    body = page.split("<tbody>", 1)[1]
    return [
        [" ".join(text_of(cell).split()) for cell in re.findall(r"<td>(.*?)</td>", row)]
        for row in re.findall(r"<tr>(.*?)</tr>", body)
    ]


@pytest.mark.one_backend
async def test_the_people_page_lists_each_person_with_their_counts(
    client: httpx.AsyncClient,
) -> None:
    response = await client.get("/people", params=SCOPE)
    assert response.status_code == 200
    assert "3 people in the scope's registry" in response.text
    shown = [cells[:5] for cells in table_rows(response.text)]
    assert shown == [
        [
            "Ana",
            "Annie, 安娜",
            "per_ana",
            "5",
            "2",
        ],  # 2 chat lines, 3 more; her memory, Bo's about her
        ["Bo", "", "per_bo", "1", "1"],
        [SCRIPT, "<b>bold</b>", "per_tag", "1", "0"],
    ]
    assert (
        'href="/events?persona=assistant&amp;project=dinner-club&amp;person=per_ana"'
        in response.text
    )
    assert (
        'href="/scope?persona=assistant&amp;project=dinner-club&amp;person=per_ana"'
        in response.text
    )


@pytest.mark.one_backend
async def test_the_people_page_in_pages(client: httpx.AsyncClient) -> None:
    pages = await every_page(client, "/people", {**SCOPE, "limit": "2"})
    assert [[cells[2] for cells in table_rows(page)] for page in pages] == [
        ["per_ana", "per_bo"],
        ["per_tag"],
    ]
    response = await client.get("/people", params={**SCOPE, "cursor": "garbage"})
    assert response.status_code == 400


@pytest.mark.one_backend
async def test_a_person_filters_the_events_and_the_memories(
    client: httpx.AsyncClient, sample: Sample
) -> None:
    async def ids(url: str, person: str, target: str) -> list[str]:
        response = await client.get(url, params={**SCOPE, "person": person})
        assert response.status_code == 200
        return linked_ids(response.text, target)

    assert await ids("/events", "per_ana", "/event") == ["a-2", "a-1", "a-0", "g-4", "g-1"]
    assert await ids("/events", "per_bo", "/event") == ["g-2"]
    # hers: derived from her events, or about her
    assert await ids("/scope", "per_ana", "/memory") == [sample.bo_about_ana, sample.ana_own]
    assert await ids("/scope", "per_bo", "/memory") == [sample.bo_about_ana]
    assert await ids("/scope", "per_tag", "/memory") == []
    page = (await client.get("/events", params={**SCOPE, "person": "per_ana"})).text
    assert "Only Ana (per_ana): the events of their relationship." in " ".join(
        text_of(page).split()
    )
    assert "5 events" in page


@pytest.mark.one_backend
async def test_a_person_s_pages_keep_the_filter(client: httpx.AsyncClient, sample: Sample) -> None:
    pages = await every_page(client, "/events", {**SCOPE, "person": "per_ana", "limit": "2"})
    assert [i for page in pages for i in linked_ids(page, "/event")] == [
        "a-2",
        "a-1",
        "a-0",
        "g-4",
        "g-1",
    ]
    as_of = {**SCOPE, "person": "per_ana", "as_of": "2100-01-01", "limit": "1"}
    pages = await every_page(client, "/scope", as_of)
    assert [i for page in pages for i in linked_ids(page, "/memory")] == [
        sample.bo_about_ana,
        sample.ana_own,
    ]
    assert 'name="person" value="per_ana"' in pages[0]  # the as_of form keeps the person
    following = next_page((await every_page(client, "/events", {**SCOPE, "limit": "2"}))[0])
    assert following is not None
    response = await client.get(following + "&person=per_ana")  # everyone's cursor
    assert response.status_code == 400


@pytest.mark.one_backend
async def test_a_person_the_registry_lacks_is_not_found(client: httpx.AsyncClient) -> None:
    for url in ("/events", "/scope"):
        response = await client.get(url, params={**SCOPE, "person": "per_nobody"})
        assert response.status_code == 404, url
        assert "not_found" in response.text
        response = await client.get(url, params={**SCOPE, "person": "per_ana\u200b"})
        assert response.status_code == 400, url


@pytest.mark.one_backend
async def test_events_and_memories_show_their_person_s_name(
    client: httpx.AsyncClient, sample: Sample
) -> None:
    events = (await client.get("/events", params=SCOPE)).text
    person = {
        linked_ids(row, "/event")[0]: row for row in re.findall(r"<tr>(.*?)</tr>", events)[1:]
    }
    assert text_of(person["g-1"]).split()[3:4] == ["Ana"]  # seq, date, role, person
    assert "Bo" in text_of(person["g-2"])
    assert re.search(r"<td>assistant</td><td></td>", person["g-3"])  # no one's
    memories = (await client.get("/scope", params=SCOPE)).text
    rows_by_id = {
        linked_ids(row, "/memory")[0]: table_cells
        for row, table_cells in zip(
            re.findall(r"<tr>(.*?)</tr>", memories)[1:], table_rows(memories), strict=True
        )
    }
    assert rows_by_id[sample.ana_own][-1] == "Ana"
    assert rows_by_id[sample.bo_about_ana][-1] == "Bo · about Ana"
    event = (await client.get("/event", params={**SCOPE, "id": "g-4"})).text
    assert re.search(r'<td>person</td><td><a [^>]*person=per_ana">Ana</a></td>', event)
    memory = (await client.get("/memory", params={**SCOPE, "id": sample.bo_about_ana})).text
    assert re.search(r"<td>person</td><td><a [^>]*>Bo</a></td>", memory)
    assert re.search(r"<td>about</td><td><a [^>]*>Ana</a></td>", memory)


@pytest.mark.one_backend
async def test_a_person_s_name_renders_as_text_never_as_markup(
    client: httpx.AsyncClient,
) -> None:
    for url, params in [
        ("/people", SCOPE),
        ("/events", SCOPE),
        ("/events", {**SCOPE, "person": "per_tag"}),
        ("/scope", {**SCOPE, "person": "per_tag"}),
        ("/event", {**SCOPE, "id": "g-5"}),
    ]:
        response = await client.get(url, params=params)
        assert response.status_code == 200, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text, url
        assert "<script" not in response.text.lower(), url
        assert "<b>bold" not in response.text, url


@pytest.mark.one_backend
async def test_the_people_pages_only_read(client: httpx.AsyncClient, sample: Sample) -> None:
    before = fingerprint(sample.path)
    for url, params in [
        ("/people", SCOPE),
        ("/events", {**SCOPE, "person": "per_ana"}),
        ("/scope", {**SCOPE, "person": "per_bo"}),
    ]:
        assert (await client.get(url, params=params)).status_code == 200
        assert (await client.post(url, params=params)).status_code == 405
    assert fingerprint(sample.path) == before


def test_people_in_a_real_browser(tmp_path: Path) -> None:
    """The people tab, a person's events one click away, and a name that is markup shown
    as text, in Debian's chromium (as tests/test_inspect.py drives it)."""
    path = tmp_path / "memory.db"
    anyio.run(fill, path)
    with inspector_in_chromium("--db", str(path), *CLI_SCOPE) as (page, start):
        page.goto(start)
        page.get_by_role("link", name="people", exact=True).click()
        text = page.inner_text("body")
        assert "3 people in the scope's registry" in text
        assert SCRIPT in text  # its name, as text
        page.get_by_role("link", name="Ana", exact=True).click()
        text = page.inner_text("body")
        assert "Only Ana (per_ana)" in text
        assert "And no mushrooms, please." in text
        assert "A vegetarian menu, then." not in text  # the assistant's: no one's
