"""Kill -9 bench: rounds of mixed work on one file, each round's process killed with SIGKILL.

Every round (``--rounds``, default 220) starts one child process on the same database
file. The child opens it (recovering whatever the last kill left) and runs ``TASKS``
concurrent tasks, each on its own scope, each doing a random mix of operations through
the public API, one after another: ``submit_event``, ``add_memories``, ``correct``,
``retract``, ``delete`` (an event, or a memory's event), ``erase`` by session, ``relate``,
``pin``, ``save_checkpoint``, ``consolidate`` (with an ``as_of`` past the working notes'
TTL), ``Memory.set_persona``, ``export`` to a new file, ``backup`` and ``reindex``. Its
settings point embeddings at a fake OpenAI-compatible server on 127.0.0.1 that the bench
starts (``amem.testing.FakeOpenAI``, each request delayed ``EMBED_DELAY``), so background
embedding and ``reindex`` do real work over real TCP. The child prints ``begin`` before
each operation and ``ack`` with its receipt after it returned. The bench kills it at a
random moment: some rounds 0-80 ms after it was let go (during open, WAL recovery, a
migration or the scrub an earlier kill left due), a third once a ``reindex`` has started,
the rest 0.05-2.5 s into the work.

After each round the bench checks the file, first with plain ``sqlite3``:

- every acknowledged operation applied whole: events with exactly their text, session,
  role and category; memories with their event, text, quote, tier, pin and revocation;
  corrections with their event, memory and ``corrects`` link; relations, personas,
  checkpoints; deleted and erased events gone with their memories and a tombstone each;
  an acknowledged export or backup complete, holding every event acknowledged before it;
- every operation in flight at the kill either applied whole or not at all (a bulk erase:
  whole events), and nothing in the file that no operation explains;
- invariants: ``PRAGMA integrity_check`` ok, ``foreign_key_check`` empty, FTS5's
  ``integrity-check``; no memory without its event, no link to nothing, every quote at its
  offsets in its event, every ``corrects`` link from a correction event's memory to a
  revoked memory, no correction event without its memory; search documents exactly for
  the current memories and indexed events; ``scope_usage`` equal to the rows counted;
  every vector of a current memory or event with its text's hash, under the configured
  fingerprint or a ``staging:`` one, every chunk there; a vector of a current item never
  lost (a reindex swaps whole or not at all); after an acknowledged ``reindex``, every
  item it saw has its vectors and no staged vector is left in the scope.

Then it reopens the file with amem (which sweeps temporary files of killed exports and
runs a scrub a kill left due): ``Memory.doctor()`` must be ok, the round's acknowledged
events read back whole, ``Scope.status`` counts match; after that clean close, no
temporary file of a dead process is left, and no byte of an erased event's text is in the
database file.

Prints one table (per operation: acknowledged, in flight at the kill, errors, lost,
half-applied) and one JSON line; exits 1 if any problem was found. ``--keep`` keeps the
work directory (the database, the exports and backups, each round's state file, the
child's stderr and every line it printed, with its clock).

Run:  uv run python bench/kill9.py [--rounds 220] [--seed 1] [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Iterable
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from subprocess import PIPE
from typing import Any

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream
from reporting import add_results_argument, print_header, recorded

import amem
from amem.db.schema import COUNTED_USAGE, SCHEMA_VERSION
from amem.limits import MAX_READ_CHARS
from amem.ops.files import TEMP_NAME
from amem.search.index import INDEXED_CATEGORIES
from amem.search.vector_rows import chunks, text_hash
from amem.store.tombstones import digest
from amem.testing import FakeOpenAI

PERSONA = "bench"
TASKS = 3
"""Concurrent tasks in a child, each on its own scope (``p0``, ``p1``, ...)."""
SESSIONS = ("s0", "s1", "s2", "s3")
SCOPE_CAP = 150
"""Events of a scope past which its task deletes and erases more than it submits, so a
scope's reindex stays short enough to finish inside a round now and then."""
EMBED_DELAY = 0.01
"""Seconds the fake server takes per embedding request."""
EMBED_BATCH = 16
DIM = 64
WEIGHTS = {
    "submit": 26,
    "add_memories": 16,
    "correct": 6,
    "retract": 3,
    "delete": 5,
    "erase": 1,
    "relate": 5,
    "pin": 4,
    "checkpoint": 4,
    "consolidate": 3,
    "persona": 3,
    "export": 2,
    "backup": 2,
    "reindex": 8,
}
OPS = tuple(WEIGHTS)
NEEDS_EVENT = {"add_memories", "delete"}
NEEDS_MEMORY = {"correct", "retract", "relate", "pin"}
REMOVES = {"delete", "erase", "consolidate"}
INVALIDATES = {"correct", "retract", "delete", "erase"}
"""Operations that invalidate the scope's checkpoints."""
MARKER = re.compile(rb"<(r\d{3}-t\d+-\d+)>")
"""The marker every event text starts its repeats with: found in the file, it names the
event whose bytes are there."""


def settings_for(base_url: str) -> amem.Settings:
    return amem.Settings(embed_base_url=base_url, embed_model="fake", embed_batch=EMBED_BATCH)


def event_id(round_: int, task: int, n: int) -> str:
    return f"r{round_:03d}-t{task}-{n}"


def payload(eid: str) -> str:
    """The exact text of event ``eid``: repeated, sometimes Chinese, now and then long."""
    h = zlib.crc32(eid.encode())
    if h % 3 == 0:
        unit = f"<{eid}> 我搬到杭州了，明天去西湖。"
    else:
        unit = f"<{eid}> I live in city{h % 97} and I like tea. "
    repeat = 1 + h % 12
    if h % 29 == 0:  # tens of chunks to embed
        repeat *= 30
    return unit * repeat


def quote_of(eid: str) -> str:
    return "明天去西湖" if zlib.crc32(eid.encode()) % 3 == 0 else "I like tea"


def role_of(eid: str) -> str:
    return "assistant" if zlib.crc32(eid.encode()) % 4 == 0 else "user"


# --- child: one round's work, until killed ------------------------------------------------


def emit(kind: str, data: dict[str, Any]) -> None:
    """One protocol line, in one write, flushed at once."""
    data["t"] = round(time.monotonic(), 4)
    sys.stdout.write(f"{kind} {json.dumps(data, ensure_ascii=False)}\n")
    sys.stdout.flush()


