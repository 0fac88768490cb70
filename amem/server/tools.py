"""The tools ``amem serve`` answers with: one ``Memory`` and the tool table, each call
answered as MCP's ``CallToolResult``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

from ..config import Settings
from ..errors import AmemError
from ..memory import open as open_memory
from ..tools.table import TOOLS, Served, encode, run, tool_schema
from .session import Tools


@asynccontextmanager
async def open_tools(path: Path | str, settings: Settings) -> AsyncIterator[Tools]:
    async with open_memory(path, settings=settings) as memory:
        served = Served(memory, settings.default_persona, settings.default_project)
        schemas = [tool_schema(tool) for tool in TOOLS.values()]
        yield Tools(schemas, partial(call, served), memory.stop_reads)


async def call(served: Served, name: str, arguments: dict[str, Any] | None) -> dict[str, Any]:
    """One call of the tool ``name`` (the session answers unknown names itself), answered
    as a ``CallToolResult`` in JSON."""
    try:
        result = await run(served, TOOLS[name], arguments)
    except AmemError as error:
        return tool_error(error)
    return tool_result(encode(result))


def tool_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def tool_error(error: AmemError) -> dict[str, Any]:
    return tool_result(f"{error.code}: {error.message}", is_error=True)
