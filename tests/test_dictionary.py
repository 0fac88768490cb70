"""jieba's dictionary is read from amem's own file of it, word by word until enough Chinese
has been tokenized, then whole; a file that is missing, damaged or cannot be written never
stops Chinese text from being tokenized, and every way of reading it segments alike."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from amem.search import dictionary
from amem.search.text import import_jieba

jieba = import_jieba()

SAMPLE = "用户喜欢喝乌龙茶，去年搬到了杭州西湖附近"
TEXTS = [
    SAMPLE,
    "我们终于修好了这个问题，真让人欣慰",
    "孩子下周就七岁了，想给她办一个生日会",
    "南京市长江大桥的夜景非常漂亮",
    "他在研究生命的起源和宇宙的结构",
]


def tokenizer_from(path: Path) -> Any:
    tokenizer = jieba.Tokenizer()
    dictionary.load(tokenizer, path)
    return tokenizer


def words(tokenizer: Any, text: str = SAMPLE) -> list[str]:
    return list(tokenizer.cut_for_search(text))


def test_the_first_load_writes_the_file_the_next_one_reads_word_by_word(tmp_path: Path) -> None:
    path = tmp_path / "jieba.sqlite"
    for older in ("jieba.cache", "jieba-0.42.0.pickle"):  # what amem kept there before
        (tmp_path / older).write_bytes(b"old")
    built = tokenizer_from(path)
    assert isinstance(built.FREQ, dict)  # built: the whole dictionary is in memory already
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jieba.sqlite"]  # one file only
    loaded = tokenizer_from(path)
    assert isinstance(loaded.FREQ, dictionary.Lookup)
    assert loaded.initialized
    assert loaded.tmp_dir is None  # read from the file: jieba was never asked to build it
    assert loaded.total == built.total
    own = jieba.Tokenizer()
    for text in TEXTS:
        assert words(loaded, text) == words(built, text) == words(own, text)
    assert "乌龙茶" in words(loaded)
    assert 0 < loaded.FREQ.reads < 1_000  # a few sentences read a few hundred entries


def test_the_whole_dictionary_replaces_the_lookups_once_they_add_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "jieba.sqlite"
    tokenizer_from(path)
    monkeypatch.setattr(dictionary, "WHOLE_AFTER", 100)  # 50,000 in use
    tokenizer = tokenizer_from(path)
    expected = [words(jieba.Tokenizer(), text) for text in TEXTS]
    lookup = tokenizer.FREQ
    assert [words(tokenizer, text) for text in TEXTS] == expected
    assert lookup.reads >= 100
    deadline = time.monotonic() + 30
    while not isinstance(tokenizer.FREQ, dict):  # loaded in a background thread
        assert time.monotonic() < deadline, "the whole dictionary was never loaded"
        time.sleep(0.01)
    assert len(tokenizer.FREQ) > 400_000
    assert [words(tokenizer, text) for text in TEXTS] == expected


KNOWN_WORDS_CHILD = """
import json, sys, time
from amem.search import dictionary, text

dictionary.WHOLE_AFTER_CHARS = 200  # 300,000 in use
before = text.tokens(sys.argv[1])
reads = text._jieba().FREQ.reads
for _ in range(20):  # the same words again: no more reads, only characters
    assert text.tokens(sys.argv[1]) == before
deadline = time.monotonic() + 30
while not isinstance(text._jieba().FREQ, dict) and time.monotonic() < deadline:
    time.sleep(0.01)
