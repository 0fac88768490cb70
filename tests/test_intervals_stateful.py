"""Validity intervals of one single-valued fact, checked against a small reference model.

Hypothesis generates lists of operations on the user's ``residence`` (add a fact from a
user event, correct a live fact with or without a new start, delete a lineage through a
live or a revoked member, and two requests that must be refused). Every list is replayed
on a fresh database (on asyncio: these rules are logic the event loop cannot change) and
on a pure-Python model of the rules in ``amem/store/facts.py``,
``amem/store/corrections.py`` and ``amem/store/erasure.py``:

* intervals are half-open, ``valid_at <= t < invalid_at``;
* a new fact closes its predecessor (the last live member with ``valid_at <= start``;
  equal starts go in insertion order) at its start and ends at its successor's start;
* intervals are stored, not recomputed: deletion never reopens one;
* a correction revokes the mistaken fact and inserts the new one at the old start and in
  the old place among equal starts (or, given a start, as a new insertion there), carrying
  the old end when it is later than the new start;
* deleting any member of a lineage removes the whole lineage and nothing else.

Starts come from four days (some facts also get an explicit end half days later), so
equal starts and late historical inserts are common. After every operation, a history
recall far in the future must return every live fact with its interval exactly as the
model stores it; at generated ``Check`` steps and after the last operation, recall at
every time of a grid (before all starts, just before and at each start and each half
day, after all) must return exactly the model's facts, with their intervals and
``expired`` flags, with and without history. The ``event`` labels show how often the
interesting cases occur (``pytest --hypothesis-show-statistics``).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from hypothesis import Phase, event, given, note, settings
from hypothesis import strategies as st

import amem

QUERY = "residence"
BASE = datetime(2024, 3, 1, tzinfo=UTC)
STARTS = tuple(BASE + timedelta(days=n) for n in range(4))
HALF_DAY = timedelta(hours=12)
GRID = (
    BASE - timedelta(days=30),
    *sorted(
        moment
        for start in STARTS
        for half in (start, start + HALF_DAY)  # starts, and where explicit ends fall between
        for moment in (half - timedelta(microseconds=1), half)
    ),
    STARTS[-1] + 3 * HALF_DAY,
    BASE + timedelta(days=3650),
)


@dataclass(frozen=True)
class Add:
    """A user event stating the fact; the memory starts at the event's occurrence time."""

    start: int  # index into STARTS
    halves: int | None = None  # an explicit end, this many half days after the start


@dataclass(frozen=True)
class Correct:
    pick: int  # which live fact, modulo their number
    start: int | None  # index into STARTS; None keeps the mistaken fact's start


@dataclass(frozen=True)
class Delete:
    pick: int
    revoked: bool  # delete through a revoked member of a lineage instead of a live fact


@dataclass(frozen=True)
class CorrectRevoked:
    """Correcting a revoked fact is refused (``NotFound``) and changes nothing."""

    pick: int


@dataclass(frozen=True)
class DeleteDeleted:
    """Deleting an already deleted fact is refused (``NotFound``) and changes nothing."""

    pick: int


@dataclass(frozen=True)
class Check:
    """Recall at every time of the grid (also done after the last operation)."""


Op = Add | Correct | Delete | CorrectRevoked | DeleteDeleted | Check

picks = st.integers(min_value=0, max_value=63)
starts = st.integers(min_value=0, max_value=len(STARTS) - 1)
adds = st.builds(Add, starts, st.none() | st.none() | st.integers(min_value=1, max_value=4))
corrections = st.builds(Correct, picks, st.none() | starts)
deletions = st.builds(Delete, picks, st.booleans())
operations = st.lists(
    st.one_of(
        # first, so that ops a failing example does not need shrink to no-ops
        st.builds(DeleteDeleted, picks),
        adds,
        adds,
        adds,
        corrections,
        corrections,
        deletions,
        deletions,
        st.builds(CorrectRevoked, picks),
        st.just(Check()),
    ),
    min_size=8,  # long enough for histories to build up (hypothesis averages ~16 ops)
    max_size=40,
)


