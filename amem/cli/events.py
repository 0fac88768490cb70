"""``submit``, ``remember``, ``recall`` and ``read``: store a message (``remember``: with one
memory quoting it), search, read the evidence; and the ways to forget: ``correct``,
``retract`` one memory, ``delete`` one message, ``erase`` many; ``evict`` lets the raw text
of derived events go, their memories kept."""

from __future__ import annotations

import argparse
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from ..errors import InvalidInput
from ..limits import (
    DEFAULT_READ_CHARS,
    DEFAULT_RECALL_LIMIT,
    MAX_RECALL_LIMIT,
    RECALL_MODES,
    ROLES,
    SUBMITTABLE_CATEGORIES,
)
from .common import (
    Command,
    dry_run_note,
    handler,
    keywords,
    opened,
    progress,
    read_text,
    show,
)
from .options import add_confirmation
from .people import add_person_option, optional_person
from .show import (
    LINE_CHARS,
    PREVIEW_ITEMS,
    copy_lines,
    erased_event,
    erased_memory,
    filed_under,
    preview_lines,
    recall_line,
)

if TYPE_CHECKING:
    from ..memory import Memory, Scope
    from ..models import (
        Correction,
        Deletion,
        Erasure,
        EventReceipt,
        Eviction,
        Evidence,
        MemoryRecord,
        RecallResult,
        Retraction,
        TombstoneImport,
    )

STATED_KINDS = ("fact", "preference", "agreement", "growth", "episode", "observation")
"""The memory kinds a user statement may be: every kind but ``emotion``, which comes only
from an assistant expression (``store.facts.check_basis``)."""
KEYED_KINDS = ("fact", "preference")
"""The kinds that take a ``fact_key`` (``store.facts.KEYED_KINDS``)."""
SUBMIT_OPTIONS = ("role", "event_id", "session", "source", "category", "occurred_at")
"""The options ``submit`` passes on to ``Scope.submit_event`` as given."""
RECALL_OPTIONS = ("limit", "mode", "as_of", "kinds", "exclude_event_ids", "exclude_from_seq")
"""The options ``recall`` passes on to ``Scope.recall`` as given."""
ERASE_SELECTORS = ("session", "since", "until", "subject", "fact_key")
"""The selectors ``erase`` passes on to ``Scope.erase`` as given (``--person`` is resolved
to a person ID first)."""


