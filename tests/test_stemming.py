"""English stemming in the search index (issue 14), and the v5 migration that rebuilds an
older file's index with stemmed tokens.

"Where does the user live?" finds "User lives in Hangzhou", and "books", "drinks",
"reading" find "book", "drink", "read": index and query tokens are Snowball stems. Chinese
tokens, digits and stop words behave as before. A file from before (schema version 4, an
index of unstemmed tokens) is rebuilt when amem opens it, in one transaction: killed
half-way it is still the old file, and another process opening it meanwhile waits.
"""

from __future__ import annotations

import logging
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from subprocess import PIPE
from typing import NamedTuple

import anyio
import anyio.abc
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from helpers import memory_draft, undo_v6, value

import amem
from amem.db.drivers import open_sqlite
from amem.db.schema import SCHEMA_VERSION, migrate
from amem.ops import doctor
from amem.search import text

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]  # see tests/conftest.py

PERSONA, PROJECT = "assistant", "support"
CHILDREN = Path(__file__).resolve().parent / "children"

FACTS = {
    "home": ("I moved to Hangzhou and I am living there now", "User lives in Hangzhou"),
    "books": ("I want to read one book a month", "User wants to read one book a month"),
    "drink": ("A drink after work would be nice", "User would like a drink after work"),
    "yoga": ("Yoga at home is what I do", "User does yoga at home"),
}
"""Event text and memory text, by event ID: no query below uses a word form they hold."""


async def add_facts(scope: amem.Scope, kind: str = "fact") -> None:
    for event_id, (said, fact) in FACTS.items():
        await scope.submit_event(said, role="user", event_id=event_id, session="s")
        draft = {"text": fact, "quote": said, "kind": kind, "basis": "user_statement"}
        await scope.add_memories(event_id, [draft])


async def found(scope: amem.Scope, query: str) -> list[str]:
    """The source events of what ``query`` recalls, best first, each once."""
    items = (await scope.recall(query)).items
    return list(dict.fromkeys(item.source_event_id for item in items))


def old_tokens(value: str) -> list[str]:
    """``text.tokens`` as amem had it before stemming (schema version 4)."""
    tokens: list[str] = []
    for run in text.RUN.findall(value):
        if text.CJK_RUN.match(run):
            tokens += text.tokens(run)  # CJK runs: unchanged by stemming
        else:
            word = run.lower()
            parts = text.LETTERS_OR_DIGITS.findall(word)
            tokens += [word, *parts] if len(parts) > 1 else [word]
    return tokens


def write_unstemmed_index(path: Path) -> int:
    """Make ``path`` a file as amem left it before stemming: its index rebuilt from the
    source texts with the old tokens, at schema version 4. Returns the document count."""
    insert = (
        "insert into search_docs (persona, project, doc_kind, ref, tokens) values (?, ?, ?, ?, ?)"
    )
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("begin immediate")
        docs = doctor.index_sources(conn)
        conn.execute("delete from search_docs")
        conn.executemany(
            insert,
            [
                (d.persona, d.project, d.doc_kind, d.ref, scoped(d.persona, d.project, d.text))
                for d in docs
            ],
        )
        conn.execute("insert into search_fts (search_fts) values ('rebuild')")
        undo_v6(conn)
        conn.execute("pragma user_version = 4")
        conn.execute("commit")
    return len(docs)


def scoped(persona: str, project: str, value: str) -> str:
    return " ".join([text.scope_token(persona, project), *old_tokens(value)])


def index_tokens(path: Path) -> dict[tuple[str, str], str]:
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute("select doc_kind, ref, tokens from search_docs").fetchall()
    return {(kind, ref): tokens for kind, ref, tokens in rows}


# --- stemmed search --------------------------------------------------------------------------


async def test_inflected_english_words_find_each_other(scope: amem.Scope) -> None:
    await add_facts(scope)
    assert (await found(scope, "Where does the user live?"))[0] == "home"
    assert (await found(scope, "books"))[0] == "books"
    assert (await found(scope, "reading"))[0] == "books"
    assert (await found(scope, "drinks"))[0] == "drink"
    assert (await found(scope, "Hangzhou lived"))[0] == "home"


