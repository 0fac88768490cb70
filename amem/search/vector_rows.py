"""Vectors of memories and conversation events as stored: one row per memory, and per
chunk of a conversation event (``CHUNK_CHARS`` characters each), under the *fingerprint*
of the embedding space (``Settings.embed_fingerprint``). Vectors are a rebuildable cache,
never a source of truth: a row is written only if its memory or event is still current
and has the text that was embedded (checked in the writing transaction); erasure deletes
them with their source.

Plain SQL and the standard library: writing, erasing and counting vectors loads no numpy
(a one-shot command or hook starts faster); searching them is ``search.vectors``.
"""

from __future__ import annotations

import hashlib
import sqlite3
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .index import INDEXED_EVENT, INDEXED_MEMORY

CHUNK_CHARS = 500
"""Characters of an event embedded as one vector (e5-small reads 512 tokens; a Chinese
character is about one token, an English word one or two)."""

Key = tuple[str, str]
"""``(doc_kind, ref)``: ``("memory", memory_id)`` or ``("event", event_id)``."""


class Nearest(NamedTuple):
    """What a vector search found, and how the query's cosines spread over what it read."""

    found: dict[Key, float]
    """The nearest memories and events, each at its best chunk's cosine."""
    embedded: int
    """Memories and events of the scope with a vector."""
    searched: int
    """Vectors (chunks) read."""
    mean: float
    """The mean cosine of the query to the vectors read (estimated from a sample)."""
    spread: float
    """Their standard deviation: how far a cosine stands out is ``(c - mean) / spread``."""


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def chunks(text: str) -> list[str]:
    """The pieces of an event's text embedded one by one (at least one)."""
    return [text[start : start + CHUNK_CHARS] for start in range(0, len(text), CHUNK_CHARS)] or [
        text
    ]


SELECT_MEMORY = f"select persona, project, text from memories m where id = ? and {INDEXED_MEMORY}"
SELECT_EVENT = f"select persona, project, text from events e where id = ? and {INDEXED_EVENT}"
INSERT_VECTOR = """
insert into vectors
    (persona, project, doc_kind, ref, chunk, fingerprint, dim, vector, text_hash, created_at)
values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
on conflict (fingerprint, doc_kind, ref, chunk) do nothing
"""
DELETE_REF = "delete from vectors where doc_kind = ? and ref = ?"
DELETE_FINGERPRINT_REF = "delete from vectors where fingerprint = ? and doc_kind = ? and ref = ?"


@dataclass(frozen=True, slots=True)
class Embedded:
    """A vector for one piece of a memory or event, as embedded from ``text_hash``."""

    kind: str
    ref: str
    chunk: int
    text_hash: str
    """Of the whole text of the memory or event, so a changed text is skipped."""
    vector: Sequence[float]


def store_vectors(
    conn: sqlite3.Connection, fingerprint: str, items: Iterable[Embedded], now: str
) -> int:
    """Store vectors whose memory or event is still current with the text that was
    embedded; returns how many memories and events got theirs (counting first chunks;
    the rest changed or went meanwhile)."""
    stored = 0
    for item in items:
        sql = SELECT_MEMORY if item.kind == "memory" else SELECT_EVENT
        row = conn.execute(sql, (item.ref,)).fetchone()
        if row is None or text_hash(row[2]) != item.text_hash:
            continue
        blob = little_endian_floats(item.vector)
        values = (row[0], row[1], item.kind, item.ref, item.chunk, fingerprint)
        cursor = conn.execute(INSERT_VECTOR, (*values, len(item.vector), blob, item.text_hash, now))
        stored += cursor.rowcount if item.chunk == 0 else 0
    return stored


def drop_vectors(conn: sqlite3.Connection, kind: str, refs: Iterable[str]) -> int:
    """Delete every vector of these memories or events; returns how many rows went."""
    return sum(conn.execute(DELETE_REF, (kind, ref)).rowcount for ref in refs)


SELECT_ALL = f"""
select 'memory', m.id, m.text from memories m
where m.persona = :persona and m.project = :project and {INDEXED_MEMORY}
union all
select 'event', e.id, e.text from events e
where e.persona = :persona and e.project = :project and {INDEXED_EVENT}
"""


def to_embed(conn: sqlite3.Connection, persona: str, project: str) -> list[tuple[str, str, str]]:
    """``(doc_kind, ref, text)`` of every current memory and indexed event of the scope
    (what a reindex embeds)."""
    params = {"persona": persona, "project": project}
    return [(str(k), str(r), str(t)) for k, r, t in conn.execute(SELECT_ALL, params)]


UNEMBEDDED = """not exists (select 1 from vectors v
    where v.fingerprint = :fingerprint and v.doc_kind = '{kind}' and v.ref = {alias}.id)"""
