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

from ..models import GraphNode, MemoryGraph

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
    parts = [svg_start(WIDTH, HEIGHT, "links of this memory")]
    for link in graph.links:
        parts.append(edge(places[link.from_id], places[link.to_id], link.kind))
    for n, node in enumerate(graph.nodes):
        parts.append(vertex(node, places[node.id], persona, project, centre=n == 0))
    parts.append("</svg>")
    return "".join(parts)


def svg_start(width: float, height: float, label: str) -> str:
    """An ``<svg>`` element's start, with the arrow head lines may end in."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'aria-label="{escape(label)}">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="8" markerHeight="8" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>'
    )


ARROWS = frozenset(("corrects", "merged_into", "supersedes"))
"""Links drawn as an arrow (lineage, from the newer memory); ``related`` is dashed, the
rest (a memory's source, a message's session and person, whom a memory is about) thin."""


def edge(start: tuple[float, float], end: tuple[float, float], kind: str) -> str:
    (x1, y1), (x2, y2) = start, end
    length = math.hypot(x2 - x1, y2 - y1) or 1.0
    dx, dy = (x2 - x1) / length * NODE_RADIUS, (y2 - y1) / length * NODE_RADIUS
    style = (
        'marker-end="url(#arrow)"'
        if kind in ARROWS
        else 'stroke-dasharray="6 4"'
        if kind == "related"
        else 'stroke-opacity="0.5"'
    )
    return (
        f'<line x1="{x1 + dx:.1f}" y1="{y1 + dy:.1f}" x2="{x2 - dx:.1f}" y2="{y2 - dy:.1f}" '
        f'stroke="#555" stroke-width="1.5" {style}><title>{kind}</title></line>'
    )


def vertex(
    node: Node, place: tuple[float, float], persona: str, project: str, *, centre: bool
) -> str:
    fill = (
        "#bbb"
        if node.revoked
        else "#e8a33d"
        if centre
        else "#c9b8e8"
        if node.expired
        else "#6fa8dc"
    )
    href = "/memory?" + urlencode({"persona": persona, "project": project, "id": node.id})
    state = " (revoked)" if node.revoked else " (expired)" if node.expired else ""
    return circle(place, fill, href, node.kind + state + ": " + node.text, node.text)


def circle(place: tuple[float, float], fill: str, href: str | None, title: str, text: str) -> str:
    """A node: a circle with its label below it and ``title`` on hover, a link to ``href``
    (none when None). Every text is escaped here."""
    x, y = place
    label = text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"
    drawn = (
        f"<title>{escape(title)}</title>"
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{NODE_RADIUS}" fill="{fill}" stroke="#333"/>'
        f'<text x="{x:.1f}" y="{y + NODE_RADIUS + 14:.1f}" text-anchor="middle" '
        f'font-size="12">{escape(label)}</text>'
    )
    return f"<g>{drawn}</g>" if href is None else f'<a href="{escape(href)}">{drawn}</a>'


# --- a scope's graph around a seed (``store.graph``, the ``/graph`` page) -----------------

COLUMN, ROW, MARGIN = 230, 58, 40
FILLS = {"memory": "#6fa8dc", "event": "#9fd39f", "person": "#f4b6c2", "session": "#ddd"}
"""A node's fill by type; a seed is orange, a revoked memory grey, an ended one lilac."""


def layered_svg(graph: MemoryGraph, persona: str, project: str) -> str:
    """A ``MemoryGraph`` as an inline ``<svg>``, one column per hop: the seeds on the left,
    each further hop to the right, newest at the top. Memories and events link to their
    pages, people to the graph around them."""
    columns: dict[int, list[GraphNode]] = {}
    for node in graph.nodes:
        columns.setdefault(node.hop, []).append(node)
    places = {
        node.id: (MARGIN + 40 + hop * COLUMN, MARGIN + row * ROW)
        for hop, nodes in columns.items()
        for row, node in enumerate(nodes)
    }
    width = 2 * MARGIN + 80 + max(columns, default=0) * COLUMN
    height = 2 * MARGIN + max((len(nodes) for nodes in columns.values()), default=1) * ROW
    parts = [svg_start(width, height, "memory graph")]
    for link in graph.edges:
        parts.append(edge(places[link.from_id], places[link.to_id], link.kind))
    for node in graph.nodes:
        parts.append(graph_vertex(node, places[node.id], persona, project))
    parts.append("</svg>")
    return "".join(parts)


def graph_vertex(node: GraphNode, place: tuple[float, float], persona: str, project: str) -> str:
    fill = (
        "#bbb"
        if node.status == "revoked"
        else "#e8a33d"
        if node.hop == 0
        else "#c9b8e8"
        if node.status == "ended"
        else FILLS[node.type]
    )
    scope = {"persona": persona, "project": project}
    href = {
        "memory": "/memory?" + urlencode(scope | {"id": node.id}),
        "event": "/event?" + urlencode(scope | {"id": node.id}),
        "person": "/graph?" + urlencode(scope | {"seed": node.id}),
    }.get(node.type)
    what = node.kind or node.type
    state = f" ({node.status})" if node.type == "memory" and not node.current else ""
    return circle(place, fill, href, f"{what}{state}: {node.label}", node.label)