async def test_stop_words_stay_out_of_queries_once_stemmed(scope: amem.Scope) -> None:
    """The token of "does" is "doe": the query's words, not its stems, tell function words,
    so "does" is left out and "a doe" or "assisting" (stem of "assistant") are kept."""
    await add_facts(scope)
    assert text.tokens("does") == ["doe"]
    assert text.query_tokens("Where does the user live?") == ["live"]
    assert text.query_tokens("does the doe live here") == ["doe", "live"]
    assert text.query_tokens("who was assisting the assistant") == ["assist"]
    assert await found(scope, "Where does the user live?") == ["home"]  # not "yoga"
    assert await found(scope, "Does the user do yoga?") == ["yoga"]


async def test_chinese_and_digits_are_not_stemmed(db_path: Path, scope: amem.Scope) -> None:
    said = "我喜欢读书, reading novels since 2019 on python3"
    await scope.submit_event(said, role="user", event_id="mixed", session="s")
    tokens = index_tokens(db_path)[("event", "mixed")].split()[1:]
    assert tokens == [
        *("喜欢", "读书", "我", "喜", "欢", "读", "书"),
        *("read", "novel", "sinc", "2019", "on", "python3", "python", "3"),
    ]
    assert await found(scope, "书") == ["mixed"]
    assert await found(scope, "读书") == ["mixed"]
    assert await found(scope, "novel") == ["mixed"]
    assert await found(scope, "2019") == ["mixed"]
    assert await found(scope, "pythons") == ["mixed"]


async def test_topic_cue_shows_the_words_not_their_stems(db_path: Path, scope: amem.Scope) -> None:
    said = "I studied Japanese grammars every evening"
    await scope.submit_event(said, role="user", event_id="study", session="s")
    draft = memory_draft("User studies Japanese grammars every evening", said, "episode")
    await scope.add_memories("study", [draft])
    cue = value(db_path, "select cue_key from memories where event_id = 'study'")
    assert cue == "studies japanese grammars every evening"
    assert await found(scope, "study grammar") == ["study"]


# --- the same tokens everywhere --------------------------------------------------------------


async def test_doctor_and_import_index_the_same_stemmed_tokens(tmp_path: Path) -> None:
    first, second = tmp_path / "first.db", tmp_path / "second.db"
    async with amem.open(first, settings=amem.Settings()) as mem:
        await add_facts(mem.scope(PERSONA, PROJECT))
        await mem.scope(PERSONA, PROJECT).submit_event("我在杭州读书 books", role="user")
        written = index_tokens(first)
        await mem.doctor(rebuild_index=True)
        rebuilt = index_tokens(first)
        await mem.export(tmp_path / "archive.jsonl")
    async with amem.open(second, settings=amem.Settings()) as mem:
        await mem.import_archive(tmp_path / "archive.jsonl")
        assert (await found(mem.scope(PERSONA, PROJECT), "reading")) == ["books"]
    imported = index_tokens(second)
    assert written == rebuilt == imported
    assert "live" in written[("memory", next(r for k, r in written if k == "memory"))].split()


# --- the v5 migration ------------------------------------------------------------------------


