"""The bounded memory graph (issue 32): ``Scope.graph`` around a memory, an event, a
person or a query, what each kind of link brings in, and how its bounds are kept and
reported. The MCP tool and the inspector's page have their tests beside theirs."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest
from helpers import derive, inspector_client, linked_ids, memory_draft

import amem

pytestmark = pytest.mark.anyio

AT = "2026-03-01T10:00:00Z"
SCOPE = {"persona": "assistant", "project": "support"}


class Sample(NamedTuple):
    tom: amem.Person
    cat: amem.MemoryRecord
    """From Tom's event in session ``morning``, about Anna."""
    corrected: amem.Correction
    """``cat`` was misheard: its correction."""
    city: amem.MemoryRecord
    """Related to the correction's memory."""
    anna: amem.Person


async def sample(scope: amem.Scope) -> Sample:
    tom = await scope.upsert_person("tom", display_name="Tom", aliases=["Tommy"])
    anna = await scope.upsert_person("anna", display_name="Anna")
    cat = await derive(
        scope,
        "Anna has a cat called Miso",
        "Anna has a cat called Mito",
        event_id="e-cat",
        session="morning",
        person="tom",
        about=["anna"],
        at=AT,
    )
    corrected = await scope.correct(cat.id, "Anna has a cat called Miso", reason="misheard")
    city = await derive(
        scope, "Tom lives in Suzhou", "Tom lives in Suzhou", event_id="e-city", at=AT
    )
    await scope.relate(corrected.memory.id, city.id)
    return Sample(tom, cat, corrected, city, anna)


def node(graph: amem.MemoryGraph, node_id: str) -> amem.GraphNode:
    [found] = [n for n in graph.nodes if n.id == node_id]
    return found


def links(graph: amem.MemoryGraph) -> set[tuple[str, str, str]]:
    return {(e.from_id, e.kind, e.to_id) for e in graph.edges}


async def test_a_memory_shows_its_source_session_person_and_links(scope: amem.Scope) -> None:
    s = await sample(scope)
    graph = await scope.graph(seed=s.cat.id, depth=2)
    assert graph.seeded_by == "memory"
    assert graph.seeds == [s.cat.id]
    assert graph.nodes[0].id == s.cat.id
    assert graph.nodes[0].hop == 0
    assert {
        (s.cat.id, "derived_from", "e-cat"),
        ("e-cat", "in_session", "session:morning"),
        ("e-cat", "belongs_to", "tom"),
        (s.cat.id, "about", "anna"),
        (s.corrected.memory.id, "corrects", s.cat.id),
        (s.corrected.memory.id, "related", s.city.id),
    } <= links(graph)
    assert node(graph, "e-cat").label.startswith("user: Anna has a cat")
    assert node(graph, "tom").label == "Tom"
    assert node(graph, "tom").type == "person"
    assert node(graph, "session:morning").type == "session"
    assert node(graph, s.city.id).hop == 2
    assert [n.hop for n in graph.nodes] == sorted(n.hop for n in graph.nodes)
    shown = {n.id for n in graph.nodes}
    assert all(e.from_id in shown and e.to_id in shown for e in graph.edges)
    assert not graph.coverage.truncated
    assert graph.coverage.nodes_shown == len(graph.nodes)
    assert graph.coverage.depth_reached == 2


async def test_a_revoked_memory_is_shown_marked(scope: amem.Scope) -> None:
    s = await sample(scope)
    graph = await scope.graph(seed=s.corrected.memory.id)
    revoked = node(graph, s.cat.id)
    assert (revoked.status, revoked.current) == ("revoked", False)
    fixed = node(graph, s.corrected.memory.id)
    assert (fixed.status, fixed.current, fixed.kind, fixed.tier) == (
        "current",
        True,
        "fact",
        "profile",
    )
    [edge] = [e for e in graph.edges if e.kind == "corrects"]
    assert edge.note == "misheard"


async def test_depth_bounds_the_walk(scope: amem.Scope) -> None:
    s = await sample(scope)
    alone = await scope.graph(seed=s.cat.id, depth=0)
    assert [n.id for n in alone.nodes] == [s.cat.id]
    assert alone.edges == []
    one = await scope.graph(seed=s.cat.id, depth=1)
    assert {n.hop for n in one.nodes} == {0, 1}
    assert s.city.id not in {n.id for n in one.nodes}, "two links away"
    assert "session:morning" not in {n.id for n in one.nodes}


