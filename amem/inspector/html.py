"""The inspector's pages, rendered on the server as plain HTML.

Memory and event text is untrusted (anything a user or a model said), so every value
goes through ``escape`` on its way into a page, attributes and SVG included; the
response headers (``app``) also forbid scripts, so a missed escape could not run one.
There is no JavaScript at all: links and GET forms do everything.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from html import escape
from urllib.parse import urlencode

from ..models import (
    ConsolidationRun,
    Evidence,
    ListedEvent,
    ListedMemory,
    Listing,
    MemoryGraph,
    Person,
    RecallItem,
)
from .graph import MAX_NODES, Graph, layered_svg, svg
from .queries import ListingPage, MemoryDetail, PeoplePage, ScopesPage

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 2em 2em; color: #222; }
header { border-bottom: 1px solid #ccc; padding: .6em 0; margin-bottom: 1em; }
header .ro { color: #777; font-size: 12px; margin-left: 1em; }
nav a { margin-right: 1em; } nav a.here { font-weight: bold; text-decoration: none; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1em; }
th, td { border-bottom: 1px solid #e3e3e3; padding: .25em .6em; text-align: left; }
td { vertical-align: top; }
th { background: #f4f4f4; } span.num { text-align: right; font-variant-numeric: tabular-nums; }
.flag { font-size: 11px; padding: 0 .4em; border-radius: 3px; background: #eee; margin-left: .3em; }
.revoked { background: #f6d5d5; } .expired { background: #e4dcf3; } .raw { background: #fde9c4; }
pre.text { white-space: pre-wrap; background: #fafafa; border: 1px solid #e3e3e3; padding: .8em; }
form { margin: .5em 0 1em; } input[type=text] { width: 22em; } .error { color: #a00; }
.pager a { margin-right: 1.5em; } .muted { color: #777; }
"""


def href(path: str, **params: object) -> str:
    """A URL of the inspector; parameters that are None are left out."""
    given = {name: str(value) for name, value in params.items() if value is not None}
    return path + ("?" + urlencode(given) if given else "")


def link(url: str, text: str, *, here: bool = False) -> str:
    return f'<a href="{escape(url)}"{" class=here" if here else ""}>{escape(text)}</a>'


def when(value: datetime | None, empty: str = "—") -> str:
    return empty if value is None else value.isoformat()


def table(headings: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A table whose cells are already HTML (each caller escapes what it puts in one)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headings)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def flag(text: str, css: str = "") -> str:
    return f'<span class="flag {css}">{escape(text)}</span>'


def layout(title: str, body: str, *, path: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)} · amem inspector</title><style>{STYLE}</style></head><body>"
        f'<header><a href="/">amem inspector</a> · <span>{escape(path)}</span> '
        '<span class="ro">read-only</span></header>'
        f"<main><h1>{escape(title)}</h1>{body}</main></body></html>"
    )


def pager(first: str | None, following: str | None) -> str:
    links = []
    if first is not None:
        links.append(link(first, "« first page"))
    if following is not None:
        links.append(link(following, "next page »"))
    return f'<p class="pager">{"".join(links)}</p>' if links else ""


def cursor_pager(
    path: str, params: Mapping[str, object], limit: int, cursor: str | None, next_cursor: str | None
) -> str:
    """The pager of a list paged by cursor: its first page once past it (``cursor``), and
    the page after this one when there is one."""
    return pager(
        href(path, **params, limit=limit) if cursor else None,
        None if next_cursor is None else href(path, **params, cursor=next_cursor, limit=limit),
    )


def scopes(page: ScopesPage, *, path: str, limit: int, cursor: str | None) -> str:
    rows = [
        (
            link(
                href("/scope", persona=s.persona, project=s.project), f"{s.persona} / {s.project}"
            ),
            escape(s.persona),
            escape(s.project),
            f'<span class="num">{s.events}</span>',
            f'<span class="num">{s.memories}</span>',
        )
        for s in page.scopes
    ]
    body = (
        f"<p>{page.total} scope{'s' * (page.total != 1)} with events or memories.</p>"
        + table(("scope", "persona", "project", "events", "current memories"), rows)
        + cursor_pager("/", {}, limit, cursor, page.next_cursor)
    )
    return layout("Scopes", body, path=path)


