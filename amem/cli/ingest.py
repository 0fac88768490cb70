"""``reindex``, ``retry`` and ``host-ingest``: what turns input into memories and vectors,
run now: embedding, extraction, and a host's transcript captured."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InvalidInput
from .common import Command, answer, handler, progress, read_text
from .options import add_people_option, people_of
from .people import chosen_person

if TYPE_CHECKING:
    from ..memory import Memory, Scope
    from ..models import CaptureResult, ReindexResult, RetryResult


def add_commands(command: Command) -> None:
    command(
        "reindex",
        handler(reindex, reindex_line),
        "rebuild the scope's vector index",
        (
            "Embed every memory of the scope with the configured embedding endpoint "
            "(AMEM_EMBED_*) and swap the new index in only after every batch succeeded. "
            "Progress goes to stderr."
        ),
    )

    extract = command(
        "retry",
        handler(retry, retry_line, status=lambda result: 0 if not result.failed else 1),
        "run pending and failed extractions now",
        (
            "Extract the scope's pending and failed events now with the configured extraction "
            "endpoint (AMEM_EXTRACT_*), and wait for them. Progress goes to stderr."
        ),
    )
    extract.add_argument("--event-id", help="only this event")

    ingest = command(
        "host-ingest",
        run_host_ingest,
        "capture a host transcript (JSONL)",
        (
            "Capture a host's transcript: FILE holds one JSON object per line with event_id, "
            "text, role and optionally session, source, category, occurred_at, person, "
            "speaker, in transcript order ('-' reads stdin). Entries this instance already "
            "captured are skipped; the rest are stored idempotently, an optional checkpoint is "
            "saved, and only then does the instance's cursor advance. A competing writer is "
            "detected (version_conflict). --person puts the new events of a speaker (an "
            "entry's speaker, else its role) in that person's relationship."
        ),
    )
    ingest.add_argument("file", metavar="FILE")
    ingest.add_argument("--instance", required=True, help="this host installation's ID")
    ingest.add_argument("--session", help="session for the checkpoint")
    ingest.add_argument("--goal", help="save a checkpoint with this goal (needs --session)")
    ingest.add_argument("--next-action")
    add_people_option(ingest, "an entry's speaker, else its role")


async def reindex(args: argparse.Namespace, _: Memory, scope: Scope) -> ReindexResult:
    return await scope.reindex(progress=progress("reindex"))


def reindex_line(result: ReindexResult) -> str:
    return (
        f"embedded {result.embedded} of {result.memories + result.events} "
        f"({result.memories} memories, {result.events} events; {result.fingerprint})"
    )


async def retry(args: argparse.Namespace, _: Memory, scope: Scope) -> RetryResult:
    return await scope.retry(args.event_id, progress=progress("retry"))


def retry_line(result: RetryResult) -> str:
    return (
        f"extracted {len(result.extracted)} events, {len(result.failed)} failed, "
        f"{len(result.memory_ids)} new memories"
    )


async def run_host_ingest(args: argparse.Namespace) -> int:
    from ..json_input import parse_json

    raw = read_text("-") if args.file == "-" else read_text(None, Path(args.file))
    entries = []
    for number, line in enumerate(raw.splitlines(), start=1):
        if line.strip():
            try:
                entries.append(parse_json(line))
            except ValueError:
                raise InvalidInput(f"line {number} of the transcript is not JSON") from None
    checkpoint = None
    if args.goal:
        if not args.session:
            raise InvalidInput("--goal needs --session")
        checkpoint = {"session": args.session, "goal": args.goal, "next_action": args.next_action}
    elif args.session or args.next_action:
        raise InvalidInput("--session and --next-action only go with --goal (a checkpoint)")
    given = people_of(args.person)

    async def capture(args: argparse.Namespace, _: Memory, scope: Scope) -> CaptureResult:
        return await scope.capture_transcript(
            args.instance,
            entries,
            checkpoint=checkpoint,
            progress=progress("host-ingest"),
            people=await chosen_people(scope, given),
        )

    await answer(args, capture, capture_line, wait=True)
    return 0


async def chosen_people(scope: Scope, given: dict[str, str] | None) -> dict[str, str] | None:
    """``--person``'s speakers to person IDs, each person given by ID or by a name only one
    person goes by (``people.chosen_person``): read before anything is written."""
    if given is None:
        return None
    return {speaker: await chosen_person(scope, person) for speaker, person in given.items()}


def capture_line(result: CaptureResult) -> str:
    return (
        f"cursor {result.cursor}: stored {len(result.stored)}, "
        f"{len(result.duplicates)} already stored, {result.skipped} skipped"
    )
