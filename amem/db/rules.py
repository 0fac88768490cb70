"""What rows count as, each said once in SQL for every statement that needs it.

A statement names the tables these fragments speak of ``m`` (memories) and ``e``
(events), and passes ``:as_of`` (a stored time) where a fragment reads it. The search
index and the vectors hold the same rows (``search.index.INDEXED_MEMORY``).
"""

from __future__ import annotations

CURRENT_MEMORY = "m.revoked_at is null"
"""A memory ``m`` that still stands: not retracted, corrected, compacted or erased.
Revoked memories are kept for audit, never shown as knowledge."""

PERSON_MEMORY = """(m.person = :person
    or exists (select 1 from json_each(m.about) where value = :person))"""
"""A memory ``m`` of the person ``:person``: derived from one of their events, or about
them (``memories.about``)."""

EVENT_AS_OF = "e.status != 'amended' and e.occurred_at <= :as_of"
"""An event ``e`` whose words are evidence at ``:as_of``: it had happened, and it was not
amended (corrected or retracted: its words are no key to anything)."""

HELD_EVENT = "e.evicted_at is null"
"""An event ``e`` that still holds its raw text: not evicted (``store.eviction``). An
evicted event keeps its row and its memories, but is never shown as itself."""

SHOWN_STATUS = "case when e.evicted_at is null then e.status else 'evicted' end"
"""The status amem shows for an event ``e``: its stored one, or ``evicted``."""

SAID_AS_OF = f"e.category = 'conversation' and {EVENT_AS_OF} and {HELD_EVENT}"
"""A conversation event ``e`` that shows what was said at ``:as_of``, as itself: the
session's recent events in a context pack, and a recall's raw fallback (which also asks
that nothing stands derived from it and that extraction has not run on it). An evicted
event has no words left to show."""

CORRECTED_EVENT = """e.status = 'amended' and exists (
    select 1 from memories c join relations r on r.to_id = c.id and r.kind = 'corrects'
    where c.event_id = e.id
) and not exists (
    select 1 from memories c where c.event_id = e.id and c.revoked_at is not null
    and not exists (select 1 from relations r where r.to_id = c.id and r.kind = 'corrects')
)"""
"""An amended event ``e`` that was corrected, and only corrected: a memory derived from it
was corrected, and none was retracted (or otherwise revoked): "forget that" stays forgotten."""

SAID_THEN_CORRECTED = f"""
(:history and e.category = 'conversation' and e.occurred_at <= :as_of and {HELD_EVENT}
 and {CORRECTED_EVENT})
"""
"""A conversation event ``e`` that recall's ``include_history`` (the parameter ``:history``)
shows as history: what was said by ``:as_of``, and then corrected (``CORRECTED_EVENT``)."""

CORRECTED_BY = """(
    select group_concat(r.from_id, ' ') from memories c
    join relations r on r.to_id = c.id and r.kind = 'corrects' where c.event_id = e.id
)"""
"""The memories that corrected those derived from the event ``e``, space-separated."""
