"""Token counting for context packs: an offline estimate, or any counter the caller brings.

Real tokenizers cannot be fetched at run time, and every model family has its own, so the
default counter estimates by character class:

- ASCII letters cost one token per 6 letters of a word, rounded up (a word and the space
  before it are one token in current tokenizers when common; rare words split);
- digits cost one token per 3 of a run (tokenizers group digits by up to three);
- ASCII punctuation costs one token per 2 characters of a run (JSON's ``","`` and ``":"``
  merge into few tokens);
- a single space or line break is free (it merges with the next word), a longer run of
  whitespace (indentation, blank lines) costs one token;
- every other character costs one token: a Chinese, Japanese or Korean character, a
  full-width punctuation mark, an accented letter, an emoji; so do control characters.

Measured against four real tokenizers on LoCoMo (English) and MemoryBank (Chinese) texts
by ``bench/tokens.py`` (figures in docs/context-packs.md), it rarely counts fewer tokens than
GPT-4o's ``o200k_base`` or DeepSeek-V3's tokenizer, at the price of over-counting English by
10-20% and Chinese by 20-80%; older tokenizers (``cl100k_base``, the legacy Claude
tokenizer) spend more than one token on a Chinese character and get under-counted there.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .errors import InvalidInput

TokenCounter = Callable[[str], int]
"""Counts the tokens of a text: ``estimate_tokens``, or e.g. a real tokenizer's
``lambda text: len(encoding.encode(text))``."""

TOKENS = re.compile(
    r"[A-Za-z]{1,6}"  # a word: one token per 6 letters, rounded up (a match per token)
    r"|[0-9]{1,3}"
    r"|[!-/:-@\[-`{-~]{1,2}"  # ASCII punctuation
    r"|\s{2,}"  # a run of whitespace; a single space or line break is free
    r"|[^\x00-\x7f\s]"  # any other character: CJK, full-width, accented, emoji
    r"|[\x00-\x08\x0e-\x1b\x7f]"  # a control character
)
"""One match per estimated token, so counting is one ``findall`` in C."""


def estimate_tokens(text: str) -> int:
    """The estimated token count of ``text`` for current LLM tokenizers (see the module
    docstring). Deterministic and offline."""
    return len(TOKENS.findall(text))


def counter_name(counter: TokenCounter) -> str:
    """How a pack names its counter: the function's name (``estimate_tokens`` by default)."""
    return getattr(counter, "__name__", type(counter).__name__)


def checked_counter(counter: TokenCounter) -> TokenCounter:
    """``counter``, refusing (``invalid_input``) a count that is not a non-negative integer."""

    def count(text: str) -> int:
        tokens = counter(text)
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            raise InvalidInput("counter must return a non-negative integer")
        return tokens

    return count
