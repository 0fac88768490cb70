"""Every limit on what callers hand amem, in one place.

Python callers get the wider limits; MCP tools are deliberately stricter where a result
or a request lands in a model's context (``MCP_*``): a tool result must fit common client
output caps, and a model that asks for 200 recall items or a 1M-token pack is wasting its
own context. Limits of amem's own machinery (the writer's batch, the stdio line, the FTS
level cap) stay beside the code they bound.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Literal, get_args

# --- text and names ---------------------------------------------------------------------

CONTROL_CHARS = re.compile("[\x00-\x1f\x7f-\x9f]")
"""Unicode's control characters (category Cc): C0, DEL and C1. Never in a one-line field
(a gist, say)."""
HIDDEN_CATEGORIES = frozenset(("Cc", "Cf", "Co", "Cs"))
"""Unicode categories never in an identifier (an ID, a session, a source, an instance, a
persona or project name, a draft's ``subject`` and ``fact_key``): control characters (Cc),
format characters (Cf: zero-width spaces and joiners, the byte order mark, the
bidirectional controls such as U+202E), private use (Co) and surrogates (Cs). They show
nothing, show what a font decides, or reorder the text around them, so a name holding one
can pass for another in a listing. Free text (events, memories) may hold them."""


def has_hidden_characters(text: str) -> bool:
    """Whether ``text`` holds a character of ``HIDDEN_CATEGORIES``. ``str.isprintable``
    passes nearly every name at C speed; only a name it fails (a separator, an unassigned
    code point, or one of these) is looked at character by character."""
    return not text.isprintable() and any(
        unicodedata.category(char) in HIDDEN_CATEGORIES for char in text
    )


MAX_EVENT_CHARS = 100_000
"""Longest event text accepted, in characters (about 25k-100k tokens)."""
MAX_MEMORY_CHARS = 2_000
"""Longest memory text (one atomic statement)."""
MAX_QUOTE_CHARS = MAX_EVENT_CHARS
"""A quote is exact words of its event, so it can be as long as the event."""
MAX_GIST_CHARS = 300
MAX_KEY_CHARS = 200
"""A draft's ``subject`` and ``fact_key``."""
MAX_PERSONA_CHARS = 20_000
MAX_ID_CHARS = 200
"""Event and memory IDs, sessions, sources, instances."""
MAX_NAME_CHARS = 100
"""Persona and project names."""
MAX_NOTE_CHARS = 1_000
"""Reasons of corrections, notes of persona versions."""
MAX_CHECKPOINT_CHARS = 4_000
"""Each checkpoint field, and each item of its lists."""
MAX_LIST_ITEMS = 100
"""Items of a checkpoint list."""
MAX_ALIASES = 50
"""Aliases of one person."""
MAX_ABOUT = 20
"""People one memory is about."""
MAX_STATE_BYTES = 1_000_000
"""A state's data, as JSON (UTF-8 bytes): a host's working state, not an archive."""

# --- choices: the values an enumerated option accepts -------------------------------------
# Here, not in models, so that the command line builds its parser without pydantic. Each
# enumeration is its Literal type; the value tuple is derived from it, and argparse choices
# and MCP schemas use these (the MCP schemas through the types).

Role = Literal["user", "assistant", "system", "tool"]
SubmittableCategory = Literal["conversation", "reference", "persona"]
"""Categories a host may submit; ``correction`` events are created by ``Scope.correct``."""
RecallMode = Literal["auto", "fast", "semantic", "deep"]
ROLES: tuple[Role, ...] = get_args(Role)
SUBMITTABLE_CATEGORIES: tuple[SubmittableCategory, ...] = get_args(SubmittableCategory)
RECALL_MODES: tuple[RecallMode, ...] = get_args(RecallMode)

# --- requests ---------------------------------------------------------------------------

MAX_INTEGER = 2**62
"""Largest integer a caller may pass for a number amem stores or compares with stored ones
(a sequence number, a version, a cursor, a scope's limit): far inside SQLite's signed
64-bit integers, so no comparison or sum of two of them overflows."""
MAX_QUERY_CHARS = 2_000
"""Longest recall query (and the part of a pack's goal and steps recalled for)."""
DEFAULT_RECALL_LIMIT = 10
MAX_RECALL_LIMIT = 200
MAX_EXCLUDED_EVENTS = 100
"""Event IDs one recall may leave out (the turn being answered; for more, ``exclude_from_seq``)."""
DEFAULT_READ_CHARS = 4_000
MAX_READ_CHARS = MAX_EVENT_CHARS
"""One page of ``read``: a whole event at most."""
MAX_DRAFTS = 100
"""Drafts in one ``add_memories`` call."""
MAX_EVICTED_IDS = 10_000
"""Event IDs one ``evict`` call may name (``before`` selects any number)."""
MAX_MEMORIES_PER_EVENT = 50
"""Drafts the extraction model may answer for one event."""
DEFAULT_BUDGET = 4_000
"""The budget of a context pack when the caller gives none, in tokens (Python and MCP)."""
MAX_BUDGET = 1_000_000
"""Largest ``resume`` budget, in tokens."""
MAX_CAPTURE_ENTRIES = 10_000
"""Transcript entries in one ``host_ingest`` transaction (longer transcripts go in slices)."""
MAX_SPEAKERS = 1_000
"""Speakers a capture's ``people`` maps to person IDs."""
DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 500
"""Items on one page of ``Scope.list``."""
LIST_PREVIEW_CHARS = 500
"""Characters of an event's text a listing shows (``read`` pages the rest)."""
DEFAULT_KEEP_NOTES = 10
MAX_KEEP_NOTES = 10_000
"""Newest working notes ``compact_working`` may keep (``keep``)."""
DEFAULT_RUN_CHARS = 20_000
MIN_RUN_CHARS = 200
MAX_RUN_CHARS = 200_000
"""Characters of event text one consolidation run freezes (``max_chars``)."""
MAX_JSON_CHARS = 200_000
"""Characters of a candidate patch or an error ``record_attempt`` keeps, as JSON."""
MAX_SCOPE_LIMIT = MAX_INTEGER
"""Largest value of a scope's ``max_events`` or ``max_text_bytes``."""
DEFAULT_GRAPH_DEPTH = 1
MAX_GRAPH_DEPTH = 3
DEFAULT_GRAPH_NODES = 80
MAX_GRAPH_NODES = 500
DEFAULT_GRAPH_EDGES = 160
MAX_GRAPH_EDGES = 1_000
"""``Scope.graph``'s ``depth``, ``max_nodes`` and ``max_edges``: defaults and most."""

# --- MCP: stricter, because results land in a model's context ----------------------------

MCP_MAX_RESULT_CHARS = 60_000
"""Tool results stay well under common client output caps (about 25k tokens)."""
MCP_MAX_RUN_CHARS = 40_000
"""``consolidation_prepare.max_chars``: a run's text and memories fit one tool result."""
MCP_CLIP_CHARS = 2_000
"""Length a string is cut to when a result would otherwise pass ``MCP_MAX_RESULT_CHARS``."""
MCP_MAX_RECALL_LIMIT = 50
"""``memory_recall.limit`` (Python: ``MAX_RECALL_LIMIT``)."""
MCP_MAX_READ_CHARS = 20_000
"""``memory_read.limit`` (Python: ``MAX_READ_CHARS``)."""
MCP_MAX_BUDGET_TOKENS = 50_000
"""``session_resume.budget_tokens`` (Python: ``MAX_BUDGET``)."""
MCP_LIST_LIMIT = 20
MCP_MAX_LIST_LIMIT = 100
"""``memory_list.limit``'s default and most (Python: ``DEFAULT_LIST_LIMIT``, ``MAX_LIST_LIMIT``)."""

STALL_SECONDS = 10.0
"""The longest ``amem serve`` waits for a host that reads none of its answers (reading held
back, or input ended) before it takes the reader as gone and drops them (``--stall-seconds``
sets less). A host that reads its stdout takes bytes within milliseconds; one that still
sends, or closed stdin, and reads nothing for this long does not read, and would otherwise
keep the server waiting forever."""

# --- host transcripts (Claude Code) ------------------------------------------------------

MAX_TRANSCRIPT_BYTES = 512 << 20
"""Largest transcript file read (512 MiB; Claude Code's long sessions are tens of MB). A
larger one is refused before a byte is read. Every run reads a transcript from its first
line (the cursor counts entries), about 110 MB/s on one core, so this also bounds the
time a hook spends reaching its cursor: 5 s, or 20 s on a machine four times as busy,
well inside ``CAPTURE_SECONDS``."""
MAX_TRANSCRIPT_LINE_BYTES = 16 << 20
"""Longest transcript line parsed (16 MiB, like an archive's). A longer line (a tool result
with images, say) is read past without being held in memory, left out and counted; the
text an event keeps is cut at ``MAX_EVENT_CHARS`` anyway."""
CAPTURE_SECONDS = 40.0
"""How long one ``claude-code-hook`` run captures and then waits for its vectors (what the
capture leaves of it, ``VECTOR_WAIT_SECONDS`` at most). Claude Code cancels a hook after its
``timeout`` (60 s unless set); what was captured by then stays, each slice committed, and
the cursor says where the next run resumes. The rest of the 60 s is for starting Python,
reaching the cursor and the slice in hand."""
VECTOR_WAIT_SECONDS = 5.0
"""How long a one-shot CLI write (``amem submit``, ``correct``, ``host-ingest``,
``claude-code-hook``, ...) waits for its own vectors before it exits
(``Memory.wait_for_vectors``); what is still without one then is said on stderr and
embedded by the next process that opens the file. A few texts take well under a second
on an endpoint or the local embedder; the hook waits only for what its ``--time-limit``
leaves."""
MAX_WAIT_SECONDS = 3_600.0
"""Longest ``Memory.wait_for_vectors`` timeout."""
MAX_HOOK_INPUT_BYTES = 1 << 20
"""Longest hook input read from stdin (1 MiB; Claude Code's are a few hundred bytes). It is
read in one pass up to the end of its JSON object, so a larger or endless stdin is refused
after at most this much."""

# --- archives ---------------------------------------------------------------------------

MAX_ARCHIVE_LINE_CHARS = 16 << 20
"""Longer than any line amem writes (a checkpoint of 3 x 100 items of 4,000 characters,
each escaped); a longer line is refused before it is held in memory."""
MAX_ARCHIVE_CELL_BYTES = 16 << 20
"""SQLite's length limit on a backup being read: no cell (or row) amem writes is longer,
and a crafted one is refused by SQLite before it is built in memory."""