def add_commands(command: Command) -> None:
    submit = command(
        "submit",
        handler(submit_event, receipt_line, wait=True),
        "store one original event",
        ("Store one original message. TEXT '-' reads it from stdin. Prints the receipt."),
    )
    submit.add_argument("text", metavar="TEXT")
    submit.add_argument("--role", default="user", choices=ROLES)
    submit.add_argument("--event-id", help="stable ID (resubmitting is safe)")
    submit.add_argument("--session")
    submit.add_argument("--source")
    submit.add_argument("--category", default="conversation", choices=SUBMITTABLE_CATEGORIES)
    submit.add_argument(
        "--occurred-at", help="ISO-8601 with a UTC offset, or a date (default: now)"
    )
    add_person_option(submit, "the event (and what is derived from it) belongs to")

    remember = command(
        "remember",
        handler(remember_text, remembered_line, wait=True),
        "store a memory in one step (what the user said, as a fact)",
        (
            "Store TEXT as something the user said (a user event) and one memory of it in "
            "the same words, quoting all of it (basis user_statement), so recall finds it "
            "at once, no extraction model needed. TEXT '-' reads it from stdin. Prints the "
            "memory ID and the event ID. --subject with --fact-key names a single-valued "
            "property (--subject user --fact-key residence): a newer memory with the same "
            "key closes the older one (kinds fact and preference only). For a message an "
            "extraction model should read, use 'amem submit'."
        ),
    )
    remember.add_argument("text", metavar="TEXT", help="what the user said ('-': read stdin)")
    remember.add_argument(
        "--kind", default="fact", choices=STATED_KINDS, help="the memory's kind (default: fact)"
    )
    remember.add_argument("--subject", help="who or what it is about (e.g. user)")
    remember.add_argument(
        "--fact-key",
        metavar="KEY",
        help="with --subject: the single-valued property it sets (e.g. residence)",
    )
    remember.add_argument("--session", help="the event's session")
    remember.add_argument(
        "--occurred-at",
        metavar="TIME",
        help="when it was said, ISO-8601 with a UTC offset, or a date (default: now); the "
        "memory is true from then",
    )
    add_person_option(remember, "the event and its memory belong to")

    recall = command(
        "recall",
        handler(search, recall_lines),
        "search memories",
        ("Search the scope's memories (and raw events without memories) for QUERY."),
    )
    recall.add_argument("query", metavar="QUERY")
    recall.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_RECALL_LIMIT,
        help=f"1 to {MAX_RECALL_LIMIT} (default {DEFAULT_RECALL_LIMIT})",
    )
    recall.add_argument(
        "--mode",
        default="auto",
        choices=RECALL_MODES,
        help="auto (default): hybrid when the scope's vectors cover it, else fast (words only)",
    )
    recall.add_argument(
        "--as-of",
        help="what was true at this ISO-8601 time (a plain date: its start, 00:00 UTC)",
    )
    recall.add_argument("--history", action="store_true", help="include facts that expired")
    recall.add_argument("--kind", action="append", dest="kinds", help="only this kind (repeatable)")
    recall.add_argument(
        "--exclude-event",
        action="append",
        dest="exclude_event_ids",
        metavar="ID",
        help="leave out this event and its memories (repeatable)",
    )
    recall.add_argument(
        "--exclude-from-seq",
        type=int,
        metavar="N",
        help="leave out events with seq >= N and their memories",
    )
    add_person_option(recall, "only what belongs to or is about")

    read = command(
        "read",
        handler(read_evidence, evidence_lines),
        "page through the original evidence of an ID",
        ("Print the original event behind a memory or event ID, unaltered."),
    )
    read.add_argument("id", metavar="ID")
    read.add_argument("--offset", type=int, default=0)
    read.add_argument("--limit", type=int, default=DEFAULT_READ_CHARS)

    # --- forgetting: correct, retract one memory, delete one message, erase many ---------

    correct = command(
        "correct",
        handler(correct_memory, correction_line, wait=True),
        "replace a mistaken memory",
        (
            "Replace the memory MEMORY_ID, which is wrong (misheard, misread), with TEXT ('-' "
            "reads stdin): the mistaken memory is revoked, the corrected one keeps its start "
            "unless --valid-at is given, the original event is marked amended and the "
            "scope's checkpoints are invalidated. For a fact that changed, submit the new "
            "message instead."
        ),
    )
    correct.add_argument("memory_id", metavar="MEMORY_ID")
    correct.add_argument("text", metavar="TEXT")
    correct.add_argument("--reason", help="why (kept with the correction)")
    correct.add_argument("--valid-at", help="ISO-8601 start of the corrected fact, or a date")

    retract = command(
        "retract",
        handler(retract_memory, retraction_line),
        "forget one memory (its message and other memories stay)",
        (
            "Forget the memory MEMORY_ID alone: it leaves recall and context packs for good "
            "(kept, with --reason, for audit), its source event is marked amended so its raw "
            "text never comes back as raw fallback, and other memories of the same event "
            "stay. To erase the words themselves, use 'amem delete'."
        ),
    )
    retract.add_argument("memory_id", metavar="MEMORY_ID")
    retract.add_argument("--reason", help="why (kept with the memory)")

    delete = command(
        "delete",
        run_delete,
        "erase one message and everything derived from it (a preview unless --yes)",
        (
            "Permanently erase an event (--event), or the whole event a memory came from "
            "(--memory): the message, every memory derived from it (the memory's siblings "
            "too) and its correction lineage; the event ID can never be stored again. "
            "Without --yes it is a preview: it lists what would go and changes nothing. "
            "To forget one memory and keep its message, use 'amem retract'."
        ),
    )
    target = delete.add_mutually_exclusive_group(required=True)
    target.add_argument("--event", dest="event_id", metavar="ID", help="the event to erase")
    target.add_argument(
        "--memory", dest="memory_id", metavar="ID", help="erase the event this memory came from"
    )
    add_copies_option(delete)
    add_confirmation(delete, "erase")

    erase = command(
        "erase",
        run_erase,
        "erase many events (a preview unless --yes)",
        (
            "Permanently erase the scope's events that match every selector given, each with "
            "everything 'amem delete' would take with it, in batches (each its own "
            "transaction; an interrupted erase can be run again). Without --yes it is a "
            f"preview: it lists what would go (the first {PREVIEW_ITEMS} events and "
            "memories, then how many more) and changes nothing. --tombstones-from applies "
            "the tombstones of an archive (a newer export) to the whole database instead: "
            "events they name are erased in every scope, and can never be stored again."
        ),
    )
    erase.add_argument("--session", help="events of this session")
    erase.add_argument("--since", metavar="TIME", help="events that occurred at or after TIME")
    erase.add_argument("--until", metavar="TIME", help="events that occurred before TIME")
    erase.add_argument("--subject", help="events with a memory about this subject")
    erase.add_argument("--fact-key", metavar="KEY", help="with --subject: and this fact key")
    add_person_option(erase, "events belonging to (alone: with their state)")
    erase.add_argument("--everything", action="store_true", help="every event of the scope")
    erase.add_argument(
        "--tombstones-from", metavar="ARCHIVE", type=Path, help="apply an archive's tombstones"
    )
    add_copies_option(erase)
    add_confirmation(erase, "erase")

    evict = command(
        "evict",
        run_evict,
        "drop the raw text of derived events, keep their memories (a preview unless --yes)",
        (
            "Drop the raw text of events whose memories are derived (status extracted or "
            "amended), keeping the events' rows, their memories and the memories' quotes: "
            "recall and context packs keep working on the memories, the events show status "
            "'evicted' and no text, and the scope's text bytes drop (the words leave the "
            "file once the writer is idle). Events not derived yet are never evicted; named "
            "ones are listed as skipped, with the reason. Select events by ID, by --before, "
            "or both (both must hold). Without --yes it is a preview: it lists what would "
            "go and changes nothing. Resubmitting an evicted event's ID brings nothing back."
        ),
    )
    evict.add_argument("event_ids", metavar="ID", nargs="*", help="an event to evict")
    evict.add_argument(
        "--before", metavar="TIME", help="derived events that occurred before TIME (or a date)"
    )
    add_confirmation(evict, "evict")


