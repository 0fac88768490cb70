"""Turning text into search tokens, and queries into safe FTS5 expressions.

Stored text is indexed as *segmented* text: tokens separated by spaces. A CJK run yields
its jieba search-mode words (``本书``, ``三体``) and every single CJK character (``书``), so
a one-character query finds the words containing it; other text yields lower-cased words
(``python3``, ``11``), and a word mixing letters and digits also its parts (``python``,
``3``). English words (ASCII letters only: a whole word or the letter part of a mixed one)
are stemmed with the Snowball English stemmer, so ``lives``, ``books`` and ``reading`` are
stored and looked up as ``live``, ``book`` and ``read``; digits, CJK and other scripts are
left as they are. FTS5's ``unicode61`` tokenizer then only splits on the spaces amem
put there. Queries are built from the same tokens, each quoted as an FTS5 string literal,
so no user text is ever executed as query syntax.

jieba is shared by every ``Memory`` of the process and made on first use (tens of
milliseconds): its dictionary is read word by word from a file until enough Chinese text
makes loading the whole of it worth while (``amem.search.dictionary``). That file lives in a
private directory, and jieba's logging is quiet.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import tempfile
import threading
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio
import Stemmer

from . import dictionary

CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0003134f"
RUN = re.compile(rf"[{CJK}]+|[^\W_{CJK}]+")
"""A run of CJK characters, or a word of other letters and digits."""
CJK_RUN = re.compile(rf"[{CJK}]")
LETTERS_OR_DIGITS = re.compile(r"\d+|[^\W\d_]+")

_lock = threading.Lock()
_tokenizer: Any = None
_stemmers = threading.local()


def _reset_after_fork() -> None:
    """A child forked while another thread held the lock would wait for it forever, and
    must not read the dictionary file through its parent's connection."""
    global _lock, _tokenizer
    _lock = threading.Lock()
    if isinstance(getattr(_tokenizer, "FREQ", None), dictionary.Lookup):
        _tokenizer = None


os.register_at_fork(after_in_child=_reset_after_fork)


def _jieba() -> Any:
    """The process-wide jieba tokenizer, initialised on first use (blocking: call it from
    a worker thread)."""
    global _tokenizer
    with _lock:
        if _tokenizer is None:
            jieba = import_jieba()
            logging.getLogger("jieba").setLevel(logging.WARNING)  # it logs to stderr at DEBUG
            tokenizer = jieba.Tokenizer()
            dictionary.load(tokenizer, private_cache_dir() / f"jieba-{jieba.__version__}.sqlite")
            _tokenizer = tokenizer
        return _tokenizer