"""For a memory ``m`` or event ``e``: it has no vector of ``:fingerprint``."""
UNEMBEDDED_MEMORY = UNEMBEDDED.format(kind="memory", alias="m")
UNEMBEDDED_EVENT = UNEMBEDDED.format(kind="event", alias="e")
NEWEST_UNEMBEDDED = {
    "memory": f"""select m.num, m.id, {UNEMBEDDED_MEMORY} from memories m
        where m.num < :before and {INDEXED_MEMORY} order by m.num desc limit :scan""",
    "event": f"""select e.seq, e.id, {UNEMBEDDED_EVENT} from events e
        where e.seq < :before and {INDEXED_EVENT} order by e.seq desc limit :scan""",
}
NEWEST = 2**63 - 1
"""``before`` for ``unembedded``'s first look: above every row number."""


def unembedded(
    conn: sqlite3.Connection, fingerprint: str, kind: str, before: int, scan: int
) -> tuple[list[Key], int | None]:
    """Of the ``scan`` newest current memories (or indexed events, by ``kind``) numbered
    below ``before``, those without a vector of ``fingerprint``, newest first; and the
    ``before`` of the next look (None when no older ones are left). Each look reads at
    most ``scan`` rows, however large the file."""
    params = {"fingerprint": fingerprint, "before": before, "scan": scan}
    rows = conn.execute(NEWEST_UNEMBEDDED[kind], params).fetchall()
    keys = [(kind, str(ref)) for _, ref, missing in rows if missing]
    return keys, (int(rows[-1][0]) if len(rows) == scan else None)


UNEMBEDDED_BY_SCOPE = f"""
select persona, project, count(*) from (
    select m.persona, m.project from memories m where {INDEXED_MEMORY} and {UNEMBEDDED_MEMORY}
    union all
    select e.persona, e.project from events e where {INDEXED_EVENT} and {UNEMBEDDED_EVENT}
) group by persona, project order by count(*) desc, persona, project
"""


def unembedded_by_scope(conn: sqlite3.Connection, fingerprint: str) -> list[tuple[str, str, int]]:
    """``(persona, project, count)`` of every scope with current memories or indexed
    events that have no vector of ``fingerprint``, the most first."""
    rows = conn.execute(UNEMBEDDED_BY_SCOPE, {"fingerprint": fingerprint}).fetchall()
    return [(str(persona), str(project), int(count)) for persona, project, count in rows]


SELECT_STAGED_REFS = "select distinct doc_kind, ref from vectors where fingerprint = ?"
DELETE_OTHER_SPACES = """
delete from vectors where persona = ? and project = ? and fingerprint != ? and fingerprint != ?
"""
PROMOTE_STAGED = """
insert into vectors
    (persona, project, doc_kind, ref, chunk, fingerprint, dim, vector, text_hash, created_at)
select persona, project, doc_kind, ref, chunk, ?, dim, vector, text_hash, created_at
from vectors where fingerprint = ? order by num
"""
DROP_STAGED = "delete from vectors where fingerprint = ?"


def swap_in(
    conn: sqlite3.Connection, persona: str, project: str, staged: str, fingerprint: str
) -> None:
    """Replace the scope's vector index with the staged vectors, in one transaction.

    Vectors of other fingerprints go; so do current ones of what was staged, which the
    staged vectors replace. A memory or event embedded while the reindex ran, and not
    in its snapshot, keeps the vector it got meanwhile.
    """
    conn.execute(DELETE_OTHER_SPACES, (persona, project, staged, fingerprint))
    for kind, ref in conn.execute(SELECT_STAGED_REFS, (staged,)).fetchall():
        conn.execute(DELETE_FINGERPRINT_REF, (fingerprint, kind, ref))
    conn.execute(PROMOTE_STAGED, (fingerprint, staged))
    conn.execute(DROP_STAGED, (staged,))


def drop_staged(conn: sqlite3.Connection, staged: str) -> None:
    conn.execute(DROP_STAGED, (staged,))


COVERAGE = f"""
select
  (select count(*) from memories m
   where m.persona = :persona and m.project = :project and {INDEXED_MEMORY}),
  (select count(distinct v.ref) from vectors v join memories m on m.id = v.ref
   where v.persona = :persona and v.project = :project and v.fingerprint = :fingerprint
     and v.doc_kind = 'memory' and {INDEXED_MEMORY}),
  (select count(*) from events e
   where e.persona = :persona and e.project = :project and {INDEXED_EVENT}),
  (select count(distinct v.ref) from vectors v
   where v.persona = :persona and v.project = :project and v.fingerprint = :fingerprint
     and v.doc_kind = 'event')
"""


@dataclass(frozen=True, slots=True)
class Coverage:
    memories: int
    embedded_memories: int
    events: int
    embedded_events: int

    @property
    def share(self) -> float:
        """Embedded memories and events over all of them (1.0 for an empty scope)."""
        total = self.memories + self.events
        return (self.embedded_memories + self.embedded_events) / total if total else 1.0


def coverage(conn: sqlite3.Connection, persona: str, project: str, fingerprint: str) -> Coverage:
    params = {"persona": persona, "project": project, "fingerprint": fingerprint}
    return Coverage(*conn.execute(COVERAGE, params).fetchone())


def little_endian_floats(vector: Sequence[float]) -> bytes:
    """A vector as stored: float32, little-endian."""
    floats = array("f", vector)
    if sys.byteorder == "big":
        floats.byteswap()
    return floats.tobytes()
