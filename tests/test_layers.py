"""amem's modules stand in layers, and every import points down: a module imports only from
its own layer's package or from layers below it (docs/architecture.md, "Layers").

Imports are read from the source (every ``import`` and ``from ... import``, relative ones
resolved, those inside functions too), so a new upward arrow fails here whatever runs it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

AMEM = Path(__file__).resolve().parent.parent / "amem"

LAYERS: list[set[str]] = [
    {
        "errors",
        "limits",
        "prompt",
        "config",
        "models",
        "tokens",
        "reads",
        "version",
        "json_input",
    },  # values
    {"db"},  # SQLite: drivers, schema, the writer actor, times
    {"inputs"},  # checking what callers pass
    {"llm"},  # HTTP clients of the models: embeddings, extraction, the local embedder
    {"search"},  # the index: tokens, documents, vectors
    {"store"},  # events, memories and their rules, in the writer's transactions
    {"recall"},  # evidence and ranking over the store
    {"ops"},  # export, import, backup, doctor
    {"pipeline"},  # background model work of a Memory
    {"memory"},  # the Python API: Memory and Scope
    {"tools"},  # the tool table a model calls
    {"agent", "server", "testing"},  # in-process agent loops, the MCP wire, test helpers
    {"adapters", "hosts", "inspector", "cli", "__main__", "__init__"},  # front doors
]
"""Lowest first. A name is a package below ``amem/`` or a module beside ``__init__``."""


def unit(module: str) -> str:
    """The layer name of ``amem.<unit>...``; ``amem`` itself is ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def level(name: str) -> int:
    for n, layer in enumerate(LAYERS):
        if name in layer:
            return n
    raise AssertionError(f"amem.{name} is in no layer: add it to LAYERS (and the docs)")


def module_of(path: Path) -> str:
    parts = list(path.relative_to(AMEM.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every amem module ``path`` imports (``from x import y`` counts as ``x.y`` too, since
    ``y`` may be a module)."""
    module = module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found |= {f"{target}.{alias.name}" for alias in node.names}
    return {name for name in found if name == "amem" or name.startswith("amem.")}


def real(module: str) -> bool:
    """Whether ``module`` names a module or package of amem (not a name inside one)."""
    path = AMEM.parent / module.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


SOURCES = sorted(AMEM.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(AMEM)))
def test_every_import_points_down(path: Path) -> None:
    here = module_of(path)
    mine = level(unit(here))
    upward = [
        target
        for target in sorted(imports(path))
        if real(target) and unit(target) != unit(here) and level(unit(target)) > mine
    ]
    assert not upward, f"{here} imports from layers above it: {upward}"


def test_the_walk_sees_relative_and_nested_imports() -> None:
    """The check itself: a store module's relative import of the index resolves, and a
    function-level import (the agent's lazy one of the tool table) is seen."""
    assert "amem.search.index" in imports(AMEM / "store" / "events.py")
    assert "amem.tools.table" in imports(AMEM / "agent.py")
    assert level("search") < level("store") < level("recall") < level("memory")
