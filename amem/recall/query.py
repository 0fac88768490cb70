"""What a recall asks: the query, and which memories and events it may return."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypedDict

from ..db import in_lists
from ..db.rules import CURRENT_MEMORY, PERSON_MEMORY
from ..db.times import db_time
from ..llm.embeddings import Vector
from ..store.facts import valid_as_of

if TYPE_CHECKING:
    from ..config import Settings


@dataclass(frozen=True, slots=True)
class RecallQuery:
    persona: str
    project: str
    query: str
    limit: int
    as_of: datetime
    include_history: bool
    kinds: frozenset[str] | None = None
    exclude_event_ids: frozenset[str] = frozenset()
    """Events left out, with every memory derived from them."""
    exclude_from_seq: int | None = None
    """Events whose ``seq`` is at least this are left out, with their memories."""
    vector: Vector | None = None
    """The query's embedding, for hybrid recall; None in ``fast`` mode."""
    fingerprint: str | None = None
    scan: int | None = None
    """Most recent vectors of the scope searched; None searches all (``deep``)."""
    min_similarity: float = 0.3
    """The model's floor: a nearest vector below it is no evidence by itself."""
    auto_coverage: float | None = None
    """``auto`` mode: the vectors are used only if they cover at least this share of the
    scope's memories and events; None uses them whatever they cover."""
    half_life_days: float = 180.0
    fade_after_days: float = 180.0
    coarsen_after_days: float = 730.0
    depth: int = 50
    """Candidates gathered of each kind (``RANKED``; more when copies crowd them out)."""
    person: str | None = None
    """Only this person's: the events of their relationship and the memories derived from
    those or about them. None: everyone's."""
    named: tuple[str, ...] = ()
    """The people of the scope the query names (``recall.people``), when ``person`` is
    None: their documents count their names as said."""
    explain: bool = False
    """Whether each item lists the query's terms it holds (``RecallItem.matched``)."""


class Aging(TypedDict):
    half_life_days: float
    fade_after_days: float
    coarsen_after_days: float


def aging(settings: Settings) -> Aging:
    """How ``settings`` age what recall shows, as ``RecallQuery``'s fields: how fast
    freshness halves, and after how long episodes fade and their times coarsen."""
    return Aging(
        half_life_days=settings.freshness_half_life_days,
        fade_after_days=settings.fade_after_days,
        coarsen_after_days=settings.coarsen_after_days,
    )


# Point lookups by ID or event: the unary + keeps SQLite from preferring the scope index
# (two equality columns) over the one that finds the row directly.
ELIGIBLE_MEMORY = f"""
+m.persona = :persona and +m.project = :project and {CURRENT_MEMORY}
and {valid_as_of(history=True)}
"""
SOURCE_SEQ = "(select x.seq from events x where x.id = m.event_id)"
"""The sequence number of a memory's source event: a primary-key read per memory."""


@dataclass(frozen=True, slots=True)
class Eligibility:
    """Which memories and events may be evidence: the scope's, valid at ``as_of`` (or
    expired too, with ``history``), of the kinds asked for, less the events the caller left
    out and everything derived from them.

    It is part of every statement that reads candidates (``memory_condition``,
    ``event_exclusion``), so an excluded event or memory never takes the place of another.
    Its parameters (``params``) are named ``:persona``, ``:project``, ``:as_of``,
    ``:history``, ``:kind0``..., ``:excluded0``... and ``:from_seq``."""

    persona: str
    project: str
    as_of: str
    """The recall's ``as_of``, as stored (``db_time``)."""
    history: bool
    kinds: tuple[str, ...] = ()
    """Memory kinds asked for; empty: every kind, and raw events too (they have none)."""
    excluded: tuple[str, ...] = ()
    """Events left out by ID."""
    from_seq: int | None = None
    """Events from this ``seq`` on are left out."""
    person: str | None = None
    """Only this person's events, and memories derived from them or about them."""

    @classmethod
    def of(cls, q: RecallQuery) -> Eligibility:
        return cls(
            q.persona,
            q.project,
            db_time(q.as_of),
            q.include_history,
            tuple(sorted(q.kinds or ())),
            tuple(sorted(q.exclude_event_ids)),
            q.exclude_from_seq,
            q.person,
        )

    def params(self) -> dict[str, object]:
        """Every named parameter of ``memory_condition`` and ``event_exclusion``."""
        named: dict[str, object] = {
            "persona": self.persona,
            "project": self.project,
            "as_of": self.as_of,
            "history": self.history,
        }
        named |= in_lists.named("kind", self.kinds)[1]
        named |= in_lists.named("excluded", self.excluded)[1]
        if self.from_seq is not None:
            named["from_seq"] = self.from_seq
        if self.person is not None:
            named["person"] = self.person
        return named

    def memory_condition(self) -> str:
        """SQL true of an eligible memory ``m``."""
        marks, _ = in_lists.named("kind", self.kinds)
        kinds = f"and m.kind in ({marks})" if self.kinds else ""
        person = f"and {PERSON_MEMORY}" if self.person is not None else ""
        return (
            f"{ELIGIBLE_MEMORY} {kinds} {person} {self.event_exclusion('m.event_id', SOURCE_SEQ)}"
        )

    def event_exclusion(self, event_id: str, seq: str, person: str | None = None) -> str:
        """SQL (``and ...``, or nothing) leaving out the excluded events, given how the
        statement names an event's ID and its ``seq`` (and its person, where the statement
        reads events themselves)."""
        marks, _ = in_lists.named("excluded", self.excluded)
        clause = f"and {event_id} not in ({marks})" if self.excluded else ""
        if self.from_seq is not None:
            clause += f" and {seq} < :from_seq"
        if person is not None and self.person is not None:
            clause += f" and {person} = :person"
        return clause
