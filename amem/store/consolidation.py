"""Consolidation runs: the host's model tidies what is known, amem keeps it honest.

A run is prepared (``prepare``): the events of a session (or of the whole scope) since
its last applied run, at most ``max_chars`` of their text (an oversized event is paged,
with offsets), are frozen into the run together with the current memories they touch:
derived from them, on the same subject and fact key, or found by recall (the caller's
``neighbours``), each with a version. The host's model reads the run and answers with a
patch; ``apply`` validates the whole patch against the frozen input, checks that every
memory it changes still has its frozen version, and writes it in one transaction. The
run then drops its frozen text (the memories hold what was kept) and remembers the
patch's digest, so the same patch applied again is a ``duplicate``.

One prepared run at a time per session: preparing again returns it until it is applied
(or fails or is invalidated), so a host that retries after a crash finds its run. Erasing
an event a run froze invalidates the run if it was still prepared and scrubs every run's
copy of the erased text (``forget_events``, called by ``store.erasure``).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ..db.rules import CURRENT_MEMORY
from ..db.times import from_db_time
from ..errors import Conflict, InvalidInput, NotFound
from ..inputs import parse_drafts
from ..limits import MAX_MEMORY_CHARS
from ..models import (
    AppliedEntry,
    ConsolidationResult,
    ConsolidationRun,
    MemoryDraft,
    PatchOp,
    RunEvent,
    RunInput,
    RunMemory,
    RunStatus,
)
from . import eviction, facts, retraction
from .checkpoints import invalidate_checkpoints
from .quotes import find_quote
from .relations import add_relation
from .runs import without_text

MAX_RUN_MEMORIES = 60
"""Memories frozen into one run at most: what a host's model can weigh in one answer."""
NEIGHBOUR_QUERIES = 12
"""Source events whose words and vectors look for neighbouring memories (the latest)."""
NEIGHBOURS = 5
"""Memories each of those queries adds at most."""
MAX_ENTRIES = 200
"""Entries in one patch at most."""
SOURCE_CATEGORIES = ("conversation",)
"""Events a run reads: what was said (references and personas are never sources)."""
NEW = "new:"
"""A patch entry names the memory an earlier add or summarise entry made as ``new:N``."""

RUN_COLUMNS = """
id, persona, project, session, status, input, candidate, error, result, created_at,
updated_at
"""
SELECT_RUN = f"select {RUN_COLUMNS} from consolidation_runs where id = ?"
SELECT_OPEN_RUN = f"""
select {RUN_COLUMNS} from consolidation_runs
where persona = ? and project = ? and session is ? and status = 'prepared'
order by num desc limit 1
"""
SELECT_CURSOR = """
select next_seq, next_offset from consolidation_runs
where persona = ? and project = ? and session is ? and status = 'applied'
order by num desc limit 1
"""
SOURCE_COLUMNS = "id, seq, role, session, person, occurred_at, text"
SELECT_SESSION_SOURCES = f"""
select {SOURCE_COLUMNS} from events
where persona = :persona and project = :project and session = :session and seq >= :seq
  and category = 'conversation' and evicted_at is null
order by seq limit :limit
"""
SELECT_SCOPE_SOURCES = f"""
select {SOURCE_COLUMNS} from events not indexed
where seq >= :seq and persona = :persona and project = :project
  and category = 'conversation' and evicted_at is null
order by seq limit :limit
"""
"""The events after a run's cursor: a session's through its index; the whole scope's
from the cursor on, in ``seq`` order (the rowid), not by sorting every event of the scope."""
MEMORY_COLUMNS = """
id, event_id, text, kind, basis, subject, fact_key, tier, person, valid_at, invalid_at,
revoked_at, pinned, about
"""
SELECT_MEMORY = f"select {MEMORY_COLUMNS}, persona, project from memories where id = ?"
SELECT_DERIVED = f"""
select id from memories m where event_id = ? and {CURRENT_MEMORY} order by num
"""
SELECT_SAME_KEY = f"""
select id from memories m
where persona = ? and project = ? and subject = ? and fact_key = ? and person is ?
  and {CURRENT_MEMORY}
order by valid_at desc, num desc limit 10
"""
SELECT_RECENT = f"""
select id from memories m
where persona = ? and project = ? and {CURRENT_MEMORY}
  and (? is null or event_id in (select id from events where session = ?))
order by pinned desc, num desc limit ?
"""
INSERT_RUN = """
insert into consolidation_runs
    (id, persona, project, session, status, input, next_seq, next_offset, created_at,
     updated_at)
values (?, ?, ?, ?, 'prepared', ?, ?, ?, ?, ?)
"""
INSERT_SOURCE = """
insert into consolidation_sources (run_id, event_id) values (?, ?) on conflict do nothing
"""
SELECT_RUNS = f"""
select {RUN_COLUMNS} from consolidation_runs
where persona = ? and project = ? and (? is null or status = ?)
order by num desc limit ?
"""
RECORD_ATTEMPT = """
update consolidation_runs set candidate = ?, error = ?, updated_at = ? where id = ?
"""
SET_FAILED = """
update consolidation_runs set status = 'failed', error = ?, updated_at = ?
where id = ? and status = 'prepared'
"""
SET_APPLIED = """
update consolidation_runs
set status = 'applied', input = ?, candidate = null, result = ?, digest = ?, updated_at = ?
where id = ?
"""
SELECT_DIGEST = "select digest from consolidation_runs where id = ?"
CLOSE_INTERVAL = "update memories set invalid_at = ? where id = ?"


