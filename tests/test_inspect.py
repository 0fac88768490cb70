"""``amem inspect``: the read-only web page, over HTTP (the ASGI app through httpx, and the
real command on a socket) and in a real headless chromium."""

from __future__ import annotations

import base64
import re
import signal
import socket
import sqlite3
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from helpers import (
    amem_cli,
    announced_url,
    every_page,
    fingerprint,
    help_text,
    inspect_process,
    inspector_in_chromium,
    linked_ids,
    next_page,
    remember,
    text_of,
)

import amem
from amem.db.schema import SCHEMA_VERSION
from amem.inspector.graph import MAX_NODES
from amem.inspector.source import readable_file

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]  # see tests/conftest.py

SCOPE = {"persona": "assistant", "project": "support"}
COFFEE_NOTES = 24
SCRIPT = "<script>alert(1)</script>"


@dataclass(frozen=True)
class Sample:
    path: Path
    hangzhou: str
    suzhou: str
    mistaken: str
    corrected: str
    script: str
    hub: str


async def fill(path: Path) -> Sample:
    """Two facts in a chain, a correction, a relation, untrusted text, a timeline of events
    long enough to page, a second scope, and a scope whose hub links to 15 memories."""
    async with amem.open(path, settings=amem.Settings()) as mem:
        s = mem.scope(**SCOPE)
        residence = {"subject": "user", "fact_key": "residence"}
        hangzhou = await remember(
            s, "e-hz", "I moved to Hangzhou", "I moved to Hangzhou", **residence
        )
        suzhou = await remember(
            s,
            "e-sz",
            "Now I live in Suzhou",
            "I live in Suzhou",
            at="2026-06-01T00:00:00Z",
            **residence,
        )
        mistaken = await remember(
            s, "e-cat", "My cat is called Mimi", "cat is called Mimi", at="2026-02-01T00:00:00Z"
        )
        fixed = await s.correct(mistaken.id, "User's cat is called Momo", reason="misheard")
        await s.relate(suzhou.id, fixed.memory.id)
        script = await remember(
            s, "e-x", f"{SCRIPT} is my motto", SCRIPT, at="2026-03-01T00:00:00Z"
        )
        for n in range(COFFEE_NOTES):
            at = f"2026-04-01T00:{n:02}:00Z"
            await s.submit_event(
                f"coffee note {n}: I drank coffee",
                role="user",
                event_id=f"coffee-{n}",
                occurred_at=at,
            )
        await mem.scope(persona="other", project="notes").submit_event("hello", role="user")
        g = mem.scope(persona="graph", project="big")
        hub = await remember(g, "hub", "the hub", "the hub")
        for n in range(15):
            spoke = await remember(g, f"spoke-{n}", f"spoke {n}", f"spoke {n}")
            await g.relate(hub.id, spoke.id)
    return Sample(path, hangzhou.id, suzhou.id, mistaken.id, fixed.memory.id, script.id, hub.id)


@pytest.fixture
async def sample(db_path: Path) -> Sample:
    return await fill(db_path)