TABS = (
    ("/scope", "memories"),
    ("/events", "events"),
    ("/people", "people"),
    ("/search", "search"),
    ("/graph", "graph"),
    ("/runs", "runs"),
)


def scope_nav(persona: str, project: str, here: str) -> str:
    tabs = " ".join(
        link(href(url, persona=persona, project=project), name, here=url == here)
        for url, name in TABS
    )
    return f"<nav>{tabs}</nav>"


def scope_title(persona: str, project: str) -> str:
    return f"{persona} / {project}"


def person_link(
    persona: str, project: str, person: str, names: dict[str, str], url: str = "/events"
) -> str:
    """A person by display name (their ID when the registry lacks them), linking to their
    events (or, ``url``, their memories)."""
    return link(
        href(url, persona=persona, project=project, person=person), names.get(person, person)
    )


def people_cell(
    persona: str, project: str, person: str | None, about: Sequence[str], names: dict[str, str]
) -> str:
    """Whose a memory is (its source event's person) and whom it is about."""
    owner = "" if person is None else person_link(persona, project, person, names)
    if not about:
        return owner
    others = ", ".join(person_link(persona, project, p, names, "/scope") for p in about)
    return f"{owner}{' · ' if owner else ''}about {others}"


def person_line(person: Person, persona: str, project: str, url: str, what: str) -> str:
    """What a page filtered by ``person`` shows, and a link to everyone's."""
    return (
        f"<p>Only <b>{escape(person.display_name)}</b> ({escape(person.id)}): {what}. "
        f"{link(href(url, persona=persona, project=project), 'everyone')}</p>"
    )


def totals_line(listing: Listing, one: str, many: str) -> str:
    parts = ", ".join(f"{n} {escape(k)}" for k, n in listing.totals.items() if n)
    noun = one if listing.total == 1 else many
    return f"<p>{listing.total} {noun}{f' ({parts})' if parts else ''}.</p>"


def memories(
    page: ListingPage,
    *,
    path: str,
    as_of: str | None,
    limit: int,
    cursor: str | None,
) -> str:
    listing, person = page.listing, page.person
    persona, project = listing.persona, listing.project
    person_id = None if person is None else person.id
    kept = (
        "" if person is None else f'<input type="hidden" name="person" value="{escape(person.id)}">'
    )
    form = (
        '<form method="get" action="/scope">'
        f'<input type="hidden" name="persona" value="{escape(persona)}">'
        f'<input type="hidden" name="project" value="{escape(project)}">'
        f"{kept}"
        '<label>as_of <input type="text" name="as_of" placeholder="2026-01-01T00:00:00Z" '
        f'value="{escape(as_of or "")}"></label> <button>show</button> '
        f"{link(href('/scope', persona=persona, project=project), 'all memories')}</form>"
    )
    if as_of:
        scope_line = (
            f"<p>Memories valid at <b>{escape(as_of)}</b> (not revoked, started, not ended).</p>"
        )
    else:
        scope_line = "<p>Every memory, revoked and expired ones flagged.</p>"
    if person is not None:
        scope_line += person_line(
            person,
            persona,
            project,
            "/scope",
            "the memories derived from their events or about them",
        )
    rows = [
        memory_row(m, persona, project, page.names)
        for m in listing.items
        if isinstance(m, ListedMemory)
    ]
    params = {"persona": persona, "project": project, "person": person_id, "as_of": as_of}
    body = (
        scope_nav(persona, project, "/scope")
        + form
        + scope_line
        + totals_line(listing, "memory", "memories")
        + table(
            (
                "memory",
                "kind",
                "basis",
                "subject · key",
                "valid from",
                "valid until",
                "said by",
                "person",
            ),
            rows,
        )
        + cursor_pager("/scope", params, limit, cursor, listing.next_cursor)
    )
    return layout(scope_title(persona, project), body, path=path)