# --- prepare ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sources:
    """The events a new run freezes and where the run after it starts."""

    events: list[RunEvent]
    next_seq: int
    next_offset: int
    more: bool


def open_run(
    conn: sqlite3.Connection, persona: str, project: str, session: str | None
) -> ConsolidationRun | None:
    """The session's prepared run, if one waits for its patch."""
    row = conn.execute(SELECT_OPEN_RUN, (persona, project, session)).fetchone()
    return None if row is None else run_from_row(row)


def select_sources(
    conn: sqlite3.Connection, persona: str, project: str, session: str | None, max_chars: int
) -> Sources:
    """The events after the session's last applied run, up to ``max_chars`` of text.

    An event that does not fit whole ends the run before it, unless it is the first: then
    the run takes a page of it, and the next run goes on from the page's end."""
    cursor = conn.execute(SELECT_CURSOR, (persona, project, session)).fetchone()
    seq, offset = cursor if cursor is not None else (0, 0)
    params = {"persona": persona, "project": project, "seq": seq, "session": session}
    sql = SELECT_SCOPE_SOURCES if session is None else SELECT_SESSION_SOURCES
    rows = conn.execute(sql, {**params, "limit": max_chars + 1}).fetchall()
    chosen: list[RunEvent] = []
    used = 0
    for event_id, event_seq, role, event_session, person, occurred_at, text in rows:
        start = offset if event_seq == seq else 0
        left = len(text) - start
        if used + left > max_chars and chosen:
            return Sources(chosen, event_seq, start, more=True)
        end = start + min(left, max_chars)
        chosen.append(
            RunEvent(
                id=event_id,
                seq=event_seq,
                role=role,
                session=event_session,
                person=person,
                occurred_at=from_db_time(occurred_at),
                offset=start,
                end=end,
                total=len(text),
                text=text[start:end],
            )
        )
        used += end - start
        if end < len(text):  # paged: the next run reads on from here
            return Sources(chosen, event_seq, end, more=True)
    if not chosen:
        return Sources([], seq, offset, more=False)
    return Sources(chosen, chosen[-1].seq + 1, 0, more=len(rows) > len(chosen))


def prepare(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    session: str | None,
    max_chars: int,
    neighbours: Sequence[str],
    run_id: str,
    now: str,
) -> ConsolidationRun:
    """Freeze a new run (or return the session's prepared one), in one transaction."""
    existing = open_run(conn, persona, project, session)
    if existing is not None:
        return existing
    sources = select_sources(conn, persona, project, session, max_chars)
    memory_ids = touched_memories(conn, persona, project, session, sources.events, neighbours)
    memories = [frozen_memory(conn, memory_id) for memory_id in memory_ids]
    frozen = RunInput(
        events=sources.events, memories=memories, max_chars=max_chars, more=sources.more
    )
    conn.execute(
        INSERT_RUN,
        (
            run_id,
            persona,
            project,
            session,
            frozen.model_dump_json(),
            sources.next_seq,
            sources.next_offset,
            now,
            now,
        ),
    )
    held = {event.id for event in sources.events} | {memory.event_id for memory in memories}
    conn.executemany(INSERT_SOURCE, [(run_id, event_id) for event_id in sorted(held)])
    return load_run(conn, persona, project, run_id)


