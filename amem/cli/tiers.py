"""``pin``, ``consolidate`` and ``compact-working``: tiers, TTLs and working notes."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..limits import DEFAULT_KEEP_NOTES
from .common import Command, dry_run_note, handler
from .options import add_confirmation

if TYPE_CHECKING:
    from ..memory import Memory, Scope
    from ..models import Compaction, Consolidation, MemoryRecord


def add_commands(command: Command) -> None:
    pin = command(
        "pin",
        handler(pin_memory, pin_line),
        "pin a memory (or --unpin it)",
        (
            "Pin the memory MEMORY_ID: it enters context packs first, and a pinned working "
            "note never expires (consolidate promotes it to episodic once its TTL passed). "
            "--unpin takes the pin away. Pinning twice changes nothing."
        ),
    )
    pin.add_argument("memory_id", metavar="MEMORY_ID")
    pin.add_argument("--unpin", action="store_true", help="take the pin away")

    consolidate = command(
        "consolidate",
        handler(consolidate_tiers, consolidation_lines),
        "apply working-note TTLs and promotions now (a preview unless --yes)",
        (
            "Delete the scope's expired, unpinned working notes for good (their source events "
            "stay; a corrected note goes with the versions it corrected), promote pinned "
            "expired ones to episodic, and move often restated memories up a tier "
            "(AMEM_PROMOTE_AFTER distinct events), in one transaction. Nothing does this in "
            "the background: run 'amem consolidate --yes' from cron or after a session. "
            "Without --yes it is a preview: it lists what would change and changes nothing."
        ),
    )
    add_confirmation(consolidate, "apply")

    compact = command(
        "compact-working",
        handler(compact_notes, compaction_lines, wait=True),
        "fold a session's older working notes into one episodic memory",
        (
            "Keep the pinned working notes of SESSION and the newest --keep others; fold the "
            "older ones into one episodic memory that quotes them word for word (a new "
            "system event of the session lists them) and links to each. The folded notes "
            "are revoked, kept for audit. No model is called. --dry-run prints what it would "
            "fold."
        ),
    )
    compact.add_argument("session", metavar="SESSION")
    compact.add_argument(
        "--keep",
        type=int,
        default=DEFAULT_KEEP_NOTES,
        help=f"newest notes kept (default {DEFAULT_KEEP_NOTES})",
    )
    compact.add_argument("--dry-run", action="store_true", help="only show what would be folded")


async def pin_memory(args: argparse.Namespace, _: Memory, scope: Scope) -> MemoryRecord:
    return await scope.pin(args.memory_id, pinned=not args.unpin)


def pin_line(memory: MemoryRecord) -> str:
    state = "pinned" if memory.pinned else "not pinned"
    return f"{memory.id} is {state} ({memory.tier}): {memory.text}"


async def consolidate_tiers(args: argparse.Namespace, _: Memory, scope: Scope) -> Consolidation:
    return await scope.consolidate(dry_run=not args.yes)


def consolidation_lines(done: Consolidation) -> str:
    verb = ("would delete", "would promote") if done.dry_run else ("deleted", "promoted")
    lines = [
        f"{verb[0]} {len(done.deleted)} expired working notes, {verb[1]} "
        f"{len(done.promotions)} memories",
        *(f"  deleted  {memory_id}" for memory_id in done.deleted),
        *(f"  promoted {p.id} {p.from_tier} -> {p.to_tier}" for p in done.promotions),
    ]
    return "\n".join([*lines, *dry_run_note(done.dry_run, "; add --yes to apply it")])


async def compact_notes(args: argparse.Namespace, _: Memory, scope: Scope) -> Compaction:
    return await scope.compact_working(args.session, keep=args.keep, dry_run=args.dry_run)


def compaction_lines(done: Compaction) -> str:
    if not done.folded:
        return f"nothing to fold: {len(done.kept)} working notes of {done.session} stay"
    if done.memory is None:
        text = f"would fold {len(done.folded)} working notes; {len(done.kept)} stay"
        return "\n".join([text, *dry_run_note(True)])
    return (
        f"folded {len(done.folded)} working notes into {done.memory.id} "
        f"(event {done.event_id}); {len(done.kept)} stay"
    )
