"""Known-target recall check: does fast recall find the memory a query names, as often as
an exhaustive FTS5 bm25 search over the same tokens does? (A start on issue 14's bench.)

Each query is three distinct words of a random memory's text, in their order; its target is
that memory. On copies of ``bench/recall.py``'s cached files (build them first with
``uv run python bench/recall.py --build-only``), in the same run: hit@5 of ``recall(...,
mode="fast")`` and of ``search_fts match <OR of the query tokens> order by bm25`` over the
whole scope, with no term cap. ``--dump`` writes every query's returned IDs and scores, to
compare two versions of amem on the same queries.

    uv run python bench/recall_targets.py [--sizes 10000,100000] [--queries 200] [--dump F]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import sys
import tempfile
from contextlib import closing
from pathlib import Path

import anyio

import amem
from amem.search.text import literal, query_tokens, scope_token

PERSONA, PROJECT = "bench", "recall"
CACHE = Path.home() / ".cache" / "amem-bench"


def known_targets(conn: sqlite3.Connection, count: int, seed: int) -> list[tuple[str, str]]:
    """``(query, memory id)``: three distinct words of a random memory, in their order."""
    rows = conn.execute(
        "select id, text from memories where persona = ? and project = ? order by num",
        (PERSONA, PROJECT),
    ).fetchall()
    rnd = random.Random(seed)
    found = []
    for memory_id, text in rnd.sample(rows, min(count, len(rows))):
        words = [word for word in dict.fromkeys(query_tokens(text)) if len(word) > 1]
        if len(words) >= 3:
            picked = sorted(rnd.sample(range(len(words)), 3))
            found.append((" ".join(words[n] for n in picked), memory_id))
    return found


def exhaustive(conn: sqlite3.Connection, query: str, limit: int) -> list[str]:
    """The reference: FTS5 bm25 over every posting of the query's tokens, in the scope."""
    terms = " OR ".join(literal(term) for term in query_tokens(query))
    match = f"({terms}) AND {literal(scope_token(PERSONA, PROJECT))}"
    rows = conn.execute(
        "select d.ref from search_fts f join search_docs d on d.num = f.rowid"
        " where search_fts match ? order by bm25(search_fts) limit ?",
        (match, limit),
    )
    return [ref for (ref,) in rows]


async def measure(size: int, count: int, seed: int) -> dict[str, object]:
    source = CACHE / f"recall-v1-seed1-{size}.db"
    if not source.exists():
        sys.exit(f"{source} is missing: run `uv run python bench/recall.py --build-only` first")
    path = Path(tempfile.mkdtemp(prefix="amem-targets-")) / "m.db"
    shutil.copy(source, path)
    with closing(sqlite3.connect(path)) as conn:
        queries = known_targets(conn, count, seed)
        reference = sum(target in exhaustive(conn, q, 5) for q, target in queries)
    returned: dict[str, list[tuple[str, float]]] = {}
    hits = 0
    async with amem.open(path, settings=amem.Settings()) as mem:
        scope = mem.scope(PERSONA, PROJECT)
        for query, target in queries:
            items = (await scope.recall(query, limit=5)).items
            returned[query] = [(item.id, item.score) for item in items]
            hits += target in [item.id for item in items]
    shutil.rmtree(path.parent)
    return {"bench": "recall_targets", "size": size, "queries": len(queries),
            "fast_hit5": round(hits / len(queries), 3),
            "exhaustive_bm25_hit5": round(reference / len(queries), 3),
            "returned": returned}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="cached bench files to use")
    parser.add_argument("--queries", type=int, default=200, help="known-target queries")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dump", type=Path, help="write every query's returned items here")
    args = parser.parse_args()
    results = [
        anyio.run(measure, int(size), args.queries, args.seed) for size in args.sizes.split(",")
    ]
    print(f"{'memories':>10} {'queries':>8} {'fast hit@5':>11} {'bm25 hit@5':>11}")
    for r in results:
        print(f"{r['size']:>10,} {r['queries']:>8} {r['fast_hit5']:>11} "
              f"{r['exhaustive_bm25_hit5']:>11}")  # fmt: skip
    for r in results:
        print(json.dumps({k: v for k, v in r.items() if k != "returned"}))
    if args.dump:
        args.dump.write_text(json.dumps(results, ensure_ascii=False))


if __name__ == "__main__":
    main()