async def test_max_nodes_and_max_edges_are_kept_and_reported(scope: amem.Scope) -> None:
    hub = await derive(scope, "The hub", event_id="hub", at=AT)
    for n in range(12):
        other = await derive(scope, f"Spoke number {n}", event_id=f"spoke-{n}", at=AT)
        await scope.relate(hub.id, other.id)
    graph = await scope.graph(seed=hub.id, max_nodes=5)
    assert len(graph.nodes) == 5
    assert graph.nodes[0].id == hub.id
    c = graph.coverage
    assert (c.nodes_shown, c.truncated) == (5, True)
    assert c.nodes_left_out == 13 - 4, "12 spokes and the source event, 4 shown"
    assert c.edges_left_out == c.nodes_left_out
    again = await scope.graph(seed=hub.id, max_nodes=5)
    assert again == graph, "the same snapshot gives the same graph"

    few = await scope.graph(seed=hub.id, max_edges=3)
    assert len(few.edges) == 3
    assert len(few.nodes) == 14
    assert (few.coverage.edges_left_out, few.coverage.truncated) == (10, True)
    bare = await scope.graph(seed=hub.id, max_edges=0)
    assert bare.edges == []
    assert bare.coverage.edges_left_out == 13


async def test_a_person_seeds_by_id_or_by_name(scope: amem.Scope) -> None:
    s = await sample(scope)
    by_id = await scope.graph(seed="tom")
    assert (by_id.seeded_by, by_id.seeds) == ("person", ["tom"])
    assert ("e-cat", "belongs_to", "tom") in links(by_id)
    by_alias = await scope.graph(seed="tommy")
    assert by_alias.seeds == ["tom"]
    assert by_alias.nodes == by_id.nodes
    about = await scope.graph(seed="Anna")
    assert (s.cat.id, "about", "anna") in links(about)


async def test_a_query_seeds_from_fast_recall(scope: amem.Scope) -> None:
    s = await sample(scope)
    graph = await scope.graph(seed="Suzhou")
    assert graph.seeded_by == "query"
    assert graph.seeds[0] == s.city.id, "the best item first"
    shown = {n.id for n in graph.nodes}
    assert {"e-city", s.corrected.memory.id} <= shown
    nothing = await scope.graph(seed="zeppelin")
    assert (nothing.seeded_by, nothing.nodes, nothing.edges) == ("query", [], [])
    assert not nothing.coverage.truncated


async def test_an_event_seed_shows_its_memories(scope: amem.Scope) -> None:
    s = await sample(scope)
    graph = await scope.graph(seed="e-city")
    assert graph.seeded_by == "event"
    assert (s.city.id, "derived_from", "e-city") in links(graph)


async def test_without_a_seed_the_newest_and_pinned_memories_start_it(
    scope: amem.Scope,
) -> None:
    s = await sample(scope)
    await scope.pin(s.city.id)
    graph = await scope.graph(depth=0)
    assert graph.seeded_by == "recent"
    assert graph.seeds[0] == s.city.id, "pinned first"
    assert set(graph.seeds) == {s.city.id, s.corrected.memory.id}, "current memories only"


async def test_another_scopes_ids_are_a_query_there(scope: amem.Scope) -> None:
    s = await sample(scope)
    elsewhere = scope._memory.scope(persona="assistant", project="elsewhere")
    graph = await elsewhere.graph(seed=s.cat.id)
    assert (graph.seeded_by, graph.nodes) == ("query", [])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"depth": 4}, "depth must be an integer from 0 to 3"),
        ({"depth": -1}, "depth must be an integer from 0 to 3"),
        ({"max_nodes": 0}, "max_nodes must be an integer from 1 to 500"),
        ({"max_edges": 1001}, "max_edges must be an integer from 0 to 1000"),
        ({"seed": ""}, "seed must not be empty"),
        ({"seed": 3}, "seed must be a string"),
    ],
)
async def test_bad_bounds_are_refused(
    scope: amem.Scope, arguments: dict[str, object], message: str
) -> None:
    with pytest.raises(amem.InvalidInput, match=message):
        await scope.graph(**arguments)  # type: ignore[arg-type]