class Targets:
    """What one task may aim at in its scope: events (role, session, seq, category) and
    current memories (their event), kept up to date from its own receipts; revoked
    memories (their event) too, since a consolidation takes some of their events along."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.events: dict[str, list[Any]] = data["events"]
        self.memories: dict[str, str] = data["memories"]
        self.revoked: dict[str, str] = data["revoked"]

    def conversation(self) -> list[str]:
        return [e for e, (_, _, _, category) in self.events.items() if category == "conversation"]

    def drop(self, event_ids: Iterable[str], memory_ids: Iterable[str]) -> None:
        gone = set(event_ids)
        for eid in gone:
            self.events.pop(eid, None)
        for owners in (self.memories, self.revoked):
            for mid in [*memory_ids, *(m for m, e in owners.items() if e in gone)]:
                owners.pop(mid, None)

    def revoke(self, memory_id: str) -> None:
        self.revoked[memory_id] = self.memories.pop(memory_id)


def choose(rng: random.Random, targets: Targets) -> str:
    weights = dict(WEIGHTS)
    if len(targets.events) > SCOPE_CAP:
        weights |= {"erase": 25, "delete": 15, "submit": 5}
    if not targets.conversation():
        weights = {op: w for op, w in weights.items() if op not in NEEDS_EVENT}
    if len(targets.memories) < 2:
        weights = {op: w for op, w in weights.items() if op not in NEEDS_MEMORY}
    return rng.choices(list(weights), list(weights.values()))[0]


def plan(
    op: str, rng: random.Random, targets: Targets, tag: str, files: Path, task: int
) -> dict[str, Any]:
    """The parameters of one operation (``tag`` is unique to it)."""
    if op == "submit":
        return {"id": tag, "session": rng.choice(SESSIONS), "role": role_of(tag)}
    if op == "add_memories":
        eid = rng.choice(targets.conversation())
        role = targets.events[eid][0]
        kind, basis = (
            ("episode", "user_statement")
            if role == "user"
            else ("observation", "assistant_expression")
        )
        drafts = [
            {
                "text": f"note {tag}.{k} about <{eid}>",
                "quote": quote_of(eid),
                "kind": kind,
                "basis": basis,
                "tier": rng.choice(["working", "working", "episodic"]),
            }
            for k in range(rng.randint(1, 3))
        ]
        return {"event": eid, "drafts": drafts}
    if op == "correct":
        mid = rng.choice(sorted(targets.memories))
        eid = targets.memories[mid]
        return {"memory": mid, "text": f"fix {tag} of <{eid}>: likes green tea"}
    if op == "retract":
        return {
            "memory": rng.choice(sorted(targets.memories)),
            "reason": rng.choice([None, f"wrong {tag}"]),
        }
    if op == "delete":
        if targets.memories and rng.random() < 0.3:
            return {"memory": rng.choice(sorted(targets.memories))}
        return {"event": rng.choice(sorted(targets.events))}
    if op == "erase":
        return {"session": rng.choice(SESSIONS)}
    if op == "relate":
        a, b = rng.sample(sorted(targets.memories), 2)
        return {"from": a, "to": b}
    if op == "pin":
        return {"memory": rng.choice(sorted(targets.memories)), "pinned": rng.random() < 0.7}
    if op == "checkpoint":
        session = rng.choice(SESSIONS)
        seqs = [q for _, s, q, _ in targets.events.values() if s == session and q is not None]
        covered = rng.choice(seqs) if seqs and rng.random() < 0.7 else None
        return {"session": session, "goal": f"goal {tag}", "covered_seq": covered}
    if op == "consolidate":
        ahead = timedelta(hours=rng.choice([0, 30, 60]))
        return {"as_of": (datetime.now(UTC) + ahead).isoformat()}
    if op == "persona":
        return {"name": f"persona-{task}", "text": f"persona text {tag}"}
    if op == "export":
        return {"path": str(files / f"{tag}.jsonl")}
    if op == "backup":
        return {"path": str(files / f"{tag}.db")}
    return {}  # reindex


async def perform(
    op: str, p: dict[str, Any], mem: amem.Memory, scope: amem.Scope
) -> dict[str, Any]:
    """Run one operation; its receipt, as much of it as the parent needs to check it."""
    if op == "submit":
        receipt = await scope.submit_event(
            payload(p["id"]), role=p["role"], event_id=p["id"], session=p["session"]
        )
        return {"seq": receipt.seq, "duplicate": receipt.duplicate}
    if op == "add_memories":
        records = await scope.add_memories(p["event"], p["drafts"])
        return {"memories": [[r.id, r.tier, r.pinned] for r in records]}
    if op == "correct":
        done = await scope.correct(p["memory"], p["text"])
        return {
            "memory": done.memory.id,
            "tier": done.memory.tier,
            "pinned": done.memory.pinned,
            "event": done.correction_event_id,
        }
    if op == "retract":
        retracted = await scope.retract(p["memory"], p["reason"])
        return {"already": retracted.already_revoked}
    if op == "delete":
        gone = await scope.delete(event_id=p.get("event"), memory_id=p.get("memory"))
        return {"events": gone.event_ids, "memories": gone.memory_ids}
    if op == "erase":
        erased = await scope.erase(session=p["session"])
        return {
            "events": erased.event_ids,
            "memories": erased.memory_ids,
            "truncated": erased.ids_truncated,
        }
    elif op == "relate":
        await scope.relate(p["from"], p["to"])
    elif op == "pin":
        await scope.pin(p["memory"], p["pinned"])
    elif op == "checkpoint":
        await scope.save_checkpoint(p["session"], goal=p["goal"], covered_seq=p["covered_seq"])
    elif op == "consolidate":
        done = await scope.consolidate(as_of=p["as_of"])
        return {"deleted": done.deleted, "promotions": [[m.id, m.to_tier] for m in done.promotions]}
    elif op == "persona":
        return {"version": (await mem.set_persona(p["name"], p["text"])).version}
    elif op == "export":
        return {"rows": sum((await mem.export(p["path"])).counts.values())}
    elif op == "backup":
        await mem.backup(p["path"])
    elif op == "reindex":
        done = await scope.reindex()
        return {"memories": done.memories, "events": done.events, "embedded": done.embedded}
    return {}


def follow(op: str, p: dict[str, Any], result: dict[str, Any], targets: Targets) -> None:
    """Keep the task's targets up to date with what its operation did."""
    if op == "submit":
        targets.events[p["id"]] = [p["role"], p["session"], result["seq"], "conversation"]
    elif op == "add_memories":
        targets.memories.update((mid, p["event"]) for mid, _, _ in result["memories"])
    elif op == "correct":
        role, session, _, _ = targets.events[targets.memories[p["memory"]]]
        targets.revoke(p["memory"])
        targets.events[result["event"]] = [role, session, None, "correction"]
        targets.memories[result["memory"]] = result["event"]
    elif op == "retract":
        targets.revoke(p["memory"])
    elif op in ("delete", "erase"):
        targets.drop(result["events"], result["memories"])
    elif op == "consolidate":  # corrections' events go with their memories
        owners = targets.memories | targets.revoked
        targets.drop([], result["deleted"])
        left = {*targets.memories.values(), *targets.revoked.values()}
        sources = {owners[m] for m in result["deleted"]} - left
        targets.drop([e for e in sources if targets.events[e][3] == "correction"], [])


