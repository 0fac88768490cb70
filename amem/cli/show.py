"""How results print on the terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..models import (
        Capacity,
        Copy,
        Evidence,
        ListedEvent,
        ListedMemory,
        Listing,
        MemoryRecord,
        ScopeSummary,
        Status,
    )

LINE_CHARS = 120
"""Characters of a text a listing line shows (``--json`` shows it whole)."""
PREVIEW_ITEMS = 20
"""Events, and memories, a preview of an erasure lists; then how many more."""


def recall_line(item: Any) -> str:
    when = item.coarse_time or (item.valid_at or item.occurred_at).date().isoformat()
    label = "raw event" if item.raw_fallback else item.kind
    flags = "".join(
        f" [{flag}]"
        for flag, on in (
            ("gist", item.gist),
            ("expired", item.expired),
            ("truncated", item.truncated),
            (f"×{item.occurrences}", item.occurrences > 1),
            ("working", item.tier == "working"),
            ("pinned", item.pinned),
        )
        if on
    )
    return f"{item.score:.3f}  {when}  {item.role:<9} {label:<11} {item.text}{flags}  ({item.id})"


def one_line(text: str) -> str:
    """``text`` on one line (white space runs as one space), cut at ``LINE_CHARS``."""
    flat = " ".join(text.split())
    return flat if len(flat) <= LINE_CHARS else flat[: LINE_CHARS - 1] + "…"


def filed_under(subject: str | None, fact_key: str | None) -> str:
    """``subject/fact_key`` (either alone if the other is unset; empty if both are): what
    ``erase --subject/--fact-key`` takes."""
    return "/".join(part for part in (subject, fact_key) if part)


def memory_line(item: ListedMemory) -> str:
    key = filed_under(item.subject, item.fact_key)
    flags = "".join(
        f" [{flag}]"
        for flag, on in (
            (key, key),
            ("expired", item.expired),
            ("revoked", item.revoked),
            ("working", item.tier == "working"),
            ("pinned", item.pinned),
        )
        if on
    )
    when = item.valid_at.date().isoformat()
    return f"{when}  {item.kind:<11} {item.role:<9} {one_line(item.text)}{flags}  ({item.id})"


def event_line(item: ListedEvent) -> str:
    when = item.occurred_at.date().isoformat()
    cut = " [truncated]" if item.truncated else ""
    return (
        f"{item.seq:>6}  {when}  {item.role:<9} {item.status:<9} "
        f"{one_line(item.text)}{cut}  ({item.id})"
    )


def listing_lines(page: Listing) -> str:
    """The first line: the total of every page and its breakdown; then one line per item
    (for events, ``seq`` first); last, the cursor of the next page if there is one."""
    from ..models import ListedMemory  # when it runs: pydantic is loaded by then

    parts = ", ".join(f"{name} {n}" for name, n in page.totals.items() if n)
    lines = [
        f"{page.total} {page.what} in {page.persona}/{page.project}"
        + (f": {parts}" if parts else "")
    ]
    for item in page.items:
        lines.append(memory_line(item) if isinstance(item, ListedMemory) else event_line(item))
    if page.next_cursor is not None:
        lines.append(f"next page: --cursor {page.next_cursor} (with the same filters)")
    return "\n".join(lines)


def scope_lines(scopes: list[ScopeSummary]) -> str:
    if not scopes:
        return "(no scope stores anything yet)"
    width = max(len(s.persona) for s in scopes)
    pwidth = max(len(s.project) for s in scopes)
    lines = [f"{'persona':<{width}}  {'project':<{pwidth}}  {'events':>8}  {'memories':>8}"]
    lines += [
        f"{s.persona:<{width}}  {s.project:<{pwidth}}  {s.events:>8,}  {s.memories:>8,}"
        for s in scopes
    ]
    return "\n".join(lines)


def of_limit(used: int, limit: int | None, unit: str) -> str:
    if limit is None:
        return f"{used:,} {unit} (no limit)"
    return f"{used:,} of {limit:,} {unit} ({used / limit:.0%} of the limit)"


def capacity_lines(capacity: Capacity, *, postgres: bool = False) -> str:
    """The scope's capacity, then the database's size: a SQLite file's with its WAL and
    free pages, or (``postgres``) the whole PostgreSQL database's, which has neither."""
    c = capacity
    size = (
        f"database: {c.file_bytes:,} bytes (the whole PostgreSQL database)"
        if postgres
        else f"file: {c.file_bytes:,} bytes, WAL {c.wal_bytes:,} bytes, "
        f"free pages {c.free_bytes:,} bytes"
    )
    return "\n".join(
        [
            f"capacity of {c.persona}/{c.project}:",
            f"  events:  {of_limit(c.events, c.max_events, 'events')}",
            f"  text:    {of_limit(c.text_bytes, c.max_text_bytes, 'bytes')}",
            f"  index:   about {c.index_bytes:,} bytes; vectors: {c.vector_bytes:,} bytes",
            f"  memories stored: {c.memories:,} (revoked included)",
            size,
        ]
    )


