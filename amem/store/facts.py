"""Derived memories: the one validation path, insertion, and validity intervals.

Every memory, whether a host proposes it (``add_memories``, ``memory_add``) or the
extraction model does, goes through ``derive_memories``: the whole batch is validated
against its source event before anything is written, then inserted in the same
transaction. Plain functions of a connection, run by the writer actor.

Single-valued facts form a chain per ``persona + project + person + subject + fact_key``
(the person the source event belongs to: Tom's new address does not end Anna's), ordered
by ``(valid_at, chain order, id)``; the chain order is the insertion order, except that a
correction keeping the mistaken fact's start takes over its place. Intervals are
half-open, ``valid_at <= t < invalid_at``. Inserting a fact closes its predecessor's
interval at the new start (if it was still open past it) and ends at its successor's
start, so late historical inserts land in order. Intervals are stored, not recomputed:
deleting a successor never reopens a closed interval.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, TypedDict

from ..db.rules import CURRENT_MEMORY
from ..db.times import db_time, from_db_time
from ..errors import InvalidInput, NotFound
from ..inputs import parse_time
from ..models import DEFAULT_TIERS, Assignment, Emotion, MemoryDraft, MemoryRecord
from ..search import index
from ..search.text import is_function_word, surface_words
from . import people
from .capacity import check_capacity
from .events import StoredEvent, load_stored
from .quotes import find_quote
from .tombstones import missing_event

ARCHIVED_CATEGORIES = frozenset(("reference", "persona"))
FADING_KINDS = frozenset(("episode", "observation", "emotion"))
"""Kinds whose old records are shown as a gist (see ``recall.present``)."""
KEYED_KINDS = frozenset(("fact", "preference"))

MEMORY_COLUMNS = """
    id, persona, project, event_id, text, quote, quote_start, quote_end, kind, basis,
    confidence, subject, fact_key, valid_at, invalid_at, emotion, valence, arousal, gist,
    created_at, tier, pinned, expires_at, person, about
"""
MEMORY_FIELDS = tuple(column.strip() for column in MEMORY_COLUMNS.split(","))
"""The names of ``MEMORY_COLUMNS``: the keys of a memory row."""
INSERT_MEMORY = f"""
insert into memories ({MEMORY_COLUMNS}) values ({", ".join(f":{name}" for name in MEMORY_FIELDS)})
"""
SELECT_SAME_MEMORY = f"""
select {MEMORY_COLUMNS} from memories m
where event_id = :event_id and {CURRENT_MEMORY} and text = :text and quote = :quote
  and kind = :kind and basis = :basis and subject is :subject and fact_key is :fact_key
  and valid_at = :valid_at and invalid_at is :invalid_at and emotion is :emotion
  and gist is :gist and about is :about
"""
CHAIN = f"""
from memories m
where persona = :persona and project = :project and subject = :subject
  and fact_key = :fact_key and person is :person and {CURRENT_MEMORY} and num != :num
"""
SELECT_PREDECESSOR = f"""
select num, invalid_at {CHAIN}
  and (valid_at < :valid_at or (valid_at = :valid_at and coalesce(chain_order, num) < :order))
order by valid_at desc, coalesce(chain_order, num) desc, id desc limit 1
"""
SELECT_SUCCESSOR = f"""
select valid_at {CHAIN}
  and (valid_at > :valid_at or (valid_at = :valid_at and coalesce(chain_order, num) > :order))
