"""The current emotion: the latest assistant-expressed emotion, decayed toward zero.

Valence and arousal are multiplied by ``0.5 ** (hours / half-life)`` (6 hours by
default); once that factor falls below the floor (0.01, about 40 hours) the emotion is no
longer current. Historical expressions stay stored as memories; the persona never
changes because of them.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import NamedTuple

from ..db.rules import CURRENT_MEMORY
from ..db.times import db_time, from_db_time
from ..models import CurrentEmotion
from .facts import valid_as_of

SELECT_LATEST = f"""
select id, emotion, valence, arousal, valid_at from memories m
where persona = :persona and project = :project and {CURRENT_MEMORY} and emotion is not null
  and basis = 'assistant_expression' and {valid_as_of()}
order by valid_at desc, num desc limit 1
"""


class Decay(NamedTuple):
    """How an expressed emotion fades: ``Settings.emotion_half_life_hours`` and
    ``Settings.emotion_floor``."""

    half_life_hours: float
    floor: float


def current_emotion(
    conn: sqlite3.Connection, persona: str, project: str, as_of: datetime, decay: Decay
) -> CurrentEmotion | None:
    params = {"persona": persona, "project": project, "as_of": db_time(as_of)}
    row = conn.execute(SELECT_LATEST, params).fetchone()
    if row is None:
        return None
    memory_id, label, valence, arousal, valid_at = row
    expressed = from_db_time(valid_at)
    hours = max(0.0, (as_of - expressed).total_seconds() / 3600)
    factor = 0.5 ** (hours / decay.half_life_hours)
    if factor < decay.floor:
        return None
    return CurrentEmotion(
        label=label,
        valence=round(valence * factor, 6),
        arousal=round(arousal * factor, 6),
        factor=round(factor, 6),
        expressed_at=expressed,
        memory_id=memory_id,
    )