async def test_an_older_file_is_reindexed_with_stems_on_open(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        await add_facts(mem.scope(PERSONA, PROJECT))
    documents = write_unstemmed_index(db_path)
    assert documents == 2 * len(FACTS)
    assert "lives" in index_tokens(db_path)[("event", "home")] + " ".join(
        index_tokens(db_path).values()
    )
    progress: list[tuple[int, int]] = []
    with caplog.at_level(logging.WARNING, logger="amem"):
        async with amem.open(
            db_path, settings=amem.Settings(), progress=lambda *p: progress.append(p)
        ) as mem:
            scope = mem.scope(PERSONA, PROJECT)
            assert (await found(scope, "Where does the user live?"))[0] == "home"
            assert (await found(scope, "drinks"))[0] == "drink"
            report = await mem.doctor()
    assert report.ok, report
    assert value(db_path, "pragma user_version") == SCHEMA_VERSION == 12
    assert progress == [(documents, documents)]
    messages = [r.getMessage() for r in caplog.records if r.name == "amem"]
    assert any(
        m.startswith("rebuilding the search index for English stemming") and "0 of 8" in m
        for m in messages
    ), messages
    assert any("done, 8 documents" in m for m in messages), messages


def test_migrating_without_a_reindex_refuses_a_file_holding_an_index(tmp_path: Path) -> None:
    """``migrate`` alone (the db layer) cannot segment text: it never bumps such a file."""
    path = tmp_path / "old.db"
    with closing(open_sqlite(str(path), readonly=False)) as conn:
        migrate(conn)
        conn.execute(
            "insert into events (id, persona, project, role, category, text, occurred_at,"
            " ingested_at, status) values ('e', 'p', 'q', 'user', 'conversation', 'books',"
            " '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z', 'stored')"
        )
    write_unstemmed_index(path)
    with closing(open_sqlite(str(path), readonly=False)) as conn:
        with pytest.raises(amem.StorageError, match="rebuilt with new tokens"):
            migrate(conn)
        assert conn.execute("pragma user_version").fetchone()[0] == 4


BIG = 6_000
"""Events in the file the subprocess tests migrate: three batches (``MIGRATION_BATCH``)."""


async def make_big_old_file(path: Path) -> None:
    async with amem.open(path, settings=amem.Settings()):
        pass
    rows = [
        (f"n-{n}", PERSONA, PROJECT, "user", "conversation", f"note {n} about the weather")
        for n in range(BIG - 1)
    ]
    rows.append(("special", PERSONA, PROJECT, "user", "conversation", "I am reading two books"))
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.executemany(
            "insert into events (id, persona, project, role, category, text, occurred_at,"
            " ingested_at, status) values (?, ?, ?, ?, ?, ?, '2026-01-01T00:00:00.000000Z',"
            " '2026-01-01T00:00:00.000000Z', 'stored')",
            rows,
        )
    assert write_unstemmed_index(path) == BIG


class Migrating(NamedTuple):
    path: Path
    process: anyio.abc.Process
    stdout: BufferedByteReceiveStream
    stderr: Path


@asynccontextmanager
async def paused_migration(backend: str, tmp_path: Path, pause: float) -> AsyncIterator[Migrating]:
    """A big old file whose migration a child process has begun and paused for ``pause``
    seconds, the whole old index still what everyone sees; the child's stderr goes to a
    file."""
    path = tmp_path / "old.db"
    await make_big_old_file(path)
    log_path = tmp_path / "child.stderr"
    with log_path.open("wb") as stderr:
        process = await anyio.open_process(
            [sys.executable, str(CHILDREN / "migrating.py"), backend, str(path), str(pause)],
            stdout=PIPE,
            stderr=stderr,
        )
        assert process.stdout is not None
        stdout = BufferedByteReceiveStream(process.stdout)
        async with process:
            assert await next_line(stdout) == f"paused 2000 {BIG}", log_path.read_text()
            assert_still_old(path)
            yield Migrating(path, process, stdout, log_path)


async def next_line(stream: BufferedByteReceiveStream) -> str:
    with anyio.fail_after(60):
        return (await stream.receive_until(b"\n", 1 << 16)).decode()


def assert_still_old(path: Path) -> None:
    """What any other connection sees while the migration runs: the whole old index."""
    assert value(path, "pragma user_version") == 4
    assert value(path, "select count(*) from search_docs") == BIG
    tokens = value(path, "select tokens from search_docs where ref = 'special'")
    assert str(tokens).endswith(" i am reading two books")


@pytest.mark.both_backends
async def test_a_killed_migration_leaves_the_old_file_which_migrates_on_reopen(
    anyio_backend: str, tmp_path: Path
) -> None:
    async with paused_migration(anyio_backend, tmp_path, 60) as (path, process, _, log_path):
        process.send_signal(signal.SIGKILL)
        assert await process.wait() == -signal.SIGKILL
    assert "rebuilding the search index for English stemming" in log_path.read_text()
    assert value(path, "pragma integrity_check") == "ok"
    assert_still_old(path)
    async with amem.open(path, settings=amem.Settings()) as mem:
        assert await found(mem.scope(PERSONA, PROJECT), "book read") == ["special"]
    assert value(path, "pragma user_version") == SCHEMA_VERSION
    assert value(path, "select count(*) from search_docs") == BIG


@pytest.mark.both_backends
async def test_another_process_opening_during_the_migration_waits_for_it(
    anyio_backend: str, tmp_path: Path
) -> None:
    async with paused_migration(anyio_backend, tmp_path, 1.5) as migrating:
        path, process, stdout, log_path = migrating
        async with amem.open(path, settings=amem.Settings()) as mem:  # waits for the lock
            assert value(path, "pragma user_version") == SCHEMA_VERSION
            assert await found(mem.scope(PERSONA, PROJECT), "books") == ["special"]
        assert await next_line(stdout) == "opened"
        assert await process.wait() == 0, log_path.read_text()