def memory_row(m: ListedMemory, persona: str, project: str, names: dict[str, str]) -> list[str]:
    flags = (flag("revoked", "revoked") if m.revoked else "") + (
        flag("expired", "expired") if m.expired else ""
    )
    key = " · ".join(escape(part) for part in (m.subject, m.fact_key) if part)
    return [
        link(href("/memory", persona=persona, project=project, id=m.id), m.text) + flags,
        escape(m.kind),
        escape(m.basis),
        key,
        escape(when(m.valid_at)),
        escape(when(m.invalid_at, "open")),
        escape(m.role),
        people_cell(persona, project, m.person, m.about, names),
    ]


def events(page: ListingPage, *, path: str, limit: int, cursor: str | None) -> str:
    listing, person = page.listing, page.person
    persona, project = listing.persona, listing.project
    rows = [
        event_row(e, persona, project, page.names)
        for e in listing.items
        if isinstance(e, ListedEvent)
    ]
    params = {
        "persona": persona,
        "project": project,
        "person": None if person is None else person.id,
    }
    whose = (
        ""
        if person is None
        else person_line(person, persona, project, "/events", "the events of their relationship")
    )
    body = (
        scope_nav(persona, project, "/events")
        + "<p>The timeline of original events, newest stored first.</p>"
        + whose
        + totals_line(listing, "event", "events")
        + table(
            ("seq", "occurred at", "role", "person", "category", "session", "status", "text"), rows
        )
        + cursor_pager("/events", params, limit, cursor, listing.next_cursor)
    )
    return layout(scope_title(persona, project), body, path=path)


def event_row(e: ListedEvent, persona: str, project: str, names: dict[str, str]) -> list[str]:
    text = e.text + ("…" if e.truncated else "")
    return [
        f'<span class="num">{e.seq}</span>',
        escape(when(e.occurred_at)),
        escape(e.role),
        "" if e.person is None else person_link(persona, project, e.person, names),
        escape(e.category),
        escape(e.session or ""),
        escape(e.status),
        link(href("/event", persona=persona, project=project, id=e.id), text),
    ]


def people(
    page: PeoplePage, persona: str, project: str, *, path: str, limit: int, cursor: str | None
) -> str:
    rows = [
        (
            person_link(persona, project, c.person.id, {c.person.id: c.person.display_name}),
            escape(", ".join(c.person.aliases)),
            escape(c.person.id),
            link(
                href("/events", persona=persona, project=project, person=c.person.id), str(c.events)
            ),
            link(
                href("/scope", persona=persona, project=project, person=c.person.id),
                str(c.memories),
            ),
            escape(" · ".join(v for v in (c.person.locale, c.person.timezone) if v)),
            escape(c.person.notes or ""),
        )
        for c in page.people
    ]
    params = {"persona": persona, "project": project}
    body = (
        scope_nav(persona, project, "/people")
        + f"<p>{page.total} {'person' if page.total == 1 else 'people'} in the scope's "
        "registry, oldest first. A person's events are those of their relationship; their "
        "memories, the current ones derived from those events or about them.</p>"
        + table(
            ("person", "aliases", "id", "events", "memories", "locale · timezone", "notes"), rows
        )
        + cursor_pager("/people", params, limit, cursor, page.next_cursor)
    )
    return layout(scope_title(persona, project), body, path=path)


RESULT_HEADINGS = (
    "#",
    "score",
    "text",
    "kind",
    "lexical",
    "semantic",
    "link",
    "basis",
    "confidence",
    "freshness",
)