async def work(
    mem: amem.Memory, task: int, targets: Targets, round_: int, seed: int, files: Path
) -> None:
    rng = random.Random(f"{seed}/{round_}/{task}")
    scope = mem.scope(PERSONA, f"p{task}")
    for n in range(1_000_000):
        op = choose(rng, targets)
        tag = event_id(round_, task, n)
        params = plan(op, rng, targets, tag, files, task)
        emit("begin", {"task": task, "n": n, "op": op, **params})
        try:
            result = await perform(op, params, mem, scope)
        except amem.AmemError as exc:
            emit("error", {"task": task, "n": n, "op": op, "code": exc.code})
            continue
        emit("ack", {"task": task, "n": n, "op": op, **result})
        follow(op, params, result, targets)


async def child_main(db: str, state: str, round_: int, seed: int, base_url: str) -> None:
    targets = json.loads(await anyio.Path(state).read_text())
    files = Path(state).parent / "files"
    async with (
        amem.open(db, settings=settings_for(base_url)) as mem,
        anyio.create_task_group() as tg,
    ):
        for task in range(TASKS):
            tg.start_soon(work, mem, task, Targets(targets[f"p{task}"]), round_, seed, files)


def run_child(argv: list[str]) -> None:
    backend, db, state, round_, seed, base_url = argv
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    if sys.stdin.readline().strip() == "go":
        main = partial(child_main, db, state, int(round_), int(seed), base_url)
        anyio.run(main, backend=backend)


# --- parent: the model of what must be in the file -----------------------------------------


@dataclass
class Ev:
    project: str
    session: str | None
    role: str
    category: str
    text: str
    origin: str


@dataclass
class Mem:
    project: str
    event: str
    text: str
    quote: str
    tier: str
    pinned: bool
    revoked: bool
    origin: str


@dataclass
class Cp:
    project: str
    goal: str
    stale: bool = False
    """Invalidated since (or possibly, by an operation in flight at a kill)."""


@dataclass
class Model:
    """Everything acknowledged (and, once resolved, everything applied) so far."""

    events: dict[str, Ev] = field(default_factory=dict)
    memories: dict[str, Mem] = field(default_factory=dict)
    relations: dict[tuple[str, str, str], str] = field(default_factory=dict)
    tombstones: dict[str, str] = field(default_factory=dict)
    """Digest -> the erased event's ID."""
    removed: dict[str, str] = field(default_factory=dict)
    """Event or memory ID -> the operation that removed it."""
    personas: dict[tuple[str, int], str] = field(default_factory=dict)
    checkpoints: list[Cp] = field(default_factory=list)

    def current_keys(self, project: str) -> set[tuple[str, str]]:
        """What a reindex of the scope embeds: current memories and indexed events."""
        keys = {
            ("memory", m)
            for m, v in self.memories.items()
            if v.project == project and not v.revoked
        }
        keys |= {
            ("event", e)
            for e, v in self.events.items()
            if v.project == project and v.category in INDEXED_CATEGORIES
        }
        return keys

    def remove(
        self, project: str, events: Iterable[str], memories: Iterable[str], op: str, bury: bool
    ) -> None:
        gone = set(memories)
        for mid in gone:
            self.memories.pop(mid, None)
            self.removed[mid] = op
        for key in [k for k in self.relations if k[0] in gone or k[1] in gone]:
            del self.relations[key]
        for eid in events:
            self.events.pop(eid, None)
            self.removed[eid] = op
            if bury:
                self.tombstones[digest(PERSONA, project, eid)] = eid
        if op in INVALIDATES:
            self.invalidate(project)

    def invalidate(self, project: str) -> None:
        for cp in self.checkpoints:
            cp.stale = cp.stale or cp.project == project

    def targets(self) -> dict[str, Any]:
        """The state file a child reads: per scope, events, current and revoked memories."""
        scopes: dict[str, Any] = {
            f"p{task}": {"events": {}, "memories": {}, "revoked": {}} for task in range(TASKS)
        }
        for e, v in self.events.items():
            scopes[v.project]["events"][e] = [v.role, v.session, None, v.category]
        for m, v in self.memories.items():
            scopes[v.project]["revoked" if v.revoked else "memories"][m] = v.event
        return scopes


def apply_ack(model: Model, op: str, p: dict[str, Any], r: dict[str, Any], project: str) -> None:
    """What an acknowledged operation did, by its parameters and receipt."""
    if op == "submit":
        model.events[p["id"]] = Ev(
            project, p["session"], p["role"], "conversation", payload(p["id"]), op
        )
    elif op == "add_memories":
        for (mid, tier, pinned), draft in zip(r["memories"], p["drafts"], strict=True):
            model.memories[mid] = Mem(
                project, p["event"], draft["text"], draft["quote"], tier, pinned, False, op
            )
    elif op == "correct":
        old = model.memories[p["memory"]]
        source = model.events[old.event]
        old.revoked = True
        model.events[r["event"]] = Ev(
            project, source.session, source.role, "correction", p["text"], op
        )
        model.memories[r["memory"]] = Mem(
            project, r["event"], p["text"], p["text"], r["tier"], r["pinned"], False, op
        )
        model.relations[(r["memory"], p["memory"], "corrects")] = op
        model.invalidate(project)
    elif op == "retract":
        model.memories[p["memory"]].revoked = True
        model.invalidate(project)
    elif op in ("delete", "erase"):
        model.remove(project, r["events"], r["memories"], op, bury=True)
    elif op == "consolidate":
        for mid, tier in r["promotions"]:
            model.memories[mid].tier = tier
        sources = {model.memories[m].event for m in r["deleted"]}
        model.remove(project, [], r["deleted"], op, bury=False)
        left = {m.event for m in model.memories.values()}
        emptied = [e for e in sources if model.events[e].category == "correction"]
        model.remove(project, [e for e in emptied if e not in left], [], op, bury=False)
    elif op == "relate":
        model.relations.setdefault((p["from"], p["to"], "related"), op)
    elif op == "pin":
        model.memories[p["memory"]].pinned = p["pinned"]
    elif op == "checkpoint":
        model.checkpoints.append(Cp(project, p["goal"]))
    elif op == "persona":
        model.personas[(p["name"], r["version"])] = p["text"]


# --- parent: reading the file with plain sqlite3 -----------------------------------------