@dataclass
class Fact:
    id: str
    event_id: str
    text: str
    start: datetime
    end: datetime | None
    order: int  # insertion order, the tie-break between equal starts
    lineage: int  # the original fact and all its corrections share one
    revoked: bool = False
    said: tuple[str, datetime] | None = None  # an added fact's message and when it was said


@dataclass
class Model:
    facts: dict[str, Fact] = field(default_factory=dict)  # stored facts, revoked included
    deleted: list[str] = field(default_factory=list)
    inserted: int = 0

    def live(self) -> list[Fact]:
        return [fact for fact in self.facts.values() if not fact.revoked]

    def revoked(self) -> list[Fact]:
        return [fact for fact in self.facts.values() if fact.revoked]

    def insert(
        self,
        id: str,
        event_id: str,
        text: str,
        start: datetime,
        end: datetime | None,
        lineage: int,
        order: int | None = None,
    ) -> Fact:
        if order is None:
            order = self.inserted
        chain = sorted(self.live(), key=lambda fact: (fact.start, fact.order))
        before = [fact for fact in chain if (fact.start, fact.order) < (start, order)]
        if before and (before[-1].end is None or before[-1].end > start):
            before[-1].end = start
        ends = [fact.start for fact in chain if (fact.start, fact.order) > (start, order)][:1]
        if end is not None:
            ends.append(end)
        fact = Fact(id, event_id, text, start, min(ends, default=None), order, lineage)
        self.inserted += 1
        self.facts[id] = fact
        return fact

    def correct(self, old: Fact, id: str, event_id: str, text: str, start: datetime | None) -> Fact:
        """An omitted start keeps the old start and the old place among equal starts."""
        old.revoked = True
        order = old.order if start is None else None
        start = old.start if start is None else start
        carried = old.end if old.end is not None and old.end > start else None
        return self.insert(id, event_id, text, start, carried, old.lineage, order)

    def delete(self, target: Fact) -> tuple[set[str], set[str]]:
        doomed = [fact for fact in self.facts.values() if fact.lineage == target.lineage]
        for fact in doomed:
            del self.facts[fact.id]
            self.deleted.append(fact.id)
        return {fact.id for fact in doomed}, {fact.event_id for fact in doomed}

    def recall(
        self, as_of: datetime, history: bool
    ) -> dict[str, tuple[str, datetime | None, datetime | None, bool]]:
        found: dict[str, tuple[str, datetime | None, datetime | None, bool]] = {}
        for fact in self.live():
            expired = fact.end is not None and fact.end <= as_of
            if fact.start <= as_of and (history or not expired):
                found[fact.id] = (fact.text, fact.start, fact.end, expired)
        for fact in self.revoked():  # a corrected message is history: what was said then
            if history and fact.said is not None and fact.said[1] <= as_of:
                found[fact.event_id] = (fact.said[0], None, None, True)
        return found


