"""Start-up: how long amem's commands take from spawn to their answer, against Python
starting and doing nothing, and against the smallest stdio JSON-RPC server, in one run.

Each row spawns a fresh process ``--runs`` times (after one untimed run) and reports the
median and the slowest of the timed runs, in seconds, with the ratio of the median to
``python -c pass``:

- ``python -c pass``: the interpreter amem runs on, starting and exiting (the floor);
- ``echo server``: a stdio server in a dozen lines of Python that answers ``initialize``
  (the floor of any Python MCP server);
- ``amem --version``, ``amem --help``: until exit;
- ``serve initialize``: ``amem serve`` spawned until its ``initialize`` answer is read;
- ``serve first zh recall``: the same process, until the answer to a first
  ``memory_recall`` of a Chinese query (time from spawn; the tokenizer's dictionary loads
  on the way);
- ``recall (one-shot)``: ``amem recall <Chinese query>`` on the same file, until exit
  (lexical: no embedding endpoint is configured; jieba's dictionary loads on the way);
- ``recall en (one-shot)``: the same with an English query (no dictionary to wait for);
- ``claude-code-hook``: ``amem claude-code-hook`` on a 12-line transcript (a new
  session each run, so every run captures it), until exit.

The database holds 200 short Chinese and English memories written through the public API
before timing starts. Every process gets the same environment, with ``AMEM_*`` variables
removed, ``HOME`` and ``XDG_CACHE_HOME`` pointing at a temporary folder kept across runs
(so jieba's dictionary cache is warm after the untimed run, as on a user's machine).

Targets (issue 30), printed, not asserted: ``serve initialize`` <= 0.3 s, ``serve first
zh recall`` <= 0.5 s, both one-shot recalls and ``claude-code-hook`` <= 0.5 s,
``--version`` and ``--help`` <= 0.15 s. Run on a quiet machine: a loaded one doubles every number.

Run:  uv run python bench/startup.py [--runs 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import anyio
from reporting import add_results_argument, recorded

import amem

ROOT = Path(__file__).resolve().parent.parent
AMEM = [sys.executable, "-m", "amem"]
"""amem as its installed script runs it (``amem = amem.cli:main``), without a shell."""
QUERY = "喝茶"
QUERY_EN = "tea"
TARGETS = {
    "serve initialize": 0.3,
    "serve first zh recall": 0.5,
    "recall (one-shot)": 0.5,
    "recall en (one-shot)": 0.5,
    "claude-code-hook": 0.5,
    "amem --version": 0.15,
    "amem --help": 0.15,
}
ECHO_SERVER = """
import json, sys
for line in sys.stdin:
    request = json.loads(line)
    if "id" in request:
        result = {"protocolVersion": "2025-06-18", "capabilities": {},
                  "serverInfo": {"name": "echo", "version": "0"}}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request["id"],
                                     "result": result}) + "\\n")
        sys.stdout.flush()