print(json.dumps([reads, type(text._jieba().FREQ).__name__, text.tokens(sys.argv[1]) == before]))
"""


def test_the_whole_dictionary_replaces_the_lookups_after_enough_characters(
    tmp_path: Path,
) -> None:
    """Known words cost no reads, but each lookup still costs more than a plain dict's:
    enough characters segmented through them buy the whole dictionary too."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    subprocess.run(
        [sys.executable, "-c", "from amem.search import text; text.tokens('杭州')"],
        env=env,
        check=True,
    )  # the file, built once
    done = subprocess.run(
        [sys.executable, "-c", KNOWN_WORDS_CHILD, SAMPLE],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    reads, kind, same = json.loads(done.stdout)
    assert reads < dictionary.WHOLE_AFTER
    assert kind == "dict"
    assert same


def test_a_whole_copy_that_cannot_be_read_leaves_the_lookups_working(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "jieba.sqlite"
    tokenizer_from(path)
    with sqlite3.connect(path) as conn:
        conn.execute("update whole set freq = x'00ff'")  # not a pickle
    monkeypatch.setattr(dictionary, "WHOLE_AFTER", 10)
    tokenizer = tokenizer_from(path)
    lookup = tokenizer.FREQ
    expected = [words(jieba.Tokenizer(), text) for text in TEXTS]
    assert [words(tokenizer, text) for text in TEXTS] == expected
    deadline = time.monotonic() + 30
    while "could not be read" not in caplog.text:
        assert time.monotonic() < deadline, "the whole copy was never tried"
        time.sleep(0.01)
    assert tokenizer.FREQ is lookup
    assert [words(tokenizer, text) for text in TEXTS] == expected


def test_threads_sharing_the_lookups_segment_alike(tmp_path: Path) -> None:
    path = tmp_path / "jieba.sqlite"
    tokenizer_from(path)
    tokenizer = tokenizer_from(path)
    expected = [words(jieba.Tokenizer(), text) for text in TEXTS]
    results: list[list[list[str]]] = []

    def run() -> None:
        results.append([words(tokenizer, text) for text in TEXTS * 20])

    threads = [threading.Thread(target=run) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected * 20] * 8


@pytest.mark.parametrize(
    "damage",
    [b"", b"not a database", "an empty database", "a database without the total"],
)
def test_a_damaged_file_is_built_again_and_replaced(tmp_path: Path, damage: bytes | str) -> None:
    path = tmp_path / "jieba.sqlite"
    if isinstance(damage, bytes):
        path.write_bytes(damage)
    else:
        with sqlite3.connect(path) as conn:
            if damage == "a database without the total":
                conn.execute("create table whole (total integer, freq blob)")
    tokenizer = tokenizer_from(path)
    assert "乌龙茶" in words(tokenizer)
    assert isinstance(tokenizer_from(path).FREQ, dictionary.Lookup)  # replaced by a good one


def test_a_file_that_cannot_be_written_still_tokenizes(tmp_path: Path) -> None:
    """Its folder is a file (no permission bit stops root, who runs CI): nothing is
    written, and the dictionary is built in memory."""
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    tokenizer = tokenizer_from(not_a_folder / "jieba.sqlite")
    assert "乌龙茶" in words(tokenizer)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_partial_file_left_by_an_exited_process_is_swept_when_the_file_is_written(
    tmp_path: Path,
) -> None:
    """A process that exits while it writes the file leaves a partial one: the next write
    removes it, and leaves alone one that another process may be writing now."""
    path = tmp_path / "jieba.sqlite"
    left = tmp_path / "jieba.sqliteabc123.tmp"
    writing = tmp_path / "jieba.sqlitexyz789.tmp"
    left.write_bytes(b"partial")
    writing.write_bytes(b"partial")
    old = time.time() - 3600
    os.utime(left, (old, old))
    tokenizer_from(path)
    assert path.is_file()
    assert not left.exists()
    assert writing.exists()


FORKED_CHILD = """
import json, os, sys
from amem.search import text

parent = text.segment(sys.argv[1])  # the parent reads the file word by word
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # the child must not share the parent's connection to the file
    os.write(write, json.dumps(text.segment(sys.argv[2])).encode())
    os._exit(0)
os.close(write)
child = json.loads(os.read(read, 1 << 20))
os.waitpid(pid, 0)
print(json.dumps([parent, child, type(text._jieba().FREQ).__name__]))
"""


def test_a_forked_child_reads_the_dictionary_on_its_own(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    subprocess.run([sys.executable, "-c", FORKED_CHILD, "杭州", "西湖"], env=env, check=True)
    done = subprocess.run(
        [sys.executable, "-c", FORKED_CHILD, SAMPLE, TEXTS[3]],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    parent, child, kind = json.loads(done.stdout)
    assert "乌龙茶" in parent.split()
    assert "长江大桥" in child.split()
    assert kind == "Lookup"
