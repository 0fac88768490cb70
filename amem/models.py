"""The pydantic models amem returns and accepts. No I/O lives here."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .limits import (
    CONTROL_CHARS,
    MAX_ABOUT,
    MAX_GIST_CHARS,
    MAX_KEY_CHARS,
    MAX_MEMORY_CHARS,
    MAX_QUOTE_CHARS,
    has_hidden_characters,
)
from .limits import RECALL_MODES as RECALL_MODES  # the choices' home is limits (no pydantic)
from .limits import ROLES as ROLES
from .limits import SUBMITTABLE_CATEGORIES as SUBMITTABLE_CATEGORIES
from .limits import RecallMode as RecallMode
from .limits import Role as Role
from .limits import SubmittableCategory as SubmittableCategory
from .prompt import render_context

Category = Literal[SubmittableCategory, "correction"]
StoredStatus = Literal["stored", "pending", "extracted", "failed", "amended"]
"""An event's status as its row stores it."""
EventStatus = Literal[StoredStatus, "evicted"]
"""An event's status as amem shows it: ``evicted`` is an event whose raw text was let go
after its memories were derived (``Scope.evict``)."""
RunStatus = Literal["prepared", "applied", "failed", "invalidated"]
PatchOp = Literal["add", "summarise", "merge", "supersede", "relate", "retract"]
"""An entry of a consolidation patch (``Scope.apply_consolidation``)."""
"""A consolidation run's status (``Scope.prepare_consolidation``)."""
MemoryKind = Literal[
    "fact", "preference", "agreement", "growth", "episode", "observation", "emotion"
]
Basis = Literal["user_statement", "assistant_expression", "inference"]
MemoryTier = Literal["working", "episodic", "profile"]
"""Where a memory lives: ``working`` (the current task's scratch notes, with a TTL),
``episodic`` (what happened) or ``profile`` (lasting facts about the user)."""
Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` while long work runs (export, import, backup,
reindex, retried extraction, transcript capture)."""
RelationKind = Literal["related", "corrects", "merged_into", "supersedes"]
"""``related``: linked by a host or a compaction; ``corrects``: a correction's audit link;
``merged_into``: a duplicate merged into the survivor; ``supersedes``: a successor that
closed a fact's interval (both written by ``Scope.apply_consolidation``)."""
Via = Literal["lexical", "semantic", "link", "reply"]
"""What brought a recalled item in (``RecallItem.via``)."""
DocKind = Literal["memory", "event"]
"""What a search document or a vector is of."""

# Each enumeration is its Literal type; the value tuples below are derived from it (as are
# those of limits: ROLES, SUBMITTABLE_CATEGORIES, RECALL_MODES), and argparse choices and
# MCP schemas use these (the MCP schemas through the types).
MEMORY_KINDS: tuple[MemoryKind, ...] = get_args(MemoryKind)
MEMORY_TIERS: tuple[MemoryTier, ...] = get_args(MemoryTier)
EVENT_STATUSES: tuple[EventStatus, ...] = get_args(EventStatus)
RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)

DEFAULT_TIERS: dict[MemoryKind, MemoryTier] = {
    "fact": "profile",
    "preference": "profile",
    "agreement": "profile",
    "growth": "profile",
    "episode": "episodic",
    "observation": "episodic",
    "emotion": "episodic",
}
"""The tier of a memory whose draft names none: lasting kinds go to ``profile``, what
happened to ``episodic``. ``working`` only when a draft asks for it."""


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EventReceipt(Record):
    """What ``submit_event`` acknowledges; returned only after the event is committed."""

    event_id: str
    seq: int
    """Database-wide sequence number: increases with every stored event, never reused."""
    status: EventStatus
    memory_ids: list[str]
    """Memories already derived from this event (non-empty only for duplicates)."""
    duplicate: bool
    """True when this ID was already stored with the same payload; nothing new was written."""
    persona: str
    project: str
    session: str | None
    occurred_at: datetime
    ingested_at: datetime
    person: str | None = None
    """The person whose relationship the event belongs to (``Scope.assign``); None: no one."""


class Event(Record):
    """A stored original event, without its text (see ``Evidence.text``)."""

    id: str
    seq: int
    persona: str
    project: str
    session: str | None
    role: Role
    category: Category
    source: str | None
    occurred_at: datetime
    ingested_at: datetime
    status: EventStatus
    error: str | None
    chars: int
    """Length of the original text in characters (0 once evicted)."""
    person: str | None = None
    """The person whose relationship the event belongs to; None: no one."""
    evicted_at: datetime | None = None
    """When its raw text was let go (``Scope.evict``; ``status`` is then ``evicted``)."""


class Persona(Record):
    """One immutable version of a persona; edits and rollbacks append versions."""

    persona: str
    version: int
    text: str
    note: str | None
    created_at: datetime


class Emotion(BaseModel):
    """An emotion the assistant expressed: a label with valence (-1..1) and arousal (0..1)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str = Field(min_length=1, max_length=100)
    valence: float = Field(ge=-1, le=1, allow_inf_nan=False)
    arousal: float = Field(ge=0, le=1, allow_inf_nan=False)


class MemoryDraft(BaseModel):
    """A memory to derive from one event, as a host (``add_memories``, ``memory_add``) or the
    extraction model proposes it. Every draft passes the same validation before it is stored:
    the quote must occur verbatim in the event, and the basis must fit the event's role.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_MEMORY_CHARS)
    """The memory itself, one atomic statement (e.g. "User lives in Hangzhou")."""
    quote: str = Field(min_length=1, max_length=MAX_QUOTE_CHARS)
    """Exact words from the source event that support it (any length). Typographic quotes,
    dashes, full-width forms and white-space runs may differ: the memory stores the
    source's own span."""
    kind: MemoryKind
    basis: Basis
    confidence: float = Field(default=1.0, ge=0, le=1, allow_inf_nan=False)
    """Ranking metadata supplied by the deriving model, not a calibrated probability."""
    subject: str | None = Field(
        default=None, min_length=1, max_length=MAX_KEY_CHARS, description="e.g. user"
    )
    """Who or what the fact is about (e.g. "user"); required with ``fact_key``."""
    fact_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_KEY_CHARS,
        description="e.g. residence: a new value ends the old.",
    )
    """Names a single-valued property (e.g. "residence"): a newer value closes the older one.
    Only user-stated facts and preferences take one."""
    valid_at: datetime | None = None
    """When it became true; default: the source event's occurrence time."""
    invalid_at: datetime | None = None
    """When it stopped being true, if the source says so."""
    emotion: Emotion | None = None
    """An emotion the assistant expressed (``assistant_expression`` only)."""
    gist: str | None = Field(default=None, min_length=1, max_length=MAX_GIST_CHARS)
    """A short authored gist, shown instead of the text once an episode has faded."""
    tier: MemoryTier | None = Field(default=None, description="working: scratch notes.")
    """``working`` for the current task's scratch notes (they expire after
    ``Settings.working_ttl_hours`` unless pinned or promoted), ``episodic`` or
    ``profile``; None: the kind's default (``DEFAULT_TIERS``)."""
    about: list[str] | None = Field(default=None, max_length=MAX_ABOUT, description="person IDs")
    """The people the memory is about, by ID: each must be in the scope's registry
    (``Scope.upsert_person``). Person-scoped reads find it under each of them."""

    @field_validator("about")
    @classmethod
    def person_ids(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        for person in value:
            if not person or person != person.strip() or has_hidden_characters(person):
                raise ValueError("each person ID must be a non-empty name without edge spaces")
        return sorted(set(value))

    @field_validator("text", "quote")
    @classmethod
    def visible_text(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        if "\x00" in value:
            raise ValueError("must not contain NUL characters")
        return value

    @field_validator("subject", "fact_key")
    @classmethod
    def name(cls, value: str | None) -> str | None:
        """Names, by ``inputs.require_name``'s rule: they key facts and show in listings."""
        if value is not None and (value != value.strip() or has_hidden_characters(value)):
            raise ValueError(
                "must be one line, no edge whitespace, no control, format (zero-width, "
                "bidirectional) or private-use characters"
            )
        return value

    @field_validator("gist")
    @classmethod
    def one_line(cls, value: str | None) -> str | None:
        if value is not None and (value != value.strip() or CONTROL_CHARS.search(value)):
            raise ValueError("must be one line without control characters or edge whitespace")
        return value

    @field_validator("valid_at", "invalid_at", mode="before")
    @classmethod
    def iso_time(cls, value: object) -> object:
        """An ISO-8601 string or a ``datetime``, as every other time amem takes; never a
        number. The UTC offset is checked when the draft is validated (``invalid_time``)."""
        if value is None or isinstance(value, datetime):
            return value
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value)
            except ValueError:
                raise ValueError("not an ISO-8601 time") from None
        raise ValueError("must be an ISO-8601 time string")


class MemoryRecord(Record):
    """A stored derived memory."""

    id: str
    persona: str
    project: str
    event_id: str
    """The source event; ``Scope.read`` on either ID pages its original text."""
    text: str
    quote: str
    quote_start: int
    """Character offset of the quote in the source event text; ``quote_end`` is exclusive."""
    quote_end: int
    kind: MemoryKind
    basis: Basis
    confidence: float
    subject: str | None
    fact_key: str | None
    valid_at: datetime
    invalid_at: datetime | None
    """End of the half-open validity interval ``valid_at <= t < invalid_at``; None: open."""
    emotion: Emotion | None
    gist: str | None
    created_at: datetime
    tier: MemoryTier
    pinned: bool
    """Pinned: enters a context pack first; a pinned working note never expires (it is
    promoted to ``episodic`` once its TTL has passed)."""
    expires_at: datetime | None
    """When a working note expires (``Scope.consolidate`` deletes it then); None for
    other tiers."""
    person: str | None = None
    """The person its source event belongs to; None: no one."""
    about: list[str] = []
    """The people it is about (``MemoryDraft.about``)."""


class Evidence(Record):
    """One page of the original event behind an event or memory ID; text is never altered."""

    id: str
    persona: str
    project: str
    event: Event
    text: str
    """Characters ``offset`` to ``offset + limit`` of the original event text."""
    offset: int
    limit: int
    total_chars: int
    next_offset: int | None
    """Where the next page starts, or None when this page reaches the end."""
    memory: MemoryRecord | None = None
    """The memory asked for, when ``id`` is a memory ID."""
    memories: list[MemoryRecord] = []
    """Every current memory derived from this event (provenance)."""


class ScoreComponents(Record):
    """What a recall score is made of; each part is in 0..1."""

    lexical: float
    semantic: float
    link: float
    fusion: float | None = None
    """Hybrid recall's score: the surprise of the item's word match and of its cosine, in
    nats, summed (not in 0..1); None in ``fast`` mode."""
    basis: float
    confidence: float
    freshness: float


class RecallItem(Record):
    """One recalled memory, with its evidence pointers, score and presentation flags."""

    id: str
    text: str
    quote: str | None
    kind: MemoryKind | None
    basis: Basis | None
    confidence: float | None
    subject: str | None
    fact_key: str | None
    valid_at: datetime | None
    invalid_at: datetime | None
    expired: bool
    """True for a fact that was no longer true at ``as_of``, or an original message whose
    memory was corrected (``corrected_by``); only with ``include_history``."""
    source_event_id: str
    occurred_at: datetime
    role: Role
    """Who said the source event (for a raw fallback item, the event itself)."""
    score: float
    components: ScoreComponents
    occurrences: int = 1
    """How many recalled candidates showed this text; the others are ``merged_ids``."""
    merged_ids: list[str] = []
    """IDs of the other memories or raw events with the same text (whitespace aside),
    merged into this item: the best scored, newest on ties."""
    gist: bool = False
    """True when ``text`` is a faded gist rather than the full memory."""
    coarse_time: str | None = None
    """A coarsened time label (e.g. "2010s") for old episodes; None when exact."""
    raw_fallback: bool = False
    """True when this is an original event, not a memory: one with no derived memory, or
    (only with ``include_history``) one whose memory was corrected (``corrected_by``)."""
    corrected_by: list[str] = []
    """For an original event recalled as history: the memories that corrected what was
    derived from it (it is ``expired``: what was said, then corrected)."""
    truncated: bool = False
    tier: MemoryTier | None = None
    """The memory's tier; None for a raw fallback event."""
    pinned: bool = False
    person: str | None = None
    """The person its source event belongs to (a raw event: its own); None: no one."""
    about: list[str] = []
    """The people the memory is about."""
    via: list[Via] = []
    """What brought it in: ``lexical`` (its words, or its source event's, matched the
    query), ``semantic`` (its vector, or its source's, was among the nearest), ``link`` (a
    ``related`` link from a memory whose words matched), ``reply`` (it answers one of the
    best turns). MCP shows it with ``explain``."""
    matched: list[str] = []
    """With ``explain``: the query's search terms (as the index holds them: English stems,
    Chinese words) that its words or its source event's hold, in the query's order."""


class RecallResult(Record):
    """What ``Scope.recall`` returns: items ranked best first, plus what the search covered."""

    query: str
    persona: str
    project: str
    as_of: datetime
    mode: RecallMode
    """The mode asked for."""
    ranking: Literal["lexical", "hybrid"] = "lexical"
    """How the items were ranked: by their words alone, or fused with vector search
    (``auto`` is hybrid when the scope's vectors cover it)."""
    include_history: bool
    items: list[RecallItem]
    warnings: list[str]


class Correction(Record):
    """What ``Scope.correct`` did: a new memory replaces the revoked one."""

    persona: str
    project: str
    memory: MemoryRecord
    """The corrected memory, derived from the new correction event."""
    revoked_id: str
    correction_event_id: str
    amended_event_id: str
    """The source event of the mistaken memory, now marked ``amended``."""


class Copy(Record):
    """A later event of the scope that repeats text a delete or erase selects: the exact
    quote of a memory derived from it, or a run of at least ``12`` characters of it once
    both are normalised (NFKC, case folded, typographic quotes and dashes made plain,
    white space collapsed). Listed in a preview; erased too with ``include_copies=True``."""

    event_id: str
    session: str | None
    role: Role
    occurred_at: datetime
    of: str
    """The selected event whose text it repeats (an earlier one)."""
    match: str
    """The repeated text as the copy has it, clipped to ``200`` characters."""


class Deletion(Record):
    """What ``Scope.delete`` permanently removed, in one transaction; with ``dry_run``,
    what it would remove (computed the same way, nothing written)."""

    persona: str
    project: str
    dry_run: bool = False
    event_ids: list[str]
    """The event, and the events of its correction lineage (and its ``copies`` with
    ``include_copies=True``)."""
    memory_ids: list[str]
    """Every memory derived from those events, lineage included."""
    relations: int
    search_rows: int
    vectors: int
    checkpoints_invalidated: int
    checkpoints_cleared: int = 0
    """Invalidated checkpoints of the scope whose text was blanked (metadata kept)."""
    copies: list[Copy] = []
    """Later events repeating the erased text: erased too (and in ``event_ids``) with
    ``include_copies=True``, else left as they are."""


# --- forgetting: retraction, bulk erasure, tombstones -------------------------------------


class Retraction(Record):
    """What ``Scope.retract`` did: one memory revoked (kept for audit), its source event
    marked ``amended``, its siblings left as they were."""

    persona: str
    project: str
    memory_id: str
    event_id: str
    """The memory's source event, now ``amended`` (its raw text is never raw fallback)."""
    reason: str | None
    revoked_at: datetime
    already_revoked: bool
    """True when the memory was already revoked (retracted or corrected): nothing changed."""
    event_amended: bool
    """True when this call marked the source event ``amended`` (False if it already was)."""
    sibling_ids: list[str]
    """Current memories derived from the same event: they stay, found by their own text."""
    search_rows: int
    vectors: int
    checkpoints_invalidated: int


class Erasure(Record):
    """What ``Scope.erase`` removed (or, with ``dry_run``, would remove): counts, and the
    first ``1,000`` event and memory IDs (``ids_truncated`` when there are more)."""

    persona: str
    project: str
    dry_run: bool
    events: int
    memories: int
    relations: int
    search_rows: int
    vectors: int
    checkpoints_invalidated: int
    checkpoints_cleared: int
    """Invalidated checkpoints of the scope whose text was blanked (metadata kept)."""
    batches: int
    """Write transactions it took (0 for a dry run or when nothing matched)."""
    event_ids: list[str]
    memory_ids: list[str]
    ids_truncated: bool
    states: int = 0
    """Person states deleted (``erase(person=...)`` alone deletes the person's state)."""
    copies: list[Copy] = []
    """Later events repeating the erased text (none for ``everything=True``): erased too
    (and counted in ``events``) with ``include_copies=True``, else left as they are."""


EvictionSkipReason = Literal["not_found", "not_derived", "already_evicted", "not_before"]
"""Why ``Scope.evict`` left an event as it was: ``not_found`` (no such event in the scope),
``not_derived`` (its memories are not derived yet: pending, stored or failed),
``already_evicted``, ``not_before`` (it did not occur before ``before``)."""


class EvictionSkip(Record):
    """An event ``Scope.evict`` was asked for and left as it was, and why."""

    event_id: str
    reason: EvictionSkipReason


class Eviction(Record):
    """What ``Scope.evict`` let go (or, with ``dry_run``, would let go): the raw text of
    derived events, whose rows, memories and quotes stay."""

    persona: str
    project: str
    dry_run: bool
    evicted: int
    """Events whose raw text went (or would go)."""
    events: list[str]
    """Their IDs, the first ``1,000`` (``ids_truncated`` when there are more)."""
    skipped: list[EvictionSkip]
    """Events named in ``event_ids`` that were left as they were, the first ``1,000``."""
    chars: int
    """Characters of raw text let go."""
    text_bytes: int
    """UTF-8 bytes of raw text let go (the scope's ``Capacity.text_bytes`` drops by it)."""
    search_rows: int
    vectors: int
    batches: int
    """Write transactions it took (0 for a dry run or when nothing was evicted)."""
    ids_truncated: bool = False


# --- tiers: consolidation and compaction -------------------------------------------------


class Promotion(Record):
    """One memory ``Scope.consolidate`` moved up a tier."""

    id: str
    from_tier: MemoryTier
    to_tier: MemoryTier


class Consolidation(Record):
    """What ``Scope.consolidate`` did, in one transaction (with ``dry_run``, what it would
    do, computed the same way, nothing written)."""

    persona: str
    project: str
    as_of: datetime
    """The time TTLs were judged at."""
    dry_run: bool
    deleted: list[str]
    """Expired, unpinned working notes, deleted completely (their source events stay)."""
    promotions: list[Promotion]
    """Memories moved up, each once (from its tier before to its tier after)."""


class Compaction(Record):
    """What ``Scope.compact_working`` did (with ``dry_run``, would do), in one transaction."""

    persona: str
    project: str
    session: str
    dry_run: bool
    kept: list[str]
    """The session's working notes that stay: pinned ones and the newest ``keep`` (and
    older ones that did not fit into one event this time: another call folds them)."""
    folded: list[str]
    """Working notes folded into ``memory``, oldest first, now revoked (reason
    ``compacted into <memory id>``); empty when there was nothing to fold."""
    memory: MemoryRecord | None
    """The new episodic memory, linked (``related``) to every folded note; it quotes
    ``event_id`` whole. None for a dry run or when nothing was folded."""
    event_id: str | None
    """The ``system`` event listing the folded notes word for word."""


class TurnEnd(Record):
    """What ``AgentSession.end_turn`` ran; a step the session is not configured for is None."""

    compaction: Compaction | None
    """``compact_working`` of the session (when ``compact_keep`` is given), run first."""
    consolidation: Consolidation | None
    """``consolidate`` of the scope (when ``consolidate``)."""
    run: ConsolidationRun | None = None
    """A consolidation run of the session prepared for the host's model, every
    ``prepare_every`` turns (``Scope.prepare_consolidation``)."""


class TombstoneImport(Record):
    """What ``Memory.import_tombstones`` did (or, with ``dry_run``, would do)."""

    path: str
    dry_run: bool
    tombstones: int
    """Tombstones in the archive."""
    new: int
    """Those this database did not hold yet (added, or would be)."""
    erasures: list[Erasure]
    """One per scope that held events the tombstones name: erased with everything derived."""


class Relation(Record):
    """A link between two memories of one scope: ``related`` or ``corects`` (audit)."""

    from_id: str
    to_id: str
    kind: RelationKind
    persona: str
    project: str
    note: str | None
    created_at: datetime


GraphNodeType = Literal["memory", "event", "person", "session"]
GraphEdgeKind = Literal[
    "derived_from",
    "corrects",
    "related",
    "merged_into",
    "supersedes",
    "about",
    "belongs_to",
    "in_session",
]
"""``derived_from``: a memory to its source event; ``corrects``, ``related``,
``merged_into``, ``supersedes``: relations between memories (``Relation``); ``about``: a
memory to a person it is about; ``belongs_to``: an event to the person whose relationship
it belongs to; ``in_session``: an event to its session."""
SeedKind = Literal["memory", "event", "person", "query", "recent"]
"""What a graph's seed was taken as: an ID, a person (ID or name), a query (the best items
of fast recall), or, with no seed, the scope's pinned and newest current memories."""


class GraphNode(Record):
    """A node of a ``MemoryGraph``: a memory, an event, a person or a session."""

    id: str
    """The memory, event or person ID; a session's name after ``session:``."""
    type: GraphNodeType
    label: str
    """A memory's text, an event's role and first words, a person's display name, a
    session's name; clipped to ``GRAPH_LABEL_CHARS``."""
    hop: int
    """Links from the nearest seed (0: a seed)."""
    kind: MemoryKind | None = None
    """A memory's kind."""
    tier: MemoryTier | None = None
    """A memory's tier."""
    status: str | None = None
    """A memory's ``current``, ``ended`` (its fact's interval closed) or ``revoked``; an
    event's status (``Event.status``)."""
    current: bool | None = None
    """For a memory: it stands now (neither revoked nor ended)."""
    role: Role | None = None
    """An event's role."""
    at: datetime | None = None
    """When a memory was stored, an event happened, a person was last changed, or a
    session's newest event happened: the recency the graph is ordered by."""


class GraphEdge(Record):
    """A directed link between two nodes of a ``MemoryGraph``."""

    from_id: str
    to_id: str
    kind: GraphEdgeKind
    note: str | None = None
    """A relation's note (a correction's reason)."""


class GraphCoverage(Record):
    """What a bounded ``MemoryGraph`` shows and what it left out."""

    nodes_shown: int
    edges_shown: int
    nodes_left_out: int
    """Nodes found linked to shown ones but not shown (``max_nodes``)."""
    edges_left_out: int
    """Links found but not shown: over ``max_edges``, or to a node left out."""
    depth_reached: int
    """The largest ``hop`` shown."""
    truncated: bool
    """Something was left out: the counts above, or what ``at_least`` says."""
    at_least: bool
    """The counts left out are lower bounds: a node had more links than were read, or the
    walk stopped once nodes and edges were both full."""


class MemoryGraph(Record):
    """What ``Scope.graph`` returns: nodes around a seed, the edges between them,
    breadth first and bounded, and ``coverage`` saying what was left out."""

    persona: str
    project: str
    seed: str | None
    """The seed as given."""
    seeded_by: SeedKind
    seeds: list[str]
    """The nodes the walk started from (``hop`` 0)."""
    depth: int
    nodes: list[GraphNode]
    """Seeds first, then by hop, then newest first."""
    edges: list[GraphEdge]
    coverage: GraphCoverage


class RunEvent(Record):
    """One source event of a consolidation run, frozen at prepare: ``text`` is the page
    ``offset`` to ``end`` of the event's ``total`` characters (an oversized event is paged
    over several runs). ``text`` is None once the run is applied, invalidated or scrubbed."""

    id: str
    seq: int
    role: Role
    session: str | None
    person: str | None
    occurred_at: datetime
    offset: int
    end: int
    total: int
    text: str | None


class RunMemory(Record):
    """A current memory a consolidation run's sources touch, frozen at prepare with its
    ``version``: a patch that changes it applies only while the version still holds."""

    id: str
    event_id: str
    text: str | None
    kind: MemoryKind
    basis: Basis
    subject: str | None
    fact_key: str | None
    tier: MemoryTier
    person: str | None
    valid_at: datetime
    invalid_at: datetime | None
    version: str


class RunInput(Record):
    """A consolidation run's frozen input: the events since the session's last applied run
    (at most ``max_chars`` of their text) and the memories they touch. ``more`` is true when
    further events wait for the next run."""

    events: list[RunEvent]
    memories: list[RunMemory]
    max_chars: int
    more: bool


class AppliedEntry(Record):
    """What one patch entry did: ``memory_id`` is the memory it made (add, summarise, a
    merge with new text) or kept (a merge's survivor); ``ids`` the memories it changed."""

    op: PatchOp
    memory_id: str | None = None
    ids: list[str] = []


class ConsolidationResult(Record):
    """What ``apply_consolidation`` did, entry by entry; ``duplicate`` is true when the same
    patch had been applied to the run before (nothing was done again)."""

    run_id: str
    duplicate: bool = False
    entries: list[AppliedEntry]
    evicted: list[str] = []


class ConsolidationRun(Record):
    """A durable consolidation run (``Scope.prepare_consolidation``): ``prepared`` until a
    patch is applied (``applied``); ``failed`` when a memory of its input changed before
    the patch came (prepare again); ``invalidated`` when one of its sources was erased.
    ``candidate`` and ``error`` keep the host's last rejected patch (``record_attempt``)."""

    id: str
    persona: str
    project: str
    session: str | None
    status: RunStatus
    input: RunInput
    candidate: Any = None
    error: Any = None
    result: ConsolidationResult | None = None
    created_at: datetime
    updated_at: datetime


class Checkpoint(Record):
    """A host-reported task state for one session; amem records it, it does not verify it."""

    persona: str
    project: str
    session: str
    goal: str
    completed: list[str]
    pending: list[str]
    constraints: list[str]
    next_action: str | None
    covered_seq: int | None
    """The last event (by ``seq``) of this scope and session the checkpoint accounts for."""
    created_at: datetime


class RetryResult(Record):
    """What ``Scope.retry`` did: which events it extracted and which failed again."""

    persona: str
    project: str
    extracted: list[str]
    """Event IDs now ``extracted``."""
    failed: list[str]
    """Event IDs that failed again; each keeps its sanitized error (``Event.error``)."""
    memory_ids: list[str]
    """Memories derived by this run."""


class ReindexResult(Record):
    """What ``Scope.reindex`` did: the scope's vector index, rebuilt and swapped in."""

    persona: str
    project: str
    fingerprint: str
    """Endpoint + model + version the vectors belong to."""
    memories: int
    """Current memories read for embedding."""
    events: int = 0
    """Conversation and correction events read for embedding."""
    embedded: int
    """Memories and events whose vectors were stored (an event may have several chunks);
    those deleted or changed during the run are skipped."""


class Status(Record):
    """Counts and health of one scope, as ``Scope.status`` and ``memory_status`` report them."""

    persona: str
    project: str
    default_persona: str
    default_project: str
    schema_version: int
    events: dict[str, int]
    """Events of the scope by status (``stored``, ``pending``, ``extracted``, ...,
    ``evicted``)."""
    memories: int
    """Current (unrevoked) memories of the scope."""
    revoked: int
    embedded: int
    """Current memories with a vector of the configured fingerprint."""
    embedded_events: int = 0
    """Conversation and correction events with a vector of the configured fingerprint."""
    coverage: float | None
    """Share of the current memories and indexed events that have a vector; None when no
    embedding endpoint is configured. ``auto`` recall is hybrid when it is at least
    ``Settings.auto_hybrid_coverage``."""
    fingerprint: str | None
    extraction: bool
    """True when an extraction endpoint is configured."""
    memory_kinds: dict[str, int]
    """Current (unrevoked) memories of the scope by kind."""
    capacity: Capacity
    """What the scope stores, its limits, and the file's size."""


DRAFT_FIELDS = frozenset(MemoryDraft.model_fields) | frozenset(Emotion.model_fields) | {"memories"}
"""Field names that may appear in validation messages about drafts."""


class CurrentEmotion(Record):
    """The latest emotion the assistant expressed, decayed toward zero since then."""

    label: str
    valence: float
    """The expressed valence times ``factor``."""
    arousal: float
    factor: float
    """``0.5 ** (hours since expressed / half-life)``; below the floor it is not current."""
    expressed_at: datetime
    memory_id: str


class ContextPack(Record):
    """What ``Scope.resume`` (and ``session_resume``) returns: a budgeted context.

    ``context`` is a JSON document built in this order: ``persona``, ``checkpoint``,
    ``agreements`` (recent agreements and growth), ``memories`` (recalled), ``emotion``
    (current), ``recent_events`` (the session's last events, chronological). ``render()``
    gives the same content as plain prompt text; both fit ``budget`` under the counter.
    """

    persona: str
    project: str
    session: str
    context: str
    """JSON text to hand the model; empty when ``insufficient_budget``."""
    included: list[str]
    """Components in the context, in order (some may be ``partial``)."""
    omitted: list[str]
    """Components that had content but none of it fit the budget."""
    partial: dict[str, int]
    """Included list components that left items out: how many, by component name."""
    tokens_used: int
    """What ``context`` costs under the counter; never above ``budget``."""
    budget: int
    counter: str
    """The name of the token counter: ``estimate_tokens`` unless the caller gave one."""
    insufficient_budget: bool
    """True when even the persona and framing do not fit: raise the budget."""
    budget_needed: int | None = None
    """With ``insufficient_budget``: at least this many tokens, what the persona and
    framing alone take under the counter."""
    as_of: datetime

    def render(self) -> str:
        """The pack as plain prompt text: the notice that it is quoted evidence (never
        instructions) first, then one section per component in order and one line per item
        ending in its citation ID, e.g. ``- User prefers trains (preference, ...) [mem_…]``.
        Empty when ``insufficient_budget``; within ``budget`` under the pack's counter."""
        return render_context(self.context)


class CaptureResult(Record):
    """What ``Scope.host_ingest`` did, in one transaction."""

    persona: str
    project: str
    instance: str
    cursor: int
    """Transcript entries captured so far by this host instance in this scope."""
    stored: list[str]
    """Event IDs stored by this call."""
    duplicates: list[str]
    """Event IDs already stored with the same payload (a replay)."""
    skipped: int
    """Entries before the cursor, not looked at (a deleted event stays deleted)."""
    erased: list[str] = []
    """Event IDs of entries past the cursor that were erased from this scope: not stored
    again (a tombstone refuses them), and the cursor moves past them."""
    checkpoint: Checkpoint | None
    receipts: list[EventReceipt]


class ArchiveResult(Record):
    """What ``export``, ``import_archive``, ``backup`` or ``restore`` wrote or read."""

    path: str
    counts: dict[str, int]
    """Rows per table (empty for a backup, which copies the whole file)."""
    skipped: dict[str, int] = {}
    """Import and restore: rows per table left out because the file's own tombstones
    erased their event (events, their memories and relations)."""


class DoctorCheck(Record):
    name: str
    ok: bool
    detail: str
    fix: str | None
    """What to run or do when the check failed."""
    severity: Literal["error", "warning"] = "error"
    """A failed ``error`` check makes the report (and ``amem doctor``) fail."""


class DoctorReport(Record):
    """What ``Memory.doctor`` found."""

    ok: bool
    schema_version: int
    checks: list[DoctorCheck]
    counts: dict[str, int]


# --- browsing and capacity ---------------------------------------------------------------

ListTarget = Literal["memories", "events"]
LIST_TARGETS: tuple[ListTarget, ...] = get_args(ListTarget)


class ListedMemory(Record):
    """One memory as ``Scope.list`` shows it: compact (``Scope.read`` gives the quote)."""

    id: str
    text: str
    kind: MemoryKind
    basis: Basis
    subject: str | None
    fact_key: str | None
    valid_at: datetime
    invalid_at: datetime | None
    source_event_id: str
    role: Role
    """Who said the source event."""
    session: str | None
    """The source event's session."""
    revoked: bool
    """Revoked (corrected or retracted): kept for audit, never recalled."""
    expired: bool
    """No longer true: its validity ended at or before the time of the listing."""
    tier: MemoryTier
    pinned: bool
    person: str | None = None
    """The person its source event belongs to; None: no one."""
    about: list[str] = []
    """The people it is about."""


class ListedEvent(Record):
    """One original event as ``Scope.list`` shows it; long texts are cut (``truncated``),
    ``Scope.read`` pages the whole text."""

    id: str
    seq: int
    text: str
    """The text, or its first ``LIST_PREVIEW_CHARS`` characters when ``truncated``."""
    chars: int
    """Length of the whole text in characters."""
    truncated: bool
    role: Role
    category: Category
    session: str | None
    occurred_at: datetime
    status: EventStatus
    person: str | None = None
    """The person whose relationship the event belongs to; None: no one."""


class Listing(Record):
    """One page of ``Scope.list``: newest stored first, with totals over every page."""

    persona: str
    project: str
    what: ListTarget
    items: list[ListedMemory] | list[ListedEvent]
    """``ListedMemory`` items when listing memories, ``ListedEvent`` items for events."""
    total: int
    """Items matching the filters, on every page (counted with this page)."""
    totals: dict[str, int]
    """``total`` broken down: by kind for memories, by role for events."""
    next_cursor: str | None
    """Pass as ``cursor`` for the next page (same filters); None on the last page."""


class ScopeSummary(Record):
    """One scope of the database, as ``Memory.scopes`` lists it."""

    persona: str
    project: str
    events: int
    """Events stored (every category and status)."""
    memories: int
    """Current (unrevoked) memories."""


class Capacity(Record):
    """What one scope stores, its optional limits, and the size of the whole file.

    Bytes of text are exact UTF-8 byte counts; index bytes are an estimate (see
    ``store.capacity``). The file figures are the database's, shared by every scope.
    """

    persona: str
    project: str
    events: int
    """Events stored, every category and status (what ``max_events`` limits)."""
    memories: int
    """Memory rows stored, revoked ones included."""
    text_bytes: int
    """UTF-8 bytes of the events' and memories' text (what ``max_text_bytes`` limits)."""
    index_bytes: int
    """Estimated bytes of the scope's search index entries."""
    vector_bytes: int
    """Bytes of the scope's stored vectors."""
    max_events: int | None
    """The scope's limit on ``events``; None: no limit."""
    max_text_bytes: int | None
    """The scope's limit on ``text_bytes``; None: no limit."""
    file_bytes: int
    """Size of the database file (every scope); on PostgreSQL, of the whole database."""
    wal_bytes: int
    """Size of its write-ahead log (0 when there is none, and on PostgreSQL)."""
    free_bytes: int
    """Bytes of unused pages inside the file, which later writes reuse before it grows
    (0 on PostgreSQL)."""


class Person(Record):
    """One person of a scope's registry (``Scope.upsert_person``): someone the persona
    talks with or about. ``version`` grows with each change."""

    id: str
    persona: str
    project: str
    display_name: str
    aliases: list[str]
    """Other names the person goes by; ``Scope.find_person`` matches these too."""
    locale: str | None
    timezone: str | None
    notes: str | None
    version: int
    created_at: datetime
    updated_at: datetime


class State(Record):
    """A versioned JSON object a host keeps between turns: the scope's own
    (``Scope.state``) or one person's (``Scope.person_state``). ``version`` is 0 until
    the first save and grows by one with each; pass it back as ``expected_version`` to
    save only if nothing changed meanwhile."""

    persona: str
    project: str
    person: str | None
    """The person whose state it is; None: the scope's own."""
    data: dict[str, Any]
    version: int
    updated_at: datetime | None
    """When it was last saved; None before the first save."""


class Assignment(Record):
    """What ``Scope.assign`` did: the event now belongs to ``person``'s relationship, with
    every memory derived from it; its role, text and times are as they were."""

    event_id: str
    person: str | None
    """Whom it belongs to now; None: no one."""
    previous: str | None
    """Whom it belonged to before."""
    reason: str | None
    memory_ids: list[str]
    """The memories derived from it, which moved with it."""
    assigned_at: datetime


Status.model_rebuild()
