"""What ``import amem`` exposes is ``amem.__all__`` and an explicit list of the rest.

As httpx pins its surface (its tests/test_exported_members.py): a name that appears on
``amem`` without being in ``__all__`` or in the allow-list below fails here, so the public
surface (docs/python-api.md, "What is public") cannot grow by accident.
"""

from __future__ import annotations

import json
import subprocess
import sys

import amem

INTERNAL_SUBMODULES = {
    # Python binds every submodule it imports as an attribute of its package, so
    # ``import amem`` necessarily exposes the modules that __init__.py imports from,
    # directly or through them. None is public API (docs/python-api.md, "What is public"):
    # tests and benches reach them by module path (``from amem.db.database import ...``).
    "agent",
    "config",
    "db",
    "errors",
    "inputs",
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

# The public submodules, amem.testing and amem.adapters.*, are not on the list: `import
# amem` does not load them (an adapter's framework loads only when its module is imported,
# tests/test_adapters.py), so they are bound only once imported by name.

FRESH_VARS = (
    "import json, types, amem\n"
    "print(json.dumps({n: isinstance(v, types.ModuleType) for n, v in vars(amem).items()}))"
)
"""``vars(amem)`` in a new interpreter: this test process has imported more submodules
(every one it imported is bound on ``amem`` too)."""


def test_import_amem_exposes_all_and_the_internal_submodules_alone() -> None:
    result = subprocess.run([sys.executable, "-c", FRESH_VARS], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    is_module: dict[str, bool] = json.loads(result.stdout)
    public = {name for name in is_module if not name.startswith("_")}
    assert public == set(amem.__all__) | INTERNAL_SUBMODULES
    assert {name for name in public if is_module[name]} == INTERNAL_SUBMODULES
    assert set(is_module) >= INCLUDED_PRIVATE_MEMBERS
