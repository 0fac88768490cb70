"""The lexical index on PostgreSQL (``search.pg_postings``) ranks as FTS5 does: the same
scopes written to a SQLite file and to PostgreSQL give the same items, in the same order,
with the same scores; and PostgreSQL's terms are folded as FTS5's tokenizer folds them.
"""

from __future__ import annotations

import sqlite3
import unicodedata
from collections.abc import Awaitable, Callable
from contextlib import closing
from functools import partial
from pathlib import Path

import pytest
from helpers import derive

import amem
from amem.db.postgres import PgConnection
from amem.db.schema import FTS_TOKENIZER
from amem.search import index, postings
from amem.search.pg_postings import fold
from amem.search.text import person_token, segment

pytestmark = [pytest.mark.anyio, pytest.mark.one_backend]

AS_OF = "2026-06-01T00:00:00Z"
SAID = [
    ("I adopted a cat named Mochi", "User has a cat named Mochi", None),
    ("我喜欢爵士乐，尤其是 Miles Davis", "用户喜欢爵士乐", None),
    ("My sister Anna lives in Hangzhou near the West Lake", "Anna lives in Hangzhou", "anna"),
    ("安娜下个月要去北京出差", "安娜下个月去北京出差", "anna"),
    ("Tom is allergic to peanuts and shellfish", "Tom is allergic to peanuts", "tom"),
    ("我们周末去西湖边喝龙井茶", "用户周末去西湖喝龙井茶", None),
    ("The café on Rue Cler serves the best crème brûlée", "User likes the café on Rue Cler", None),
    ("Remind me to renew the passport before the Beijing trip", "User must renew passport", None),
    ("项目编号是 A-113，截止日期是五月", "项目编号 A-113 五月截止", None),
    ("Mochi the cat hates the vacuum cleaner", "Mochi hates the vacuum", None),
]
"""A small bilingual scope: events, the memory derived from each, whose relationship."""
NOISE = [f"status update {n}: the build is green, jazz on the radio" for n in range(30)]
"""Common words in many documents: idf, conjunctions and the postings bounds have work."""
QUERIES = [
    "Mochi",
    "cat",
    "爵士乐",
    "西湖 龙井",
    "Anna Hangzhou",
    "安娜 北京",
    "allergic peanuts",
    "cafe",
    "crème brûlée",
    "passport Beijing",
    "项目编号",
    "A-113",
    "jazz radio",
    "build green",
    "the cat hates the vacuum",
    "what does Tom avoid eating",
]


async def fill(mem: amem.Memory) -> None:
    """Two scopes (so lookups are narrowed to one), people, noise, and one deletion."""
    for persona in ("other", "p"):
        scope = mem.scope(persona, "q")
        await scope.upsert_person("tom", display_name="Tom")
        await scope.upsert_person("anna", display_name="Anna", aliases=["安娜"])
        for n, (event, text, person) in enumerate(SAID):
            at = f"2026-0{1 + n % 5}-1{n % 9}T08:00:00Z"
            await derive(scope, event, text, event_id=f"{persona}-{n}", at=at, person=person)
        for n, text in enumerate(NOISE):
            await scope.submit_event(
                text, role="assistant", event_id=f"{persona}-noise-{n}", occurred_at=AS_OF
            )
        await scope.delete(event_id=f"{persona}-noise-3")  # a document leaves the index


Recalled = list[tuple[str, str, float]]


async def recalls(mem: amem.Memory) -> dict[str, Recalled]:
    scope = mem.scope("p", "q")
    found = {}
    for query in QUERIES:
        for person in (None, "anna"):
            result = await scope.recall(query, as_of=AS_OF, limit=10, person=person)
            found[f"{query} ({person})"] = [
                (item.source_event_id, item.text, round(item.score, 6)) for item in result.items
            ]
    return found


async def on(where: str | Path, step: Callable[[amem.Memory], Awaitable[None]]) -> None:
    async with amem.open(where) as mem:
        await step(mem)


async def test_the_same_scope_recalls_the_same_items_on_both_databases(
    db_path: Path, pg_url: str
) -> None:
    found: dict[str, dict[str, Recalled]] = {}
    for name, where in (("sqlite", db_path), ("postgresql", pg_url)):

        async def run(mem: amem.Memory, name: str = name) -> None:
            await fill(mem)
            found[name] = await recalls(mem)

        await on(where, run)
    assert sum(bool(items) for items in found["sqlite"].values()) >= len(QUERIES)
    for query, items in found["sqlite"].items():
        assert found["postgresql"][query] == items, query


