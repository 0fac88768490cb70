"""SQL ``in (...)`` lists: their placeholders, written one way per kind of statement.

A list of values is bound as parameters, never written into the SQL text: positional
``?`` placeholders (``marks``) for statements of ``?`` parameters and for long lists
(SQLite looks each named parameter up in a list of names: binding 10,000 named values
costs ten times 10,000 positional ones), named ones (``named``) for statements of named
parameters. Only constants of the code are written in as SQL literals (``literals``), for
fragments shared by statements that bind nothing of theirs.
"""

from __future__ import annotations

from collections.abc import Iterable


def marks(count: int) -> str:
    """``?, ?, ...``: the placeholders of a list of ``count`` positional values."""
    return ", ".join("?" * count)


def named(name: str, values: Iterable[object]) -> tuple[str, dict[str, object]]:
    """``(":name0, :name1, ...", {"name0": ..., ...})``: the placeholders of ``values`` as
    named parameters, and those parameters (to add to the statement's)."""
    params = {f"{name}{n}": value for n, value in enumerate(values)}
    return ", ".join(f":{key}" for key in params), params


def literals(values: Iterable[str]) -> str:
    """``'a', 'b'``: constant strings of the code as SQL string literals."""
    return ", ".join("'{}'".format(value.replace("'", "''")) for value in values)