# --- the inspector's page -----------------------------------------------------------------


@pytest.mark.one_backend  # HTML over the same reads: the event loop cannot change it
async def test_the_inspector_draws_a_scopes_graph_around_a_seed(
    mem: amem.Memory, scope: amem.Scope
) -> None:
    s = await sample(scope)
    await derive(scope, "<script>alert(1)</script> is my motto", event_id="e-x", at=AT)
    async with inspector_client(Path(mem.path)) as client:
        scope_page = (await client.get("/scope", params=SCOPE)).text
        assert 'href="/graph?persona=assistant&amp;project=support"' in scope_page
        params = SCOPE | {"seed": s.cat.id, "depth": "2"}
        page = (await client.get("/graph", params=params)).text
        svg = page[page.index("<svg") : page.index("</svg>")]
        found = await scope.graph(seed=s.cat.id, depth=2)
        assert svg.count("<circle") == len(found.nodes)
        assert s.corrected.memory.id in linked_ids(svg, "/memory")
        assert "e-cat" in linked_ids(svg, "/event")
        assert 'marker-end="url(#arrow)"' in svg  # the correction
        assert 'stroke-dasharray="6 4"' in svg  # the relation
        assert "nothing left out" in page

        by_query = (await client.get("/graph", params=SCOPE | {"seed": "motto"})).text
        assert "<script>" not in by_query
        assert "&lt;script&gt;" in by_query
        assert "Seed taken as query" in by_query

        person = (await client.get("/graph", params=SCOPE | {"seed": "Tommy"})).text
        assert "Seed taken as person" in person
        empty = (await client.get("/graph", params=SCOPE | {"seed": "zeppelin"})).text
        assert "the graph is empty" in empty
        refused = await client.get("/graph", params=SCOPE | {"depth": "4"})
        assert refused.status_code == 400
        assert "depth must be between 0 and 3" in refused.text


# --- explanations: what brought a recalled item in -----------------------------------------


async def test_a_recalled_item_says_what_brought_it_in(scope: amem.Scope) -> None:
    s = await sample(scope)
    hits = await scope.recall("Suzhou")
    via = {item.id: item.via for item in hits.items}
    assert via[s.city.id] == ["lexical"]
    assert via[s.corrected.memory.id] == ["link"], "related to the memory that matched"
    raw = await scope.submit_event("a zeppelin flew over", role="user", occurred_at=AT)
    [item] = (await scope.recall("zeppelin")).items
    assert (item.id, item.raw_fallback, item.via) == (raw.event_id, True, ["lexical"])


async def test_explain_says_which_of_the_query_terms_an_item_holds(scope: amem.Scope) -> None:
    tea = await scope.submit_event("我每天早上喝绿茶", role="user", occurred_at=AT)
    [memory] = await scope.add_memories(
        tea.event_id, [memory_draft("User drinks green tea every morning", "喝绿茶")]
    )
    plain = await scope.recall("green tea in the morning")
    assert [item.matched for item in plain.items] == [[]], "only asked with explain"
    [item] = (await scope.recall("green tea in the morning", explain=True)).items
    assert item.id == memory.id
    assert item.matched == ["green", "tea", "morn"], "the English stems its words hold"
    [item] = (await scope.recall("绿茶 咖啡", explain=True)).items
    assert item.matched[0] == "绿茶", "found through its source message's words"
    assert "咖啡" not in item.matched
    with pytest.raises(amem.InvalidInput):
        await scope.recall("tea", explain="yes")


async def test_two_nodes_of_the_last_hop_show_the_link_between_them(scope: amem.Scope) -> None:
    event = await scope.submit_event("I moved to Suzhou and adopted a cat", role="user")
    home, cat = await scope.add_memories(
        event.event_id,
        [
            memory_draft("User lives in Suzhou", "I moved to Suzhou"),
            memory_draft("User has a cat", "adopted a cat"),
        ],
    )
    await scope.relate(home.id, cat.id)
    graph = await scope.graph(seed=home.id, depth=1)
    assert {n.id for n in graph.nodes} == {home.id, cat.id, event.event_id}
    assert (cat.id, "derived_from", event.event_id) in links(graph), "both shown: linked"
    assert graph.coverage.nodes_left_out == 0
