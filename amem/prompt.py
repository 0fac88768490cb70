"""A context pack as plain prompt text (``ContextPack.render``), built from its JSON.

The notice that everything is quoted evidence, never instructions, comes first; then one
section per component in the pack's order, one line per item ending with the ID a model
can cite (and ``read`` for the full evidence). Built only from the pack's ``context``, so
the text holds exactly what the JSON holds and the same pack always renders the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def render_context(context: str) -> str:
    """The prompt text of a pack's JSON ``context``; empty for an empty context."""
    if not context:
        return ""
    document: dict[str, Any] = json.loads(context)
    scope = document["scope"]
    lines = [
        document["notice"],
        f"Session {document['session']} (persona {scope['persona']}, project "
        f"{scope['project']}), as of {document['as_of']}.",
    ]
    for name, render in SECTIONS.items():
        if name in document:
            lines += ["", *render(document[name])]
    return "\n".join(lines)


def persona_lines(persona: dict[str, Any]) -> list[str]:
    return [f"Persona ({persona['id']}, version {persona['version']}):", persona["text"]]


def person_lines(person: dict[str, Any]) -> list[str]:
    names = ", ".join(person.get("aliases", []))
    lines = [
        f"Person: {person['display_name']}"
        + (f" (also {names})" if names else "")
        + f" [{person['id']}]"
    ]
    for name in ("locale", "timezone", "notes"):
        if name in person:
            lines.append(f"- {name}: {one_line(person[name])}")
    if "state" in person:
        lines.append(f"- state: {json.dumps(person['state'], ensure_ascii=False)}")
    return lines


def profile_lines(memories: list[dict[str, Any]]) -> list[str]:
    return ["Their profile:", *memory_lines(memories)[1:]]


def checkpoint_lines(checkpoint: dict[str, Any]) -> list[str]:
    lines = [f"Task checkpoint (saved {checkpoint['saved_at']}):"]
    lines.append(f"- goal: {one_line(checkpoint['goal'])}")
    for field in ("completed", "pending", "constraints"):
        if checkpoint[field]:
            lines.append(f"- {field}: " + "; ".join(map(one_line, checkpoint[field])))
    if checkpoint["next_action"]:
        lines.append(f"- next action: {one_line(checkpoint['next_action'])}")
    return lines


def agreement_lines(agreements: list[dict[str, Any]]) -> list[str]:
    return ["Agreements:"] + [
        f"- {one_line(item['text'])} ({item['kind']} since {item['since']}) [{item['id']}]"
        for item in agreements
    ]


def memory_lines(memories: list[dict[str, Any]]) -> list[str]:
    return ["Memories:"] + [
        f"- {one_line(item['text'])} ({memory_note(item)}) [{item['id']}]" for item in memories
    ]


def memory_note(item: dict[str, Any]) -> str:
    notes = [item["kind"], item["time"]]
    if item["expired"]:
        notes.append("no longer valid")
    if item["gist"]:
        notes.append("gist")
    return ", ".join(notes)


def emotion_lines(emotion: dict[str, Any]) -> list[str]:
    return [
        f"Current emotion: {emotion['label']} (valence {emotion['valence']:.2f}, arousal "
        f"{emotion['arousal']:.2f}, expressed {emotion['expressed_at']}) [{emotion['id']}]"
    ]


def event_lines(events: list[dict[str, Any]]) -> list[str]:
    return ["Recent events of the session:"] + [
        f"- {item['occurred_at']} {item['role']}: {one_line(item['text'])} [{item['id']}]"
        for item in events
    ]


def one_line(text: str) -> str:
    """One item, one line: line breaks inside a text become spaces."""
    return " ".join(text.splitlines())


SECTIONS: dict[str, Callable[[Any], list[str]]] = {
    "persona": persona_lines,
    "person": person_lines,
    "profile": profile_lines,
    "checkpoint": checkpoint_lines,
    "agreements": agreement_lines,
    "memories": memory_lines,
    "emotion": emotion_lines,
    "recent_events": event_lines,
}
