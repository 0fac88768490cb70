"""The inspector's web application: GET routes over one database file, read-only.

Routes (every one takes ``persona`` and ``project`` but ``/``; pages take ``limit`` and
``cursor``):

/         scopes with their counts
/scope    a scope's memories, with validity intervals; ``as_of`` shows those valid then
/events   a scope's timeline of original events
/people   a scope's registry of people, with how many events and memories are theirs
/search   fast recall (``q``, ``as_of``, ``history``, ``page``) with score components
/memory   one memory (``id``): its fields and its corrections and relations as a graph
/event    one event (``id``): its text a page at a time (``offset``), its memories
/graph    the scope's graph around a seed (``seed``, ``depth``), as ``Scope.graph`` reads it

``/scope`` and ``/events`` take ``person`` (a person ID of the registry): only that
person's events, and the memories derived from them or about them.

Any other method than GET (and HEAD, which is GET without a body) answers 405. Only the
hosts ``127.0.0.1`` and ``localhost`` are served, so a web page elsewhere cannot reach the
inspector by rebinding a name of its own to this machine.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

import anyio.to_thread
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from ..config import Settings
from ..db.times import db_time, utc_now
from ..errors import AmemError, InvalidInput, NotFound
from ..inputs import parse_time, require_name, require_text
from ..limits import (
    DEFAULT_GRAPH_DEPTH,
    DEFAULT_GRAPH_EDGES,
    DEFAULT_GRAPH_NODES,
    DEFAULT_LIST_LIMIT,
    DEFAULT_READ_CHARS,
    MAX_GRAPH_DEPTH,
    MAX_QUERY_CHARS,
    MAX_RECALL_LIMIT,
)
from ..recall import recall_memories, recalled_refs
from ..recall.query import RecallQuery, aging
from ..store.consolidation import list_runs, load_run
from ..store.graph import SEED_ITEMS, memory_graph
from . import html, queries
from .graph import Graph, neighbourhood
from .source import read

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_PAGE_SIZE = 25
MAX_PAGE_SIZE = 100
"""Rows on one page of scopes, memories, events or search results."""
HOSTS = ["127.0.0.1", "localhost"]
HEADERS = {
    # no script may run, whatever a page holds; styles and SVG are inline
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
STATUS = {InvalidInput: 400, NotFound: 404}


def create_app(path: Path, settings: Settings) -> Starlette:
    """The inspector for the database at ``path`` (checked with ``source.readable_file``);
    ``settings`` gives recall its freshness and fading knobs."""

    async def reading(
        fn: Callable[Concatenate[sqlite3.Connection, P], T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        return await anyio.to_thread.run_sync(functools.partial(read, path, fn, *args, **kwargs))

    async def scopes(request: Request) -> Response:
        limit, cursor = page_size(request), optional(request, "cursor")
        page = await reading(queries.scopes_page, cursor, limit)
        return page_response(html.scopes(page, path=str(path), limit=limit, cursor=cursor))

    async def memories(request: Request) -> Response:
        persona, project = scope_of(request)
        limit, cursor = page_size(request), optional(request, "cursor")
        as_of_text, person = optional(request, "as_of"), person_of(request)
        query = queries.memories_query(limit, utc_now(), as_of_time(as_of_text), person)
        listing = await reading(queries.listing_page, persona, project, query, cursor)
        page = html.memories(listing, path=str(path), as_of=as_of_text, limit=limit, cursor=cursor)
        return page_response(page)

    async def events(request: Request) -> Response:
        persona, project = scope_of(request)
        limit, cursor = page_size(request), optional(request, "cursor")
        query = queries.events_query(limit, utc_now(), person_of(request))
        listing = await reading(queries.listing_page, persona, project, query, cursor)
        return page_response(html.events(listing, path=str(path), limit=limit, cursor=cursor))

    async def people(request: Request) -> Response:
        persona, project = scope_of(request)
        limit, cursor = page_size(request), optional(request, "cursor")
        page = await reading(queries.people_page, persona, project, cursor, limit)
        body = html.people(page, persona, project, path=str(path), limit=limit, cursor=cursor)
        return page_response(body)

    async def search(request: Request) -> Response:
        persona, project = scope_of(request)
        size, page = page_size(request), number(request, "page", 1, MAX_RECALL_LIMIT)
        text = optional(request, "q")
        as_of_text = optional(request, "as_of")
        as_of = as_of_time(as_of_text) or utc_now()
        history = optional(request, "history") is not None
        items, more = None, False
        if text is not None:
            shown = page * size
            if shown > MAX_RECALL_LIMIT:
                raise InvalidInput(f"page times limit must be at most {MAX_RECALL_LIMIT}")
            text = require_text(text, "q", max_chars=MAX_QUERY_CHARS)
            # one more tells whether another page follows
            query = recall_query(persona, project, text, shown + 1, as_of, history)
            found = (await reading(recall_memories, query)).items
            more = len(found) > shown and shown < MAX_RECALL_LIMIT
            items = found[shown - size : shown]
        body = html.search(
            persona,
            project,
            path=str(path),
            query=text or "",
            as_of=as_of_text,
            history=history,
            items=items,
            first_rank=(page - 1) * size + 1,
            limit=size,
            page=page,
            more=more,
        )
        return page_response(body)

    def recall_query(
        persona: str,
        project: str,
        text: str,
        limit: int,
        as_of: datetime,
        history: bool = False,
    ) -> RecallQuery:
        """Fast recall's request, with the settings' freshness and fading knobs."""
        return RecallQuery(
            persona=persona,
            project=project,
            query=text,
            limit=limit,
            as_of=as_of,
            include_history=history,
            **aging(settings),
        )

    async def memory(request: Request) -> Response:
        persona, project = scope_of(request)
        memory_id = require_name(request.query_params.get("id"), "id")
        now = db_time(utc_now())
        detail, graph = await reading(memory_and_links, persona, project, memory_id, now)
        return page_response(html.memory(detail, graph, path=str(path)))

    async def scope_graph(request: Request) -> Response:
        persona, project = scope_of(request)
        seed = optional(request, "seed")
        depth = number(request, "depth", 0, MAX_GRAPH_DEPTH, default=DEFAULT_GRAPH_DEPTH)
        query = None
        if seed is not None:
            seed = require_text(seed, "seed", max_chars=MAX_QUERY_CHARS)
            found_by = recall_query(persona, project, seed, SEED_ITEMS, utc_now())
            query = functools.partial(recalled_refs, q=found_by)
        found = await reading(
            memory_graph,
            persona,
            project,
            seed=seed,
            query=query,
            depth=depth,
            max_nodes=DEFAULT_GRAPH_NODES,
            max_edges=DEFAULT_GRAPH_EDGES,
            now=db_time(utc_now()),
        )
        body = html.graph(persona, project, found, path=str(path), seed=seed or "", depth=depth)
        return page_response(body)

    async def event(request: Request) -> Response:
        persona, project = scope_of(request)
        event_id = require_name(request.query_params.get("id"), "id")
        offset = number(request, "offset", 0, 2**31)
        limit = number(request, "limit", 1, DEFAULT_READ_CHARS, default=DEFAULT_READ_CHARS)
        evidence, names = await reading(
            queries.event_page, persona, project, event_id, offset, limit
        )
        if evidence.memory is not None:  # a memory ID: it has its own page
            raise NotFound("no event with this id in this scope")
        return page_response(html.event(evidence, names, path=str(path), limit=limit))

    async def runs(request: Request) -> Response:
        persona, project = scope_of(request)
        found = await reading(list_runs, persona, project, None, DEFAULT_LIST_LIMIT)
        return page_response(html.runs(persona, project, found, path=str(path)))

    async def run(request: Request) -> Response:
        persona, project = scope_of(request)
        run_id = require_name(request.query_params.get("id"), "id")
        found = await reading(load_run, persona, project, run_id)
        return page_response(html.run(found, path=str(path)))

    async def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, AmemError)
        status = next((s for cls, s in STATUS.items() if isinstance(exc, cls)), 503)
        page = html.error(status, exc.code, exc.message, path=str(path))
        return page_response(page, status)

    routes = [
        Route("/", scopes, methods=["GET"]),
        Route("/scope", memories, methods=["GET"]),
        Route("/events", events, methods=["GET"]),
        Route("/people", people, methods=["GET"]),
        Route("/search", search, methods=["GET"]),
        Route("/memory", memory, methods=["GET"]),
        Route("/event", event, methods=["GET"]),
        Route("/graph", scope_graph, methods=["GET"]),
        Route("/runs", runs, methods=["GET"]),
        Route("/run", run, methods=["GET"]),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=HOSTS)],
        exception_handlers={AmemError: refused},
    )


def memory_and_links(
    conn: sqlite3.Connection, persona: str, project: str, memory_id: str, now: str
) -> tuple[queries.MemoryDetail, Graph]:
    """A memory and its neighbourhood, from one snapshot."""
    detail = queries.memory_detail(conn, persona, project, memory_id)
    return detail, neighbourhood(conn, persona, project, memory_id, now)


def page_response(content: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(content, status_code=status, headers=HEADERS)


def optional(request: Request, name: str) -> str | None:
    """A query parameter; absent and empty are the same (an empty form field)."""
    value = request.query_params.get(name)
    return value or None


def scope_of(request: Request) -> tuple[str, str]:
    params = request.query_params
    return require_name(params.get("persona"), "persona"), require_name(
        params.get("project"), "project"
    )


def person_of(request: Request) -> str | None:
    """The ``person`` a page is filtered by: a person ID, or None for everyone."""
    value = optional(request, "person")
    return None if value is None else require_name(value, "person")


def number(request: Request, name: str, low: int, high: int, *, default: int | None = None) -> int:
    value = optional(request, name)
    if value is None:
        return low if default is None else default
    try:
        parsed = int(value)
    except ValueError:
        raise InvalidInput(f"{name} must be an integer") from None
    if not low <= parsed <= high:
        raise InvalidInput(f"{name} must be between {low} and {high}")
    return parsed


def page_size(request: Request) -> int:
    return number(request, "limit", 1, MAX_PAGE_SIZE, default=DEFAULT_PAGE_SIZE)


def as_of_time(value: str | None) -> datetime | None:
    return None if value is None else parse_time(value, "as_of")
