"""Every async test runs on asyncio and on trio; a missing trio fails the run."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio  # noqa: F401  (imported so a missing trio is an error, never a skip)

import amem


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "memory.db"


@pytest.fixture
async def mem(db_path: Path) -> AsyncIterator[amem.Memory]:
    async with amem.open(db_path, settings=amem.Settings()) as memory:
        yield memory


@pytest.fixture
def scope(mem: amem.Memory) -> amem.Scope:
    return mem.scope(persona="assistant", project="support")