def touched_memories(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    session: str | None,
    events: Sequence[RunEvent],
    neighbours: Sequence[str],
) -> list[str]:
    """The current memories a run's sources touch, most direct first: derived from them,
    on the same subject and fact key as those, then the recall neighbours. With no
    sources, the session's (or scope's) most recent memories, pinned first: a run can
    still tidy what is known."""
    found: dict[str, None] = {}
    derived = [
        memory_id for event in events for (memory_id,) in conn.execute(SELECT_DERIVED, (event.id,))
    ]
    found.update(dict.fromkeys(derived))
    for memory_id in derived:
        row = conn.execute(SELECT_MEMORY, (memory_id,)).fetchone()
        subject, fact_key, person = row[5], row[6], row[8]
        if fact_key is not None:
            same = conn.execute(SELECT_SAME_KEY, (persona, project, subject, fact_key, person))
            found.update(dict.fromkeys(memory_id for (memory_id,) in same))
    for memory_id in neighbours:
        row = conn.execute(SELECT_MEMORY, (memory_id,)).fetchone()
        if row is not None and row[11] is None and (row[-2], row[-1]) == (persona, project):
            found[memory_id] = None
    if not events:
        recent = conn.execute(SELECT_RECENT, (persona, project, session, session, MAX_RUN_MEMORIES))
        found.update(dict.fromkeys(memory_id for (memory_id,) in recent))
    return list(found)[:MAX_RUN_MEMORIES]


def frozen_memory(conn: sqlite3.Connection, memory_id: str) -> RunMemory:
    row = conn.execute(SELECT_MEMORY, (memory_id,)).fetchone()
    (ident, event_id, text, kind, basis, subject, fact_key, tier, person, valid_at, invalid_at) = (
        row[:11]
    )
    return RunMemory(
        id=ident,
        event_id=event_id,
        text=text,
        kind=kind,
        basis=basis,
        subject=subject,
        fact_key=fact_key,
        tier=tier,
        person=person,
        valid_at=from_db_time(valid_at),
        invalid_at=None if invalid_at is None else from_db_time(invalid_at),
        version=version_of(row),
    )


def version_of(row: Sequence[Any] | None) -> str:
    """A memory's version: a digest of everything a patch may rely on (gone: ``gone``)."""
    if row is None:
        return "gone"
    stated = json.dumps(list(row[:14]), ensure_ascii=False, default=str)
    return hashlib.sha256(stated.encode()).hexdigest()[:16]


# --- reading runs ----------------------------------------------------------------------


def run_from_row(row: Sequence[Any]) -> ConsolidationRun:
    (
        ident,
        persona,
        project,
        session,
        status,
        frozen,
        candidate,
        error,
        result,
        created,
        updated,
    ) = row
    return ConsolidationRun(
        id=ident,
        persona=persona,
        project=project,
        session=session,
        status=status,
        input=RunInput.model_validate_json(frozen),
        candidate=None if candidate is None else json.loads(candidate),
        error=None if error is None else json.loads(error),
        result=None if result is None else ConsolidationResult.model_validate_json(result),
        created_at=from_db_time(created),
        updated_at=from_db_time(updated),
    )


def load_run(conn: sqlite3.Connection, persona: str, project: str, run_id: str) -> ConsolidationRun:
    row = conn.execute(SELECT_RUN, (run_id,)).fetchone()
    if row is None or (row[1], row[2]) != (persona, project):
        raise NotFound("no consolidation run with this id in this scope")
    return run_from_row(row)


def list_runs(
    conn: sqlite3.Connection, persona: str, project: str, status: RunStatus | None, limit: int
) -> list[ConsolidationRun]:
    rows = conn.execute(SELECT_RUNS, (persona, project, status, status, limit)).fetchall()
    return [run_from_row(row) for row in rows]


def record_attempt(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    run_id: str,
    candidate: str,
    error: str | None,
    now: str,
) -> ConsolidationRun:
    """Keep a rejected candidate patch and its error on a prepared run."""
    require_prepared(load_run(conn, persona, project, run_id))
    conn.execute(RECORD_ATTEMPT, (candidate, error, now, run_id))
    return load_run(conn, persona, project, run_id)


def require_prepared(run: ConsolidationRun) -> None:
    if run.status != "prepared":
        raise Conflict(
            f"consolidation run {run.id} is {run.status}; prepare a new run",
            code="version_conflict",
        )