async def submit_event(args: argparse.Namespace, _: Memory, scope: Scope) -> EventReceipt:
    return await scope.submit_event(
        read_text(args.text),
        **keywords(args, *SUBMIT_OPTIONS),
        person=await optional_person(scope, args.person),
    )


def receipt_line(r: EventReceipt) -> str:
    return (
        f"{'already stored' if r.duplicate else 'stored'} {r.event_id} "
        f"(seq {r.seq}, {r.status}) in {r.persona}/{r.project}"
    )


class Remembered(TypedDict):
    """What ``amem remember`` stored."""

    memory: MemoryRecord
    event: EventReceipt


async def remember_text(args: argparse.Namespace, _: Memory, scope: Scope) -> Remembered:
    """A user event saying TEXT and one memory quoting all of it (without the white space
    around it: stdin's last newline). The draft is checked before the event is stored, so
    a refused draft stores nothing."""
    from ..inputs import parse_drafts
    from ..limits import MAX_MEMORY_CHARS

    said = read_text(args.text)
    text = said.strip()
    if len(text) > MAX_MEMORY_CHARS:
        raise InvalidInput(
            f"a memory holds at most {MAX_MEMORY_CHARS:,} characters; store a longer text "
            "with 'amem submit' (an extraction model derives its memories)"
        )
    if args.fact_key is not None and (args.subject is None or args.kind not in KEYED_KINDS):
        raise InvalidInput(
            "--fact-key needs --subject, and --kind fact or preference", code="role_violation"
        )
    draft = {"text": text, "quote": text, "kind": args.kind, "basis": "user_statement"}
    draft |= {"subject": args.subject, "fact_key": args.fact_key}
    [checked] = parse_drafts([draft])
    receipt = await scope.submit_event(
        said,
        role="user",
        session=args.session,
        occurred_at=args.occurred_at,
        person=await optional_person(scope, args.person),
    )
    [memory] = await scope.add_memories(receipt.event_id, [checked])
    return Remembered(memory=memory, event=receipt)


def remembered_line(done: Remembered) -> str:
    memory, receipt = done["memory"], done["event"]
    about = filed_under(memory.subject, memory.fact_key)
    return (
        f"remembered {memory.id} ({memory.kind}{'; ' + about if about else ''}) from event "
        f"{receipt.event_id} in {receipt.persona}/{receipt.project}"
    )


async def search(args: argparse.Namespace, _: Memory, scope: Scope) -> RecallResult:
    return await scope.recall(
        args.query,
        **keywords(args, *RECALL_OPTIONS),
        include_history=args.history,
        person=await optional_person(scope, args.person),
    )