def test_terms_are_folded_as_fts5_folds_them() -> None:
    """Every letter and digit Unicode has, lower-cased as ``text.tokens`` leaves it, is
    indexed by FTS5 as ``fold`` has it."""
    chars = [chr(c) for c in range(0x80, 0x32000) if chr(c).isalnum()]
    words = [char.lower() + "x" for char in chars]  # "x": a letter FTS5 drops still shows
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.execute(f'create virtual table t using fts5 (w, tokenize = "{FTS_TOKENIZER}")')
        conn.executemany("insert into t (rowid, w) values (?, ?)", enumerate(words, 1))
        conn.execute("create virtual table v using fts5vocab(t, instance)")
        indexed = dict(conn.execute("select doc, term from v"))
    differ = {
        unicodedata.name(char, hex(ord(char))): (indexed.get(n), fold(word))
        for n, (char, word) in enumerate(zip(chars, words, strict=True), 1)
        if indexed.get(n) != fold(word)
    }
    assert differ == {}


DOCUMENTS = [
    "I adopted a cat named Mochi",
    "Mochi the cat hates the vacuum cleaner",
    "我喜欢爵士乐，尤其是 Miles Davis",
    "我们周末去西湖边喝龙井茶",
    "The café on Rue Cler serves the best crème brûlée",
    "the cafe near the lake serves creme brulee too",
    "项目编号是 A-113，截止日期是五月",
    *[f"status update {n}: the build is green, jazz on the radio" for n in range(12)],
]
LOOKUPS = [
    ["mochi"],
    ["cat", "mochi"],
    ["cafe"],
    ["café", "creme"],
    ["build", "green", "jazz"],
    ["爵士乐"],
    ["西", "湖"],
    ["nothing"],
]
PHRASES = [
    ["cat", "name"],
    ["creme", "brulee"],
    ["crème", "brûlée"],
    ["西", "湖"],
    ["green", "jazz"],
    ["build", "is", "green", "jazz", "on", "the"],  # more tokens than PostgreSQL joins
]


def lookups(conn: sqlite3.Connection, person: str | None) -> list[object]:
    """What every read of ``postings.Postings`` answers for one scope (a person's of it)."""
    index = postings.of(conn)
    within = index.within("p", "q", person)
    found: list[object] = [index.whole(within), round(index.average_length(), 9)]
    for terms in LOOKUPS:
        # as common as each other (PostgreSQL merges their postings), or unknown (it probes)
        for sizes in ([1000.0] * len(terms), ()):
            found += [index.newest(within, terms, 3, sizes), index.oldest(within, terms, 3, sizes)]
    found.append(index.counts(within, [terms[0] for terms in LOOKUPS], 5))
    for tokens in PHRASES:
        for sizes in ([1000.0] * len(tokens), [float(n) for n in range(1, len(tokens) + 1)], ()):
            found += [
                index.phrase(within, tokens, 0, 10, sizes),
                index.phrase(within, tokens, 5, 2, sizes),
            ]
    found.append(index.sizes(list(range(1, 30))))
    return found


def write(conn: sqlite3.Connection, step: Callable[[], None]) -> None:
    conn.execute("begin immediate")
    step()
    conn.execute("commit")


def index_all(conn: sqlite3.Connection) -> None:
    """Two scopes' documents, some of them Anna's; then one removed, one's people changed."""
    for persona in ("p", "other"):
        for n, text in enumerate(DOCUMENTS):
            people = ["anna"] if n % 3 == 0 else []
            index.index_doc(conn, persona, "q", "event", f"{persona}-{n}", segment(text), people)


def change(conn: sqlite3.Connection) -> None:
    index.remove_docs(conn, "event", ["p-3"])
    [(num, tokens)] = conn.execute("select num, tokens from search_docs where ref = 'p-4'")
    scope, _, rest = tokens.partition(" ")
    anna = person_token("p", "q", "anna")
    postings.of(conn).retoken(num, "p", "q", tokens, f"{scope} {anna} {rest}")


async def test_every_lookup_answers_alike_on_both_databases(db_path: Path, pg_url: str) -> None:
    for where in (db_path, pg_url):
        async with amem.open(where):
            pass  # the schema
    with (
        closing(sqlite3.connect(db_path, isolation_level=None)) as lite,
        closing(PgConnection.connect(pg_url, readonly=False)) as pg,
    ):
        conns = [lite, pg]
        for conn in conns:
            write(conn, partial(index_all, conn))
        for person in (None, "anna"):
            assert lookups(lite, person) == lookups(pg, person)  # type: ignore[arg-type]
        for conn in conns:
            write(conn, partial(change, conn))
        for person in (None, "anna"):
            assert lookups(lite, person) == lookups(pg, person)  # type: ignore[arg-type]
        assert postings.of(pg).check() is None  # type: ignore[arg-type]