order by valid_at, coalesce(chain_order, num), id limit 1
"""


class ChainKey(TypedDict):
    """Where a single-valued fact stands: its chain (scope, subject, fact key, person) and
    its place in it (start, then order); ``num`` is the fact itself, left out of the chain.
    The parameters of ``SELECT_PREDECESSOR`` and ``SELECT_SUCCESSOR``."""

    persona: str
    project: str
    subject: str | None
    fact_key: str
    person: str | None
    num: int
    valid_at: str
    order: int


SELECT_CHAIN_ORDER = "select coalesce(chain_order, num) from memories where id = ?"
SET_CHAIN_ORDER = "update memories set chain_order = ? where num = ?"
CLOSE_INTERVAL = "update memories set invalid_at = ? where num = ?"
SELECT_KEYED_OF_EVENT = f"""
select num, subject, fact_key, valid_at, invalid_at, coalesce(chain_order, num) from memories m
where event_id = ? and fact_key is not null and {CURRENT_MEMORY}
"""
SET_CUE = "update memories set cue_key = ? where num = ?"
CUE_WORDS = 6
MARK_EXTRACTED = """
update events set status = 'extracted', error = null
where id = ? and status in ('stored', 'pending', 'failed')
"""


def valid_as_of(*, history: bool = False) -> str:
    """SQL that holds for a memory ``m`` valid at the parameter ``:as_of``: started and not
    yet ended (intervals are half-open). With ``history``, the parameter ``:history``, when
    true, also admits memories that have ended (recall's ``include_history``)."""
    ended = ":history or " if history else ""
    return f"m.valid_at <= :as_of and ({ended}m.invalid_at is null or m.invalid_at > :as_of)"


@dataclass(frozen=True, slots=True)
class ValidMemory:
    """A draft that passed validation, with its quote's span in the source and times in
    stored form."""

    draft: MemoryDraft
    quote_start: int
    quote_end: int
    valid_at: str
    invalid_at: str | None


def load_event(conn: sqlite3.Connection, persona: str, project: str, event_id: str) -> StoredEvent:
    event = load_stored(conn, event_id)
    if event is None or (event.persona, event.project) != (persona, project):
        raise missing_event(conn, persona, project, event_id)
    return event


def derive_memories(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    event_id: str,
    drafts: Sequence[MemoryDraft],
    segmented: Sequence[str],
    now: str,
    *,
    working_ttl: timedelta,
    chain_order: int | None = None,
    speaker: str | None = None,
) -> list[MemoryRecord]:
    """Validate every draft against its source event, then store them all (or none).

    A draft identical to a memory already derived from this event returns that memory,
    so repeating a derivation is harmless. ``segmented`` holds each draft's text as
    ``text.segment`` returns it (computed before the transaction). ``chain_order`` places
    a fact where another one stood (a correction keeping its start); by default it goes
    after its equals. A memory that takes the scope past one of its limits refuses the
    batch (``capacity_exceeded``, ``store.capacity``). A working note expires
    ``working_ttl`` after ``now``.

    ``speaker`` is the role whose words the drafts stand for, when that is not the event's
    own: a correction event (role ``system``: the host amends the record; no one says it
    in the conversation) restates what the mistaken memory stood for, so its basis rules
    are judged as that memory's were.
    """
    event = load_event(conn, persona, project, event_id)
    if event.evicted_at is not None:
        raise InvalidInput(
            "the source event was evicted: its raw text is gone, so no new memory can quote it",
            code="quote_mismatch",
        )
    judged = event if speaker is None else replace(event, role=speaker)
    valid = [validate(judged, draft, f"memories[{n}]") for n, draft in enumerate(drafts)]
    for n, draft in enumerate(drafts):
        people.require_people(conn, persona, project, draft.about or (), f"memories[{n}].about")
    expires_at = db_time(from_db_time(now) + working_ttl)
    records = [
        insert_memory(conn, event, memory, tokens, now, expires_at, chain_order)
        for memory, tokens in zip(valid, segmented, strict=True)
    ]
    conn.execute(MARK_EXTRACTED, (event.id,))
    return records


def validate(event: StoredEvent, draft: MemoryDraft, field: str) -> ValidMemory:
    """The rules of seed 000 "Authority, attribution and scope", for one draft."""
    if event.category in ARCHIVED_CATEGORIES:
        raise role_violation(f"{field}: reference and persona events are archived, never a source")
    span = find_quote(event.text, draft.quote)
    if span is None:
        raise InvalidInput(
            f"{field}.quote does not occur in the source event", code="quote_mismatch"
        )
    check_basis(event, draft, field)
    if draft.fact_key is not None and draft.subject is None:
        raise InvalidInput(f"{field}.subject is required with fact_key")
    valid_at = (
        event.occurred_at
        if draft.valid_at is None
        else db_time(parse_time(draft.valid_at, f"{field}.valid_at"))
    )
    invalid_at = (
        None
        if draft.invalid_at is None
        else db_time(parse_time(draft.invalid_at, f"{field}.invalid_at"))
    )
    if invalid_at is not None and invalid_at <= valid_at:
        raise InvalidInput(f"{field}.invalid_at must be later than valid_at", code="invalid_time")
    return ValidMemory(draft, *span, valid_at, invalid_at)


def check_basis(event: StoredEvent, draft: MemoryDraft, field: str) -> None:
    if draft.basis == "user_statement" and event.role != "user":
        raise role_violation(f"{field}.basis user_statement needs a user event")
    if draft.basis == "assistant_expression" and event.role != "assistant":
        raise role_violation(f"{field}.basis assistant_expression needs an assistant event")
    if draft.basis == "inference" and draft.kind == "growth":
        raise role_violation(f"{field}: an inference never becomes growth")
    if draft.fact_key is not None and (
        draft.basis != "user_statement" or draft.kind not in KEYED_KINDS
    ):
        raise role_violation(
            f"{field}.fact_key is only for user-stated facts and preferences (basis "
            "user_statement, kind fact or preference)"
        )
    if (draft.kind == "emotion" or draft.emotion is not None) and (
        draft.basis != "assistant_expression"
    ):
        raise role_violation(f"{field}: an emotion comes only from an assistant expression")
    if draft.kind == "emotion" and draft.emotion is None:
        raise InvalidInput(
            f"{field}.emotion (label, valence, arousal) is required for kind emotion"
        )


def role_violation(message: str) -> InvalidInput:
    return InvalidInput(message, code="role_violation")


def insert_memory(
    conn: sqlite3.Connection,
    event: StoredEvent,
    memory: ValidMemory,
    segmented: str,
    now: str,
    expires_at: str,
    chain_order: int | None = None,
) -> MemoryRecord:
    """Store one validated memory; ``expires_at`` is kept only for a working note."""
    draft = memory.draft
    emotion = draft.emotion
    tier = draft.tier or DEFAULT_TIERS[draft.kind]
    row: dict[str, Any] = {
        "id": f"mem_{uuid.uuid4().hex}",
        "persona": event.persona,
        "project": event.project,
        "event_id": event.id,
        "text": draft.text,
        "quote": event.text[memory.quote_start : memory.quote_end],
        "quote_start": memory.quote_start,
        "quote_end": memory.quote_end,
        "kind": draft.kind,
        "basis": draft.basis,
        "confidence": draft.confidence,
        "subject": draft.subject,
        "fact_key": draft.fact_key,
        "valid_at": memory.valid_at,
        "invalid_at": memory.invalid_at,
        "emotion": emotion.label if emotion else None,
        "valence": emotion.valence if emotion else None,
        "arousal": emotion.arousal if emotion else None,
        "gist": draft.gist,
        "created_at": now,
        "tier": tier,
        "pinned": 0,
        "expires_at": expires_at if tier == "working" else None,
        "person": event.person,
        "about": json.dumps(draft.about, ensure_ascii=False) if draft.about else None,
    }
    same = conn.execute(SELECT_SAME_MEMORY, row).fetchone()
    if same is not None:  # derived before: the same memory, not a second one
        return memory_from_row(same)
    num = conn.execute(INSERT_MEMORY, row).lastrowid
    assert num is not None
    check_capacity(conn, event.persona, event.project)  # an identical memory adds nothing
    index.index_doc(conn, event.persona, event.project, "memory", row["id"], segmented)
    if draft.gist is None and draft.kind in FADING_KINDS:
        conn.execute(SET_CUE, (topic_cue(draft.text, segmented), num))
    if draft.fact_key is not None:
        if chain_order is not None:
            conn.execute(SET_CHAIN_ORDER, (chain_order, num))
        key: ChainKey = {
            "persona": event.persona,
            "project": event.project,
            "subject": draft.subject,
            "fact_key": draft.fact_key,
            "person": event.person,
            "num": num,
            "valid_at": memory.valid_at,
            "order": num if chain_order is None else chain_order,
        }
        row["invalid_at"] = place_in_chain(conn, key, memory.invalid_at)
    return memory_record(row)


def place_in_chain(conn: sqlite3.Connection, key: ChainKey, invalid_at: str | None) -> str | None:
    """Close the predecessor's interval, end this one at the successor; returns its end."""
    predecessor = conn.execute(SELECT_PREDECESSOR, key).fetchone()
    if predecessor is not None:
        pred_num, pred_end = predecessor
        if pred_end is None or pred_end > key["valid_at"]:
            conn.execute(CLOSE_INTERVAL, (key["valid_at"], pred_num))
    successor = conn.execute(SELECT_SUCCESSOR, key).fetchone()
    ends = [end for end in (invalid_at, successor and successor[0]) if end is not None]
    end = min(ends) if ends else None
    if end != invalid_at:
        conn.execute(CLOSE_INTERVAL, (end, key["num"]))
    return end


def reassign(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    event_id: str,
    person: str | None,
    reason: str | None,
    now: str,
) -> Assignment:
    """``people.assign``, with the event's single-valued facts moved from the old person's
    fact chains into the new person's: Tom's address, filed under Anna by mistake, no
    longer ends Anna's, and now ends Tom's earlier one."""
    moved = people.assign(conn, persona, project, event_id, person, reason, now)
    if moved.previous == person:
        return moved
    for num, subject, fact_key, valid_at, invalid_at, order in conn.execute(
        SELECT_KEYED_OF_EVENT, (event_id,)
    ).fetchall():
        key: ChainKey = {
            "persona": persona,
            "project": project,
            "subject": subject,
            "fact_key": fact_key,
            "person": moved.previous,
            "num": num,
            "valid_at": valid_at,
            "order": order,
        }
        end = leave_chain(conn, key, invalid_at)
        place_in_chain(conn, {**key, "person": person}, end)
    return moved


def leave_chain(conn: sqlite3.Connection, key: ChainKey, invalid_at: str | None) -> str | None:
    """Take a fact out of the chain ``key`` names: the predecessor it closed ends where
    its successor starts again (or is open), and an end the successor set goes; returns
    the fact's own end (one its source stated)."""
    predecessor = conn.execute(SELECT_PREDECESSOR, key).fetchone()
    successor = conn.execute(SELECT_SUCCESSOR, key).fetchone()
    follows = None if successor is None else successor[0]
    if predecessor is not None and predecessor[1] == key["valid_at"]:
        conn.execute(CLOSE_INTERVAL, (follows, predecessor[0]))
    if follows is not None and invalid_at == follows:
        conn.execute(CLOSE_INTERVAL, (None, key["num"]))
        return None
    return invalid_at


def memory_from_row(row: Iterable[Any]) -> MemoryRecord:
    """The model of a row in ``MEMORY_COLUMNS`` order."""
    return memory_record(dict(zip(MEMORY_FIELDS, row, strict=True)))


def memory_record(row: Mapping[str, Any]) -> MemoryRecord:
    """The model of a memory row by column name: stored times parsed, the emotion's label,
    valence and arousal made one ``Emotion``."""
    fields = {name: row[name] for name in MEMORY_FIELDS if name not in ("valence", "arousal")}
    fields["valid_at"] = from_db_time(row["valid_at"])
    fields["created_at"] = from_db_time(row["created_at"])
    fields["pinned"] = bool(row["pinned"])
    fields["about"] = json.loads(row["about"]) if row["about"] else []
    for name in ("invalid_at", "expires_at"):
        if row[name] is not None:
            fields[name] = from_db_time(row[name])
    if row["emotion"] is not None:
        fields["emotion"] = Emotion(
            label=row["emotion"], valence=row["valence"], arousal=row["arousal"]
        )
    return MemoryRecord.model_validate(fields)


SELECT_MEMORY = f"select {MEMORY_COLUMNS} from memories where id = ?"
SELECT_MEMORY_SCOPE = "select persona, project, revoked_at from memories where id = ?"


def load_memory(
    conn: sqlite3.Connection, persona: str, project: str, memory_id: str
) -> MemoryRecord:
    """A current memory of this scope; revoked and foreign memories read as absent."""
    scope = conn.execute(SELECT_MEMORY_SCOPE, (memory_id,)).fetchone()
    if scope is None or scope != (persona, project, None):
        raise NotFound("no memory with this id in this scope")
    return memory_from_row(conn.execute(SELECT_MEMORY, (memory_id,)).fetchone())


def topic_cue(text: str, segmented: str) -> str:
    """An extractive topic cue: the first distinct content words of a memory's ``text``,
    whose tokens are ``segmented``.

    Shown (labelled as a cue) instead of an old episode that has no authored gist. English
    tokens are stems (``studi``), so each is shown as the word of ``text`` it came from.
    """
    words = surface_words(text)
    content = [
        token
        for token in dict.fromkeys(segmented.split())
        if len(token) > 1 and not token.isdigit() and not is_function_word(token, words)
    ]
    shown = [words.get(token, [token])[0] for token in content]
    return " ".join(list(dict.fromkeys(shown))[:CUE_WORDS])