async def test_scopes_page_lists_every_scope_with_its_counts(client: httpx.AsyncClient) -> None:
    response = await client.get("/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    rows = re.findall(r"<tr><td>(.*?)</tr>", response.text)
    shown = [text_of(row).split() for row in rows]
    assert shown == [
        ["assistant", "/", "support", "assistant", "support", str(5 + COFFEE_NOTES), "4"],
        ["graph", "/", "big", "graph", "big", "16", "16"],
        ["other", "/", "notes", "other", "notes", "1", "0"],
    ]


async def test_scopes_page_in_pages(client: httpx.AsyncClient) -> None:
    pages = await every_page(client, "/", {"limit": "2"})
    names = [re.findall(r"<tr><td><a [^>]*>([^<]*)</a>", page) for page in pages]
    assert names == [["assistant / support", "graph / big"], ["other / notes"]]


async def test_memories_page_shows_every_memory_with_its_interval(
    client: httpx.AsyncClient, sample: Sample
) -> None:
    page = (await client.get("/scope", params=SCOPE)).text
    rows = {
        i: row for row in re.findall(r"<tr>(.*?)</tr>", page) for i in linked_ids(row, "/memory")
    }
    assert set(rows) == {
        sample.hangzhou,
        sample.suzhou,
        sample.mistaken,
        sample.corrected,
        sample.script,
    }
    hangzhou = text_of(rows[sample.hangzhou])
    assert "2026-01-01T00:00:00+00:00" in hangzhou
    assert "2026-06-01T00:00:00+00:00" in hangzhou  # closed when the user moved
    assert "expired" in hangzhou
    assert "open" in text_of(rows[sample.suzhou])
    assert "revoked" in text_of(rows[sample.mistaken])
    assert "revoked" not in text_of(rows[sample.corrected])


async def test_memories_page_in_keyset_pages(client: httpx.AsyncClient, sample: Sample) -> None:
    pages = await every_page(client, "/scope", {**SCOPE, "limit": "2"})
    ids = [i for page in pages for i in linked_ids(page, "/memory")]
    assert len(pages) == 3
    assert len(ids) == len(set(ids)) == 5
    assert ids[0] == sample.script  # newest stored first


async def test_as_of_shows_the_memories_valid_then(
    client: httpx.AsyncClient, sample: Sample
) -> None:
    async def valid_at(when: str) -> set[str]:
        response = await client.get("/scope", params={**SCOPE, "as_of": when})
        assert response.status_code == 200
        assert f'value="{when}"' in response.text  # the control keeps what was asked
        return set(linked_ids(response.text, "/memory"))

    assert await valid_at("2026-03-01T00:00:00Z") == {
        sample.hangzhou,
        sample.corrected,
        sample.script,
    }
    assert await valid_at("2026-07-01T00:00:00+08:00") == {
        sample.suzhou,
        sample.corrected,
        sample.script,
    }
    assert await valid_at("2026-06-01T00:00:00Z") == {
        sample.suzhou,
        sample.corrected,
        sample.script,
    }  # half-open
    assert await valid_at("2025-12-31T23:59:59Z") == set()


async def test_as_of_pages_keep_their_time(client: httpx.AsyncClient, sample: Sample) -> None:
    params = {**SCOPE, "as_of": "2026-03-01T00:00:00Z", "limit": "1"}
    pages = await every_page(client, "/scope", params)
    ids = [i for page in pages for i in linked_ids(page, "/memory")]
    assert sorted(ids) == sorted([sample.hangzhou, sample.corrected, sample.script])


async def test_a_naive_as_of_is_refused(client: httpx.AsyncClient) -> None:
    response = await client.get("/scope", params={**SCOPE, "as_of": "2026-03-01T00:00:00"})
    assert response.status_code == 400
    assert "invalid_time" in response.text


async def test_events_timeline_in_pages_newest_first(client: httpx.AsyncClient) -> None:
    pages = await every_page(client, "/events", {**SCOPE, "limit": "10"})
    seqs = [int(s) for page in pages for s in re.findall(r'<tr><td><span class="num">(\d+)<', page)]
    assert len(pages) == 3
    assert len(seqs) == 5 + COFFEE_NOTES
    assert seqs == sorted(seqs, reverse=True)
    assert "coffee note 23: I drank coffee" in text_of(pages[0])
    assert "correction" in text_of(pages[-1])  # the correction event, with its category


async def test_search_shows_the_fast_recall_ranking_and_its_components(
    client: httpx.AsyncClient, sample: Sample
) -> None:
    page = (await client.get("/search", params={**SCOPE, "q": "where do I live"})).text
    rows = re.findall(r"<tr>(.*?)</tr>", page)[1:]
    async with amem.open(sample.path, settings=amem.Settings()) as mem:
        expected = await mem.scope(**SCOPE).recall("where do I live", mode="fast", limit=25)
    assert expected.items
    assert len(rows) == len(expected.items)
    for row, item in zip(rows, expected.items, strict=True):
        cells = text_of(row).split()
        assert item.id in linked_ids(row, "/memory") + linked_ids(row, "/event")
        c = item.components
        numbers = [
            f"{v:.3f}"
            for v in (item.score, c.lexical, c.semantic, c.link, c.basis, c.confidence, c.freshness)
        ]
        assert [cells[1], *cells[-6:]] == numbers


async def test_search_in_pages(client: httpx.AsyncClient) -> None:
    pages = await every_page(client, "/search", {**SCOPE, "q": "coffee", "limit": "10"})
    texts = [t for page in pages for t in re.findall(r"coffee note \d+", page)]
    ranks = [
        int(r) for page in pages for r in re.findall(r'<tr><td><span class="num">(\d+)<', page)
    ]
    assert len(pages) == 3
    assert sorted(set(texts)) == sorted(f"coffee note {n}" for n in range(COFFEE_NOTES))
    assert len(texts) == COFFEE_NOTES
    assert ranks == list(range(1, COFFEE_NOTES + 1))
    assert "raw event" in pages[0]  # events with no memory come back labelled


async def test_search_without_evidence_returns_nothing(client: httpx.AsyncClient) -> None:
    page = (await client.get("/search", params={**SCOPE, "q": "zebra"})).text
    assert "No evidence for this query" in page


async def test_memory_page_draws_the_correction_and_the_relation(
    client: httpx.AsyncClient, sample: Sample
) -> None:
    page = (await client.get("/memory", params={**SCOPE, "id": sample.corrected})).text
    assert "User's cat is called Momo" in text_of(page)
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert svg.count("<circle") == 3  # itself, the memory it corrected, the related one
    assert set(linked_ids(svg, "/memory")) == {sample.corrected, sample.mistaken, sample.suzhou}
    assert 'marker-end="url(#arrow)"' in svg  # the correction
    assert 'stroke-dasharray="6 4"' in svg  # the relation
    rows = [" ".join(text_of(row).split()) for row in re.findall(r"<tr>(.*?)</tr>", page)]
    assert "corrects User's cat is called Momo User said: cat is called Mimi misheard" in rows
    assert "related User said: I live in Suzhou User's cat is called Momo" in rows
    assert "more linked memories are not drawn" not in page


async def test_a_revoked_memory_page_says_why(client: httpx.AsyncClient, sample: Sample) -> None:
    page = (await client.get("/memory", params={**SCOPE, "id": sample.mistaken})).text
    assert re.search(r"<td>revoked</td><td>2026-[^<]*</td>", page)
    rows = [" ".join(text_of(row).split()) for row in re.findall(r"<tr>(.*?)</tr>", page)]
    assert "corrects User's cat is called Momo User said: cat is called Mimi misheard" in rows


async def test_the_graph_is_bounded_and_says_what_it_left_out(
    client: httpx.AsyncClient, sample: Sample
) -> None:
    params = {"persona": "graph", "project": "big", "id": sample.hub}
    page = (await client.get("/memory", params=params)).text
    svg = page[page.index("<svg") : page.index("</svg>")]
    assert svg.count("<circle") == MAX_NODES
    assert f"{16 - MAX_NODES} more linked memories are not drawn" in page


async def test_a_memory_of_another_scope_reads_as_absent(
    client: httpx.AsyncClient, sample: Sample
) -> None:
    params = {"persona": "other", "project": "notes", "id": sample.suzhou}
    response = await client.get("/memory", params=params)
    assert response.status_code == 404
    assert "not_found" in response.text


async def test_event_page_pages_the_text_and_lists_its_memories(
    client: httpx.AsyncClient, sample: Sample
) -> None:
    page = (await client.get("/event", params={**SCOPE, "id": "e-sz"})).text
    assert "Now I live in Suzhou" in page
    assert linked_ids(page, "/memory") == [sample.suzhou]
    first = await client.get("/event", params={**SCOPE, "id": "coffee-3", "limit": "10"})
    following = next_page(first.text)
    assert following is not None
    second = (await client.get(following)).text
    assert re.search(r"<pre class=text>coffee not</pre>", first.text)
    assert re.search(r"<pre class=text>e 3: I dra</pre>", second)


async def test_memory_text_renders_as_text_never_as_markup(
    client: httpx.AsyncClient, sample: Sample
) -> None:
    urls = [
        ("/scope", SCOPE),
        ("/events", SCOPE),
        ("/search", {**SCOPE, "q": "motto"}),
        ("/memory", {**SCOPE, "id": sample.script}),
        ("/event", {**SCOPE, "id": "e-x"}),
    ]
    for url, params in urls:
        response = await client.get(url, params=params)
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text, url
        assert "<script" not in response.text.lower(), url
        assert "script-src" not in response.headers["content-security-policy"]
        assert "default-src 'none'" in response.headers["content-security-policy"]


async def test_bad_parameters_are_refused_with_their_code(client: httpx.AsyncClient) -> None:
    for url, params in [
        ("/scope", {**SCOPE, "cursor": "garbage"}),
        ("/scope", {**SCOPE, "limit": "1000"}),
        ("/scope", {"persona": "assistant"}),
        ("/", {"cursor": "garbage"}),
        ("/", {"cursor": base64.urlsafe_b64encode(b"[" * 30_000).decode()}),  # nested deep
        ("/", {"cursor": base64.urlsafe_b64encode(b"\xff\xfe").decode()}),  # not UTF-8
        ("/scope", {"persona": "assistant\u202e", "project": "support"}),  # bidirectional
        ("/event", {**SCOPE, "id": "coffee-1\u200b"}),  # invisible
        ("/search", {**SCOPE, "q": "coffee", "page": "9", "limit": "100"}),
    ]:
        response = await client.get(url, params=params)
        assert response.status_code == 400, (url, params)
        assert "invalid_input" in response.text


async def test_a_cursor_of_another_as_of_is_refused(client: httpx.AsyncClient) -> None:
    pages = await every_page(client, "/scope", {**SCOPE, "limit": "2"})
    following = next_page(pages[0])
    assert following is not None
    response = await client.get(following + "&as_of=2026-03-01T00%3A00%3A00Z")
    assert response.status_code == 400


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
async def test_only_get_is_served(client: httpx.AsyncClient, method: str) -> None:
    for url in ("/", "/scope", "/events", "/search", "/memory", "/event"):
        response = await client.request(method, url, params=SCOPE)
        assert response.status_code == 405, (method, url)


async def test_other_host_names_are_refused(client: httpx.AsyncClient) -> None:
    response = await client.get("/", headers={"host": "attacker.example"})
    assert response.status_code == 400


async def test_a_session_of_requests_changes_nothing_in_the_file(
    client: httpx.AsyncClient, sample: Sample
) -> None:
    before = fingerprint(sample.path)
    for url, params in [
        ("/", {}),
        ("/scope", SCOPE),
        ("/scope", {**SCOPE, "as_of": "2026-03-01T00:00:00Z"}),
        ("/events", {**SCOPE, "limit": "5"}),
        ("/search", {**SCOPE, "q": "coffee Hangzhou"}),
        ("/memory", {**SCOPE, "id": sample.corrected}),
        ("/event", {**SCOPE, "id": "e-hz"}),
    ]:
        assert (await client.get(url, params=params)).status_code == 200
        await client.post(url, params=params)
    assert fingerprint(sample.path) == before


async def test_a_writer_works_beside_it_and_a_reload_shows_its_writes(
    client: httpx.AsyncClient, sample: Sample
) -> None:
    async with amem.open(sample.path, settings=amem.Settings()) as mem:
        scope = mem.scope(**SCOPE)
        assert (await client.get("/events", params=SCOPE)).status_code == 200
        await scope.submit_event("written while inspected", role="user", event_id="late")
        page = (await client.get("/events", params=SCOPE)).text
        assert "written while inspected" in page
        await scope.submit_event("and again", role="user", event_id="later")
    assert "and again" in (await client.get("/events", params=SCOPE)).text


async def test_a_missing_file_is_refused_and_not_created(tmp_path: Path) -> None:
    path = tmp_path / "typo" / "memory.db"
    with pytest.raises(amem.StorageError) as refused:
        readable_file(path)
    assert refused.value.code == "no_database"
    assert not path.parent.exists()


@pytest.mark.parametrize(
    ("version", "code"),
    [(SCHEMA_VERSION + 1, "schema_too_new"), (SCHEMA_VERSION - 1, "schema_too_old")],
)
async def test_a_schema_it_does_not_read_is_refused_unchanged(
    sample: Sample, version: int, code: str
) -> None:
    conn = sqlite3.connect(sample.path)
    conn.execute(f"pragma user_version = {version}")
    conn.close()
    before = fingerprint(sample.path)
    with pytest.raises(amem.StorageError) as refused:
        readable_file(sample.path)
    assert refused.value.code == code
    if code == "schema_too_old":
        assert "amem doctor" in str(refused.value)
    assert fingerprint(sample.path) == before


def test_the_command_explains_itself() -> None:
    out = help_text("inspect")
    for text in ("--port", "--open", "127.0.0.1", "read-only", "never created, never migrated"):
        assert text in out, text


def test_the_command_refuses_a_missing_file_without_creating_it(tmp_path: Path) -> None:
    path = tmp_path / "typo" / "memory.db"
    result = amem_cli("inspect", "--db", str(path))
    assert result.returncode == 1
    assert result.stderr.startswith("amem: error: no_database:")
    assert result.stdout == ""
    assert not path.parent.exists()


def test_the_command_refuses_a_port_in_use(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    anyio.run(fill, path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = amem_cli("inspect", "--db", str(path), "--port", str(taken.getsockname()[1]))
    assert result.returncode == 1
    assert result.stderr.startswith("amem: error: port_unavailable:")
    assert result.stdout == ""


@pytest.mark.parametrize("sigint", [signal.SIG_DFL, signal.SIG_IGN], ids=["default", "ignored"])
def test_the_command_serves_on_127_0_0_1_until_interrupted(tmp_path: Path, sigint: Any) -> None:
    """Ctrl-C stops it with 130, also when it was started with SIGINT ignored (a shell's
    background job): uvicorn shuts down on SIGINT either way."""
    path = tmp_path / "memory.db"
    anyio.run(fill, path)
    args = ("--db", str(path), "--persona", "assistant", "--project", "support")
    process = inspect_process(*args, sigint=sigint)
    try:
        url = announced_url(process)
        assert url.endswith("/scope?persona=assistant&project=support")
        response = httpx.get(url, timeout=30)
        assert response.status_code == 200
        assert "I live in Suzhou" in response.text
        assert httpx.post(url, timeout=30).status_code == 405
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert out == ""  # nothing but the announcement, and that goes to stderr
    assert "Traceback" not in err


# --- a real browser ------------------------------------------------------------------------
# Playwright's sync API drives Debian's chromium (never a browser of Playwright's own). Its
# async API is asyncio-only, so this is a plain test that runs once.


def png_facts(data: bytes) -> tuple[int, int, int]:
    """Width, height and the number of distinct byte values of a PNG's pixel rows (a blank
    page has a handful); a malformed PNG fails the test."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    pixels, at = b"", 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        if kind == b"IDAT":
            pixels += data[at + 8 : at + 8 + length]
        at += 12 + length
    return width, height, len(set(zlib.decompress(pixels)))


def test_pages_in_a_real_browser(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    sample = anyio.run(fill, path)
    before = fingerprint(path)
    with inspector_in_chromium("--db", str(path)) as (page, start):

        def shot(name: str) -> str:
            """The page's text when its screenshot is taken; the screenshot checked."""
            data = page.screenshot(path=tmp_path / f"{name}.png", full_page=True)
            width, height, values = png_facts(data)
            assert width == 1280, name
            assert height >= 300, name
            assert values > 20, name  # text and tables, not a blank page
            assert len(data) > 10_000, name
            return page.inner_text("body")

        def submit(link: str, field: str, value: str, button: str, name: str) -> str:
            """Follow ``link``, fill in ``field``, press ``button``: ``shot(name)``."""
            page.get_by_role("link", name=link).click()
            page.fill(f"input[name={field}]", value)
            page.get_by_role("button", name=button).click()
            return shot(name)

        page.goto(start)
        text = shot("scopes")
        assert "assistant / support" in text
        assert "graph / big" in text

        text = submit("assistant / support", "as_of", "2026-03-01T00:00:00Z", "show", "as-of")
        assert "Memories valid at 2026-03-01T00:00:00Z" in text
        assert "User said: I moved to Hangzhou" in text
        assert "I live in Suzhou" not in text
        assert f"User said: {SCRIPT}" in text  # shown as text, never run

        page.get_by_role("link", name="events").click()
        text = shot("events")
        assert "coffee note 23: I drank coffee" in text
        page.get_by_role("link", name="next page »").click()
        assert "I moved to Hangzhou" in shot("events-2")  # the oldest event

        text = submit("search", "q", "where do I live", "search", "search")
        assert "User said: I live in Suzhou" in text
        assert "lexical" in text
        assert "freshness" in text

        page.goto(start + f"memory?persona=assistant&project=support&id={sample.corrected}")
        text = shot("memory")
        assert "User's cat is called Momo" in text
        graph = page.get_by_role("img", name="links of this memory")
        assert graph.locator("circle").count() == 3
        graph.locator("a").nth(1).click()  # a node is a link to its memory's page
        assert "misheard" in shot("linked-memory")
    assert fingerprint(path) == before