def search(
    persona: str,
    project: str,
    *,
    path: str,
    query: str,
    as_of: str | None,
    history: bool,
    items: list[RecallItem] | None,
    first_rank: int,
    limit: int,
    page: int,
    more: bool,
) -> str:
    form = (
        '<form method="get" action="/search">'
        f'<input type="hidden" name="persona" value="{escape(persona)}">'
        f'<input type="hidden" name="project" value="{escape(project)}">'
        f'<input type="hidden" name="limit" value="{limit}">'
        f'<label>query <input type="text" name="q" value="{escape(query)}"></label> '
        '<label>as_of <input type="text" name="as_of" placeholder="now" '
        f'value="{escape(as_of or "")}"></label> '
        f'<label><input type="checkbox" name="history" value="1"{" checked" * history}> '
        "include ended facts</label> <button>search</button></form>"
        '<p class="muted">Fast (lexical) recall, as <code>Scope.recall(mode="fast")</code> '
        "ranks it; semantic is 0 here: the inspector calls no embedding endpoint.</p>"
    )
    body = scope_nav(persona, project, "/search") + form
    if items is not None:
        rows = [result_row(n, item, persona, project) for n, item in enumerate(items, first_rank)]
        body += (
            table(RESULT_HEADINGS, rows)
            if rows
            else "<p>No evidence for this query: nothing is returned.</p>"
        )
        params = {
            "persona": persona,
            "project": project,
            "q": query,
            "as_of": as_of,
            "history": "1" if history else None,
            "limit": limit,
        }
        body += pager(
            href("/search", **params) if page > 1 else None,
            href("/search", **params, page=page + 1) if more else None,
        )
    return layout(scope_title(persona, project), body, path=path)


def result_row(rank: int, item: RecallItem, persona: str, project: str) -> list[str]:
    c = item.components
    target = "/event" if item.raw_fallback else "/memory"
    flags = (
        (flag("raw event", "raw") if item.raw_fallback else "")
        + (flag("ended", "expired") if item.expired else "")
        + (flag("gist") if item.gist else "")
    )
    return [
        f'<span class="num">{rank}</span>',
        f'<span class="num">{item.score:.3f}</span>',
        link(href(target, persona=persona, project=project, id=item.id), item.text) + flags,
        escape(item.kind or "event"),
        *(
            f'<span class="num">{part:.3f}</span>'
            for part in (c.lexical, c.semantic, c.link, c.basis, c.confidence, c.freshness)
        ),
    ]


def memory(detail: MemoryDetail, graph: Graph, *, path: str) -> str:
    m, source, names = detail.memory, detail.source, detail.names
    persona, project = m.persona, m.project
    state = (
        flag("revoked", "revoked")
        if detail.revoked_at
        else flag("open", "")
        if m.invalid_at is None
        else flag("closed", "expired")
    )
    fields = [
        ("text", escape(m.text) + state),
        ("id", escape(m.id)),
        ("kind · basis", f"{escape(m.kind)} · {escape(m.basis)}"),
        ("confidence", f"{m.confidence:.2f}"),
        ("subject · fact key", " · ".join(escape(v) for v in (m.subject, m.fact_key) if v)),
        ("valid", f"{escape(when(m.valid_at))} → {escape(when(m.invalid_at, 'open'))}"),
        ("person", "" if m.person is None else person_link(persona, project, m.person, names)),
        ("about", ", ".join(person_link(persona, project, p, names, "/scope") for p in m.about)),
        ("quote", escape(m.quote)),
        ("gist", escape(m.gist or "")),
        ("created", escape(when(m.created_at))),
        (
            "revoked",
            escape(when(detail.revoked_at, "no"))
            + (f" ({escape(detail.revoke_reason)})" if detail.revoke_reason else ""),
        ),
        (
            "source event",
            link(
                href("/event", persona=persona, project=project, id=source.id),
                f"{source.id} ({source.role}, {source.category}, {source.status})",
            ),
        ),
    ]
    names = {node.id: node.text for node in graph.nodes}
    links = [
        (
            escape(lk.kind),
            link(
                href("/memory", persona=persona, project=project, id=lk.from_id), names[lk.from_id]
            ),
            link(href("/memory", persona=persona, project=project, id=lk.to_id), names[lk.to_id]),
            escape(lk.note or ""),
        )
        for lk in graph.links
    ]
    if graph.left_out:
        more = "at least " if graph.capped else ""
        left = (
            f"<p>{more}{graph.left_out} more linked memories are not drawn "
            f"(at most {MAX_NODES} are).</p>"
        )
    else:
        left = ""
    if links:
        drawn = (
            svg(graph, persona, project)
            + left
            + '<p class="muted">Solid arrow: a correction points at the memory it revoked. '
            "Dashed: related. Grey: revoked.</p>" + table(("link", "from", "to", "note"), links)
        )
    else:
        drawn = "<p>No corrections or relations link this memory.</p>"
    body = (
        scope_nav(persona, project, "/memory")
        + table(("field", "value"), ((escape(k), v) for k, v in fields))
        + "<h2>Corrections and relations</h2>"
        + drawn
    )
    return layout("Memory", body, path=path)


