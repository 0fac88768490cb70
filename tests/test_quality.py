"""Retrieval quality as a test: on a fixed slice of real conversations, amem finds the right
memory at least as often as the plain baselines computed in the same test.

The slice is the first LoCoMo conversation (149 questions) and the whole of
MADial-Bench English (160 dialogues, asked as the last turn and as the last four turns).
``bench/quality.py`` runs it exactly as it runs the whole suite: the same loaders, the same
ingest through the public API, the same baselines over the same texts and the same
e5-small vectors, the same metrics and targets. So this test and the bench cannot drift.

- ``amem-auto`` (the default mode, with the local embedder): hit@5 and recall@10 at or
  above the best of FTS5 BM25 (every term, any term), dense cosine and reciprocal-rank
  fusion, less 0.01;
- ``amem-fast`` (words only): at or above both BM25 baselines, less 0.01.

Hit rates are deterministic (the model, the texts and the ranking are), so the test asserts
no timing and needs no tolerance beyond the targets' own. The data is read from
``$AMEM_DATA`` or the ``shared/data`` folder beside the checkout (see its README for the
licences); it is never copied into the package.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import quality  # noqa: E402  (bench/quality.py: the suite this test is a slice of)
from embed_cache import local_embedder  # noqa: E402

EMBEDDINGS = quality.recall.CACHE / "quality"
"""``bench/quality.py``'s embedding cache (its ``--cache``)."""
LOCOMO_CONVERSATIONS = 1
"""The first (conv-26): 419 turns, 149 questions."""


def data_folder() -> Path:
    """``$AMEM_DATA``, else ``shared/data`` beside the checkout (or beside /work/main)."""
    candidates = [Path(os.environ["AMEM_DATA"])] if "AMEM_DATA" in os.environ else []
    candidates += [ROOT.parent / "shared" / "data", Path("/work/shared/data")]
    for folder in candidates:
        if (folder / "locomo10.json").is_file() and (folder / "madial-bench-en").is_dir():
            return folder
    pytest.fail(
        f"the quality test needs LoCoMo and MADial-Bench English: set AMEM_DATA "
        f"(looked in {', '.join(map(str, candidates))})"
    )


def the_slice(data: Path, name: str) -> quality.Corpus:
    if name == "madial-en":
        return quality.load_madial(data)
    locomo = quality.load_locomo(data)
    locomo.parts = locomo.parts[:LOCOMO_CONVERSATIONS]
    return locomo


async def measure(corpora: list[quality.Corpus], folder: Path) -> list[quality.Row]:
    """Each set into a fresh database in ``folder``, every query through amem and the
    baselines. The embeddings are cached where ``bench/quality.py`` keeps them
    (``~/.cache/amem-bench/quality``): amem and the baselines embed each text once, and once
    only on a machine that ran either before (on a fresh one the model takes about two
    minutes of CPU for this slice; a cached vector is the one the model returned)."""
    rows = []
    async with local_embedder(EMBEDDINGS) as (settings, client, _):
        for corpus in corpora:
            outcome = await quality.run_corpus(corpus, settings, client, folder)
            assert outcome.hybrid == len(outcome.answers), "every default recall used vectors"
            rows += quality.rows_of(outcome)
    return rows


STYLES = {"locomo": {"question"}, "madial-en": {"last turn", "last 4 turns"}}
"""The sets of the slice (one test each, so they can run side by side) and how each asks."""


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("name", sorted(STYLES))
def test_recall_finds_the_right_turn_at_least_as_often_as_plain_baselines(
    tmp_path: Path, name: str
) -> None:
    rows = anyio.run(measure, [the_slice(data_folder(), name)], tmp_path)
    assert {(row.corpus, row.style) for row in rows} == {(name, style) for style in STYLES[name]}
    assert sum(row.n for row in rows if row.corpus == "locomo") == (149 if name == "locomo" else 0)
    short = [
        f"{row.corpus} {row.style}: {method} {note}"
        for row in rows
        for method, ok, note in (
            (quality.DEFAULT, row.default_ok, row.default_note),
            (quality.FAST, row.fast_ok, row.fast_note),
        )
        if not ok
    ]
    assert not short, "\n".join(short)
