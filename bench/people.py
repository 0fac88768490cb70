"""Person-scoped recall at 100k events and 1,000 people (issue 31): does
``recall(query, person=P)`` find what recall over P's events alone finds, and at what cost
next to unscoped recall over the whole scope, in the same run?

The data: real conversation, LoCoMo's turns and MemoryBank's Chinese lines
(``/work/shared/data``; bench only), cut into sessions of ``SESSION_TURNS`` consecutive
turns, the sessions shuffled once with a seeded random and cycled until ``--events``
events (turns alternate ``user`` and ``assistant``). Each session belongs to one of
``--people`` people of the registry (``upsert_person``; each person gets one session
before any gets a second, then sessions go to people at random), and each of its events
is submitted with ``person=``. A ``--memory-share`` of the events also gets one memory
through ``add_memories`` (the host acting as extractor): its first sentence, quoted.
Everything goes through the public API: events ``BATCH`` at a time through
``Scope._submit_events`` (``submit_event``'s own path, one transaction per batch),
memories ``CONCURRENT`` calls at a time; the file's search index is then merged as
amem's writer merges it when idle (``recall_quality.settled``).

Queries: for ``--queries`` people drawn with a seeded random (each once while there are
people left), one of the person's events is the target, and the query is made from its
words, three classes in turn:

- ``keywords``: two (else three) content words of the event (English words, jieba words
  of a Chinese one), shuffled, that occur together in no other event of that person;
- ``words``: half of the event's content words (3 to 6), in their order (no uniqueness
  check: a paraphrase-like subset);
- ``pair``: two of the event's content words, in their order (no uniqueness check: often
  several of the person's events hold both, so the ranking among them decides).

Measured per query, all with ``limit=10`` and ``--mode``:

- (a) person-scoped: ``recall(query, person=P)`` on the whole scope;
- (b) the reference, unscoped recall restricted by hand: the same query, no person, over
  a scope holding only P's events and memories (one scope per drawn person, in a second
  database file built the same way);
- (c) unscoped: ``recall(query)`` over the whole scope, no person (its hit rates are
  shown, not judged: other people's sessions repeat the same turns).

hit@1/5/10 of the target event: an item whose ``source_event_id`` (or a merged item's)
is the target; ``rank a!=b``: queries whose target (a) and (b) rank differently. (a) and
(c) are timed on every query, alternating which goes first, after ``WARMUP`` untimed
queries, in ``--repeat`` rounds over all the queries (their percentiles are over every
timing: one shared VM's stall moves the p99 of 200 timings a lot). Targets (printed,
never asserted): (a) hit@k >= (b) hit@k for k 1, 5 and 10; p99(a) <= ``TARGET_RATIO`` x
p99(c).

Run:  uv run python bench/people.py [--events 100000] [--people 1000] [--queries 200]
      [--mode fast] [--repeat 3] [--memory-share 0.1] [--seed 31] [--dir DIR] [--results]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
from events import locomo_texts
from recall import quiet_settings
from recall_quality import en_words, english, index_terms, settled, zh_words
from reporting import add_results_argument, percentile_ms, print_header, recorded

import amem
from amem.db.times import db_time
from amem.models import RECALL_MODES

DATA = Path("/work/shared/data")
PERSONA, PROJECT = "bench", "people"
REF_PERSONA = "ref"
SESSION_TURNS = 20
BATCH = 1_000
"""Events per ``_submit_events`` call."""
CONCURRENT = 32
"""``add_memories`` calls in flight while building."""
LIMIT = 10
HIT_KS = (1, 5, 10)
WARMUP = 3
DRAWS = 30
"""Events of a person tried before a query of its class is given up for that person."""
TARGET_RATIO = 1.2
CLASSES = ("keywords", "words", "pair")
START = datetime(2023, 1, 1, tzinfo=UTC)
SENTENCE = re.compile(r".+?(?:[.!?。！？]+|$)", re.S)


@dataclass(slots=True)
class Event:
    idx: int
    text: str
    role: str
    session: str
    person: str
    memory: str | None = None
    """The quote of the one memory added for it, if any."""

    @property
    def id(self) -> str:
        return f"e{self.idx:07d}"

    @property
    def occurred_at(self) -> str:
        return db_time(START + timedelta(minutes=self.idx))

    def item(self, person: bool) -> dict[str, Any]:
        return {
            "text": self.text,
            "role": self.role,
            "event_id": self.id,
            "session": self.session,
            "occurred_at": self.occurred_at,
            "person": self.person if person else None,
        }

    def draft(self) -> dict[str, Any]:
        basis = "user_statement" if self.role == "user" else "assistant_expression"
        return {"text": self.memory, "quote": self.memory, "kind": "episode", "basis": basis}


@dataclass(slots=True)
class Query:
    cls: str
    text: str
    person: str
    target: str
    ranks: dict[str, int | None] = field(default_factory=dict)
    """Per side (a, b, c): the target's 1-based rank among the items, None if absent."""
    seconds: dict[str, list[float]] = field(default_factory=dict)


