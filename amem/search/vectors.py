"""Exact vector search held in memory, over the vectors ``search.vector_rows`` stores.

Search: each ``(persona, project, fingerprint)`` has a matrix in memory (``Matrices``),
loaded on first use and then extended with the rows numbered above the last one it holds.
Rows are only ever appended; a deleted or changed row bumps the scope's ``vector_epochs``
row (triggers keep it), which makes the matrix reload whole. The matrix holds each vector
as int8 (scaled by one factor per matrix), a quarter of float32: a scan is bound by memory
bandwidth, so simsimd's SIMD int8 kernel scans the newest ``scan`` rows (all of them for
``deep``) several times as fast as a float32 product. The rows best by that
scan are then read back from SQLite as float32 and ranked by their exact cosine, which
is what a result carries; against an exact float32 search, recall@10 is 1.000 in
``bench/vectors.py``. Memory: ``dim + 8`` bytes per vector (384 dims: 392 bytes, 100k
vectors 37 MiB) plus a few bytes of key; scopes beyond ``Matrices.budget`` bytes are
dropped least recently used first, and a scope larger than the budget alone is searched
from SQLite in blocks instead (float32, exact), never held.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar, cast

import numpy as np
import numpy.typing as npt
import simsimd

from ..db.in_lists import marks
from .vector_rows import Key, Nearest

BLOCK_ROWS = 65_536
"""Rows read at a time when a scope is searched from SQLite."""

Floats = npt.NDArray[np.float32]
Codes = npt.NDArray[np.int8]
Nums = npt.NDArray[np.int64]
A = TypeVar("A", Codes, Nums)


# ---- search ----------------------------------------------------------------------------

SELECT_EPOCH = "select epoch from vector_epochs where persona = ? and project = ?"
SELECT_ROWS = """
select num, doc_kind, ref, chunk, vector from vectors
where persona = ? and project = ? and fingerprint = ? and num > ?
order by num limit ?
"""
SELECT_SIZE = """
select count(*), count(*) filter (where chunk = 0) from vectors
where persona = ? and project = ? and fingerprint = ?
"""
SELECT_SCAN_START = """
select num - 1 from vectors where persona = ? and project = ? and fingerprint = ?
order by num desc limit 1 offset ?
"""
ALL_ROWS = 2**63 - 1
"""``limit`` for no limit: the largest 64-bit integer, which both databases take
(SQLite's ``-1`` is an error on PostgreSQL)."""


CODE_MAX = 127
"""The largest int8 code: a matrix's largest vector component, in absolute value."""
SHORTLIST = 4
"""Rows the int8 scan hands to the exact ranking, per result asked for (an event's chunks
may crowd the top, see ``best``)."""
SHORTLIST_MIN = 64
SCAN_THREADS = 2
SAMPLE_STEP = 64
SAMPLE_MARGIN = 8
"""Sampled scores above the expected threshold rank: a bad sample costs one more pass."""
SELECT_VECTORS = "select num, vector from vectors where num in ({})"
SELECT_REF_VECTORS = """
select ref, vector from vectors where fingerprint = ? and doc_kind = ? and ref in ({})
"""
REFS_BATCH = 500
"""Refs one ``SELECT_REF_VECTORS`` reads (SQLite allows 999 variables in older builds)."""


@dataclass(slots=True)
class Matrix:
    """The vectors of one scope and fingerprint in ``num`` order (oldest first), as int8
    codes in a buffer that grows by doubling, so appending a few rows never copies the
    rest."""

    epoch: int
    last: int = 0
    """The highest ``num`` loaded."""
    codes: Codes = field(default_factory=lambda: np.empty((0, 0), dtype=np.int8))
    scale: float = 0.0
    """``codes = round(vector * scale)``, set by the first rows loaded (later larger
    components are clipped: the exact ranking after the scan corrects for it)."""
    nums: Nums = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    keys: list[Key] = field(default_factory=list)
    refs: int = 0
    """Distinct memories and events (their first chunks)."""

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes + self.nums.nbytes) + 80 * len(self.keys)

    def extend(self, rows: list[Row]) -> None:
        """Append rows read by ``SELECT_ROWS``; a vector of another size than the newest
        belongs to another space and is left out."""
        fresh, block = decoded(rows)
        dim = block.shape[1]
        if self.codes.shape[1:] != (dim,):  # the first rows, or the scope changed model
            self.codes, self.nums = np.empty((0, dim), np.int8), np.empty(0, np.int64)
            self.keys, self.refs = [], 0
            self.scale = CODE_MAX / max(float(np.abs(block).max()), 1e-9)
        count, needed = len(self.keys), len(self.keys) + len(fresh)
        if needed > len(self.codes):
            size = max(needed, 2 * len(self.codes))
            self.codes = grown(self.codes, count, (size, dim))
            self.nums = grown(self.nums, count, (size,))
        self.codes[count:needed] = quantised(block, self.scale)
        self.nums[count:needed] = [row[0] for row in fresh]
        self.keys += [(kind, ref) for _, kind, ref, _, _ in fresh]
        self.refs += sum(1 for _, _, _, n, _ in fresh if n == 0)
        self.last = rows[-1][0]