def mark_failed(
    conn: sqlite3.Connection, persona: str, project: str, run_id: str, error: str, now: str
) -> None:
    """A run whose input went stale (``version_conflict``) can never apply: it fails, so
    the next prepare freezes the memories as they are now."""
    load_run(conn, persona, project, run_id)
    conn.execute(SET_FAILED, (error, now, run_id))


# --- the patch -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One validated patch entry. ``draft`` is the memory an add or a summarise makes,
    ``text`` a merge's new text; ``ids`` the memories (or ``new:N`` references) it names."""

    op: PatchOp
    source: str | None = None
    draft: MemoryDraft | None = None
    text: str | None = None
    ids: tuple[str, ...] = ()
    reason: str | None = None

    @property
    def new_text(self) -> str | None:
        """The text of the memory this entry makes, if it makes one."""
        return self.draft.text if self.draft is not None else self.text


@dataclass(frozen=True, slots=True)
class Patch:
    entries: tuple[Entry, ...]
    evict: tuple[str, ...]
    digest: str

    @property
    def texts(self) -> list[str]:
        """The texts of the memories the patch makes, in entry order (to segment)."""
        return [entry.new_text for entry in self.entries if entry.new_text is not None]


ENTRY_FIELDS = {
    "add": None,
    "summarise": {"op", "source", "text", "quote", "gist"},
    "merge": {"op", "ids", "text"},
    "supersede": {"op", "id", "by"},
    "relate": {"op", "from", "to"},
    "retract": {"op", "id", "reason"},
}
"""The fields each op takes (``add``: a memory draft's fields besides ``op`` and
``source``)."""


def parse_patch(patch: object) -> Patch:
    """Check a patch's structure (nothing of the store yet); errors name the entry."""
    if not isinstance(patch, Mapping):
        raise InvalidInput('patch must be an object: {"entries": [...], "evict": [...]}')
    unknown = set(patch) - {"entries", "evict"}
    if unknown:
        raise InvalidInput(f"patch has unknown fields: {', '.join(sorted(unknown))}")
    entries = patch.get("entries", [])
    evict = patch.get("evict", [])
    if not isinstance(entries, list) or len(entries) > MAX_ENTRIES:
        raise InvalidInput(f"patch.entries must be a list of at most {MAX_ENTRIES} entries")
    if not isinstance(evict, list) or not all(isinstance(e, str) and e for e in evict):
        raise InvalidInput("patch.evict must be a list of event IDs")
    parsed = tuple(parse_entry(entry, n, entries) for n, entry in enumerate(entries))
    stated = json.dumps(
        {"entries": entries, "evict": evict}, sort_keys=True, ensure_ascii=False, default=str
    )
    return Patch(parsed, tuple(dict.fromkeys(evict)), hashlib.sha256(stated.encode()).hexdigest())


def parse_entry(entry: object, n: int, entries: Sequence[object]) -> Entry:
    where = f"patch.entries[{n}]"
    if not isinstance(entry, Mapping) or entry.get("op") not in ENTRY_FIELDS:
        raise InvalidInput(
            f"{where} must be an object whose op is one of {', '.join(ENTRY_FIELDS)}"
        )
    op: PatchOp = entry["op"]
    allowed = ENTRY_FIELDS[op]
    if allowed is not None and set(entry) - allowed:
        raise InvalidInput(f"{where} ({op}) takes only {', '.join(sorted(allowed))}")
    if op in ("add", "summarise"):
        source = entry_name(entry, "source", where)
        fields = {key: value for key, value in entry.items() if key not in ("op", "source")}
        if op == "summarise":
            fields |= {"kind": "episode", "basis": "inference", "tier": "episodic"}
        [draft] = parse_drafts([fields])
        return Entry(op, source=source, draft=draft)
    if op == "merge":
        ids = entry.get("ids")
        if not isinstance(ids, list) or len(ids) < 2 or len(set(map(str, ids))) != len(ids):
            raise InvalidInput(f"{where}.ids must list at least two different memory IDs")
        names = tuple(reference(value, f"{where}.ids", n, entries) for value in ids)
        text = entry.get("text")
        if text is not None and (
            not isinstance(text, str) or not text.strip() or len(text) > MAX_MEMORY_CHARS
        ):
            raise InvalidInput(f"{where}.text must be a memory's text (1 to {MAX_MEMORY_CHARS})")
        return Entry(op, ids=names, text=text)
    if op == "supersede":
        old = reference(entry.get("id"), f"{where}.id", n, entries)
        new = reference(entry.get("by"), f"{where}.by", n, entries)
        if old == new:
            raise InvalidInput(f"{where}: a memory cannot supersede itself")
        return Entry(op, ids=(old, new))
    if op == "relate":
        first = reference(entry.get("from"), f"{where}.from", n, entries)
        second = reference(entry.get("to"), f"{where}.to", n, entries)
        if first == second:
            raise InvalidInput(f"{where}: from and to must be different memories")
        return Entry(op, ids=(first, second))
    reason = entry.get("reason")
    if reason is not None and (not isinstance(reason, str) or not reason.strip()):
        raise InvalidInput(f"{where}.reason must be a non-empty string")
    return Entry(op, ids=(reference(entry.get("id"), f"{where}.id", n, entries),), reason=reason)


