"""What consolidation runs keep of the text they froze.

A run copies event and memory text into its frozen input. Once it is applied the copies go
(the memories and events hold what is kept), and erasing an event a run froze takes the
copies of every run that holds it (called by ``store.erasure`` inside the erasure's own
transaction), so an erasure leaves no copy behind in a run.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection

from ..models import RunInput

SELECT_RUNS_OF_EVENTS = """
select distinct run_id from consolidation_sources where event_id in ({marks})
"""
SELECT_INPUT = "select input from consolidation_runs where id = ?"
SCRUB_RUN = """
update consolidation_runs
set input = ?, candidate = null, error = null,
    status = case status when 'prepared' then 'invalidated' else status end,
    updated_at = ?
where id = ?
"""
DELETE_SOURCES = "delete from consolidation_sources where event_id in ({marks})"


def without_text(frozen: RunInput) -> RunInput:
    """A run's input with its copies of event and memory text dropped (IDs and offsets
    stay): once applied or scrubbed, the memories and the events hold what is kept."""
    return frozen.model_copy(
        update={
            "events": [event.model_copy(update={"text": None}) for event in frozen.events],
            "memories": [memory.model_copy(update={"text": None}) for memory in frozen.memories],
        }
    )


# --- erasure ---------------------------------------------------------------------------


DROP_TEXT = "update consolidation_runs set input = ?, updated_at = ? where id = ?"


def drop_event_text(conn: sqlite3.Connection, event_ids: Collection[str], now: str) -> None:
    """Evicting these events: the runs that froze them keep no copy of their text (the
    events stay in the runs' input, with their offsets; a patch can no longer quote them)."""
    gone = set(event_ids)
    for run_id in runs_holding(conn, event_ids):
        frozen = stored_input(conn, run_id)
        events = [e.model_copy(update={"text": None}) if e.id in gone else e for e in frozen.events]
        conn.execute(
            DROP_TEXT, (frozen.model_copy(update={"events": events}).model_dump_json(), now, run_id)
        )


SELECT_MEMORY_EVENTS = "select distinct event_id from memories where id in ({marks})"
SET_INPUT = "update consolidation_runs set input = ? where id = ?"


def forget_memories(conn: sqlite3.Connection, memory_ids: Collection[str]) -> None:
    """Deleting these memories (an erasure, an expired working note): the runs that froze
    them keep no copy of their text (a patch naming one is refused: its version is gone)."""
    ids = list(memory_ids)
    if not ids:
        return
    sql = SELECT_MEMORY_EVENTS.format(marks=", ".join("?" * len(ids)))
    events = [event_id for (event_id,) in conn.execute(sql, ids)]
    gone = set(ids)
    for run_id in runs_holding(conn, events):
        frozen = stored_input(conn, run_id)
        kept = [m.model_copy(update={"text": None}) if m.id in gone else m for m in frozen.memories]
        conn.execute(
            SET_INPUT, (frozen.model_copy(update={"memories": kept}).model_dump_json(), run_id)
        )


def runs_holding(conn: sqlite3.Connection, event_ids: Collection[str]) -> list[str]:
    ids = list(event_ids)
    sql = SELECT_RUNS_OF_EVENTS.format(marks=", ".join("?" * len(ids)))
    return [run_id for (run_id,) in conn.execute(sql, ids)] if ids else []


def stored_input(conn: sqlite3.Connection, run_id: str) -> RunInput:
    return RunInput.model_validate_json(conn.execute(SELECT_INPUT, (run_id,)).fetchone()[0])


def forget_events(conn: sqlite3.Connection, event_ids: Collection[str], now: str) -> int:
    """Erasing these events: every run that froze one loses its copies of text (and the
    erased events and their memories from its input), and a prepared one is invalidated.
    Returns how many runs were scrubbed."""
    if not event_ids:
        return 0
    runs = runs_holding(conn, event_ids)
    gone = set(event_ids)
    for run_id in runs:
        frozen = stored_input(conn, run_id)
        kept = frozen.model_copy(
            update={
                "events": [event for event in frozen.events if event.id not in gone],
                "memories": [m for m in frozen.memories if m.event_id not in gone],
            }
        )
        conn.execute(SCRUB_RUN, (without_text(kept).model_dump_json(), now, run_id))
    ids = list(event_ids)
    conn.execute(DELETE_SOURCES.format(marks=", ".join("?" * len(ids))), ids)
    return len(runs)