Row = tuple[int, str, str, int, bytes]
"""What ``SELECT_ROWS`` reads: ``num``, ``doc_kind``, ``ref``, ``chunk``, ``vector``."""


def decoded(rows: list[Row]) -> tuple[list[Row], Floats]:
    """The rows whose vectors have the newest row's size (another size is another space),
    and those vectors as one float32 matrix."""
    dim = len(rows[-1][4]) // 4
    fresh = [row for row in rows if len(row[4]) == 4 * dim]
    block = np.frombuffer(b"".join(row[4] for row in fresh), dtype="<f4").reshape(-1, dim)
    return fresh, block


def grown(array: A, count: int, shape: tuple[int, ...]) -> A:
    """A larger buffer holding the first ``count`` rows of ``array``."""
    larger = np.empty(shape, dtype=array.dtype)
    larger[:count] = array[:count]
    return cast(A, larger)


def quantised(vectors: Floats, scale: float) -> Codes:
    codes = np.clip(np.rint(vectors * scale), -CODE_MAX, CODE_MAX)
    return cast(Codes, codes.astype(np.int8))


class Matrices:
    """The loaded matrices of one ``Memory``, shared by its reader threads."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        """Most bytes of vectors held, over all scopes."""
        self._loaded: OrderedDict[tuple[str, str, str], Matrix] = OrderedDict()
        self._lock = threading.Lock()

    def nearest(
        self,
        conn: sqlite3.Connection,
        scope: tuple[str, str],
        fingerprint: str,
        query: Sequence[float],
        k: int,
        scan: int | None,
    ) -> Nearest:
        """The ``k`` most similar memories and events among the newest ``scan`` vectors
        (all when None), and how the query's cosines spread over them."""
        vector = np.asarray(query, dtype=np.float32)
        with self._lock:  # one loader at a time; the scan itself runs unlocked
            matrix = self._current(conn, scope, fingerprint)
            if matrix is not None:  # rows past ``count`` may be written by the next loader
                count, refs = len(matrix.keys), matrix.refs
                codes, nums = matrix.codes[:count], matrix.nums[:count]  # views, not copies
                keys = matrix.keys  # appended in place, never rewritten: rows below count hold
        if matrix is None:
            return streamed(conn, scope, fingerprint, vector, k, scan)
        start = 0 if scan is None else max(0, count - scan)
        if count == 0 or codes.shape[1] != len(vector):  # another size: another space
            return Nearest({}, refs, 0, 0.0, 0.0)
        products = scores(codes[start:], quantised(vector, matrix.scale))
        rows = top_rows(products, min(len(products), max(SHORTLIST * k, SHORTLIST_MIN))) + start
        exact = read_vectors(conn, nums[rows], len(vector)) @ vector
        sample = products[::SAMPLE_STEP] if len(products) > SAMPLE_STEP**2 else products
        mean, spread = np.mean(sample), np.std(sample)  # int8 codes: scale squared
        found = best(exact, [keys[row] for row in rows], k)
        unit = matrix.scale**2
        return Nearest(found, refs, len(products), float(mean / unit), float(spread / unit))

    def _current(
        self, conn: sqlite3.Connection, scope: tuple[str, str], fingerprint: str
    ) -> Matrix | None:
        """The scope's matrix, brought up to date; None when it is larger than the budget."""
        name = (*scope, fingerprint)
        row = conn.execute(SELECT_EPOCH, scope).fetchone()
        epoch = 0 if row is None else int(row[0])
        matrix = self._loaded.pop(name, None)
        if matrix is None or matrix.epoch != epoch:
            matrix = Matrix(epoch)
        new_rows = conn.execute(SELECT_ROWS, (*name, matrix.last, ALL_ROWS)).fetchall()
        if new_rows:
            matrix.extend(new_rows)
        if matrix.nbytes > self.budget:
            return None
        self._loaded[name] = matrix
        held = sum(m.nbytes for m in self._loaded.values())
        while held > self.budget:
            _, dropped = self._loaded.popitem(last=False)
            held -= dropped.nbytes
        return matrix


def scores(codes: Codes, query: Codes) -> Floats:
    """The int8 dot products of ``query`` with every row of ``codes``."""
    products = simsimd.cdist(
        query[None, :], codes, metric="dot", out_dtype="float32", threads=SCAN_THREADS
    )
    return cast(Floats, np.asarray(products)[0])