"""
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}


def line(message: dict[str, object]) -> bytes:
    return (json.dumps(message, ensure_ascii=False) + "\n").encode()


def timed_exit(argv: list[str], env: dict[str, str], stdin: bytes = b"") -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, input=stdin, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{argv[-3:]} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed


def timed_server(argv: list[str], env: dict[str, str], recall: bool) -> float:
    """Seconds from spawn to the ``initialize`` answer, or, with ``recall``, to the answer
    of a first ``memory_recall``."""
    started = time.perf_counter()
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write(line(INITIALIZE))
        process.stdin.flush()
        process.stdout.readline()
        if recall:
            process.stdin.write(line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            call = {"name": "memory_recall", "arguments": {"query": QUERY}}
            process.stdin.write(
                line({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
            )
            process.stdin.flush()
            answer = json.loads(process.stdout.readline())
            if answer.get("result", {}).get("isError", True):
                raise SystemExit(f"memory_recall failed: {answer}")
        return time.perf_counter() - started
    finally:
        process.stdin.close()
        process.wait(timeout=60)


def transcript(session: str) -> list[str]:
    """12 lines of a Claude Code transcript (6 exchanges) of one session."""
    lines = []
    for n in range(6):
        for role, text in (
            ("user", f"第{n}个问题：我们用什么茶？"),
            ("assistant", f"Answer {n}: oolong."),
        ):
            content = text if role == "user" else [{"type": "text", "text": text}]
            lines.append(
                json.dumps(
                    {
                        "type": role,
                        "sessionId": session,
                        "uuid": str(uuid.uuid4()),
                        "timestamp": f"2026-03-01T10:{n:02d}:00Z",
                        "message": {"role": role, "content": content},
                    },
                    ensure_ascii=False,
                )
            )
    return lines


async def fill(db: Path) -> None:
    async with amem.open(db) as mem:
        scope = mem.scope()
        for n in range(100):
            for text, memory in (
                (f"我每天下午喝{n}杯乌龙茶", f"用户每天下午喝{n}杯乌龙茶"),
                (f"I walk {n} km on Sundays", f"User walks {n} km on Sundays"),
            ):
                receipt = await scope.submit_event(text, role="user")
                draft = {"text": memory, "quote": text, "kind": "fact", "basis": "user_statement"}
                await scope.add_memories(receipt.event_id, [draft])


def measure(runs: int, folder: Path) -> dict[str, list[float]]:
    db = folder / "memory.db"
    anyio.run(fill, db)
    home = folder / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMEM_")}
    env |= {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
    hook_dir = folder / "transcripts"
    hook_dir.mkdir()

    def hook() -> float:
        session = str(uuid.uuid4())
        path = hook_dir / f"{session}.jsonl"
        path.write_text("\n".join(transcript(session)) + "\n", encoding="utf-8")
        hook_input = {
            "session_id": session,
            "transcript_path": str(path),
            "hook_event_name": "PreCompact",
        }
        argv = [*AMEM, "claude-code-hook", "--db", str(db)]
        return timed_exit(argv, env, json.dumps(hook_input).encode())

    rows: dict[str, Callable[[], float]] = {
        "python -c pass": lambda: timed_exit([sys.executable, "-c", "pass"], env),
        "echo server": lambda: timed_server([sys.executable, "-c", ECHO_SERVER], env, False),
        "amem --version": lambda: timed_exit([*AMEM, "--version"], env),
        "amem --help": lambda: timed_exit([*AMEM, "--help"], env),
        "serve initialize": lambda: timed_server([*AMEM, "serve", "--db", str(db)], env, False),
        "serve first zh recall": lambda: timed_server([*AMEM, "serve", "--db", str(db)], env, True),
        "recall (one-shot)": lambda: timed_exit([*AMEM, "recall", QUERY, "--db", str(db)], env),
        "recall en (one-shot)": lambda: timed_exit(
            [*AMEM, "recall", QUERY_EN, "--db", str(db)], env
        ),
        "claude-code-hook": hook,
    }
    results: dict[str, list[float]] = {}
    for name, run in rows.items():
        run()  # untimed: caches warm, as on a machine that ran amem before
        results[name] = [run() for _ in range(runs)]
        print(f"  {name}: done", file=sys.stderr)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs of each row")
    parser.add_argument("--json", action="store_true", help="also print one JSON line")
    add_results_argument(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="amem-startup-") as tmp:
        results = measure(args.runs, Path(tmp))
    with recorded("startup", args.results):
        report(results, args.runs, args.json)


def report(results: dict[str, list[float]], runs: int, as_json: bool) -> None:
    floor = statistics.median(results["python -c pass"])
    print(f"startup: {runs} runs a row, Python {sys.version.split()[0]}, {os.cpu_count()} cores")
    print(f"{'row':<24} {'median s':>9} {'slowest s':>10} {'x python':>9}  target")
    summary = {}
    for name, times in results.items():
        median, slowest = statistics.median(times), max(times)
        target = TARGETS.get(name)
        verdict = "" if target is None else f"<= {target}: {'ok' if median <= target else 'MISS'}"
        print(f"{name:<24} {median:>9.3f} {slowest:>10.3f} {median / floor:>9.1f}  {verdict}")
        summary[name] = {"median_s": round(median, 4), "slowest_s": round(slowest, 4)}
    if as_json:
        print(json.dumps({"bench": "startup", "runs": runs, "rows": summary}))


if __name__ == "__main__":
    main()