# ------------------------------------------------------------------------------ the data


def chunks() -> list[list[str]]:
    """LoCoMo's turns and MemoryBank's Chinese lines in sessions of ``SESSION_TURNS``."""
    locomo = locomo_texts(DATA / "locomo10.json")
    users = json.loads((DATA / "memorybank" / "memory_bank_cn.json").read_text("utf-8"))
    memorybank = [
        pair[side]
        for user in users.values()
        for day in user["history"].values()
        for pair in day
        for side in ("query", "response")
    ]
    out = []
    for texts in (locomo, memorybank):
        texts = [" ".join(t.split()) for t in texts if t.strip()]
        out += [texts[i : i + SESSION_TURNS] for i in range(0, len(texts), SESSION_TURNS)]
    return out


def first_sentence(text: str) -> str | None:
    match = SENTENCE.match(text)
    sentence = match.group(0).strip() if match else ""
    return sentence if len(sentence) >= 12 else None


def make_events(n: int, people: int, memory_share: float, seed: int) -> list[Event]:
    rnd = random.Random(f"{seed}:events")
    pool = chunks()
    rnd.shuffle(pool)
    owners = [f"p{k:04d}" for k in range(people)]
    rnd.shuffle(owners)
    made: list[Event] = []
    session = 0
    while len(made) < n:
        turns = pool[session % len(pool)]
        person = owners[session] if session < people else f"p{rnd.randrange(people):04d}"
        for k, text in enumerate(turns[: n - len(made)]):
            event = Event(len(made), text, ("user", "assistant")[k % 2], f"s{session:06d}", person)
            if rnd.random() < memory_share:
                event.memory = first_sentence(text)
            made.append(event)
        session += 1
    return made


# ---------------------------------------------------------------------------- building


async def fill(
    scope: amem.Scope, events: Sequence[Event], person: bool, memory_ids: dict[str, str]
) -> None:
    """``events`` into ``scope`` (with their person if ``person``), then their memories;
    ``memory_ids`` gets each memory's event."""
    for start in range(0, len(events), BATCH):
        await scope._submit_events([e.item(person) for e in events[start : start + BATCH]])
    with_memory = [e for e in events if e.memory is not None]

    async def add(event: Event) -> None:
        for record in await scope.add_memories(event.id, [event.draft()]):
            memory_ids[record.id] = event.id

    for start in range(0, len(with_memory), CONCURRENT):
        async with anyio.create_task_group() as tg:
            for event in with_memory[start : start + CONCURRENT]:
                tg.start_soon(add, event)


async def wait_embedded(mem: amem.Memory, scopes: Sequence[amem.Scope], mode: str) -> None:
    """For a mode that reads vectors, with embeddings configured: until amem has embedded
    every event and memory in the background."""
    if mode == "fast" or not mem.settings.embedding_enabled:
        return
    for scope in scopes:
        while True:  # polled: the background embedding signals nothing
            if (await scope.status()).coverage == 1.0:
                break
            await anyio.sleep(1.0)