def entry_name(entry: Mapping[str, Any], field: str, where: str) -> str:
    value = entry.get(field)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{where}.{field} must be an ID")
    return value


def reference(value: object, where: str, n: int, entries: Sequence[object]) -> str:
    """A memory ID, or ``new:K`` naming what an earlier add or summarise entry made."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{where} must be a memory ID or new:N")
    if value.startswith(NEW):
        index = value[len(NEW) :]
        earlier = entries[int(index)] if index.isdigit() and int(index) < n else None
        if not isinstance(earlier, Mapping) or earlier.get("op") not in ("add", "summarise"):
            raise InvalidInput(f"{where}: {value} must name an earlier add or summarise entry")
    return value


# --- apply -----------------------------------------------------------------------------


def apply(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    run_id: str,
    patch: Patch,
    segmented: Sequence[str],
    now: str,
    *,
    working_ttl: timedelta,
) -> ConsolidationResult:
    """Apply a patch to a prepared run in this one transaction, or write nothing."""
    run = load_run(conn, persona, project, run_id)
    if run.status == "applied":
        stored = conn.execute(SELECT_DIGEST, (run_id,)).fetchone()[0]
        if stored != patch.digest or run.result is None:
            raise Conflict(f"consolidation run {run_id} was applied with a different patch")
        return run.result.model_copy(update={"duplicate": True})
    require_prepared(run)
    check_against(run, patch)
    check_versions(conn, run, patch)
    made: dict[str, str] = {}
    texts = iter(segmented)
    done = [
        apply_entry(conn, persona, project, n, entry, made, texts, now, working_ttl)
        for n, entry in enumerate(patch.entries)
    ]
    evicted: list[str] = []
    if patch.evict:
        eviction_done = eviction.evict_events(conn, persona, project, patch.evict, now=now)
        if eviction_done.skipped:
            refused = (f"{skip.event_id} ({skip.reason})" for skip in eviction_done.skipped)
            raise InvalidInput(f"patch.evict: cannot evict {', '.join(refused)}")
        evicted = eviction_done.events
    if any(entry.op in ("merge", "supersede", "retract") for entry in patch.entries):
        invalidate_checkpoints(conn, persona, project, now)
    result = ConsolidationResult(run_id=run_id, entries=done, evicted=evicted)
    conn.execute(
        SET_APPLIED,
        (
            without_text(run.input).model_dump_json(),
            result.model_dump_json(),
            patch.digest,
            now,
            run_id,
        ),
    )
    return result


def check_against(run: ConsolidationRun, patch: Patch) -> None:
    """Every source is one of the run's events and every quote is in its frozen page;
    every memory named is in the run's input."""
    pages = {event.id: event.text or "" for event in run.input.events}
    frozen = {memory.id for memory in run.input.memories}
    for n, entry in enumerate(patch.entries):
        where = f"patch.entries[{n}]"
        if entry.source is not None:
            if entry.source not in pages:
                raise InvalidInput(f"{where}.source {entry.source} is not a source of this run")
            assert entry.draft is not None
            if find_quote(pages[entry.source], entry.draft.quote) is None:
                raise InvalidInput(
                    f"{where}.quote does not occur in the run's text of its source",
                    code="quote_mismatch",
                )
        for name in entry.ids:
            if not name.startswith(NEW) and name not in frozen:
                raise InvalidInput(f"{where}: memory {name} is not in this run's input")
    for event_id in patch.evict:
        if event_id not in pages:
            raise InvalidInput(f"patch.evict: {event_id} is not a source of this run")