def top_rows(scores: Floats, wanted: int) -> npt.NDArray[np.intp]:
    """Indices of the ``wanted`` largest ``scores``, in no order.

    A full ``argpartition`` of a million scores costs more than the scan that made them;
    a threshold read off every ``SAMPLE_STEP``-th score keeps, with a margin, a few times
    ``wanted`` of them, and only those are partitioned. Exact: when fewer than ``wanted``
    pass the threshold, all scores are partitioned."""
    if wanted >= len(scores):
        return np.arange(len(scores))
    sample = np.sort(scores[::SAMPLE_STEP])
    rank = min(len(sample) - 1, 2 * wanted * len(sample) // len(scores) + SAMPLE_MARGIN)
    above = np.flatnonzero(scores >= sample[-1 - rank])
    if len(above) < wanted:
        return np.argpartition(scores, len(scores) - wanted)[-wanted:]
    return above[np.argpartition(scores[above], len(above) - wanted)[-wanted:]]


def read_vectors(conn: sqlite3.Connection, nums: Nums, dim: int) -> Floats:
    """The float32 vectors of rows ``nums``, in that order (the read snapshot the matrix was
    brought up to date in holds them all: a deleted row would have reloaded it)."""
    blobs = dict(conn.execute(SELECT_VECTORS.format(marks(len(nums))), nums.tolist()).fetchall())
    joined = b"".join(blobs[num] for num in nums.tolist())
    return np.frombuffer(joined, dtype="<f4").reshape(-1, dim)


def similarities(
    conn: sqlite3.Connection, fingerprint: str, query: Sequence[float], keys: Iterable[Key]
) -> dict[Key, float]:
    """The exact cosine of each of ``keys`` that has a vector of ``fingerprint`` (an event
    at its best chunk), read by key: a point lookup each, however large the scope."""
    vector = np.asarray(query, dtype=np.float32)
    refs: dict[str, list[str]] = {}
    for kind, ref in keys:
        refs.setdefault(kind, []).append(ref)
    found: dict[Key, float] = {}
    for kind, wanted in refs.items():
        for start in range(0, len(wanted), REFS_BATCH):
            batch = wanted[start : start + REFS_BATCH]
            sql = SELECT_REF_VECTORS.format(marks(len(batch)))
            for ref, blob in conn.execute(sql, [fingerprint, kind, *batch]).fetchall():
                if len(blob) == 4 * len(vector):  # another size: another space
                    similarity = float(np.frombuffer(blob, dtype="<f4") @ vector)
                    found[kind, ref] = max(found.get((kind, ref), -1.0), similarity)
    return found


def streamed(
    conn: sqlite3.Connection,
    scope: tuple[str, str],
    fingerprint: str,
    vector: Floats,
    k: int,
    scan: int | None,
) -> Nearest:
    """``Matrices.nearest`` for a scope too large to hold: block by block from SQLite."""
    name = (*scope, fingerprint)
    total, refs = conn.execute(SELECT_SIZE, name).fetchone()
    last = 0
    if scan is not None and scan < total:
        last = int(conn.execute(SELECT_SCAN_START, (*name, scan - 1)).fetchone()[0])
    found: dict[Key, float] = {}
    searched, total_sum, squares = 0, 0.0, 0.0
    while block := conn.execute(SELECT_ROWS, (*name, last, BLOCK_ROWS)).fetchall():
        last = block[-1][0]
        fresh, vectors = decoded(block)
        if vectors.shape[1] == len(vector):
            keys = [(kind, ref) for _, kind, ref, _, _ in fresh]
            similarities = vectors @ vector
            searched += len(similarities)
            total_sum += float(similarities.sum())
            squares += float(np.square(similarities).sum())
            for key, similarity in best(similarities, keys, k).items():
                found[key] = max(found.get(key, -1.0), similarity)
            found = dict(sorted(found.items(), key=lambda pair: -pair[1])[:k])
    mean = total_sum / searched if searched else 0.0
    spread = math.sqrt(max(0.0, squares / searched - mean * mean)) if searched else 0.0
    return Nearest(found, int(refs), searched, mean, spread)


def best(similarities: Floats, keys: list[Key], k: int) -> dict[Key, float]:
    """The ``k`` best keys by similarity, each at its best row (an event has several)."""
    take = min(len(keys), 4 * k)  # chunks of one event may crowd the top
    if take < len(keys):
        top = np.argpartition(-similarities, take - 1)[:take]
    else:
        top = np.arange(len(keys))
    found: dict[Key, float] = {}
    for index in top[np.argsort(-similarities[top], kind="stable")]:
        key = keys[index]
        if key not in found:
            found[key] = float(similarities[index])
            if len(found) == k:
                break
    return found
