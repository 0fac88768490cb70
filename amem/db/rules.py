"""What rows count as, each said once in SQL for every statement that needs it.

A statement names the tables these fragments speak of ``m`` (memories) and ``e``
(events), and passes ``:as_of`` (a stored time) where a fragment reads it. The search
index and the vectors hold the same rows (``search.index.INDEXED_MEMORY``).
"""

from __future__ import annotations

CURRENT_MEMORY = "m.revoked_at is null"
"""A memory ``m`` that still stands: not retracted, corrected, compacted or erased.
Revoked memories are kept for audit, never shown as knowledge."""

EVENT_AS_OF = "e.status != 'amended' and e.occurred_at <= :as_of"
"""An event ``e`` whose words are evidence at ``:as_of``: it had happened, and it was not
amended (corrected or retracted: its words are no key to anything)."""

SAID_AS_OF = f"e.category = 'conversation' and {EVENT_AS_OF}"
"""A conversation event ``e`` that shows what was said at ``:as_of``, as itself: the
session's recent events in a context pack, and a recall's raw fallback (which also asks
that nothing stands derived from it and that extraction has not run on it)."""
