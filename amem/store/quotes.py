"""Where a memory's quote stands in its source event.

A quote must be the source's own words, but a model copying them routinely straightens
curly quotes, turns dashes into hyphens, writes full-width forms as ASCII and collapses
runs of white space. Those differences are forgiven: the quote is found in the source
with both sides folded the same way, and the memory stores the source's exact span,
never the model's rewrite of it.
"""

from __future__ import annotations

import unicodedata

FOLDS = str.maketrans(
    {
        **dict.fromkeys("‘’‚‛′`´", "'"),
        **dict.fromkeys("“”„‟″«»", '"'),
        **dict.fromkeys("‐‑‒–—―−", "-"),
    }
)
"""Typographic quotes, primes and dashes, and the ASCII character each is read as."""


def find_quote(source: str, quote: str) -> tuple[int, int] | None:
    """The ``(start, end)`` of ``quote`` in ``source``: where it occurs verbatim, else
    where it occurs once both are folded (``fold``); None when it does not occur."""
    start = source.find(quote)
    if start >= 0:
        return start, start + len(quote)
    wanted, _ = fold(quote)
    wanted = wanted.strip()
    text, origins = fold(source)
    found = text.find(wanted) if wanted else -1
    if found < 0:
        return None
    return origins[found], origins[found + len(wanted) - 1] + 1


def fold(text: str) -> tuple[str, list[int]]:
    """``text`` with compatibility forms (NFKC: full-width letters, digits and
    punctuation, the ideographic space), typographic quotes and dashes made plain and
    every run of white space one space; and for each folded character, the index of
    the character of ``text`` it came from."""
    folded: list[str] = []
    origins: list[int] = []
    for index, char in enumerate(text):
        plain = unicodedata.normalize("NFKC", char).translate(FOLDS)
        if plain.isspace():
            if folded and folded[-1] == " ":
                continue
            plain = " "
        folded.extend(plain)
        origins.extend([index] * len(plain))
    return "".join(folded), origins