def event(evidence: Evidence, names: dict[str, str], *, path: str, limit: int) -> str:
    e, persona, project = evidence.event, evidence.persona, evidence.project
    fields = [
        ("id", escape(e.id)),
        ("seq", str(e.seq)),
        ("role · category", f"{escape(e.role)} · {escape(e.category)}"),
        ("person", "" if e.person is None else person_link(persona, project, e.person, names)),
        ("session", escape(e.session or "")),
        ("source", escape(e.source or "")),
        ("occurred at", escape(when(e.occurred_at))),
        ("stored at", escape(when(e.ingested_at))),
        ("status", escape(e.status)),
        ("extraction error", f'<span class="error">{escape(e.error or "")}</span>'),
        ("characters", str(evidence.total_chars)),
    ]
    derived = [
        (link(href("/memory", persona=persona, project=project, id=m.id), m.text), escape(m.kind))
        for m in evidence.memories
    ]
    end = evidence.offset + len(evidence.text)
    shown = f"characters {evidence.offset}–{end} of {evidence.total_chars}"
    if e.evicted_at is not None:  # the row and its memories stay, the words do not
        shown = f"evicted at {when(e.evicted_at)}: its raw text was let go, its memories stay"
    params = {"persona": persona, "project": project, "id": e.id, "limit": limit}
    body = (
        scope_nav(persona, project, "/event")
        + table(("field", "value"), ((escape(k), v) for k, v in fields))
        + f"<h2>Text</h2><p class=muted>{shown}</p><pre class=text>{escape(evidence.text)}</pre>"
        + pager(
            href("/event", **params) if evidence.offset else None,
            None
            if evidence.next_offset is None
            else href("/event", **params, offset=evidence.next_offset),
        )
        + "<h2>Memories derived from it</h2>"
        + (table(("memory", "kind"), derived) if derived else "<p>None (current).</p>")
    )
    return layout("Event", body, path=path)


def graph(
    persona: str, project: str, found: MemoryGraph, *, path: str, seed: str, depth: int
) -> str:
    """A scope's graph around a seed (``Scope.graph``): a form for the seed and depth,
    the drawing, what was left out, and every edge as a table."""
    form = (
        '<form method="get" action="/graph">'
        f'<input type="hidden" name="persona" value="{escape(persona)}">'
        f'<input type="hidden" name="project" value="{escape(project)}">'
        f'<label>seed <input type="text" name="seed" value="{escape(seed)}" '
        'placeholder="memory, event or person ID, a name, or a query"></label> '
        '<label>depth <select name="depth">'
        + "".join(f'<option value="{n}"{" selected" * (n == depth)}>{n}</option>' for n in range(4))
        + "</select></label> <button>draw</button></form>"
        '<p class="muted">As <code>Scope.graph</code> reads it: no seed starts from the pinned '
        "and newest current memories; a query starts from fast recall's best items.</p>"
    )
    c = found.coverage
    more = "at least " if c.at_least else ""
    left = (
        f"<p>{c.nodes_shown} nodes and {c.edges_shown} links shown, {c.depth_reached} links "
        f"deep; {more}{c.nodes_left_out} more nodes and {more}{c.edges_left_out} more links "
        "were left out.</p>"
        if c.truncated
        else f"<p>{c.nodes_shown} nodes and {c.edges_shown} links: nothing left out.</p>"
    )
    labels = {node.id: node.label for node in found.nodes}
    rows = [
        (escape(e.kind), escape(labels[e.from_id]), escape(labels[e.to_id]), escape(e.note or ""))
        for e in found.edges
    ]
    if found.nodes:
        drawn = (
            f"<p>Seed taken as {escape(found.seeded_by)}.</p>"
            + layered_svg(found, persona, project)
            + left
            + '<p class="muted">Orange: a seed. Blue: a memory (grey: revoked, lilac: ended); '
            "green: a message; pink: a person; light grey: a session. Arrows: corrections, "
            "merges and successors; dashed: related.</p>"
            + (table(("link", "from", "to", "note"), rows) if rows else "")
        )
    else:
        drawn = "<p>Nothing matches this seed: the graph is empty.</p>"
    body = scope_nav(persona, project, "/graph") + form + drawn
    return layout(scope_title(persona, project), body, path=path)


