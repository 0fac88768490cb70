"""What every bench's report shares: the nearest-rank percentiles of its timings, and its
``--results``, with which its printed table becomes its latest run in ``docs/benchmarks.md``.

Standard library only, so that a bench's measuring subprocesses, which import the bench's
module, load nothing more for it (``bench/common.py`` brings in amem, numpy and httpx).
"""

from __future__ import annotations

import argparse
import io
import math
import os
import platform
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stdout
from pathlib import Path


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (NaN for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def percentile_ms(seconds: Sequence[float], q: float) -> float:
    """``percentile`` of timings in seconds, in milliseconds."""
    return percentile(seconds, q) * 1000


def print_header(header: str) -> None:
    """A table's header line, underlined."""
    print(header)
    print("-" * len(header))


RESULTS_PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def add_results_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--results",
        action="store_true",
        help="write the table into docs/benchmarks.md as its latest run",
    )


@contextmanager
def recorded(bench: str, results: bool) -> Iterator[None]:
    """Prints what the block prints once it is done; with ``results``, it also becomes the
    bench's latest run (``write_results``)."""
    printed = io.StringIO()
    with redirect_stdout(printed):
        yield
    sys.stdout.write(printed.getvalue())
    if results:
        write_results(bench, printed.getvalue())


def write_results(bench: str, text: str, path: Path = RESULTS_PAGE) -> None:
    """Make ``text``, the table a bench printed, its latest run on the results page.

    Replaces what stands between the lines ``<!-- results: BENCH -->`` and
    ``<!-- /results: BENCH -->`` of ``path`` with a line naming today's date, the commit
    (``git rev-parse --short HEAD``) and the machine, and a fenced block holding ``text``
    without its JSON lines (they are for machines; the page shows the table)."""
    begin, end = f"<!-- results: {bench} -->", f"<!-- /results: {bench} -->"
    page = path.read_text(encoding="utf-8")
    if page.count(begin) != 1 or page.count(end) != 1 or page.index(begin) > page.index(end):
        raise SystemExit(f"{path} needs one '{begin}' line and one '{end}' line after it")
    git = ["git", "rev-parse", "--short", "HEAD"]  # of the code that ran
    done = subprocess.run(git, cwd=Path(__file__).parent, capture_output=True, text=True)
    commit = done.stdout.strip() or "unknown"
    machine = (
        f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}"
    )
    lines = [line.rstrip() for line in text.strip("\n").splitlines()]
    table = "\n".join(line for line in lines if not line.startswith('{"')).strip("\n")
    fence = "```"
    while fence in table:
        fence += "`"
    block = (
        f"Latest run, {time.strftime('%Y-%m-%d')}, amem at `{commit}`, {machine}:\n\n"
        f"{fence}text\n{table}\n{fence}"
    )
    head, rest = page.split(begin, 1)
    tail = rest.split(end, 1)[1]
    path.write_text(f"{head}{begin}\n{block}\n{end}{tail}", encoding="utf-8")
