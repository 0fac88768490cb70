"""A scope's memory graph around a seed (``Scope.graph``): memories, their source events,
the people and sessions those belong to, and the links between them, read breadth first
and bounded however connected the scope is. No model is called.

Nodes and the edges that reach them:

- a memory: ``derived_from`` its source event; ``corrects``, ``related``, ``merged_into``
  and ``supersedes`` to and from other memories (the ``relations`` table); ``about``
  each person of the registry it is about;
- an event: the memories ``derived_from`` it; ``in_session`` its session; ``belongs_to``
  its person;
- a person: the events that ``belong_to`` them and the memories ``about`` them;
- a session: its events (``in_session``).

The walk admits the seeds (hop 0), then every node one link further, newest first, hop by
hop up to ``depth``, until ``max_nodes``; an edge is shown when both its ends are, up to
``max_edges``. Each expanded node has at most ``LINKS_PER_NODE`` of its links read, and the
walk stops once nodes and edges are both full: ``coverage`` counts what was seen and left
out, as lower bounds (``at_least``) when either cut the reading short. The same snapshot
always gives the same graph.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..db.rules import CURRENT_MEMORY
from ..db.times import from_db_time
from ..models import GraphCoverage, GraphEdge, GraphNode, GraphNodeType, MemoryGraph, SeedKind
from .people import find_people

LINKS_PER_NODE = 200
"""Links read of one node while expanding it."""
SEED_ITEMS = 5
"""Recall items a query seed starts from."""
Found = Callable[[sqlite3.Connection], list[tuple[Literal["memory", "event"], str]]]
"""A query seed's best recall items as ``(doc_kind, id)``, on the walk's connection (the
caller's recall: the store does not rank)."""
RECENT_SEEDS = 10
"""Memories a graph without a seed starts from: the pinned ones, then the newest."""
GRAPH_LABEL_CHARS = 200
EVENT_LABEL_CHARS = 80
SESSION = "session:"
"""What a session node's ID starts with (a session's name is no ID of its own)."""

MEMORY_NODE = """
select id, text, kind, tier, event_id, about, created_at,
    case when revoked_at is not null then 'revoked'
         when invalid_at is not null and invalid_at <= :now then 'ended'
         else 'current' end
from memories where id = :id and persona = :persona and project = :project
"""
EVENT_NODE = f"""
select id, role, substr(text, 1, {EVENT_LABEL_CHARS + 1}), session, person, occurred_at,
    case when evicted_at is null then status else 'evicted' end
from events where id = :id and persona = :persona and project = :project
"""
PERSON_NODE = """
select id, display_name, updated_at from people
where id = :id and persona = :persona and project = :project
"""
SESSION_NODE = """
select max(occurred_at) from events
where persona = :persona and project = :project and session = :id
"""
RELATIONS_OF = """
select r.from_id, r.to_id, r.kind, r.note, m.created_at from relations r
join memories m on m.id = case when r.from_id = :id then r.to_id else r.from_id end
where r.persona = :persona and r.project = :project and (r.from_id = :id or r.to_id = :id)
order by m.created_at desc, m.id limit :limit
"""
DERIVED_FROM = """
select id, created_at from memories
where event_id = :id and persona = :persona and project = :project
order by num desc limit :limit
"""
EVENTS_OF_PERSON = """
select id, occurred_at from events
where persona = :persona and project = :project and person = :id
order by seq desc limit :limit
"""
MEMORIES_ABOUT = """
select m.id, m.created_at from memories m, json_each(m.about) j
where m.persona = :persona and m.project = :project and m.about is not null
  and j.value = :id
order by m.num desc limit :limit
"""
EVENTS_IN_SESSION = """
select id, occurred_at from events
where persona = :persona and project = :project and session = :id
order by seq desc limit :limit
"""
PEOPLE_WHEN = """
select id, updated_at from people where persona = :persona and project = :project
  and id in (select value from json_each(:ids))
"""
PINNED_MEMORIES = f"""
select id from memories m where persona = :persona and project = :project
  and pinned = 1 and {CURRENT_MEMORY} and (invalid_at is null or invalid_at > :now)
order by valid_at desc, id limit :limit
"""
NEWEST_MEMORIES = f"""
select id from memories m where persona = :persona and project = :project
  and {CURRENT_MEMORY} and (invalid_at is null or invalid_at > :now)
order by num desc limit :limit
"""
IS_MEMORY = "select 1 from memories where id = ? and persona = ? and project = ?"
IS_EVENT = "select 1 from events where id = ? and persona = ? and project = ?"
IS_PERSON = "select 1 from people where id = ? and persona = ? and project = ?"

Key = tuple[GraphNodeType, str]
"""A node as the walk knows it: its type and its own ID (a session's name)."""


@dataclass(frozen=True, slots=True)
class Link:
    """An edge as the walk finds it: from the node being expanded, to ``other``."""

    other: Key
    at: str
    """The other node's recency (a stored time)."""
    edge: GraphEdge


@dataclass(slots=True)
class Walk:
    conn: sqlite3.Connection
    params: dict[str, Any]
    max_nodes: int
    max_edges: int
    nodes: dict[Key, GraphNode] = field(default_factory=dict)
    rows: dict[Key, tuple[Any, ...]] = field(default_factory=dict)
    edges: dict[tuple[str, str, str], GraphEdge] = field(default_factory=dict)
    left_nodes: set[Key] = field(default_factory=set)
    left_edges: set[tuple[str, str, str]] = field(default_factory=set)
    at_least: bool = False

    def admit(self, key: Key, hop: int) -> bool:
        """Show the node ``key`` at ``hop`` if there is room and it exists."""
        if key in self.nodes:
            return True
        if len(self.nodes) >= self.max_nodes:
            self.left_nodes.add(key)
            return False
        node = self.node(key, hop)
        if node is None:
            return False
        self.nodes[key] = node
        return True

    def node(self, key: Key, hop: int) -> GraphNode | None:
        kind, own_id = key
        params = self.params | {"id": own_id}
        if kind == "memory":
            row = self.conn.execute(MEMORY_NODE, params).fetchone()
            if row is None:
                return None
            self.rows[key] = row
            memory_id, text, memory_kind, tier, _, _, created_at, status = row
            return GraphNode(
                id=memory_id,
                type="memory",
                label=clipped(text, GRAPH_LABEL_CHARS),
                hop=hop,
                kind=memory_kind,
                tier=tier,
                status=status,
                current=status == "current",
                at=from_db_time(created_at),
            )
        if kind == "event":
            row = self.conn.execute(EVENT_NODE, params).fetchone()
            if row is None:
                return None
            self.rows[key] = row
            event_id, role, text, _, _, occurred_at, status = row
            words = " ".join(text.split()) or "(no text kept)"
            return GraphNode(
                id=event_id,
                type="event",
                label=clipped(f"{role}: {words}", EVENT_LABEL_CHARS),
                hop=hop,
                status=status,
                role=role,
                at=from_db_time(occurred_at),
            )
        if kind == "person":
            row = self.conn.execute(PERSON_NODE, params).fetchone()
            if row is None:
                return None
            person_id, name, updated_at = row
            return GraphNode(
                id=person_id,
                type="person",
                label=clipped(name, GRAPH_LABEL_CHARS),
                hop=hop,
                at=from_db_time(updated_at),
            )
        (newest,) = self.conn.execute(SESSION_NODE, params).fetchone()
        if newest is None:
            return None
        return GraphNode(
            id=SESSION + own_id,
            type="session",
            label=clipped(own_id, GRAPH_LABEL_CHARS),
            hop=hop,
            at=from_db_time(newest),
        )

    def links(self, key: Key) -> list[Link]:
        """The links of a shown node, its own first, then newest first."""
        kind, own_id = key
        params = self.params | {"id": own_id, "limit": LINKS_PER_NODE}
        found: list[Link] = []
        if kind == "memory":
            memory_id, _, _, _, event_id, about, _, _ = self.rows[key]
            event = self.conn.execute(EVENT_NODE, self.params | {"id": event_id}).fetchone()
            if event is not None:
                edge = GraphEdge(from_id=memory_id, to_id=event_id, kind="derived_from")
                found.append(Link(("event", event_id), event[5], edge))
            people = json.loads(about) if about else []
            if people:
                whens = self.conn.execute(PEOPLE_WHEN, self.params | {"ids": json.dumps(people)})
                for person, updated_at in sorted(whens, key=newest):
                    edge = GraphEdge(from_id=memory_id, to_id=person, kind="about")
                    found.append(Link(("person", person), updated_at, edge))
            rows = self.read(RELATIONS_OF, params)
            for from_id, to_id, relation, note, created_at in rows:
                other = to_id if from_id == own_id else from_id
                edge = GraphEdge(from_id=from_id, to_id=to_id, kind=relation, note=note)
                found.append(Link(("memory", other), created_at, edge))
        elif kind == "event":
            _, _, _, session, person, _, _ = self.rows[key]
            if session is not None:
                edge = GraphEdge(from_id=own_id, to_id=SESSION + session, kind="in_session")
                (newest_at,) = self.conn.execute(SESSION_NODE, params | {"id": session}).fetchone()
                found.append(Link(("session", session), newest_at, edge))
            if person is not None:
                row = self.conn.execute(PERSON_NODE, params | {"id": person}).fetchone()
                if row is not None:
                    edge = GraphEdge(from_id=own_id, to_id=person, kind="belongs_to")
                    found.append(Link(("person", person), row[2], edge))
            for memory_id, created_at in self.read(DERIVED_FROM, params):
                edge = GraphEdge(from_id=memory_id, to_id=own_id, kind="derived_from")
                found.append(Link(("memory", memory_id), created_at, edge))
        elif kind == "person":
            for event_id, occurred_at in self.read(EVENTS_OF_PERSON, params):
                edge = GraphEdge(from_id=event_id, to_id=own_id, kind="belongs_to")
                found.append(Link(("event", event_id), occurred_at, edge))
            for memory_id, created_at in self.read(MEMORIES_ABOUT, params):
                edge = GraphEdge(from_id=memory_id, to_id=own_id, kind="about")
                found.append(Link(("memory", memory_id), created_at, edge))
        else:
            for event_id, occurred_at in self.read(EVENTS_IN_SESSION, params):
                edge = GraphEdge(from_id=event_id, to_id=SESSION + own_id, kind="in_session")
                found.append(Link(("event", event_id), occurred_at, edge))
        return found

    def read(self, sql: str, params: dict[str, Any]) -> list[Any]:
        rows = self.conn.execute(sql, params).fetchall()
        self.at_least = self.at_least or len(rows) == LINKS_PER_NODE
        return rows

    def full(self) -> bool:
        return len(self.nodes) >= self.max_nodes and len(self.edges) >= self.max_edges

    def add_edge(self, link: Link) -> None:
        edge = link.edge
        key = (edge.from_id, edge.to_id, edge.kind)
        if key in self.edges:
            return
        if link.other not in self.nodes or len(self.edges) >= self.max_edges:
            self.left_edges.add(key)
        else:
            self.edges[key] = edge


def newest(row: tuple[Any, ...]) -> tuple[str, str]:
    """Newest first, then by ID: ``(id, time)`` rows sorted with ``sorted(key=newest)``."""
    return (invert(row[1]), row[0])


def invert(text: str) -> str:
    """A key that sorts stored times newest first (they are ISO text of one width)."""
    return "".join(chr(0x10FFFF - ord(c)) for c in text)


def memory_graph(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    *,
    seed: str | None,
    query: Found | None,
    depth: int,
    max_nodes: int,
    max_edges: int,
    now: str,
) -> MemoryGraph:
    """The graph around ``seed`` (checked by the caller; ``query`` finds what it stands
    for as a query, used when it names no memory, event or person)."""
    walk = Walk(conn, {"persona": persona, "project": project, "now": now}, max_nodes, max_edges)
    seeded_by, seeds = seed_nodes(conn, persona, project, seed, query, now)
    shown: list[Key] = [key for key in seeds if walk.admit(key, 0)]
    frontier = list(shown)
    for hop in range(1, depth + 1):
        if not frontier:
            break
        if walk.full():
            walk.at_least = True
            break
        found: list[Link] = [link for key in frontier for link in walk.links(key)]
        candidates = {link.other: link.at for link in found if link.other not in walk.nodes}
        order = sorted(candidates, key=lambda key: (invert(candidates[key]), key))
        frontier = [key for key in order if walk.admit(key, hop)]
        for link in found:
            walk.add_edge(link)
    links_among_shown(walk, frontier)
    walk.left_nodes -= walk.nodes.keys()
    nodes = list(walk.nodes.values())
    edges = list(walk.edges.values())
    truncated = bool(walk.left_nodes or walk.left_edges or walk.at_least)
    return MemoryGraph(
        persona=persona,
        project=project,
        seed=seed,
        seeded_by=seeded_by,
        seeds=[walk.nodes[key].id for key in shown],
        depth=depth,
        nodes=nodes,
        edges=edges,
        coverage=GraphCoverage(
            nodes_shown=len(nodes),
            edges_shown=len(edges),
            nodes_left_out=len(walk.left_nodes),
            edges_left_out=len(walk.left_edges),
            depth_reached=max((node.hop for node in nodes), default=0),
            truncated=truncated,
            at_least=walk.at_least,
        ),
    )


def links_among_shown(walk: Walk, last_hop: list[Key]) -> None:
    """The edges between nodes of the last hop and other shown nodes: the walk went no
    further from them, but two shown nodes that are linked show their link."""
    beyond = walk.at_least  # links to nodes past the last hop are not counted as left out
    for key in last_hop:
        for link in walk.links(key):
            if link.other in walk.nodes:
                walk.add_edge(link)
    walk.at_least = beyond


def seed_nodes(
    conn: sqlite3.Connection,
    persona: str,
    project: str,
    seed: str | None,
    query: Found | None,
    now: str,
) -> tuple[SeedKind, list[Key]]:
    """What the walk starts from, and what the seed was taken as."""
    params = {"persona": persona, "project": project, "now": now, "limit": RECENT_SEEDS}
    if seed is None:
        pinned = [row[0] for row in conn.execute(PINNED_MEMORIES, params)]
        newest_ids = [row[0] for row in conn.execute(NEWEST_MEMORIES, params)]
        ids = list(dict.fromkeys([*pinned, *newest_ids]))[:RECENT_SEEDS]
        return "recent", [("memory", memory_id) for memory_id in ids]
    scope = (seed, persona, project)
    if conn.execute(IS_MEMORY, scope).fetchone():
        return "memory", [("memory", seed)]
    if conn.execute(IS_EVENT, scope).fetchone():
        return "event", [("event", seed)]
    if conn.execute(IS_PERSON, scope).fetchone():
        return "person", [("person", seed)]
    named = find_people(conn, persona, project, seed)
    if len(named) == 1:
        return "person", [("person", named[0].id)]
    if query is None:
        return "query", []
    found: list[Key] = [(kind, ident) for kind, ident in query(conn)]
    return "query", found[:SEED_ITEMS]


def clipped(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"