def recall_lines(result: RecallResult) -> str:
    lines = [recall_line(item) for item in result.items] or ["(no evidence found)"]
    return "\n".join([*lines, *(f"warning: {w}" for w in result.warnings)])


async def read_evidence(args: argparse.Namespace, _: Memory, scope: Scope) -> Evidence:
    return await scope.read(args.id, offset=args.offset, limit=args.limit)


def evidence_lines(page: Evidence) -> str:
    more = f", next page: --offset {page.next_offset}" if page.next_offset is not None else ""
    header = (
        f"event {page.event.id} ({page.event.role}, {page.event.occurred_at.isoformat()}, "
        f"{page.event.status}) chars {page.offset}-{page.offset + len(page.text)} of "
        f"{page.total_chars}{more}"
    )
    failure = [f"error: {page.event.error}"] if page.event.error else []  # why it failed
    return "\n".join([header, *failure, page.text])


async def correct_memory(args: argparse.Namespace, _: Memory, scope: Scope) -> Correction:
    text = read_text(args.text)
    return await scope.correct(args.memory_id, text, valid_at=args.valid_at, reason=args.reason)


def correction_line(done: Correction) -> str:
    return (
        f"corrected: {done.revoked_id} revoked, now {done.memory.id}: {done.memory.text} "
        f"(event {done.amended_event_id} amended)"
    )


async def retract_memory(args: argparse.Namespace, _: Memory, scope: Scope) -> Retraction:
    return await scope.retract(args.memory_id, reason=args.reason)


def retraction_line(done: Retraction) -> str:
    what = "was already revoked" if done.already_revoked else "retracted"
    return (
        f"{done.memory_id} {what}; event {done.event_id} is amended; "
        f"{len(done.sibling_ids)} other memories of it stay"
    )


def add_copies_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--include-copies",
        action="store_true",
        help="also erase later events that repeat the erased text (the copies a preview lists)",
    )


async def run_delete(args: argparse.Namespace) -> int:
    async with opened(args) as (_, scope):
        done = await scope.delete(
            event_id=args.event_id,
            memory_id=args.memory_id,
            dry_run=not args.yes,
            include_copies=args.include_copies,
        )
        said = await previewed(args, scope, done.event_ids, done.memory_ids, done.dry_run)
    show(args, done, deletion_lines(done, said, args.memory_id, args.include_copies))
    return 0


async def previewed(
    args: argparse.Namespace,
    scope: Scope,
    event_ids: list[str],
    memory_ids: list[str],
    dry_run: bool,
) -> dict[str, str]:
    """What a preview says of the first ``PREVIEW_ITEMS`` events and memories it lists, by
    ID (none after a real erasure, or for ``--json``): read now, from the same scope. A
    revoked memory cannot be read: it is left out (``preview_lines`` says so)."""
    from ..errors import NotFound

    said: dict[str, str] = {}
    if not dry_run or args.json:
        return said
    memories: dict[str, MemoryRecord] = {}
    for event_id in event_ids[:PREVIEW_ITEMS]:
        with suppress(NotFound):  # erased meanwhile
            page = await scope.read(event_id, limit=2 * LINE_CHARS)
            said[event_id] = erased_event(page)
            memories |= {memory.id: memory for memory in page.memories}
    for memory_id in memory_ids[:PREVIEW_ITEMS]:
        if memory_id not in memories:
            with suppress(NotFound):  # revoked
                page = await scope.read(memory_id, limit=1)
                if page.memory is not None:
                    memories[memory_id] = page.memory
        if memory_id in memories:
            said[memory_id] = erased_memory(memories[memory_id])
    return said


def deletion_lines(
    done: Deletion, said: dict[str, str], memory_id: str | None, included: bool = False
) -> str:
    if done.dry_run and memory_id is not None and done.event_ids:
        head = [
            f"memory {memory_id} came from event {done.event_ids[0]}: deleting it erases that "
            "whole message, with every memory derived from it and its corrections (all listed "
            "below); to forget this memory alone, use 'amem retract'"
        ]
    else:
        head = []
    verb = "would erase" if done.dry_run else "erased"
    lines = [
        *head,
        f"{verb} {len(done.event_ids)} events, {len(done.memory_ids)} memories, "
        f"{done.relations} relations, {done.vectors} vectors, {done.search_rows} search rows; "
        f"{done.checkpoints_invalidated} checkpoints invalidated, "
        f"{done.checkpoints_cleared} cleared",
        *preview_lines(
            done.event_ids,
            len(done.event_ids),
            done.memory_ids,
            len(done.memory_ids),
            said if done.dry_run else None,
        ),
        *copy_lines(done.copies, included=included, dry_run=done.dry_run),
    ]
    return "\n".join([*lines, *dry_run_note(done.dry_run, "; add --yes to delete")])


