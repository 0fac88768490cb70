"""jieba's dictionary is loaded from amem's own cache of it, and a cache that is missing,
damaged or cannot be written never stops Chinese text from being tokenized."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path
from typing import Any

from amem.search.text import import_jieba, load_dictionary

jieba = import_jieba()

SAMPLE = "用户喜欢喝乌龙茶，去年搬到了杭州西湖附近"


def tokenizer_from(cache: Path) -> Any:
    tokenizer = jieba.Tokenizer()
    load_dictionary(tokenizer, cache)
    return tokenizer


def words(tokenizer: Any) -> list[str]:
    return list(tokenizer.cut_for_search(SAMPLE))


def test_the_first_load_writes_the_cache_the_next_one_reads(tmp_path: Path) -> None:
    cache = tmp_path / "jieba.pickle"
    built = tokenizer_from(cache)
    assert cache.is_file()
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []
    with cache.open("rb") as file:
        freq, total = pickle.load(file)
    assert (freq, total) == (built.FREQ, built.total)
    loaded = tokenizer_from(cache)
    assert loaded.initialized
    assert loaded.tmp_dir is None  # read from the cache: jieba was never asked to build it
    assert words(loaded) == words(built) == words(jieba.Tokenizer())
    assert "乌龙茶" in words(loaded)


def test_a_damaged_cache_is_built_again_and_replaced(tmp_path: Path) -> None:
    cache = tmp_path / "jieba.pickle"
    for damage in (b"", b"not a pickle", pickle.dumps(["a list", "not a dictionary"])):
        cache.write_bytes(damage)
        tokenizer = tokenizer_from(cache)
        assert "乌龙茶" in words(tokenizer)
        with cache.open("rb") as file:
            assert pickle.load(file)[1] == tokenizer.total


def test_a_cache_that_cannot_be_written_still_tokenizes(tmp_path: Path) -> None:
    """Its folder is a file (no permission bit stops root, who runs CI): nothing is
    written, and the dictionary is built in memory."""
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    tokenizer = tokenizer_from(not_a_folder / "jieba.pickle")
    assert "乌龙茶" in words(tokenizer)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_partial_cache_left_by_an_exited_process_is_swept_when_the_cache_is_written(
    tmp_path: Path,
) -> None:
    """The warm-up thread does not hold up a process's exit, so one that exits while it
    writes the cache leaves a partial file: the next write removes it, and leaves alone
    one that another process may be writing now."""
    cache = tmp_path / "jieba.pickle"
    left = tmp_path / "jieba.pickleabc123.tmp"
    writing = tmp_path / "jieba.picklexyz789.tmp"
    left.write_bytes(b"partial")
    writing.write_bytes(b"partial")
    old = time.time() - 3600
    os.utime(left, (old, old))
    tokenizer_from(cache)
    assert cache.is_file()
    assert not left.exists()
    assert writing.exists()
