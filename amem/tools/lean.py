"""Lean JSON for a model's context: the tools' input schemas and recall answers.

A host puts ``tools/list`` into every conversation and every recall result into the next
turn, so both say only what a model uses (``bench/mcp_cost.py`` measures them):

- a tool's input schema is pydantic's with each optional argument as its own type (leaving
  the argument out is how a model says "none"; an explicit null is still accepted) and
  nested models written inline (no ``$defs`` to chase), without what a model does not act
  on (``LEFT_OUT``); the tools decide which properties are not shown at all;
- a recall item keeps what a model acts on (``RECALL_SHOWN``: its ID, text, who said it,
  kind, score, validity and the flags that are set, whose it is and whom it is about, its
  tier when it is not its kind's default); floats have 3 significant digits, and
  fields that are null or at their default are left out. ``explain`` shows every field, the
  score components included. The Python API's ``RecallResult`` is unchanged: this is only
  how MCP writes it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..models import DEFAULT_TIERS, RecallItem, RecallResult

NULL = {"type": "null"}
LEFT_OUT = frozenset(
    (
        "title",
        "default",
        "format",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "additionalProperties",
    )
)
"""Schema keywords ``tools/list`` leaves out: titles repeat the property names; defaults
are the server's business; lengths, counts and unknown properties are checked by the
server, whose errors name the argument and the rule (docs/mcp-tools.md lists the limits);
times are plain strings whose form the server's instructions state once. Types, enums,
numeric ranges, ``required`` and descriptions stay."""


def lean_schema(schema: dict[str, Any], hidden: Collection[str] = ()) -> dict[str, Any]:
    """``schema`` (pydantic's ``model_json_schema()`` of a tool's argument model) as
    ``tools/list`` shows it, without the properties named in ``hidden``."""
    defs = schema.get("$defs", {})
    lean = lean_node({key: value for key, value in schema.items() if key != "$defs"}, defs)
    properties = lean.get("properties", {})
    for name in hidden:
        del properties[name]
    return lean


def lean_node(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:  # a nested model, inlined; its docstring is for Python readers
        model = defs[node["$ref"].rsplit("/", 1)[-1]]
        inlined = {key: value for key, value in model.items() if key != "description"}
        node = inlined | {key: value for key, value in node.items() if key != "$ref"}
    branches = node.get("anyOf", [])
    if NULL in branches and len(branches) == 2 and node.get("default", ...) is None:
        [kept] = [branch for branch in branches if branch != NULL]
        node = {key: value for key, value in node.items() if key not in ("anyOf", "default")}
        node = kept | node
        return lean_node(node, defs)
    lean: dict[str, Any] = {}
    for key, value in node.items():
        if key in LEFT_OUT:
            continue
        if key == "properties":
            lean[key] = {name: lean_node(field, defs) for name, field in value.items()}
        elif key == "items" and isinstance(value, dict):
            lean[key] = lean_node(value, defs)
        elif key == "anyOf":
            lean[key] = [lean_node(branch, defs) for branch in value]
        else:
            lean[key] = value
    return lean


RECALL_SHOWN = frozenset(
    {
        "id",
        "text",
        "role",
        "kind",
        "score",
        "valid_at",
        "invalid_at",
        "expired",
        "occurrences",
        "merged_ids",
        "gist",
        "coarse_time",
        "raw_fallback",
        "corrected_by",
        "truncated",
        "pinned",
        "person",
        "about",
    }
)
"""The item fields a recall shows without ``explain`` (when set: ``person`` and ``about``
only for what belongs to or is about someone of the registry); besides them, ``basis``
when it is ``inference`` (nobody said it), and ``occurred_at`` for a raw message (which
has no ``valid_at``)."""


def recall_answer(result: RecallResult, *, explain: bool, as_of_asked: bool) -> dict[str, Any]:
    """What ``memory_recall`` answers: the scope, how the items were ranked, the warnings
    (say, vectors that do not cover the scope), then the items. ``as_of`` and
    ``include_history`` are shown when asked for; the query and mode are the caller's own."""
    answer: dict[str, Any] = {
        "persona": result.persona,
        "project": result.project,
        "ranking": result.ranking,
        "warnings": result.warnings,
    }
    if as_of_asked:
        answer["as_of"] = result.model_dump(mode="json", include={"as_of"})["as_of"]
    if result.include_history:
        answer["include_history"] = True
    answer["items"] = [recall_entry(item, explain=explain) for item in result.items]
    return answer


def recall_entry(item: RecallItem, *, explain: bool) -> dict[str, Any]:
    """One recall item, without what is null or at its default."""
    fields = RecallItem.model_fields
    entry = {
        name: rounded(value)
        for name, value in item.model_dump(mode="json").items()
        if value is not None and value is not False and value != fields[name].default
    }
    if explain:
        return entry
    shown = RECALL_SHOWN | ({"basis"} if item.basis == "inference" else set())
    shown |= {"occurred_at"} if item.valid_at is None else set()
    # a tier is news only where it is not its kind's (a working note, a promoted memory)
    shown |= {"tier"} if item.kind and item.tier != DEFAULT_TIERS[item.kind] else set()
    return {name: value for name, value in entry.items() if name in shown}


def rounded(value: Any) -> Any:
    """Floats to 3 significant digits, in lists and objects too."""
    if isinstance(value, float):
        return float(f"{value:.3g}")
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [rounded(item) for item in value]
    return value