async def build(
    main: Path, ref: Path, events: list[Event], people: int, drawn: set[str]
) -> tuple[dict[str, str], dict[str, float]]:
    """The whole scope in ``main``; each drawn person's events alone, in its own scope of
    ``ref``. Returns memory ID -> event ID, and the seconds each part took."""
    memory_ids: dict[str, str] = {}
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    async with amem.open(main, settings=quiet_settings()) as mem:
        scope = mem.scope(PERSONA, PROJECT)
        for k in range(people):
            await scope.upsert_person(f"p{k:04d}", display_name=f"P{k:04d}")
        await fill(scope, events, True, memory_ids)
    timings["build_s"] = time.perf_counter() - t0
    progress(f"built {len(events):,} events in {timings['build_s']:.1f} s")
    t0 = time.perf_counter()
    settled(main, len(events))
    timings["merge_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    own: dict[str, list[Event]] = {person: [] for person in drawn}
    for event in events:
        if event.person in own:
            own[event.person].append(event)
    async with amem.open(ref, settings=quiet_settings()) as mem:
        for person in sorted(drawn):
            await fill(mem.scope(REF_PERSONA, person), own[person], False, memory_ids)
    settled(ref, len(drawn))
    timings["reference_s"] = time.perf_counter() - t0
    return memory_ids, timings


# ----------------------------------------------------------------------------- queries


def words_of(text: str) -> list[str]:
    return en_words(text) if english(text) else zh_words(text)


def terms_of(text: str) -> set[str]:
    return set(index_terms(text))


def keywords(rnd: random.Random, target: Event, others: Sequence[set[str]]) -> str | None:
    """Two (else three) of the target's words that no other event of the person holds
    together, shuffled."""
    words = words_of(target.text)
    for k in (2, 3):
        combos = [
            c
            for c in itertools.combinations(words, k)
            if not any(a in b for a, b in itertools.permutations(c, 2))
        ]
        for combo in rnd.sample(combos, min(12, len(combos))):
            needed = {t for w in combo for t in index_terms(w)}
            if not any(needed <= terms for terms in others):
                return " ".join(rnd.sample(combo, len(combo)))
    return None


def some_words(rnd: random.Random, target: Event) -> str | None:
    """Half of the target's content words (3 to 6), in their order."""
    words = words_of(target.text)
    if len(words) < 4:
        return None
    keep = sorted(rnd.sample(range(len(words)), min(6, max(3, len(words) // 2))))
    return " ".join(words[i] for i in keep)


def pair(rnd: random.Random, target: Event) -> str | None:
    """Two of the target's content words, in their order."""
    words = words_of(target.text)
    if len(words) < 2:
        return None
    return " ".join(words[i] for i in sorted(rnd.sample(range(len(words)), 2)))


def make_queries(events: list[Event], count: int, seed: int) -> list[Query]:
    rnd = random.Random(f"{seed}:queries")
    by_person: dict[str, list[Event]] = {}
    for event in events:
        by_person.setdefault(event.person, []).append(event)
    people = sorted(by_person)
    order: list[str] = []
    while len(order) < count * 2:  # room for people who yield no query of a class
        order += rnd.sample(people, len(people))
    found: list[Query] = []
    for person in order:
        if len(found) >= count:
            break
        cls = CLASSES[len(found) % len(CLASSES)]
        own = by_person[person]
        for _ in range(DRAWS):
            target = rnd.choice(own)
            if cls == "keywords":
                others = [terms_of(e.text) for e in own if e is not target]
                text = keywords(rnd, target, others)
            elif cls == "words":
                text = some_words(rnd, target)
            else:
                text = pair(rnd, target)
            if text:
                found.append(Query(cls, text, person, target.id))
                break
    return found


# ---------------------------------------------------------------------------- measuring


def rank_of(result: amem.RecallResult, target: str, memory_ids: dict[str, str]) -> int | None:
    for n, item in enumerate(result.items, 1):
        sources = {item.source_event_id, *(memory_ids.get(m, m) for m in item.merged_ids)}
        if target in sources:
            return n
    return None


async def measure(
    main: Path,
    ref: Path,
    queries: list[Query],
    mode: str,
    repeat: int,
    memory_ids: dict[str, str],
) -> None:
    async with (
        amem.open(main, settings=quiet_settings()) as mem,
        amem.open(ref, settings=quiet_settings()) as ref_mem,
    ):
        whole = mem.scope(PERSONA, PROJECT)
        await wait_embedded(mem, [whole], mode)
        await wait_embedded(
            ref_mem, [ref_mem.scope(REF_PERSONA, p) for p in {q.person for q in queries}], mode
        )

        async def run(side: str, q: Query) -> tuple[amem.RecallResult, float]:
            if side == "a":
                call = whole.recall(q.text, limit=LIMIT, mode=mode, person=q.person)
            elif side == "b":
                call = ref_mem.scope(REF_PERSONA, q.person).recall(q.text, limit=LIMIT, mode=mode)
            else:
                call = whole.recall(q.text, limit=LIMIT, mode=mode)
            t0 = time.perf_counter()
            result = await call
            return result, time.perf_counter() - t0

        for q in queries[:WARMUP]:
            for side in "abc":
                await run(side, q)
        for lap in range(repeat):
            for n, q in enumerate(queries):
                for side in ("a", "c", "b") if (n + lap) % 2 == 0 else ("c", "a", "b"):
                    result, seconds = await run(side, q)
                    if not lap:
                        q.ranks[side] = rank_of(result, q.target, memory_ids)
                    q.seconds.setdefault(side, []).append(seconds)


# ---------------------------------------------------------------------------- reporting


def hit_rate(queries: Sequence[Query], side: str, k: int) -> float:
    hits = [(rank := q.ranks[side]) is not None and rank <= k for q in queries]
    return round(sum(hits) / len(hits), 3) if hits else 0.0


def report(
    args: argparse.Namespace, queries: list[Query], timings: dict[str, float], people: int
) -> None:
    built = ", ".join(f"{k} {v:.1f}" for k, v in timings.items())
    print(
        f"people: {args.events:,} events, {people:,} people, {len(queries)} queries x "
        f"{args.repeat} timed rounds, mode {args.mode}, limit {LIMIT}, seed {args.seed}; "
        f"seconds: {built}"
    )
    print(
        "(a) recall(query, person=P)  (b) reference: P's events alone, unscoped  "
        "(c) recall(query), whole scope"
    )
    header = (
        f"{'class':<9} {'n':>4}"
        + "".join(f" {f'a@{k}':>6} {f'b@{k}':>6}" for k in HIT_KS)
        + f" {'c@10':>6} {'rank a!=b':>9}"
    )
    print_header(header)
    rows = {cls: [q for q in queries if q.cls == cls] for cls in CLASSES}
    rows["all"] = queries
    summary: dict[str, Any] = {}
    for name, group in rows.items():
        cells = "".join(
            f" {hit_rate(group, 'a', k):>6.3f} {hit_rate(group, 'b', k):>6.3f}" for k in HIT_KS
        )
        differ = sum(q.ranks["a"] != q.ranks["b"] for q in group)
        print(f"{name:<9} {len(group):>4}{cells} {hit_rate(group, 'c', 10):>6.3f} {differ:>9}")
        summary[name] = {
            "n": len(group),
            "rank_differs": differ,
            **{f"{s}_hit{k}": hit_rate(group, s, k) for s in "abc" for k in HIT_KS},
        }
    print()
    ms = {
        side: (
            percentile_ms([s for q in queries for s in q.seconds[side]], 0.5),
            percentile_ms([s for q in queries for s in q.seconds[side]], 0.99),
        )
        for side in "abc"
    }
    print_header(f"{'latency (ms)':<34} {'p50':>7} {'p99':>7}")
    for side, label in (
        ("a", "(a) person-scoped, whole scope"),
        ("c", "(c) unscoped, whole scope"),
        ("b", "(b) reference, P's events alone"),
    ):
        print(f"{label:<34} {ms[side][0]:>7.2f} {ms[side][1]:>7.2f}")
    ratio = ms["a"][1] / ms["c"][1]
    hits_ok = all(hit_rate(queries, "a", k) >= hit_rate(queries, "b", k) for k in HIT_KS)
    print(
        f"\ntargets: (a) hit@1/5/10 >= (b): {'pass' if hits_ok else 'FAIL'}; "
        f"p99(a)/p99(c) = {ratio:.2f} (<= {TARGET_RATIO}): "
        f"{'pass' if ratio <= TARGET_RATIO else 'FAIL'}"
    )
    print(
        json.dumps(
            {
                "bench": "people",
                "events": args.events,
                "people": people,
                "mode": args.mode,
                "repeat": args.repeat,
                "seed": args.seed,
                "hits": summary,
                "ms": {s: {"p50": round(v[0], 2), "p99": round(v[1], 2)} for s, v in ms.items()},
                "p99_ratio": round(ratio, 3),
                "timings_s": {k: round(v, 1) for k, v in timings.items()},
            }
        )
    )


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--people", type=int, default=1_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--mode", choices=RECALL_MODES, default="fast")
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds over the queries")
    parser.add_argument("--memory-share", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--dir", type=Path, help="keep the two database files here")
    add_results_argument(parser)
    args = parser.parse_args()
    t0 = time.perf_counter()
    events = make_events(args.events, args.people, args.memory_share, args.seed)
    queries = make_queries(events, args.queries, args.seed)
    people = len({e.person for e in events})
    progress(f"{len(events):,} events of {people:,} people, {len(queries)} queries")
    with tempfile.TemporaryDirectory(prefix="amem-people-") as tmp:
        folder = args.dir or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        main_db, ref_db = folder / "people.db", folder / "people-ref.db"
        for path in (main_db, ref_db):
            for leftover in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                leftover.unlink(missing_ok=True)
        memory_ids, timings = anyio.run(
            build, main_db, ref_db, events, args.people, {q.person for q in queries}
        )
        t1 = time.perf_counter()
        anyio.run(measure, main_db, ref_db, queries, args.mode, args.repeat, memory_ids)
        timings["measure_s"] = time.perf_counter() - t1
    timings["total_s"] = time.perf_counter() - t0
    with recorded("people", args.results):
        report(args, queries, timings, people)


if __name__ == "__main__":
    main()