@dataclass
class FileState:
    """Every row the checks look at, read with plain sqlite3, and what SQLite said."""

    problems: list[str] = field(default_factory=list)
    """Broken invariants."""
    events: dict[str, tuple[str, str | None, str, str, str]] = field(default_factory=dict)
    """ID -> (project, session, role, category, text)."""
    memories: dict[str, dict[str, Any]] = field(default_factory=dict)
    relations: set[tuple[str, str, str]] = field(default_factory=set)
    tombstones: set[str] = field(default_factory=set)
    personas: dict[tuple[str, int], str] = field(default_factory=dict)
    checkpoints: list[tuple[str, str, str | None]] = field(default_factory=list)
    """(project, goal, invalidated_at)."""
    covered: set[tuple[str, str]] = field(default_factory=set)
    """Items with every chunk's vector under the configured fingerprint."""
    staged: Counter[str] = field(default_factory=Counter)
    """Staged vectors per project."""
    temp_records: int = 0


MEMORY_COLUMNS = (
    "id",
    "project",
    "event_id",
    "text",
    "quote",
    "quote_start",
    "quote_end",
    "tier",
    "pinned",
    "revoked_at",
    "expires_at",
)


def read_file(db: Path, fingerprint: str) -> FileState:
    fs = FileState()
    with closing(sqlite3.connect(db)) as conn:
        conn.text_factory = str
        pragma = conn.execute("pragma integrity_check").fetchall()
        if pragma != [("ok",)]:
            fs.problems.append(f"integrity_check: {pragma[:3]}")
        if fk := conn.execute("pragma foreign_key_check").fetchall():
            fs.problems.append(f"foreign_key_check: {fk[:3]}")
        version = conn.execute("pragma user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):  # 0: killed before its first migration
            fs.problems.append(f"user_version {version}")
        if version == 0:
            return fs
        try:
            conn.execute("begin")
            conn.execute("insert into search_fts (search_fts, rank) values ('integrity-check', 1)")
        except sqlite3.DatabaseError as exc:
            fs.problems.append(f"FTS5 integrity-check: {exc}")
        finally:
            conn.execute("rollback")
        read_rows(conn, fs)
        check_rows(conn, fs)
        read_vectors(conn, fs, fingerprint)
        usage = sorted(conn.execute("select * from scope_usage").fetchall())
        counted = sorted(conn.execute(COUNTED_USAGE).fetchall())
        if [row for row in usage if any(row[2:])] != counted:
            fs.problems.append(f"scope_usage {usage} but the rows count {counted}")
        fs.temp_records = conn.execute("select count(*) from temp_files").fetchone()[0]
    return fs


def read_rows(conn: sqlite3.Connection, fs: FileState) -> None:
    for eid, persona, project, session, role, category, text in conn.execute(
        "select id, persona, project, session, role, category, text from events"
    ):
        fs.events[eid] = (
            project if persona == PERSONA else f"{persona}?",
            session,
            role,
            category,
            text,
        )
    for row in conn.execute(f"select {', '.join(MEMORY_COLUMNS)} from memories"):
        fs.memories[row[0]] = dict(zip(MEMORY_COLUMNS, row, strict=True))
    fs.relations = set(conn.execute("select from_id, to_id, kind from relations"))
    fs.tombstones = {d for (d,) in conn.execute("select digest from erased_events")}
    fs.personas = {
        (p, v): t for p, v, t in conn.execute("select persona, version, text from personas")
    }
    fs.checkpoints = list(conn.execute("select project, goal, invalidated_at from checkpoints"))


def check_rows(conn: sqlite3.Connection, fs: FileState) -> None:
    """The invariants between rows: derivation, lineage, the search index."""
    problems = fs.problems
    for mid, m in fs.memories.items():
        event = fs.events.get(m["event_id"])
        if event is None:
            problems.append(f"memory {mid} without its event")
        elif event[4][m["quote_start"] : m["quote_end"]] != m["quote"]:
            problems.append(f"memory {mid}: its quote is not at its offsets in its event")
    with_memory = {m["event_id"] for m in fs.memories.values()}
    for eid, (_, _, _, category, _) in fs.events.items():
        if category == "correction" and eid not in with_memory:
            problems.append(f"correction event {eid} without its memory")
    for a, b, kind in fs.relations:
        if a not in fs.memories or b not in fs.memories:
            problems.append(f"relation {a} -> {b} points at nothing")
        elif kind == "corrects" and (
            fs.memories[b]["revoked_at"] is None
            or fs.events[fs.memories[a]["event_id"]][3] != "correction"
        ):
            problems.append(f"corrects {a} -> {b}: not a correction of a revoked memory")
    docs = Counter(conn.execute("select doc_kind, ref from search_docs"))
    indexed = Counter({("memory", m): 1 for m, v in fs.memories.items() if v["revoked_at"] is None})
    indexed.update(("event", e) for e, v in fs.events.items() if v[3] in INDEXED_CATEGORIES)
    if docs != indexed:
        missing, orphaned = indexed - docs, docs - indexed
        problems.append(f"search_docs: {len(missing)} missing, {len(orphaned)} orphaned or twice")


def read_vectors(conn: sqlite3.Connection, fs: FileState, fingerprint: str) -> None:
    """Every vector belongs to a current item with that text, under the configured
    fingerprint or a staging one, and every item with vectors of one has all its chunks."""
    texts = {("memory", m): v["text"] for m, v in fs.memories.items() if v["revoked_at"] is None}
    texts |= {("event", e): v[4] for e, v in fs.events.items() if v[3] in INDEXED_CATEGORIES}
    spaces: dict[tuple[str, str, str], set[int]] = {}
    for project, kind, ref, chunk, fp, dim, size, hashed in conn.execute(
        "select project, doc_kind, ref, chunk, fingerprint, dim, length(vector), text_hash "
        "from vectors"
    ):
        text = texts.get((kind, ref))
        if text is None or text_hash(text) != hashed:
            fs.problems.append(f"vector of {kind} {ref} ({fp[:16]}): no current item with its text")
        if fp != fingerprint and not fp.startswith("staging:"):
            fs.problems.append(f"vector under an unknown fingerprint {fp[:40]}")
        if dim != DIM or size != 4 * DIM:
            fs.problems.append(f"vector of {kind} {ref}: {dim} dims, {size} bytes")
        spaces.setdefault((fp, kind, ref), set()).add(chunk)
        if fp.startswith("staging:"):
            fs.staged[project] += 1
    for (fp, kind, ref), got in spaces.items():
        text = texts.get((kind, ref))
        if text is None:
            continue
        wanted = set(range(len(chunks(text)) if kind == "event" else 1))
        if got != wanted:
            fs.problems.append(f"vectors of {kind} {ref} ({fp[:16]}): chunks {sorted(got)[:5]}")
        elif fp == fingerprint:
            fs.covered.add((kind, ref))


# --- parent: one round ---------------------------------------------------------------------


@dataclass
class Tally:
    acked: Counter[str] = field(default_factory=Counter)
    in_flight: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    lost: Counter[str] = field(default_factory=Counter)
    half: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    rounds: int = 0
    killed_early: int = 0
    reindex_killed: int = 0
    reindex_done: int = 0
    staged_seen: int = 0
    """Staged vectors of interrupted reindexes in the file after each kill, summed over
    rounds (they stay until their scope's next reindex completes)."""
    temp_left_by_kills: int = 0
    exports_checked: int = 0

    def lose(self, op: str, what: str) -> None:
        self.note(self.lost, op, f"lost ({op}): {what}")

    def halve(self, op: str, what: str) -> None:
        self.note(self.half, op, f"half-applied ({op}): {what}")

    def note(self, counts: Counter[str], op: str, problem: str) -> None:
        """Count a problem once, however many later rounds still see it."""
        if problem not in self.problems:
            counts[op] += 1
            self.problems.append(problem)


@dataclass
class Snapshot:
    """An export or backup: the events it must hold (those acknowledged before it began,
    outside scopes where a removal ran meanwhile)."""

    path: str
    kind: str
    events: dict[str, Ev]
    unstable: set[str]
    acked: bool = False


class Round:
    """One round's lines, replayed in order onto the model."""

    def __init__(self, model: Model, tally: Tally) -> None:
        self.model = model
        self.tally = tally
        self.pending: dict[int, dict[str, Any]] = {}
        self.snapshots: list[Snapshot] = []
        self.open_snapshots: dict[int, Snapshot] = {}
        self.reindexes: dict[str, tuple[set[tuple[str, str]], bool]] = {}
        """Project -> (what its last reindex of the round saw, whether it was acknowledged)."""
        self.acked_events: list[str] = []

    def take(self, kind: str, data: dict[str, Any]) -> None:
        task, op = data["task"], data["op"]
        project = f"p{task}"
        if kind == "begin":
            self.pending[task] = data
            if op in REMOVES:
                for snap in self.open_snapshots.values():
                    snap.unstable.add(project)
            if op in ("export", "backup"):
                unstable = {f"p{t}" for t, d in self.pending.items() if d["op"] in REMOVES}
                snap = Snapshot(data["path"], op, dict(self.model.events), unstable)
                self.snapshots.append(snap)
                self.open_snapshots[task] = snap
            if op == "reindex":
                self.reindexes[project] = (self.model.current_keys(project), False)
            return
        begun = self.pending.pop(task)
        self.open_snapshots.pop(task, None)
        if kind == "error":
            self.tally.errors[op] += 1
            self.tally.problems.append(f"error ({op}): {data['code']}")  # every one counts
            return
        self.tally.acked[op] += 1
        apply_ack(self.model, op, begun, data, project)
        if op == "submit":
            self.acked_events.append(begun["id"])
        if op in ("export", "backup"):
            next(s for s in self.snapshots if s.path == begun["path"]).acked = True
        if op == "reindex":
            self.reindexes[project] = (self.reindexes[project][0], True)
            self.tally.reindex_done += 1


def resolve(
    op: str, p: dict[str, Any], project: str, model: Model, fs: FileState, tally: Tally
) -> None:
    """An operation in flight at the kill: applied whole or not at all, as the file says;
    the model follows the file."""
    if op == "submit":
        if p["id"] in fs.events:
            model.events[p["id"]] = Ev(
                project, p["session"], p["role"], "conversation", payload(p["id"]), op
            )
    elif op == "add_memories":
        texts = {d["text"]: d for d in p["drafts"]}
        found = {
            m: v
            for m, v in fs.memories.items()
            if v["event_id"] == p["event"] and v["text"] in texts
        }
        if found and len(found) != len(texts):
            tally.halve(op, f"{len(found)} of {len(texts)} memories of {p['event']}")
        for mid, v in found.items():
            model.memories[mid] = Mem(
                project, p["event"], v["text"], v["quote"], v["tier"], bool(v["pinned"]), False, op
            )
    elif op == "correct":
        new = [m for m, v in fs.memories.items() if v["text"] == p["text"]]
        old = fs.memories.get(p["memory"])
        revoked = old is not None and old["revoked_at"] is not None
        if not new and not revoked:
            return
        if len(new) != 1 or not revoked:
            tally.halve(op, f"{len(new)} corrected memories, old revoked: {revoked}")
            return
        v = fs.memories[new[0]]
        source = model.events[model.memories[p["memory"]].event]
        model.memories[p["memory"]].revoked = True
        model.events[v["event_id"]] = Ev(
            project, source.session, source.role, "correction", p["text"], op
        )
        model.memories[new[0]] = Mem(
            project, v["event_id"], p["text"], p["text"], v["tier"], bool(v["pinned"]), False, op
        )
        model.relations[(new[0], p["memory"], "corrects")] = op
        model.invalidate(project)
    elif op == "retract":
        if p["memory"] in fs.memories and fs.memories[p["memory"]]["revoked_at"] is not None:
            model.memories[p["memory"]].revoked = True
        model.invalidate(project)
    elif op in REMOVES:
        resolve_removal(op, p, project, model, fs, tally)
    elif op == "relate":
        if (p["from"], p["to"], "related") in fs.relations:
            model.relations.setdefault((p["from"], p["to"], "related"), op)
    elif op == "pin":
        if p["memory"] in fs.memories:
            model.memories[p["memory"]].pinned = bool(fs.memories[p["memory"]]["pinned"])
    elif op == "checkpoint":
        if any(goal == p["goal"] for _, goal, _ in fs.checkpoints):
            model.checkpoints.append(Cp(project, p["goal"]))
    elif op == "persona":
        for (name, version), text in fs.personas.items():
            if name == p["name"] and text == p["text"]:
                model.personas[(name, version)] = text


def resolve_removal(
    op: str, p: dict[str, Any], project: str, model: Model, fs: FileState, tally: Tally
) -> None:
    """A delete, erase or consolidate in flight: what went, and whether it went whole."""
    events = {e for e, v in model.events.items() if v.project == project and e not in fs.events}
    memories = {m for m, v in model.memories.items() if v.project == project}
    promoted = {
        m for m in memories & fs.memories.keys() if fs.memories[m]["tier"] != model.memories[m].tier
    }
    memories -= fs.memories.keys()
    if not (events or memories or promoted):
        return  # not applied
    buried = {e for e in events if digest(PERSONA, project, e) in fs.tombstones}
    if op == "consolidate":
        check_consolidation(p, project, model, fs, tally, events, memories, buried)
        for mid in promoted:
            model.memories[mid].tier = fs.memories[mid]["tier"]
    else:
        if events - buried:
            tally.halve(op, f"{len(events - buried)} events gone without a tombstone")
        if memories != {m for m, v in model.memories.items() if v.event in events}:
            tally.halve(op, "the memories that went are not those of the events that went")
        if op == "delete":
            target = p["event"] if "event" in p else model.memories[p["memory"]].event
            if events != lineage(model, [target]):
                tally.halve(op, f"delete of {target} took other than its lineage")
        else:
            session = [
                e
                for e, v in model.events.items()
                if v.project == project and v.session == p["session"]
            ]
            whole = all(lineage(model, [e]) <= events for e in events)
            if not whole or not events <= lineage(model, session):
                tally.halve(op, f"erase of {p['session']} took part of a lineage or others")
    model.remove(project, events, memories, op, bury=op != "consolidate")


def check_consolidation(
    p: dict[str, Any],
    project: str,
    model: Model,
    fs: FileState,
    tally: Tally,
    events: set[str],
    memories: set[str],
    buried: set[str],
) -> None:
    """An applied consolidation took working notes (and their earlier versions) and the
    correction events left without a memory, no original event, and left no working note
    past its TTL at ``as_of``."""
    op = "consolidate"
    if buried or any(model.events[e].category != "correction" for e in events):
        tally.halve(op, "it removed an original event or left a tombstone")
    if any(model.memories[m].tier != "working" for m in memories):
        tally.halve(op, "it removed a memory that was not a working note")
    sources = {model.memories[m].event for m in memories}
    left = {v["event_id"] for v in fs.memories.values()}
    if events != {e for e in sources - left if model.events[e].category == "correction"}:
        tally.halve(op, "the correction events that went are not those it emptied")
    as_of = datetime.fromisoformat(p["as_of"])
    for mid, v in fs.memories.items():
        expires = v["expires_at"]
        if (
            v["project"] == project
            and v["revoked_at"] is None
            and v["tier"] == "working"
            and expires is not None
            and datetime.fromisoformat(expires) <= as_of
        ):
            tally.halve(op, f"working note {mid} past its TTL neither went nor moved")


def lineage(model: Model, events: Iterable[str]) -> set[str]:
    """The events that erasing ``events`` takes along: through their memories' ``corrects``
    links, both ways, to those memories' events, to the end."""
    links: dict[str, set[str]] = {}
    for a, b, kind in model.relations:
        if kind == "corrects":
            links.setdefault(a, set()).add(b)
            links.setdefault(b, set()).add(a)
    derived: dict[str, list[str]] = {}
    for mid, v in model.memories.items():
        derived.setdefault(v.event, []).append(mid)
    todo, seen = list(events), set()
    while todo:
        eid = todo.pop()
        if eid not in seen:
            seen.add(eid)
            for mid in derived.get(eid, []):
                todo.extend(model.memories[m].event for m in links.get(mid, ()))
    return seen


def unexplained(model: Model, kind: str, ids: Iterable[str], tally: Tally) -> None:
    """Rows of the file (``kind``, ``ids``) the model does not hold: a removed one that is
    back is lost, any other is unexplained."""
    for rid in ids:
        if rid in model.removed:
            tally.lose(model.removed[rid], f"removed {kind} {rid} is back")
        else:
            tally.halve("?", f"{kind} {rid} that no operation explains")


def compare(model: Model, fs: FileState, tally: Tally) -> None:
    """The model against the file, row by row."""
    for eid, ev in model.events.items():
        got = fs.events.get(eid)
        if got is None:
            tally.lose(ev.origin, f"event {eid} is gone")
        elif got != (ev.project, ev.session, ev.role, ev.category, ev.text):
            tally.lose(ev.origin, f"event {eid} changed")
    unexplained(model, "event", fs.events.keys() - model.events.keys(), tally)
    for mid, m in model.memories.items():
        got = fs.memories.get(mid)
        if got is None:
            tally.lose(m.origin, f"memory {mid} is gone")
            continue
        seen = (
            got["project"],
            got["event_id"],
            got["text"],
            got["quote"],
            got["tier"],
            bool(got["pinned"]),
            got["revoked_at"] is not None,
        )
        if seen != (m.project, m.event, m.text, m.quote, m.tier, m.pinned, m.revoked):
            tally.lose(m.origin, f"memory {mid} is {seen}, expected {m}")
    unexplained(model, "memory", fs.memories.keys() - model.memories.keys(), tally)
    for key, origin in model.relations.items():
        if key not in fs.relations:
            tally.lose(origin, f"relation {key} is gone")
    for key in fs.relations - model.relations.keys():
        tally.halve("?", f"relation {key} that no operation explains")
    for d, eid in model.tombstones.items():
        if d not in fs.tombstones:
            tally.lose(model.removed.get(eid, "?"), f"tombstone of {eid} is gone")
    if extra := fs.tombstones - model.tombstones.keys():
        tally.halve("?", f"{len(extra)} tombstones that no operation explains")
    for key, text in model.personas.items():
        if fs.personas.get(key) != text:
            tally.lose("persona", f"persona version {key}")
    if extra_personas := fs.personas.keys() - model.personas.keys():
        tally.halve("persona", f"persona versions {sorted(extra_personas)[:3]} unexplained")
    if len(fs.checkpoints) != len(model.checkpoints):
        tally.lose(
            "checkpoint", f"{len(fs.checkpoints)} checkpoints, {len(model.checkpoints)} saved"
        )
    live = {(project, goal) for project, goal, invalidated in fs.checkpoints if invalidated is None}
    for cp in model.checkpoints:
        if not cp.stale and (cp.project, cp.goal) not in live:
            tally.lose("checkpoint", f"checkpoint {cp.goal} gone or invalidated")


def check_snapshot(snap: Snapshot, tally: Tally) -> None:
    """An acknowledged export or backup is complete and holds what it must; one in flight
    at the kill is either absent or complete."""
    path = Path(snap.path)
    if not path.exists():
        if snap.acked:
            tally.lose(snap.kind, f"{path.name} is missing")
        return
    tally.exports_checked += 1
    must = {e: v.text for e, v in snap.events.items() if v.project not in snap.unstable}
    if not snap.acked:
        must = {}
    try:
        held = archive_events(path) if snap.kind == "export" else backup_events(path)
    except (ValueError, KeyError, sqlite3.Error) as exc:
        tally.halve(snap.kind, f"{path.name} is incomplete ({exc})")
        return
    wrong = [e for e, text in must.items() if held.get(e) != text]
    if wrong:
        tally.lose(snap.kind, f"{path.name} lacks {len(wrong)} events, first {wrong[0]}")


def archive_events(path: Path) -> dict[str, str]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    if lines[0].get("format") != "amem-archive" or lines[-1] != {
        "end": True,
        "rows": len(lines) - 2,
    }:
        raise ValueError("no header or no end line")
    return {r["row"]["id"]: r["row"]["text"] for r in lines[1:-1] if r["table"] == "events"}


def backup_events(path: Path) -> dict[str, str]:
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        if conn.execute("pragma integrity_check").fetchall() != [("ok",)]:
            raise ValueError("integrity_check failed")
        return dict(conn.execute("select id, text from events").fetchall())


def check_reindexes(rnd: Round, fs: FileState, covered_before: set[tuple[str, str]]) -> None:
    model, tally = rnd.model, rnd.tally
    current = set().union(*(model.current_keys(f"p{t}") for t in range(TASKS)))
    for project, (seen, acked) in rnd.reindexes.items():
        if not acked:
            continue
        bare = [k for k in seen & current if k not in fs.covered]
        if bare:
            tally.lose(
                "reindex", f"{len(bare)} items of {project} without vectors, first {bare[0]}"
            )
        if fs.staged[project]:
            tally.halve("reindex", f"{fs.staged[project]} staged vectors left in {project}")
    if lost := (covered_before & current) - fs.covered:
        tally.halve("reindex", f"{len(lost)} current items lost their vectors, first {min(lost)}")


def temp_files(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if TEMP_NAME.fullmatch(p.name)]


def erased_bytes(db: Path, erased: set[str]) -> list[str]:
    """Erased events whose marker is still in the database file or its WAL."""
    found: set[str] = set()
    for path in (db, Path(f"{db}-wal")):
        if path.exists():
            found.update(m.decode() for m in MARKER.findall(path.read_bytes()))
    return sorted(found & erased)


async def reopen(db: Path, settings: amem.Settings, rnd: Round, tally: Tally) -> None:
    """amem opens the file (sweeping what the kill left), its doctor must find it healthy,
    the round's acknowledged events read back whole, and every scope counts as it should."""
    model = rnd.model
    async with amem.open(db, settings=settings) as mem:
        report = await mem.doctor()
        if not report.ok:
            failed = [
                f"{c.name}: {c.detail}" for c in report.checks if not c.ok and c.severity == "error"
            ]
            tally.note(tally.half, "doctor", f"doctor: {failed}")
        for eid in rnd.acked_events:
            ev = model.events.get(eid)
            if ev is None:
                continue
            page = await mem.scope(PERSONA, ev.project).read(eid, limit=MAX_READ_CHARS)
            if page.text != ev.text:
                tally.lose("submit", f"event {eid} reads back changed")
        for task in range(TASKS):
            status = await mem.scope(PERSONA, f"p{task}").status()
            events = sum(1 for v in model.events.values() if v.project == f"p{task}")
            memories = sum(
                1 for v in model.memories.values() if v.project == f"p{task}" and not v.revoked
            )
            if (sum(status.events.values()), status.memories) != (events, memories):
                problem = f"status of p{task}: {status.events}, {status.memories}"
                tally.note(tally.half, "status", problem)


# --- parent: children ----------------------------------------------------------------------


class Child:
    """One round's child process; its stdout parsed as it arrives."""

    def __init__(self, process: anyio.abc.Process, stderr: Path) -> None:
        self.process = process
        self.stderr = stderr
        self.ready = anyio.Event()
        self.acked = anyio.Event()
        self.reindexing = anyio.Event()
        self.eof = anyio.Event()
        self.lines: list[tuple[str, dict[str, Any]]] = []

    async def pump(self) -> None:
        assert self.process.stdout is not None
        stream = BufferedByteReceiveStream(self.process.stdout)
        try:
            while True:
                try:
                    line = (await stream.receive_until(b"\n", 1 << 24)).decode()
                except (anyio.IncompleteRead, anyio.EndOfStream):
                    return  # a line cut by the kill was never printed
                kind, _, rest = line.partition(" ")
                if kind == "ready":
                    self.ready.set()
                    continue
                data = json.loads(rest)
                self.lines.append((kind, data))
                if kind == "ack":
                    self.acked.set()
                if kind == "begin" and data["op"] == "reindex":
                    self.reindexing.set()
        finally:
            self.ready.set()
            self.acked.set()
            self.reindexing.set()
            self.eof.set()

    async def go(self) -> None:
        await self.ready.wait()
        assert self.process.stdin is not None
        await self.process.stdin.send(b"go\n")

    async def kill(self) -> int:
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
        await self.eof.wait()
        returncode = await self.process.wait()
        await self.process.aclose()
        return returncode


async def spawn(
    tg: anyio.abc.TaskGroup, work: Path, round_: int, seed: int, base_url: str
) -> Child:
    backend = "trio" if round_ % 2 else "asyncio"
    state = work / f"state-{round_:03d}.json"
    command = [
        sys.executable,
        __file__,
        "--child",
        backend,
        str(work / "memory.db"),
        str(state),
        str(round_),
        str(seed),
        base_url,
    ]
    stderr = work / f"child-{round_:03d}.stderr"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMEM_")}
    with stderr.open("wb") as err:
        process = await anyio.open_process(command, stdin=PIPE, stdout=PIPE, stderr=err, env=env)
    child = Child(process, stderr)
    tg.start_soon(child.pump)
    return child


class SlowEmbeddings(FakeOpenAI):
    """The fake server, taking ``EMBED_DELAY`` per embedding request, like a real one,
    and quiet about the connections the kills cut."""

    def __init__(self, *, dim: int) -> None:
        super().__init__(dim=dim)
        self._server.handle_error = lambda *_: None  # type: ignore[method-assign]

    def respond(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if path.endswith("/embeddings"):
            time.sleep(EMBED_DELAY)
        return super().respond(path, body)


async def run_rounds(args: argparse.Namespace, work: Path) -> Tally:
    rng = random.Random(args.seed)
    db = work / "memory.db"
    (work / "files").mkdir()
    model, tally = Model(), Tally()
    covered: set[tuple[str, str]] = set()
    with SlowEmbeddings(dim=DIM) as api:
        api.embedding_requests = _Discard()  # type: ignore[assignment]
        settings = settings_for(api.base_url)
        fingerprint = settings.embed_fingerprint
        assert fingerprint is not None
        async with anyio.create_task_group() as tg:
            upcoming = await spawn(tg, work, 0, args.seed, api.base_url)
            for round_ in range(args.rounds):
                child = upcoming
                (work / f"state-{round_:03d}.json").write_text(json.dumps(model.targets()))
                await child.go()
                if round_ + 1 < args.rounds:  # its imports overlap this round
                    upcoming = await spawn(tg, work, round_ + 1, args.seed, api.base_url)
                mode = rng.choices(["open", "reindex", "work"], [1, 3, 6])[0]
                if mode == "open":
                    tally.killed_early += 1
                    await anyio.sleep(rng.uniform(0, 0.08))
                elif mode == "reindex":
                    with anyio.move_on_after(10):  # a round with no reindex is killed anyway
                        await child.reindexing.wait()
                    await anyio.sleep(rng.uniform(0, 0.4))
                else:
                    await child.acked.wait()
                    await anyio.sleep(rng.uniform(0.05, 2.5))
                returncode = await child.kill()
                if returncode != -signal.SIGKILL:
                    tail = child.stderr.read_text(errors="replace")[-2000:]
                    problem = f"round {round_}: child exited {returncode}: {tail}"
                    tally.note(tally.half, "child exit", problem)
                covered = await check_round(round_, child, db, settings, model, tally, covered)
                if args.keep:  # what the child printed, with its clock (``t``)
                    lines = work / f"lines-{round_:03d}.json"
                    lines.write_text(json.dumps(child.lines, ensure_ascii=False))
                else:
                    for leftover in (work / f"state-{round_:03d}.json", child.stderr):
                        leftover.unlink(missing_ok=True)
    return tally


class _Discard(list[Any]):
    """The fake server keeps every request body; this run makes hundreds of thousands."""

    def append(self, item: Any) -> None:
        pass


async def check_round(
    round_: int,
    child: Child,
    db: Path,
    settings: amem.Settings,
    model: Model,
    tally: Tally,
    covered: set[tuple[str, str]],
) -> set[tuple[str, str]]:
    before = len(tally.problems)
    rnd = Round(model, tally)
    for kind, data in child.lines:
        rnd.take(kind, data)
    assert settings.embed_fingerprint is not None
    fs = await anyio.to_thread.run_sync(read_file, db, settings.embed_fingerprint)
    for problem in fs.problems:
        tally.note(tally.half, "invariants", f"invariant: {problem}")
    for task, begun in sorted(rnd.pending.items()):
        tally.in_flight[begun["op"]] += 1
        tally.reindex_killed += begun["op"] == "reindex"
        resolve(begun["op"], begun, f"p{task}", model, fs, tally)
    compare(model, fs, tally)
    for snap in rnd.snapshots:
        check_snapshot(snap, tally)
    check_reindexes(rnd, fs, covered)
    tally.staged_seen += sum(fs.staged.values())
    files = db.parent / "files"
    tally.temp_left_by_kills += len(temp_files(files))
    await reopen(db, settings, rnd, tally)
    if left := temp_files(files):
        for name in left:
            tally.note(tally.half, "temp files", f"temp file {name} after the next open")
    after = await anyio.to_thread.run_sync(read_file, db, settings.embed_fingerprint)
    if after.temp_records:
        problem = f"{after.temp_records} temp_files records after the next open"
        tally.note(tally.half, "temp files", problem)
    erased = set(model.tombstones.values())
    if found := await anyio.to_thread.run_sync(erased_bytes, db, erased):
        for eid in found:
            tally.note(tally.half, "erased bytes", f"erased {eid}'s text in the file after close")
    tally.rounds += 1
    acked = sum(1 for kind, _ in child.lines if kind == "ack")
    flying = ", ".join(sorted(d["op"] for d in rnd.pending.values())) or "-"
    print(
        f"round {round_ + 1}: {acked} acknowledged, in flight: {flying}; "
        f"{len(tally.problems) - before} problems",
        file=sys.stderr,
    )
    for problem in tally.problems[before : before + 5]:
        print(f"  {problem[:300]}", file=sys.stderr)
    return fs.covered


# --- report ---------------------------------------------------------------------------------


def print_report(args: argparse.Namespace, tally: Tally, seconds: float) -> dict[str, Any]:
    rows = [*OPS, "invariants", "doctor", "status", "temp files", "erased bytes", "child exit", "?"]
    rows = [r for r in rows if r in OPS or tally.half[r] or tally.lost[r]]
    header = f"{'operation':<14}{'acked':>8}{'in flight':>11}{'errors':>8}{'lost':>6}{'half':>6}"
    print(
        f"kill9: {tally.rounds} rounds x {TASKS} tasks, one file, SIGKILL each round, "
        f"seed {args.seed}, {os.cpu_count()} cores"
    )
    print_header(header)
    for op in rows:
        print(
            f"{op:<14}{tally.acked[op]:>8,}{tally.in_flight[op]:>11,}{tally.errors[op]:>8,}"
            f"{tally.lost[op]:>6,}{tally.half[op]:>6,}"
        )
    print("-" * len(header))
    lost, half = sum(tally.lost.values()), sum(tally.half.values())
    print(
        f"{'total':<14}{sum(tally.acked.values()):>8,}{sum(tally.in_flight.values()):>11,}"
        f"{sum(tally.errors.values()):>8,}{lost:>6,}{half:>6,}"
    )
    print(
        f"rounds killed during open {tally.killed_early}, with a reindex in flight "
        f"{tally.reindex_killed}; reindexes completed {tally.reindex_done}; staged vectors "
        f"seen after kills {tally.staged_seen:,}; exports and backups checked "
        f"{tally.exports_checked}; temp files left by kills {tally.temp_left_by_kills} "
        f"(all swept by the next open unless 'temp files' shows); {seconds:.0f} s"
    )
    problems = len(tally.problems)
    print(f"target: 0 lost, 0 half-applied, 0 errors: {'met' if not problems else 'MISSED'}")
    for problem in tally.problems[:20]:
        print(f"  {problem[:300]}")
    line = {
        "bench": "kill9",
        "rounds": tally.rounds,
        "seed": args.seed,
        "acknowledged": sum(tally.acked.values()),
        "in_flight": sum(tally.in_flight.values()),
        "errors": sum(tally.errors.values()),
        "lost": lost,
        "half_applied": half,
        "problems": problems,
        "killed_during_open": tally.killed_early,
        "reindex_in_flight": tally.reindex_killed,
        "reindex_completed": tally.reindex_done,
        "seconds": round(seconds, 1),
        "per_operation": {
            op: {
                "acked": tally.acked[op],
                "in_flight": tally.in_flight[op],
                "errors": tally.errors[op],
                "lost": tally.lost[op],
                "half_applied": tally.half[op],
            }
            for op in rows
        },
    }
    print(json.dumps(line))
    return line


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        run_child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=220)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", type=Path, help="work directory (default: a new temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    add_results_argument(parser)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kill9-", dir=args.dir))
    print(f"work directory: {work}", file=sys.stderr)
    started = time.perf_counter()
    tally = anyio.run(run_rounds, args, work)
    with recorded("kill9", args.results):
        print_report(args, tally, time.perf_counter() - started)
    if args.keep or tally.problems:
        print(f"kept: {work}", file=sys.stderr)
    else:
        shutil.rmtree(work)
    sys.exit(1 if tally.problems else 0)


if __name__ == "__main__":
    main()