def status_lines(status: Status, *, postgres: bool = False) -> str:
    events = ", ".join(f"{name} {n}" for name, n in status.events.items())
    kinds = ", ".join(f"{name} {n}" for name, n in status.memory_kinds.items() if n)
    coverage = (
        "no embedding endpoint"
        if status.coverage is None
        else f"{status.coverage:.0%} embedded ({status.fingerprint})"
    )
    extraction = "configured" if status.extraction else "not configured"
    lines = [
        f"scope {status.persona}/{status.project} (default {status.default_persona}/"
        f"{status.default_project}), schema version {status.schema_version}",
        f"events: {sum(status.events.values()):,} ({events})",
        f"memories: {status.memories:,} current{f' ({kinds})' if kinds else ''}, "
        f"{status.revoked:,} revoked",
        f"vectors: {coverage}; extraction: {extraction}",
        capacity_lines(status.capacity, postgres=postgres),
    ]
    return "\n".join(lines)


def erased_event(page: Evidence) -> str:
    """An event a preview lists: who said what (its start, ``one_line``), and its category
    unless it is a conversation message."""
    text = page.text + ("…" if page.next_offset is not None else "")
    category = "" if page.event.category == "conversation" else f" ({page.event.category})"
    return f"{page.event.role}{category}: {one_line(text)}"


def erased_memory(memory: MemoryRecord) -> str:
    """A memory a preview lists: its kind, text (``one_line``) and subject/fact_key."""
    about = "/".join(key for key in (memory.subject, memory.fact_key) if key)
    return f"{memory.kind}: {one_line(memory.text)}{f' ({about})' if about else ''}"


def preview_lines(
    event_ids: list[str],
    events: int,
    memory_ids: list[str],
    memories: int,
    said: dict[str, str] | None,
) -> list[str]:
    """What an erasure would take (or took), listed: the first ``PREVIEW_ITEMS`` events and
    memories, each with its ID and what ``said`` says of it (a memory missing there was
    revoked: it goes too; None: IDs alone, after the erasure), then how many more there
    are of each (``events``, ``memories``)."""
    lines = []
    for label, ids, total, unread in (
        ("event ", event_ids, events, ""),
        ("memory", memory_ids, memories, "(revoked)"),
    ):
        for item in ids[:PREVIEW_ITEMS]:
            shown = "" if said is None else said.get(item, unread)
            lines.append(f"  {label} {item}  {shown}".rstrip())
        if total > PREVIEW_ITEMS:
            lines.append(f"  and {total - PREVIEW_ITEMS:,} more {label.strip()}s")
    return lines


def copy_lines(copies: list[Copy], *, included: bool, dry_run: bool) -> list[str]:
    """The later events repeating the erased text (``copies``): whether they go too
    (``included``) or stay, then the first ``PREVIEW_ITEMS``, each with its ID, role, the
    repeated text (``one_line``) and the event it repeats."""
    if not copies:
        return []
    if included:
        fate = "would be erased too" if dry_run else "erased too"
    else:
        fate = "would stay" if dry_run else "left as they are"
        fate += "; --include-copies erases them too"
    some = "1 later event repeats" if len(copies) == 1 else f"{len(copies)} later events repeat"
    lines = [f"{some} the erased text (copies; {fate}):"]
    for copy in copies[:PREVIEW_ITEMS]:
        said = f"{copy.role}: {one_line(copy.match)}"
        lines.append(f"  copy   {copy.event_id}  {said}  (of {copy.of})")
    if len(copies) > PREVIEW_ITEMS:
        lines.append(f"  and {len(copies) - PREVIEW_ITEMS:,} more copies")
    return lines