def import_jieba() -> Any:
    """The jieba module, imported without the warnings its source raises when it is
    compiled (invalid escape sequences, deprecated ``pkg_resources``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", SyntaxWarning)
        import jieba
    return jieba


def private_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/amem`` (or ``~/.cache/amem``), readable by its owner only."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    path = Path(base) / "amem"
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if path.stat().st_uid == os.getuid() and os.access(path, os.W_OK):
            return path
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="amem-cache-"))


@functools.lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """The token of a lower-cased non-CJK ``word``: its Snowball English stem when it is
    all ASCII letters (``studies`` -> ``studi``), else the word itself (``11``, ``café``).

    Cached: a store's vocabulary is small, and a cached word costs a dictionary lookup.
    PyStemmer's stemmer objects are not safe to share between threads, so each thread
    (event loop, worker, database connection) has its own."""
    if not (word.isascii() and word.isalpha()):
        return word
    stemmer = getattr(_stemmers, "english", None)
    if stemmer is None:
        stemmer = _stemmers.english = Stemmer.Stemmer("english", 0)  # 0: no second cache
    result: str = stemmer.stemWord(word)
    return result


def tokens(text: str) -> list[str]:
    """Search tokens of ``text``, in order (the first Chinese text waits for jieba)."""
    found: list[str] = []
    for run in RUN.findall(text):
        if CJK_RUN.match(run):
            tokenizer = _jieba()
            found += [word for word in tokenizer.cut_for_search(run) if len(word) > 1]
            if isinstance(tokenizer.FREQ, dictionary.Lookup):
                tokenizer.FREQ.segmented(len(run))
            found += list(run)
        else:
            word = run.lower()
            found.append(stem(word))
            parts = LETTERS_OR_DIGITS.findall(word)
            if len(parts) > 1:  # "python3" is also "python" and "3"
                found += map(stem, parts)
    return found


def surface_words(text: str) -> dict[str, list[str]]:
    """For each stemmed token of ``text``, the distinct lower-cased words it came from, in
    order (``studi`` -> ``["studies"]``): stems are for matching, words for showing and for
    telling function words. Cheap (a regular expression and cached stems, no jieba), so it
    may run inside a transaction."""
    words: dict[str, list[str]] = {}
    for run in RUN.findall(text):
        if not CJK_RUN.match(run):
            word = run.lower()
            for each in (word, *LETTERS_OR_DIGITS.findall(word)):
                behind = words.setdefault(stem(each), [])
                if each not in behind:
                    behind.append(each)
    return words


def is_function_word(token: str, words: dict[str, list[str]]) -> bool:
    """Whether ``token`` stands only for function words (``STOP_WORDS``) of the text whose
    ``surface_words`` are ``words``: ``doe`` from "does" does, ``doe`` from "a doe" does not.
    Comparing words, not stems, keeps ``assist`` (the stem of ``assistant``) a content word."""
    return all(word in STOP_WORDS for word in words.get(token, (token,)))


def segment(text: str) -> str:
    """The form stored in the FTS index: tokens joined by single spaces."""
    return " ".join(tokens(text))


def segment_all(texts: Sequence[str]) -> list[str]:
    return [segment(text) for text in texts]


INLINE_CHARS = 1000
"""Texts up to this length are segmented on the loop once jieba is loaded (tens of
microseconds: cheaper than a thread hop); longer ones in a worker thread."""


async def segment_off_loop(texts: Sequence[str]) -> list[str]:
    """``segment`` for each text, never blocking the loop for long, never inside the writer."""
    short = sum(map(len, texts)) <= INLINE_CHARS
    if short and (_tokenizer is not None or not any(CJK_RUN.search(t) for t in texts)):
        return segment_all(texts)
    return await anyio.to_thread.run_sync(segment_all, texts)


def load_whole_dictionary() -> None:
    """Load jieba and the whole of its dictionary now (blocking), as a process does by
    itself once it has tokenized enough Chinese (``dictionary.WHOLE_AFTER``): for a
    benchmark that times tokenizing at full speed."""
    freq = _jieba().FREQ
    if isinstance(freq, dictionary.Lookup):
        freq.load_whole()


@functools.lru_cache(maxsize=1024)
def scope_token(persona: str, project: str) -> str:
    """A token added to every indexed document of a scope, so FTS can filter by scope.
    Letters and digits only, and never produced from real text by ``tokens``' lower-case
    words in practice (a fixed prefix plus 16 hex digits). Cached: every write of a scope
    asks for it."""
    digest = hashlib.sha256(f"{persona}\x00{project}".encode()).hexdigest()[:16]
    return f"qscope{digest}"


PERSON_PREFIX = "qperson"


@functools.lru_cache(maxsize=4096)
def person_token(persona: str, project: str, person: str) -> str:
    """A token added to every indexed document of a person (the events of their
    relationship, the memories derived from them or about them), so FTS can filter by
    person and a query naming them can count it as a word (``recall.people``). Made like
    ``scope_token``, with its own prefix."""
    digest = hashlib.sha256(f"{persona}\x00{project}\x00{person}".encode()).hexdigest()[:16]
    return f"{PERSON_PREFIX}{digest}"


def literal(token: str) -> str:
    """An FTS5 string literal: the token in double quotes, inner quotes doubled."""
    return '"' + token.replace('"', '""') + '"'


# fmt: off
STOP_WORDS = frozenset({
    "the", "a", "an", "and", "or", "but", "of", "to", "in", "on", "at", "for", "with", "from",
    "by", "is", "are", "was", "were", "be", "been", "am", "i", "you", "he", "she", "it", "we",
    "they", "me", "my", "your", "his", "her", "its", "our", "their", "this", "that", "these",
    "those", "what", "which", "who", "whom", "how", "when", "where", "why", "do", "does",
    "did", "have", "has", "had", "about", "just", "very", "really", "user", "assistant",
    "said", "says", "s", "t", "not", "no", "any", "some", "there", "here", "than", "then",
    "的", "了", "我", "你", "他", "她", "它", "们", "是", "在", "有", "和", "就", "不", "也", "很",
    "都", "这", "那", "吗", "呢", "吧", "啊", "么", "什", "哪", "一", "个", "着", "过", "把", "被",
    "给", "让", "与", "及", "等", "对", "还", "又", "什么", "怎么", "哪里", "我们", "你们", "他们",
    "她们", "自己", "没有", "用户", "一个", "这个", "那个",
})
# fmt: on
"""Function words: left out of queries (when anything else is left) and of topic cues.
Words, not tokens: see ``is_function_word``."""
CJK_FUNCTION_WORDS = tuple(word for word in STOP_WORDS if CJK_RUN.match(word))
"""The CJK ones, whose characters ``function_characters`` leaves out of queries too."""


def query_tokens(query: str) -> list[str]:
    """The distinct tokens of a query, in order, without function words unless the query
    has nothing else ("the who" still finds The Who)."""
    return list(dict.fromkeys(token for clause in clause_tokens(query) for token in clause))


CLAUSE_END = re.compile(r"[\n.!?;。！？；]+")
"""Where a sentence or a line ends."""


def clause_tokens(query: str) -> list[list[str]]:
    """``query_tokens`` of each clause of ``query`` (split where a sentence or a line ends),
    from one segmentation: function words are left out if the whole query has anything else."""
    pieces = [tokens(clause) for clause in CLAUSE_END.split(query)]
    words = surface_words(query)
    spare = function_characters(query)
    found = list(dict.fromkeys(token for piece in pieces for token in piece))
    content = {
        token for token in found if token not in spare and not is_function_word(token, words)
    } or set(found)
    return [list(dict.fromkeys(token for token in piece if token in content)) for piece in pieces]


def function_characters(text: str) -> set[str]:
    """The CJK characters of ``text`` that stand only inside its function words.

    Each CJK character is a token of its own (so ``书`` finds ``本书``), and a function
    word's characters would otherwise stay in a query that leaves the word out: in "用户对
    什么过敏" the characters of 用户, held by every memory about the user, matched every
    memory and ranked short ones first."""
    covered = [False] * len(text)
    for word in CJK_FUNCTION_WORDS:
        start = text.find(word)
        while start >= 0:
            covered[start : start + len(word)] = [True] * len(word)
            start = text.find(word, start + 1)
    inside: dict[str, bool] = {}
    for n, char in enumerate(text):
        if CJK_RUN.match(char):
            inside[char] = inside.get(char, True) and covered[n]
    return {char for char, only in inside.items() if only}


def match_any(terms: Iterable[str]) -> str:
    return " OR ".join(literal(term) for term in terms)


def phrase_tokens(text: str) -> list[str]:
    """The tokens an FTS5 phrase of ``text`` needs, in order: as indexed, a CJK run's
    characters stand next to each other (its words come before them), other words as
    ``tokens`` gives them."""
    found: list[str] = []
    for run in RUN.findall(text):
        run_tokens = tokens(run)
        found += run_tokens[-len(run) :] if CJK_RUN.match(run) else run_tokens
    return found
