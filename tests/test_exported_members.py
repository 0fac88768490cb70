"""What ``import amem`` exposes is ``amem.__all__`` and an explicit list of the rest.

As httpx pins its surface (its tests/test_exported_members.py): a name that appears on
``amem`` without being in ``__all__`` or in the allow-list below fails here, so the public
surface (docs/python-api.md, "What is public") cannot grow by accident.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import clean_env

import amem

INTERNAL_SUBMODULES = {
    # Python binds every submodule it imports as an attribute of its package, so once a
    # public name has been used, ``amem`` also exposes the modules it was imported from,
    # directly or through them. None is public API (docs/python-api.md, "What is public"):
    # tests and benches reach them by module path (``from amem.db.database import ...``).
    "agent",
    "config",
    "db",
    "errors",
    "inputs",
    "json_input",
    "limits",
    "llm",
    "memory",
    "models",
    "ops",
    "pipeline",
    "prompt",
    "reads",
    "recall",
    "search",
    "store",
    "tokens",
    "version",
}

INCLUDED_PRIVATE_MEMBERS = {"__version__"}
"""Public although they start with ``_`` (so outside ``__all__``, as ``from amem import *``
skips them anyway)."""

# The public submodules, amem.testing and amem.adapters.*, are not on the list: using
# amem's names does not load them (an adapter's framework loads only when its module is
# imported, tests/test_adapters.py), so they are bound only once imported by name.

HEAVY = ("numpy", "pydantic", "httpx", "anyio", "jieba", "mcp")
"""What amem's work needs and a program that only imports it, or prints amem's version,
should not wait for (together most of a second)."""


def fresh(code: str) -> object:
    """What ``code`` prints as JSON in a new interpreter without the user's ``AMEM_*``
    settings: this test process has imported more submodules (every one it imported is
    bound on ``amem`` too)."""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=clean_env()
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def surface(use: str) -> dict[str, bool]:
    """``vars(amem)`` after ``use``: each name, and whether it is a module."""
    code = (
        f"import json, types, amem\n{use}\n"
        "print(json.dumps({n: isinstance(v, types.ModuleType) for n, v in vars(amem).items()}))"
    )
    found = fresh(code)
    assert isinstance(found, dict)
    return found


def test_import_amem_binds_its_version_alone_and_loads_nothing_heavy() -> None:
    is_module = surface("")
    assert {name for name in is_module if not name.startswith("_")} == {"version"}
    assert set(is_module) >= INCLUDED_PRIVATE_MEMBERS
    loaded = fresh("import json, sys, amem\nprint(json.dumps(sorted(sys.modules)))")
    assert isinstance(loaded, list)
    assert [m for m in loaded if m.split(".")[0] in HEAVY] == []


def test_every_public_name_resolves_and_the_surface_is_all_and_the_internal_submodules() -> None:
    is_module = surface("[getattr(amem, name) for name in amem.__all__]")
    public = {name for name in is_module if not name.startswith("_")}
    assert public == set(amem.__all__) | INTERNAL_SUBMODULES
    assert {name for name in public if is_module[name]} == INTERNAL_SUBMODULES
    assert set(is_module) >= INCLUDED_PRIVATE_MEMBERS


def test_dir_lists_every_public_name_before_it_is_used() -> None:
    listed = fresh("import json, amem\nprint(json.dumps(dir(amem)))")
    assert isinstance(listed, list)
    assert set(listed) >= set(amem.__all__) | INCLUDED_PRIVATE_MEMBERS


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = amem.no_such_name


def test_a_memory_without_a_model_endpoint_never_loads_httpx(tmp_path: Path) -> None:
    """One-shot commands and hooks open a memory, write or recall, and exit: with no model
    configured, the HTTP client is never imported (about 0.1 s of each start)."""
    code = (
        "import json, sys, anyio, amem\n"
        "async def main():\n"
        f"    async with amem.open({str(tmp_path / 'm.db')!r}, settings=amem.Settings()) as mem:\n"
        "        await mem.scope().submit_event('I moved to Lisbon', role='user')\n"
        "        assert (await mem.scope().recall('Lisbon')).items\n"
        "anyio.run(main)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'httpx')))"
    )
    assert fresh(code) == []
