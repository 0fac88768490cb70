"""jieba's dictionary, ready in a millisecond: read word by word from amem's SQLite copy of
it until a process has asked for enough words to make loading all of it worth while.

jieba segments with a prefix dictionary (``FREQ``: about 500,000 words and prefixes, 70 MB
once loaded, a third of a second to unpickle). A query or a message needs a few hundred of
its entries, so a process starts with a ``Lookup``: each entry is read from the file when
first asked for, and remembered. Once the reads have cost about what loading the whole
dictionary costs (``WHOLE_AFTER``), the whole of it is loaded in a background thread and
takes the lookups' place: a server that keeps tokenizing Chinese pays for the load once, a
command that tokenizes one query never does (rent until the rent paid equals the price,
then buy: never more than twice the better of the two choices made in hindsight).

The file is built once per jieba version from jieba's own dictionary (a few seconds), in a
private folder, and replaced atomically; a missing or damaged file is built again, and one
that cannot be written leaves the dictionary in memory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("amem")

WHOLE_AFTER = 50_000
"""Reads of the file (about 6 µs each) after which the whole dictionary is loaded: together
they cost about what the load does (0.3 s)."""
WHOLE_AFTER_CHARS = 300_000
"""Characters segmented through the lookups after which the whole dictionary is loaded
even if they needed few reads: a remembered word is still a method call where the whole
dictionary is a plain ``dict`` lookup, about 1 µs a character more (245,000 characters a
second against 322,000), so these too add up to the load's cost."""

PARTIAL_AGE_SECONDS = 600
"""A partial file this old was left by a process that exited while writing it (a process
does not wait for background work at exit); writing one takes seconds."""


class Lookup:
    """jieba's ``FREQ`` as far as jieba reads it (``in``, ``[]``, ``get``), each word read
    from the file once. Safe to share between threads."""

    def __init__(self, conn: sqlite3.Connection, on_whole: Callable[[dict[str, int]], None]):
        self._conn = conn
        self._known: dict[str, int | None] = {}
        self._lock = threading.Lock()
        self._on_whole = on_whole
        self._bought = False
        self.reads = 0
        self.chars = 0

    def get(self, word: str, default: Any = None) -> Any:
        try:
            freq = self._known[word]
        except KeyError:
            freq = self._read(word)
        return default if freq is None else freq

    def __contains__(self, word: str) -> bool:
        return self.get(word) is not None

    def __getitem__(self, word: str) -> int:
        freq: int | None = self.get(word)
        if freq is None:
            raise KeyError(word)
        return freq

    def _read(self, word: str) -> int | None:
        with self._lock:
            row = self._conn.execute("select freq from words where word = ?", (word,)).fetchone()
            self.reads += 1
        freq = self._known[word] = None if row is None else row[0]
        if self.reads >= WHOLE_AFTER:
            self._load_whole_soon()
        return freq

    def segmented(self, chars: int) -> None:
        """Count ``chars`` more characters segmented through the lookups."""
        self.chars += chars
        if self.chars >= WHOLE_AFTER_CHARS:
            self._load_whole_soon()

    def _load_whole_soon(self) -> None:
        """Start loading the whole dictionary in the background, once."""
        with self._lock:
            if self._bought:
                return
            self._bought = True
        threading.Thread(target=self._load_whole_quietly, name="amem-jieba", daemon=True).start()

    def _load_whole_quietly(self) -> None:
        """``load_whole``, or a warning and the lookups for good if the file's whole copy
        cannot be read (the lookups still answer)."""
        try:
            self.load_whole()
        except (sqlite3.Error, pickle.UnpicklingError, EOFError, ValueError, TypeError):
            log.warning("jieba's whole dictionary could not be read; words are looked up")

    def load_whole(self) -> None:
        """Load every entry and hand the dictionary to ``on_whole`` (blocking)."""
        with self._lock:
            (blob,) = self._conn.execute("select freq from whole").fetchone()
        self._on_whole(pickle.loads(blob))  # a private folder: only its owner writes there


def load(tokenizer: Any, path: Path) -> None:
    """Give ``tokenizer`` its dictionary: a ``Lookup`` in ``path`` when that reads, else
    the whole of it built from jieba's own, and written to ``path`` for the next process."""
    conn = None
    try:
        conn = sqlite3.connect(
            f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False
        )
        (total,) = conn.execute("select total from whole").fetchone()
        tokenizer.FREQ = Lookup(conn, lambda freq: setattr(tokenizer, "FREQ", freq))
        tokenizer.total, tokenizer.initialized = total, True
    except (sqlite3.Error, TypeError, ValueError):  # missing, damaged, or not a dictionary
        if conn is not None:
            conn.close()
        build(tokenizer, path)


def build(tokenizer: Any, path: Path) -> None:
    """Let jieba build its dictionary, then write it to ``path`` (if the folder takes it).
    jieba's own cache of it goes to a private folder removed afterwards: ``path`` holds
    all a later process needs."""
    with tempfile.TemporaryDirectory(prefix="amem-jieba-") as scratch:
        tokenizer.tmp_dir = scratch
        tokenizer.initialize()
    with contextlib.suppress(OSError, sqlite3.Error):
        sweep_partial_files(path)
        for older in (*path.parent.glob("jieba-*.pickle"), path.parent / "jieba.cache"):
            older.unlink(missing_ok=True)  # what amem kept there before this file
        fd, partial = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        os.close(fd)
        try:
            write(partial, tokenizer.FREQ, tokenizer.total)
            os.replace(partial, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)


def write(file: str, freq: dict[str, int], total: int) -> None:
    """The dictionary file: each entry for lookups, and the whole of it in one pickle."""
    with contextlib.closing(sqlite3.connect(file)) as conn, conn:
        conn.execute("create table words (word text primary key, freq integer) without rowid")
        conn.execute("create table whole (total integer not null, freq blob not null)")
        conn.executemany("insert into words values (?, ?)", sorted(freq.items()))
        blob = pickle.dumps(freq, pickle.HIGHEST_PROTOCOL)
        conn.execute("insert into whole values (?, ?)", (total, blob))


def sweep_partial_files(path: Path) -> None:
    """Delete the partial files of ``path`` that no process is still writing."""
    now = time.time()
    for partial in path.parent.glob(f"{path.name}*.tmp"):
        with contextlib.suppress(OSError):
            if now - partial.stat().st_mtime > PARTIAL_AGE_SECONDS:
                partial.unlink()
