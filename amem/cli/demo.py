"""``amem demo``: a small bilingual conversation (written for amem; no data set) and the
story told over it.

The demo plays the host's part: it submits these events and derives the listed memories
through ``add_memories``, as a host's own model would through ``memory_add``. No API key
or network is involved.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..errors import AmemError
from .common import Command
from .show import recall_line

if TYPE_CHECKING:
    from ..memory import Memory, Scope

SAMPLE_PERSONA: Final = "assistant"
SAMPLE_PROJECT: Final = "demo"
SAMPLE_SESSION: Final = "demo-chat"
PERSONA_TEXT: Final = "You are 小助手, a warm, concise bilingual assistant."

# (event_id, role, occurred_at, text): a residence that changes twice (Beijing, Shanghai,
# Hangzhou), a book named only inside Chinese compounds, a preference, and a phone number
# the user later asks to delete.
SAMPLE_CONVERSATION: Final[tuple[tuple[str, str, str, str], ...]] = (
    (
        "demo-1",
        "user",
        "2026-01-05T09:00:00+08:00",
        "Hi! I just moved to Beijing for a new job at a robotics startup.",
    ),
    (
        "demo-2",
        "assistant",
        "2026-01-05T09:00:20+08:00",
        "Congratulations on the move! Beijing winters are cold, so pack a warm coat.",
    ),
    ("demo-3", "user", "2026-03-10T21:15:00+08:00", "我最近在读一本书，叫《三体》，非常好看。"),
    (
        "demo-4",
        "assistant",
        "2026-03-10T21:15:30+08:00",
        "太好了，我真为你高兴！《三体》是很棒的科幻小说。",
    ),
    (
        "demo-5",
        "user",
        "2026-06-02T08:30:00+08:00",
        "Update: the startup relocated, so I live in Shanghai now.",
    ),
    (
        "demo-6",
        "user",
        "2026-06-02T08:31:00+08:00",
        "My spare phone number is 555-0199, keep it in case you need it.",
    ),
    ("demo-7", "user", "2026-09-15T19:00:00+08:00", "我又搬家了，现在住在杭州，离西湖很近。"),
    ("demo-8", "assistant", "2026-09-15T19:00:40+08:00", "杭州很美！周末可以去西湖边散步。"),
    (
        "demo-9",
        "user",
        "2026-11-28T10:00:00+08:00",
        "I prefer tea over coffee these days, especially 龙井. Let's plan a weekend trip.",
    ),
)


def residence(city: str, quote: str) -> dict[str, Any]:
    return {
        "text": f"User lives in {city}",
        "quote": quote,
        "kind": "fact",
        "basis": "user_statement",
        "subject": "user",
        "fact_key": "residence",
    }


# The memories a host's model would derive, keyed by event ID.
SAMPLE_MEMORIES: Final[dict[str, list[dict[str, Any]]]] = {
    "demo-1": [
        residence("Beijing", "I just moved to Beijing"),
        {
            "text": "User works at a robotics startup",
            "quote": "a new job at a robotics startup",
            "kind": "fact",
            "basis": "user_statement",
        },
    ],
    "demo-3": [
        {
            "text": "用户在读《三体》",
            "quote": "我最近在读一本书，叫《三体》",
            "kind": "episode",
            "basis": "user_statement",
            "gist": "读《三体》",
        }
    ],
    "demo-4": [
        {
            "text": "Assistant was glad about the user's book",
            "quote": "我真为你高兴",
            "kind": "emotion",
            "basis": "assistant_expression",
            "emotion": {"label": "joy", "valence": 0.8, "arousal": 0.5},
        }
    ],
    # the extractor misheard this one: the correction below fixes it
    "demo-5": [residence("Shenzhen", "I live in Shanghai now")],
    "demo-6": [
        {
            "text": "User's spare phone number is 555-0199",
            "quote": "555-0199",
            "kind": "fact",
            "basis": "user_statement",
        }
    ],
    "demo-7": [residence("Hangzhou", "现在住在杭州")],
    "demo-9": [
        {
            "text": "User prefers tea, especially Longjing (龙井)",
            "quote": "I prefer tea over coffee",
            "kind": "preference",
            "basis": "user_statement",
        },
        {
            "text": "Plan a weekend trip together",
            "quote": "Let's plan a weekend trip",
            "kind": "agreement",
            "basis": "user_statement",
        },
    ],
}


def add_commands(command: Command) -> None:
    command(
        "demo",
        run_demo,
        "show the whole job on a small bilingual sample",
        (
            "Build a small bilingual sample conversation in a fresh local database (no API key "
            "needed): a fact that changes twice, a correction, a deletion and a Chinese query "
            "only per-character indexing can answer; then print recall results, an as_of "
            "answer and a session_resume pack under a small budget. The database is kept: "
            "--db names the new file (default: a new file in a temporary directory)."
        ),
    )


async def run_demo(args: argparse.Namespace) -> int:
    import tempfile

    import anyio

    from ..config import Settings, is_postgres_url
    from ..memory import open as open_memory
    from .options import refuse_sqlite_only

    if is_postgres_url(args.db):  # $AMEM_DB is not read: the demo's database is always new
        refuse_sqlite_only("demo")
    if args.db is None:
        path = Path(tempfile.mkdtemp(prefix="amem-demo-")) / "demo.db"
    else:
        path = Path(args.db)
    if await anyio.Path(path).exists():
        raise AmemError(f"{path} already exists; choose a new file", code="target_exists")
    settings = Settings(default_persona=SAMPLE_PERSONA, default_project=SAMPLE_PROJECT)
    async with open_memory(path, settings=settings) as memory:
        await demo(memory, path)
    return 0


async def demo(memory: Memory, path: Path) -> None:
    """The whole job, narrated: store, derive, change, correct, delete, recall, resume."""
    scope = memory.scope()
    await memory.set_persona(SAMPLE_PERSONA, PERSONA_TEXT)
    print(f"amem demo: a fresh database at {path}\n")
    print("1. The conversation, stored as original events (newest last):")
    for event_id, role, occurred_at, text in SAMPLE_CONVERSATION:
        await scope.submit_event(
            text, role=role, event_id=event_id, session=SAMPLE_SESSION, occurred_at=occurred_at
        )
        print(f"   {occurred_at[:10]}  {role:<9} {text}")
    for event_id, drafts in SAMPLE_MEMORIES.items():
        await scope.add_memories(event_id, drafts)
    print(
        "\n2. Memories, each with its exact quote, written the way a host's own model writes "
        "them\n   (memory_add; with AMEM_EXTRACT_* set, amem's extractor derives them itself)."
        "\n   'residence' changed twice:"
    )
    await show_recall(scope, "lives", include_history=True)

    [shenzhen] = (await scope.recall("Shenzhen", include_history=True)).items
    fixed = await scope.correct(shenzhen.id, "User lives in Shanghai", reason="misheard")
    print(
        f"\n3. A correction: 'Shenzhen' was misheard -> {fixed.memory.text!r};"
        " the mistaken memory is revoked for good."
    )
    phone = await scope.delete(event_id="demo-6")
    print(
        f"\n4. A deletion: the phone-number message and {len(phone.memory_ids)} memory are "
        "gone, bytes included."
    )
    await show_recall(scope, "555-0199")

    print("\n5. Where did the user live on 2026-07-01 (as_of)?")
    await show_recall(scope, "lives", as_of="2026-07-01T00:00:00Z")
    print("\n6. A Chinese query only per-character indexing can answer: 书 (book)")
    await show_recall(scope, "书")
    print("\n7. Now (tea and the trip plan):")
    await show_recall(scope, "tea trip")

    pack = await scope.resume(SAMPLE_SESSION, query="Hangzhou weekend", budget=500)
    partly = [f"{name} ({left} left out)" for name, left in pack.partial.items()]
    print(
        f"\n8. session_resume under a 500-token budget: included {pack.included}, "
        f"partial {partly}, omitted {pack.omitted}, {pack.tokens_used} tokens:"
    )
    print(json.dumps(json.loads(pack.context), ensure_ascii=False, indent=1))
    print(
        f"\nExplore it: {amem_command()} recall --db {shlex.quote(str(path))} "
        f"--persona {SAMPLE_PERSONA} --project {SAMPLE_PROJECT} 杭州"
    )


def amem_command() -> str:
    """How the user runs amem from their shell: ``uv run amem`` when ``uv run`` started
    this process (from a clone) and no ``amem`` is on the PATH outside its environment,
    else ``amem``."""
    import shutil

    if "UV" not in os.environ:  # uv sets it in the processes it runs
        return "amem"
    environment = os.path.abspath(os.path.dirname(sys.executable))
    outside = [
        folder
        for folder in os.environ.get("PATH", "").split(os.pathsep)
        if folder and os.path.abspath(folder) != environment
    ]
    return "amem" if shutil.which("amem", path=os.pathsep.join(outside)) else "uv run amem"


async def show_recall(scope: Scope, query: str, **options: Any) -> None:
    result = await scope.recall(query, **options)
    for item in result.items:
        print(f"   {recall_line(item)}")
    if not result.items:
        print("   (no evidence found)")