def runs(persona: str, project: str, found: list[ConsolidationRun], *, path: str) -> str:
    """The scope's consolidation runs, newest first, each linked to its page."""
    rows = [
        (
            link(href("/run", persona=persona, project=project, id=run.id), run.id),
            flag(run.status, "" if run.status == "applied" else "muted"),
            escape(run.session or "(the whole scope)"),
            str(len(run.input.events)),
            str(len(run.input.memories)),
            "—" if run.result is None else str(len(run.result.entries)),
            "—" if run.result is None else str(len(run.result.evicted)),
            when(run.updated_at),
        )
        for run in found
    ]
    headings = ("run", "status", "session", "messages", "memories", "entries", "evicted", "at")
    body = (
        scope_nav(persona, project, "/runs")
        + f"<p>The newest {len(found)} consolidation runs: what the host's model was given "
        "(<code>prepare_consolidation</code>) and what its patch did "
        "(<code>apply_consolidation</code>).</p>"
        + (table(headings, rows) if rows else "<p>No consolidation run yet.</p>")
    )
    return layout(scope_title(persona, project), body, path=path)


def run(found: ConsolidationRun, *, path: str) -> str:
    """One consolidation run: its frozen messages and memories, the last rejected patch and
    its error, and what the applied patch did."""
    persona, project = found.persona, found.project
    events = [
        (
            link(href("/event", persona=persona, project=project, id=e.id), e.id),
            escape(e.role),
            f"{e.offset}–{e.end} of {e.total}",
            escape(e.text) if e.text is not None else flag("not kept", "muted"),
        )
        for e in found.input.events
    ]
    memories = [
        (
            link(href("/memory", persona=persona, project=project, id=m.id), m.id),
            escape(m.kind),
            escape(m.text) if m.text is not None else flag("not kept", "muted"),
            f"<code>{escape(m.version)}</code>",
        )
        for m in found.input.memories
    ]
    attempt = (
        "<h3>Last rejected patch</h3>"
        f"<pre>{escape(json.dumps(found.candidate, ensure_ascii=False, indent=1))}</pre>"
        f"<p>{escape(json.dumps(found.error, ensure_ascii=False))}</p>"
        if found.candidate is not None or found.error is not None
        else ""
    )
    body = (
        scope_nav(persona, project, "/runs")
        + f"<h2>Run {escape(found.id)}</h2>"
        + f"<p>{flag(found.status)} session {escape(found.session or '(the whole scope)')}, "
        f"prepared {when(found.created_at)}, last changed {when(found.updated_at)}"
        + (", more messages wait for the next run" if found.input.more else "")
        + ".</p><h3>Messages</h3>"
        + (table(("message", "role", "characters", "text"), events) if events else "<p>None.</p>")
        + "<h3>Memories</h3>"
        + (table(("memory", "kind", "text", "version"), memories) if memories else "<p>None.</p>")
        + attempt
        + applied(found)
    )
    return layout(scope_title(persona, project), body, path=path)


def applied(found: ConsolidationRun) -> str:
    """What a run's applied patch did, entry by entry, and the messages it evicted."""
    if found.result is None:
        return ""
    rows = [
        (escape(entry.op), escape(entry.memory_id or ""), escape(", ".join(entry.ids)))
        for entry in found.result.entries
    ]
    evicted = ", ".join(found.result.evicted)
    return (
        "<h3>Applied</h3>"
        + (table(("op", "memory", "changed"), rows) if rows else "<p>Nothing to change.</p>")
        + (f"<p>Evicted: {escape(evicted)}</p>" if evicted else "")
    )


def error(status: int, code: str, message: str, *, path: str) -> str:
    body = (
        f'<p class="error"><b>{escape(code)}</b>: {escape(message)}</p>'
        f"<p>{link('/', 'all scopes')}</p>"
    )
    return layout(f"Error {status}", body, path=path)
