"""The docs cover every public name and CLI command, and their Python examples run."""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import re
from pathlib import Path

import pytest
from helpers import clean_env, environment

import amem
from amem.cli.app import build_parser
from amem.tools.table import TOOLS

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "decisions").glob("*.md")),
]
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
EXPECTED_OUTPUT = re.compile(r"# -> (.+)$", re.MULTILINE)
"""``print(x)  # -> shown`` in an example claims the line it prints; the test checks it."""


def python_examples() -> list[tuple[str, str]]:
    return [
        (f"{path.name}#{n}", code)
        for path in DOC_FILES
        for n, code in enumerate(PYTHON_BLOCK.findall(path.read_text()))
    ]


LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(path: Path) -> set[str]:
    """The ``#anchor`` of every heading of a Markdown file, as GitHub makes them."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", path.read_text(), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda path: path.name)
def test_every_relative_link_leads_somewhere(path: Path) -> None:
    """A link to a file names one that exists, and a ``#anchor`` a heading it has."""
    broken = []
    for target in LINK.findall(path.read_text()):
        if "://" in target or target.startswith("mailto:"):
            continue
        name, _, anchor = target.partition("#")
        linked = (path.parent / name).resolve() if name else path
        if not linked.exists() or (
            anchor and linked.suffix == ".md" and anchor not in anchors(linked)
        ):
            broken.append(target)
    assert not broken


def test_all_is_sorted_and_complete() -> None:
    assert amem.__all__ == sorted(amem.__all__)
    for name in amem.__all__:
        assert hasattr(amem, name), name


def test_every_public_name_has_a_section_in_the_api_docs() -> None:
    api = (ROOT / "docs" / "python-api.md").read_text()
    headings = set(re.findall(r"^#{2,3} `(\w+)`", api, re.MULTILINE))
    assert set(amem.__all__) <= headings, set(amem.__all__) - headings


@pytest.mark.parametrize("cls", [amem.Memory, amem.Scope])
def test_every_public_method_is_documented(cls: type) -> None:
    api = (ROOT / "docs" / "python-api.md").read_text()
    public = [name for name, _ in inspect.getmembers(cls) if not name.startswith("_")]
    missing = [name for name in public if f"{name}" not in api]
    assert not missing


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def test_every_cli_command_is_documented() -> None:
    cli = (ROOT / "docs" / "cli.md").read_text()
    for command, sub in subcommands(build_parser()).items():
        assert f"## `amem {command}`" in cli, command
        for action in subcommands(sub):
            assert f"## `amem {command} {action}`" in cli, (command, action)


def test_every_spec_cli_command_exists() -> None:
    spec = {
        "serve",
        "demo",
        "submit",
        "recall",
        "read",
        "persona",
        "export",
        "import",
        "backup",
        "restore",
        "doctor",
        "reindex",
        "retry",
        "host-ingest",
    }
    spec |= {"correct", "retract", "delete", "erase"}  # SPEC section 10: forgetting
    spec |= {"list", "status"}  # SPEC §10 (issue 16)
    spec |= {"inspect"}  # SPEC §10 (issue 18)
    spec |= {"people"}  # SPEC §11 (issue 31)
    beyond = {"limits"}  # capacity limits (issue 16), named by neither spec section
    beyond |= {"remember"}  # a memory from a shell in one step (issue 30)
    beyond |= {"claude-code-hook", "claude-code-capture"}  # Claude Code capture (issue 18)
    beyond |= {"pin", "consolidate", "compact-working"}  # tiers (issue 17)
    beyond |= {"evict"}  # natural eviction, Scope.evict of SPEC §11 (issue 32)
    assert spec | beyond == set(subcommands(build_parser()))


FOLDER_ROWS = ("adapters/", "hosts/", "inspector/")
"""Packages architecture.md describes as one folder, not module by module."""


def test_every_module_is_in_the_architecture_table() -> None:
    """docs/architecture.md's module table names every module of the package (a package's
    ``__init__`` only when it holds code of its own), so it cannot go stale unseen."""
    table = (ROOT / "docs" / "architecture.md").read_text().split("| module | concern |")[1]
    named = set(re.findall(r"`([\w/.]+)`", table.split("\n\n", 1)[0]))
    package = ROOT / "amem"
    missing = []
    for path in sorted(package.rglob("*.py")):
        module = path.relative_to(package).as_posix()
        if module.startswith(FOLDER_ROWS) or module == "__main__.py":
            continue
        if path.name == "__init__.py" and "/" in module and len(path.read_text()) < 2_000:
            continue  # a package's docstring and re-exports
        if module not in named and f"amem/{module}" not in named:
            missing.append(module)
    assert missing == []


def test_every_recall_tuning_number_is_listed_with_its_value() -> None:
    """docs/retrieval.md's "Tuning" table names every constant of ``amem.recall.tuning``
    with the value it has (numbers as ``1,600``; weights as ``name value, ...``)."""
    from amem.recall import tuning

    doc = (ROOT / "docs" / "retrieval.md").read_text()
    table = doc.split("## Tuning", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for row in table.splitlines():
        if row.startswith("| `"):
            cells = row.split("|")
            rows[cells[1].strip(" `")] = cells[2].strip()
    constants = {name: value for name, value in vars(tuning).items() if name.isupper()}
    assert rows.keys() == constants.keys()
    for name, value in constants.items():
        if isinstance(value, dict):
            shown = ", ".join(f"{key} {weight}" for key, weight in value.items())
        else:
            shown = f"{value:,}" if isinstance(value, int) else str(value)
        assert rows[name] == shown, name


def test_every_mcp_tool_is_documented() -> None:
    tools = (ROOT / "docs" / "mcp-tools.md").read_text()
    for tool in TOOLS.values():
        assert f"## `{tool.name}`" in tools, tool.name
        for argument in tool.args.model_fields:
            assert f"`{argument}" in tools, (tool.name, argument)


def run_example(name: str, code: str, folder: Path, env: dict[str, str] | None = None) -> str:
    """Run an example as a script (``__main__``) in this process, in ``folder``, without
    the user's ``AMEM_*`` settings and with ``folder`` as the user-data directory (where
    ``amem.open()`` puts its default file); return what it printed."""
    printed = io.StringIO()
    env = clean_env({"XDG_DATA_HOME": str(folder), **(env or {})})
    with environment(env), contextlib.chdir(folder), contextlib.redirect_stdout(printed):
        exec(compile(code, name, "exec"), {"__name__": "__main__"})
    return printed.getvalue()


@pytest.mark.parametrize(("name", "code"), python_examples(), ids=lambda v: v[:40])
def test_docs_examples_run(
    name: str, code: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # docs/postgres.md's examples open AMEM_DB: a fresh PostgreSQL database here
    on_postgres = name.startswith("postgres.md#")
    env = {"AMEM_DB": request.getfixturevalue("pg_url")} if on_postgres else {}
    expected = EXPECTED_OUTPUT.findall(code)
    printed = run_example(name, code, tmp_path, env).splitlines()
    assert len(printed) == len(expected), (name, printed)
    for line, claim in zip(printed, expected, strict=True):
        claim = re.sub(r"\s{2,}\(.*\)$", "", claim)  # "# -> 1  (a note)": the note is prose
        if claim.endswith(" ..."):
            assert line.startswith(claim.removesuffix(" ...")), (name, line)
        else:
            assert line == claim, (name, line)