async def run_erase(args: argparse.Namespace) -> int:
    selectors = [*keywords(args, *ERASE_SELECTORS).values(), args.person]
    if args.tombstones_from is None:
        async with opened(args) as (memory, scope):
            erased = await erase_events(args, memory, scope)
            said = await previewed(args, scope, erased.event_ids, erased.memory_ids, erased.dry_run)
        lines = erasure_lines(erased, said, included=args.include_copies)
        show(args, erased, "\n".join([*lines, *yes_note(erased.dry_run)]))
    elif args.everything or any(value is not None for value in selectors):
        raise InvalidInput("--tombstones-from takes no other selector")
    elif args.include_copies:
        raise InvalidInput("--include-copies goes with a selector, not --tombstones-from")
    else:
        async with opened(args) as (memory, _):
            applied = await memory.import_tombstones(args.tombstones_from, dry_run=not args.yes)
            said = {}
            for e in applied.erasures:
                where = memory.scope(e.persona, e.project)
                said |= await previewed(args, where, e.event_ids, e.memory_ids, e.dry_run)
        show(args, applied, tombstone_lines(applied, said))
    return 0


async def run_evict(args: argparse.Namespace) -> int:
    async with opened(args) as (_, scope):
        done = await scope.evict(args.event_ids or None, before=args.before, dry_run=not args.yes)
    show(args, done, eviction_lines(done))
    return 0


def eviction_lines(e: Eviction) -> str:
    """What an eviction let go (or would), the first ``PREVIEW_ITEMS`` events listed, and
    every skipped one with its reason."""
    verb = "would evict" if e.dry_run else "evicted"
    lines = [
        f"{e.persona}/{e.project}: {verb} the raw text of {e.evicted} events "
        f"({e.chars:,} characters, {e.text_bytes:,} bytes; {e.search_rows} search rows, "
        f"{e.vectors} vectors); their memories stay"
    ]
    lines += [f"  event {event_id}" for event_id in e.events[:PREVIEW_ITEMS]]
    if e.evicted > PREVIEW_ITEMS:
        lines.append(f"  and {e.evicted - PREVIEW_ITEMS:,} more events")
    lines += [f"  skipped {skip.event_id}: {skip.reason}" for skip in e.skipped]
    return "\n".join([*lines, *dry_run_note(e.dry_run, "; add --yes to evict")])


async def erase_events(args: argparse.Namespace, _: Memory, scope: Scope) -> Erasure:
    return await scope.erase(
        **keywords(args, *ERASE_SELECTORS, "everything", "include_copies"),
        person=await optional_person(scope, args.person),
        dry_run=not args.yes,
        progress=progress("erase"),
    )


def tombstone_lines(applied: TombstoneImport, said: dict[str, str]) -> str:
    lines = [f"{applied.tombstones} tombstones in the archive, {applied.new} new here"]
    for e in applied.erasures:
        lines += erasure_lines(e, said)
    return "\n".join([*lines, *yes_note(applied.dry_run)])


def erasure_lines(e: Erasure, said: dict[str, str], *, included: bool = False) -> list[str]:
    """What an erasure took, or would take: with the preview's list (``preview_lines``),
    then its copies (``copy_lines``; ``included``: erased too)."""
    copies = copy_lines(e.copies, included=included, dry_run=e.dry_run)
    if not e.dry_run:
        return [erasure_line(e), *copies]
    listed = preview_lines(e.event_ids, e.events, e.memory_ids, e.memories, said)
    return [erasure_line(e), *listed, *copies]


def erasure_line(e: Erasure) -> str:
    verb = "would erase" if e.dry_run else "erased"
    states = f", {e.states} person state" if e.states else ""
    return (
        f"{e.persona}/{e.project}: {verb} {e.events} events, {e.memories} memories, "
        f"{e.relations} relations, {e.vectors} vectors, {e.search_rows} search rows{states}; "
        f"{e.checkpoints_invalidated} checkpoints invalidated, {e.checkpoints_cleared} cleared"
    )


def yes_note(dry_run: bool) -> list[str]:
    return dry_run_note(dry_run, "; add --yes to erase")
