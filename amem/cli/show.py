"""How results print on the terminal."""

from __future__ import annotations

from typing import Any


def recall_line(item: Any) -> str:
    when = item.coarse_time or (item.valid_at or item.occurred_at).date().isoformat()
    label = "raw event" if item.raw_fallback else item.kind
    flags = "".join(
        f" [{flag}]"
        for flag, on in (
            ("gist", item.gist),
            ("expired", item.expired),
            ("truncated", item.truncated),
            (f"×{item.occurrences}", item.occurrences > 1),
        )
        if on
    )
    return f"{item.score:.3f}  {when}  {item.role:<9} {label:<11} {item.text}{flags}  ({item.id})"