async def apply(scope: amem.Scope, model: Model, op: Op, step: int) -> str:
    """Run ``op`` on amem and on the model; returns what happened, for the failure report."""
    if isinstance(op, Add):
        start = STARTS[op.start]
        end = None if op.halves is None else start + op.halves * HALF_DAY
        said = f"residence is city{step}"
        message = f"Since then my {said}, just so you know."
        receipt = await scope.submit_event(message, role="user", occurred_at=start)
        draft = amem.MemoryDraft(
            text=f"User {said}",
            quote=said,
            kind="fact",
            basis="user_statement",
            subject="user",
            fact_key="residence",
            invalid_at=end,
        )
        [record] = await scope.add_memories(receipt.event_id, [draft])
        describe_insert(model, start)
        if end is not None:
            event("insert: explicit end")
        fact = model.insert(record.id, receipt.event_id, record.text, start, end, step)
        fact.said = (message, start)
        assert (record.valid_at, record.invalid_at) == (fact.start, fact.end)
        return f"added {record.id} [{fact.start}, {fact.end})"
    if isinstance(op, Correct):
        old = pick(model.live(), op.pick)
        if old is None:
            return "skipped: no live fact"
        start = old.start if op.start is None else STARTS[op.start]
        text = f"User residence corrected to town{step}"
        valid_at = None if op.start is None else STARTS[op.start]
        done = await scope.correct(old.id, text, valid_at=valid_at, reason="wrong city")
        assert (done.revoked_id, done.amended_event_id) == (old.id, old.event_id)
        event("correct: keep start" if op.start is None else "correct: new start")
        describe_insert(model, start)
        fact = model.correct(old, done.memory.id, done.correction_event_id, text, valid_at)
        assert (done.memory.valid_at, done.memory.invalid_at) == (fact.start, fact.end)
        return f"corrected {old.id} to {fact.id} [{fact.start}, {fact.end})"
    if isinstance(op, Delete):
        target = pick(model.revoked() if op.revoked else model.live(), op.pick)
        if target is None:
            return "skipped: nothing to delete"
        removed = await scope.delete(memory_id=target.id)
        memory_ids, event_ids = model.delete(target)
        event(f"delete: lineage of {min(len(memory_ids), 3)}{'+' * (len(memory_ids) >= 3)}")
        assert set(removed.memory_ids) == memory_ids
        assert set(removed.event_ids) == event_ids
        return f"deleted {target.id}: {sorted(memory_ids)}"
    if isinstance(op, CorrectRevoked):
        target = pick(model.revoked(), op.pick)
        if target is None:
            return "skipped: no revoked fact"
        with pytest.raises(amem.NotFound):
            await scope.correct(target.id, "User residence corrected again")
        return f"refused to correct revoked {target.id}"
    if isinstance(op, Check):
        await check_grid(scope, model)
        return "recall matched the model at every grid time"
    pool_ids = model.deleted
    if not pool_ids:
        return "skipped: nothing deleted yet"
    gone = pool_ids[op.pick % len(pool_ids)]
    with pytest.raises(amem.NotFound):
        await scope.delete(memory_id=gone)
    return f"refused to delete deleted {gone}"


def pick(pool: list[Fact], n: int) -> Fact | None:
    """The ``n``-th fact of ``pool``, counting round; None for an empty pool."""
    return pool[n % len(pool)] if pool else None


def describe_insert(model: Model, start: datetime) -> None:
    """Label the insertion for ``--hypothesis-show-statistics``."""
    live = model.live()
    if any(fact.start == start for fact in live):
        event("insert: equal start")
    if any(fact.start > start for fact in live):
        event("insert: late historical")


async def check_recall(scope: amem.Scope, model: Model, as_of: datetime, history: bool) -> None:
    result = await scope.recall(QUERY, limit=200, as_of=as_of, include_history=history)
    got = {
        item.id: (item.text, item.valid_at, item.invalid_at, item.expired) for item in result.items
    }
    assert got == model.recall(as_of, history), (
        f"recall(as_of={as_of.isoformat()}, include_history={history})"
    )


async def check_grid(scope: amem.Scope, model: Model) -> None:
    for as_of in GRID:
        for history in (False, True):
            await check_recall(scope, model, as_of, history)


async def replay(ops: list[Op]) -> None:
    model = Model()
    with tempfile.TemporaryDirectory() as tmp:
        async with amem.open(Path(tmp) / "memory.db", settings=amem.Settings()) as mem:
            scope = mem.scope(persona="assistant", project="intervals")
            for step, op in enumerate(ops):
                note(f"step {step}: {op}")
                note(f"    {await apply(scope, model, op, step)}")
                # every stored fact has started by then: its interval, as stored, in one call
                await check_recall(scope, model, GRID[-1], history=True)
            await check_grid(scope, model)


# no explain phase: it reruns a failing example ~100 times, for nothing a model diff lacks
@settings(
    max_examples=100,
    deadline=None,
    phases=[phase for phase in Phase if phase is not Phase.explain],
)
@given(ops=operations)
def test_fact_intervals_follow_the_model(ops: list[Op]) -> None:
    anyio.run(replay, ops)  # temporal rules: asyncio only (see tests/conftest.py)
