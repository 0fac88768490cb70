"""JSON text from outside amem (a request, a transcript line, a cursor, an archive), read
so that whatever is wrong with it is one ``ValueError``. Apart from ``inputs``, which
needs pydantic, so that the MCP session can read requests before pydantic is loaded."""

from __future__ import annotations

import json
from typing import Any


class NestedTooDeep(ValueError):
    """A JSON text nested deeper than Python's parser goes."""


def parse_json(data: str | bytes, **options: Any) -> Any:
    """``json.loads`` of outside input (a transcript line, a request, a cursor): whatever
    is wrong with it is a ``ValueError``: not UTF-8, not JSON, or nested too deep
    (``NestedTooDeep``: the parser's ``RecursionError``, which every caller would otherwise
    have to know about). ``options`` go to ``json.loads``."""
    try:
        return json.loads(data, **options)
    except RecursionError:
        raise NestedTooDeep("the JSON text is nested too deep") from None
