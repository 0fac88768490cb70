"""A memory's neighbourhood: the memories its corrections and relations link it to,
breadth first, at most ``MAX_NODES`` of them, and its drawing as inline SVG.

Links are ``corrects`` (a correction to the memory it revoked) and ``related``. The work
is bounded however connected a memory is: each drawn memory has its links read once, at
most ``LINKS_PER_NODE`` of them. Linked memories that did not fit are counted, not drawn
(a lower bound when a memory had more links than were read).
"""

from __future__ import annotations

import math
import sqlite3
from collections import deque
from dataclasses import dataclass
from html import escape
from urllib.parse import urlencode

MAX_NODES = 12
LINKS_PER_NODE = 100
LINKS = """
select from_id, to_id, kind, note from relations
where persona = :persona and project = :project and (from_id = :id or to_id = :id)
order by created_at, from_id, to_id limit :limit
"""
NODE = """
select id, text, kind, revoked_at is not null, invalid_at is not null and invalid_at <= :now
from memories where id = :id
"""


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    text: str
    kind: str
    revoked: bool
    expired: bool


@dataclass(frozen=True, slots=True)
class Link:
    from_id: str
    to_id: str
    kind: str
    """``corrects`` (from the correction to the memory it revoked) or ``related``."""
    note: str | None
    """A correction's reason."""


@dataclass(frozen=True, slots=True)
class Graph:
    nodes: list[Node]
    """The memory asked for first, then the others in breadth-first order."""
    links: list[Link]
    """Links between drawn memories."""
    left_out: int
    """Linked memories not drawn (at least this many when ``capped``)."""
    capped: bool


def neighbourhood(
    conn: sqlite3.Connection, persona: str, project: str, memory_id: str, now: str
) -> Graph:
    """The memories linked to ``memory_id``, directly or through others, nearest first."""
    drawn = [memory_id]
    queue = deque(drawn)
    links: dict[tuple[str, str, str], Link] = {}
    left_out: set[str] = set()
    capped = False
    while queue:
        node = queue.popleft()
        params = {"persona": persona, "project": project, "id": node, "limit": LINKS_PER_NODE}
        rows = conn.execute(LINKS, params).fetchall()
        capped = capped or len(rows) == LINKS_PER_NODE
        for from_id, to_id, kind, note in rows:
            other = to_id if from_id == node else from_id
            if other not in drawn:
                if len(drawn) == MAX_NODES:
                    left_out.add(other)
                    continue
                drawn.append(other)
                queue.append(other)
            links[(from_id, to_id, kind)] = Link(from_id, to_id, kind, note)
    nodes = [node_row(conn, node_id, now) for node_id in drawn]
    return Graph(nodes, list(links.values()), len(left_out), capped)


def node_row(conn: sqlite3.Connection, memory_id: str, now: str) -> Node:
    memory_id, text, kind, revoked, expired = conn.execute(
        NODE, {"id": memory_id, "now": now}
    ).fetchone()
    return Node(memory_id, text, kind, bool(revoked), bool(expired))


WIDTH, HEIGHT, RADIUS, NODE_RADIUS = 720, 440, 160, 16
LABEL_CHARS = 28


def svg(graph: Graph, persona: str, project: str) -> str:
    """The graph as an inline ``<svg>``: the memory asked for in the middle, the others on
    a circle around it; each node links to its page; ``corrects`` is a solid arrow from
    the correction, ``related`` a dashed line. Every text is escaped."""
    centre = (WIDTH / 2, HEIGHT / 2)
    places = {graph.nodes[0].id: centre}
    others = graph.nodes[1:]
    for n, node in enumerate(others):
        angle = 2 * math.pi * n / len(others) - math.pi / 2
        places[node.id] = (
            centre[0] + RADIUS * math.cos(angle),
            centre[1] + RADIUS * math.sin(angle),
        )
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" aria-label="links of this memory">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="8" markerHeight="8" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
    ]
    for link in graph.links:
        parts.append(edge(places[link.from_id], places[link.to_id], link.kind))
    for n, node in enumerate(graph.nodes):
        parts.append(vertex(node, places[node.id], persona, project, centre=n == 0))
    parts.append("</svg>")
    return "".join(parts)


def edge(start: tuple[float, float], end: tuple[float, float], kind: str) -> str:
    (x1, y1), (x2, y2) = start, end
    length = math.hypot(x2 - x1, y2 - y1) or 1.0
    dx, dy = (x2 - x1) / length * NODE_RADIUS, (y2 - y1) / length * NODE_RADIUS
    style = 'marker-end="url(#arrow)"' if kind == "corrects" else 'stroke-dasharray="6 4"'
    return (
        f'<line x1="{x1 + dx:.1f}" y1="{y1 + dy:.1f}" x2="{x2 - dx:.1f}" y2="{y2 - dy:.1f}" '
        f'stroke="#555" stroke-width="1.5" {style}><title>{kind}</title></line>'
    )


def vertex(
    node: Node, place: tuple[float, float], persona: str, project: str, *, centre: bool
) -> str:
    x, y = place
    fill = (
        "#bbb"
        if node.revoked
        else "#e8a33d"
        if centre
        else "#c9b8e8"
        if node.expired
        else "#6fa8dc"
    )
    label = node.text if len(node.text) <= LABEL_CHARS else node.text[: LABEL_CHARS - 1] + "…"
    href = "/memory?" + urlencode({"persona": persona, "project": project, "id": node.id})
    state = " (revoked)" if node.revoked else " (expired)" if node.expired else ""
    return (
        f'<a href="{escape(href)}"><title>{escape(node.kind + state + ": " + node.text)}</title>'
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{NODE_RADIUS}" fill="{fill}" stroke="#333"/>'
        f'<text x="{x:.1f}" y="{y + NODE_RADIUS + 14:.1f}" text-anchor="middle" '
        f'font-size="12">{escape(label)}</text></a>'
    )
