"""How far ``amem.estimate_tokens`` is from real tokenizers, on English and Chinese text.

Tokenizers cannot be downloaded at run time, so this bench takes the ones litellm ships in
its wheel (``litellm/litellm_core_utils/tokenizers/``): OpenAI's ``o200k_base`` (GPT-4o and
later) and ``cl100k_base`` (GPT-4, GPT-3.5) as tiktoken cache files, DeepSeek-V3's
``tokenizer.json`` and the legacy Claude ``tokenizer.json`` (the public one Anthropic
published for Claude 1-2; later Claude tokenizers are not public). None of them is an amem
dependency; run the bench with::

    uv run --with litellm --with tiktoken --with tokenizers python bench/tokens.py [--results]

Texts: every LoCoMo turn (English, ``locomo10.json``) and every MemoryBank message (Chinese,
``memorybank/memory_bank_cn.json``), each alone and each as the JSON item a pack holds
(``{"id", "text", "kind"}``, the shape whose cost the budget counts). For each tokenizer
and text set: the total of estimates over the total of real counts, the mean and the
worst relative errors ((estimate - real) / real, per text) and the share of texts the
estimate under-counts (a pack counted by it may then be over its real budget).

Prints one table and one JSON line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
from collections.abc import Callable
from pathlib import Path

from events import locomo_texts
from reporting import add_results_argument, write_results

import amem

DATA = Path("/work/shared/data")
TOKENIZERS = ("o200k_base", "cl100k_base", "deepseek-v3", "claude-legacy")
ITEM_ID = "mem_0123456789abcdef0123456789abcdef"


def litellm_tokenizers() -> Path:
    """The folder of tokenizer files inside the installed litellm (not imported: only read)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("litellm is not installed: run with `uv run --with litellm ...`")
    return Path(spec.submodule_search_locations[0]) / "litellm_core_utils" / "tokenizers"


def real_counters(folder: Path) -> dict[str, Callable[[str], int]]:
    os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)  # litellm's cache: no download
    import tiktoken
    import tokenizers

    def tiktoken_counter(name: str) -> Callable[[str], int]:
        encoding = tiktoken.get_encoding(name)
        return lambda text: len(encoding.encode(text, disallowed_special=()))

    def json_counter(file: str) -> Callable[[str], int]:
        tokenizer = tokenizers.Tokenizer.from_file(str(folder / file))
        return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)

    return {
        "o200k_base": tiktoken_counter("o200k_base"),
        "cl100k_base": tiktoken_counter("cl100k_base"),
        "deepseek-v3": json_counter("deepseek_tokenizer.json"),
        "claude-legacy": json_counter("anthropic_tokenizer.json"),
    }


def english(data: Path) -> list[str]:
    return locomo_texts(data / "locomo10.json")


def chinese(data: Path) -> list[str]:
    users = json.loads((data / "memorybank" / "memory_bank_cn.json").read_text(encoding="utf-8"))
    return [
        text
        for user in users.values()
        for day in user["history"].values()
        for exchange in day
        for text in (exchange["query"], exchange["response"])
    ]


def as_items(texts: list[str]) -> list[str]:
    """Each text as the JSON item a pack holds."""
    return [
        json.dumps({"id": ITEM_ID, "text": text, "kind": "fact"}, ensure_ascii=False)
        for text in texts
    ]


def errors(estimates: list[int], reals: list[int]) -> dict[str, float]:
    pairs = [(e, r) for e, r in zip(estimates, reals, strict=True) if r]
    relative = [(e - r) / r for e, r in pairs]
    return {
        "total_ratio": round(sum(e for e, _ in pairs) / sum(r for _, r in pairs), 3),
        "mean_abs_error": round(statistics.mean(abs(x) for x in relative), 3),
        "worst_under": round(min(relative), 3),
        "worst_over": round(max(relative), 3),
        "under_counted": round(sum(e < r for e, r in pairs) / len(pairs), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the shared data folder")
    add_results_argument(parser)
    args = parser.parse_args()
    counters = real_counters(litellm_tokenizers())
    english_texts, chinese_texts = english(args.data), chinese(args.data)
    sets = {
        "en": english_texts,
        "zh": chinese_texts,
        "en-json": as_items(english_texts),
        "zh-json": as_items(chinese_texts),
    }
    results: dict[str, dict[str, dict[str, float]]] = {}
    header = f"{'set':8} {'texts':>6} {'tokenizer':14} {'est/real':>8} {'mean|err|':>9} "
    table = [header + f"{'worst under':>11} {'worst over':>10} {'under-counted':>13}"]
    print(table[-1])
    for name, texts in sets.items():
        estimates = [amem.estimate_tokens(text) for text in texts]
        for tokenizer in TOKENIZERS:
            reals = [counters[tokenizer](text) for text in texts]
            row = errors(estimates, reals)
            results.setdefault(name, {})[tokenizer] = row
            table.append(
                f"{name:8} {len(texts):>6} {tokenizer:14} {row['total_ratio']:>8.2f} "
                f"{row['mean_abs_error']:>9.1%} {row['worst_under']:>+11.0%} "
                f"{row['worst_over']:>+10.0%} {row['under_counted']:>13.1%}"
            )
            print(table[-1])
    print(json.dumps({"bench": "tokens", "results": results}, separators=(",", ":")))
    if args.results:
        write_results("tokens", "\n".join(table))


if __name__ == "__main__":
    main()
