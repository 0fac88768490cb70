"""Turning text into search tokens, and queries into safe FTS5 expressions.

Stored text is indexed as *segmented* text: word tokens separated by spaces, with every
CJK character as a token of its own, so ``书`` finds ``本书``. FTS5's ``unicode61``
tokenizer then only splits on the spaces amem put there (and folds case and diacritics).
Queries are built from the same tokens, each quoted as an FTS5 string literal, so no
user text is ever executed as query syntax.
"""

from __future__ import annotations

import re

# A run of letters/digits that are not CJK, or one CJK character (Han, kana, hangul).
CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f"
TOKEN = re.compile(rf"[{CJK}]|[^\W_{CJK}]+")


def tokens(text: str) -> list[str]:
    """Search tokens of ``text``: lower-cased words and single CJK characters, in order."""
    return [token.lower() for token in TOKEN.findall(text)]


def segment(text: str) -> str:
    """The form stored in the FTS index: tokens joined by single spaces."""
    return " ".join(tokens(text))


def match_expression(query: str) -> str | None:
    """An FTS5 MATCH expression that finds documents holding any token of ``query``.

    Every token is a quoted literal (``"`` doubled inside), so operators, column filters,
    ``NEAR``, ``*`` or ``:`` in the query are just text. None when the query has no tokens.
    """
    unique = dict.fromkeys(tokens(query))
    if not unique:
        return None
    return " OR ".join('"' + token.replace('"', '""') + '"' for token in unique)