def check_versions(conn: sqlite3.Connection, run: ConsolidationRun, patch: Patch) -> None:
    """Every memory the patch names still has the version the run froze."""
    frozen = {memory.id: memory.version for memory in run.input.memories}
    for name in sorted({name for entry in patch.entries for name in entry.ids}):
        if name.startswith(NEW):
            continue
        now = version_of(conn.execute(SELECT_MEMORY, (name,)).fetchone())
        if now != frozen[name]:
            raise Conflict(
                f"memory {name} changed after the run was prepared; prepare a new run",
                code="version_conflict",
            )


def apply_entry(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    n: int,
    entry: Entry,
    made: dict[str, str],
    texts: Iterator[str],
    now: str,
    working_ttl: timedelta,
) -> AppliedEntry:
    """Write entry ``n``: ``made`` maps ``new:N`` to the memories earlier entries made,
    ``texts`` yields the segmented text of each memory the patch makes, in order."""
    ids = [made.get(name, name) for name in entry.ids]
    if entry.op in ("add", "summarise"):
        assert entry.source is not None
        assert entry.draft is not None
        [record] = facts.derive_memories(
            conn,
            persona,
            project,
            entry.source,
            [entry.draft],
            [next(texts)],
            now,
            working_ttl=working_ttl,
        )
        made[f"{NEW}{n}"] = record.id
        return AppliedEntry(op=entry.op, memory_id=record.id)
    if entry.op == "merge":
        return merge(conn, persona, project, ids, entry.text, texts, now, working_ttl)
    if entry.op == "supersede":
        supersede(conn, persona, project, ids[0], ids[1], now)
        return AppliedEntry(op="supersede", memory_id=ids[1], ids=[ids[0]])
    if entry.op == "relate":
        add_relation(conn, persona, project, ids[0], ids[1], "related", None, now)
        return AppliedEntry(op="relate", ids=ids)
    retraction.retract(conn, persona, project, ids[0], entry.reason or "consolidated", now)
    return AppliedEntry(op="retract", ids=ids)


def current_row(conn: sqlite3.Connection, memory_id: str) -> Sequence[Any]:
    """A memory still current when an entry reaches it (an earlier entry may have merged
    or retracted it)."""
    row: Sequence[Any] | None = conn.execute(SELECT_MEMORY, (memory_id,)).fetchone()
    if row is None or row[11] is not None:
        raise InvalidInput(f"memory {memory_id} is no longer current when the patch reaches it")
    return row


def merge(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    ids: Sequence[str],
    text: str | None,
    texts: Iterator[str],
    now: str,
    working_ttl: timedelta,
) -> AppliedEntry:
    """Merge duplicates into one: the first survives, or a new memory with ``text`` takes
    the first one's source, quote and kind; the others are revoked, each linked
    ``merged_into`` the survivor."""
    rows = [current_row(conn, memory_id) for memory_id in ids]
    survivor = ids[0]
    merged = list(ids[1:])
    if text is not None:
        first = facts.load_memory(conn, persona, project, ids[0])
        restated = first.model_dump(
            include={"kind", "basis", "confidence", "subject", "fact_key", "tier", "about"}
        )
        restated |= {"text": text, "quote": first.quote, "valid_at": first.valid_at}
        [record] = facts.derive_memories(
            conn,
            persona,
            project,
            rows[0][1],
            parse_drafts([restated]),
            [next(texts)],
            now,
            working_ttl=working_ttl,
        )
        survivor, merged = record.id, list(ids)
    for memory_id in merged:
        retraction.revoke(conn, memory_id, f"merged into {survivor}", now)
        add_relation(conn, persona, project, memory_id, survivor, "merged_into", None, now)
    return AppliedEntry(op="merge", memory_id=survivor, ids=merged)


def supersede(
    conn: sqlite3.Connection, persona: str, project: str, old: str, new: str, now: str
) -> None:
    """``new`` closes ``old``'s interval at its own start; ``old`` stays as history."""
    old_row, new_row = current_row(conn, old), current_row(conn, new)
    ends, starts = old_row[10], new_row[9]
    if starts <= old_row[9]:
        raise InvalidInput(f"memory {new} starts no later than {old}: it cannot supersede it")
    if ends is None or ends > starts:
        conn.execute(CLOSE_INTERVAL, (starts, old))
    add_relation(conn, persona, project, new, old, "supersedes", None, now)


def new_run_id() -> str:
    return f"run_{uuid.uuid4().hex}"
