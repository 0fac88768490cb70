"""amem: long-term memory for LLM agents, on SQLite, awaited in-loop (asyncio or trio).

Importing ``amem`` loads nothing but its version: each public name's module is imported
the first time the name is used (PEP 562), so a command that prints its version or help,
or a server answering its first request, does not wait most of a second for numpy,
pydantic and httpx.
"""

import importlib as _importlib
import typing as _typing

from .version import __version__ as __version__

if _typing.TYPE_CHECKING:
    from .agent import AgentSession
    from .config import Settings
    from .errors import (
        AmemError,
        BudgetTooSmall,
        Closed,
        Conflict,
        InvalidInput,
        NotFound,
        StorageError,
        UpstreamError,
    )
    from .memory import Memory, Scope, open
    from .models import (
        ArchiveResult,
        Assignment,
        Capacity,
        CaptureResult,
        Checkpoint,
        Compaction,
        Consolidation,
        ConsolidationResult,
        ConsolidationRun,
        ContextPack,
        Copy,
        Correction,
        CurrentEmotion,
        Deletion,
        DoctorCheck,
        DoctorReport,
        Emotion,
        Erasure,
        Event,
        EventReceipt,
        Eviction,
        EvictionSkip,
        Evidence,
        GraphCoverage,
        GraphEdge,
        GraphNode,
        ListedEvent,
        ListedMemory,
        Listing,
        MemoryDraft,
        MemoryGraph,
        MemoryRecord,
        Person,
        Persona,
        Promotion,
        RecallItem,
        RecallResult,
        ReindexResult,
        Relation,
        Retraction,
        RetryResult,
        ScopeSummary,
        ScoreComponents,
        State,
        Status,
        TombstoneImport,
        TurnEnd,
    )
    from .tokens import TokenCounter, estimate_tokens

_HOMES = {
    "agent": "AgentSession",
    "config": "Settings",
    "errors": (
        "AmemError BudgetTooSmall Closed Conflict InvalidInput NotFound StorageError UpstreamError"
    ),
    "memory": "Memory Scope open",
    "models": (
        "ArchiveResult Assignment Capacity CaptureResult Checkpoint Compaction Consolidation"
        " ConsolidationResult ConsolidationRun"
        " ContextPack Copy Correction CurrentEmotion Deletion DoctorCheck DoctorReport"
        " Emotion Erasure Event EventReceipt Eviction EvictionSkip Evidence ListedEvent"
        " ListedMemory Listing"
        " GraphCoverage GraphEdge GraphNode MemoryDraft MemoryGraph MemoryRecord Person"
        " Persona Promotion RecallItem RecallResult"
        " ReindexResult Relation Retraction RetryResult ScopeSummary ScoreComponents"
        " State Status TombstoneImport TurnEnd"
    ),
    "tokens": "TokenCounter estimate_tokens",
}
"""The module each public name lives in, its names separated by spaces (the imports above,
for type checkers)."""

_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names.split()}


__all__ = [
    "AgentSession",
    "AmemError",
    "ArchiveResult",
    "Assignment",
    "BudgetTooSmall",
    "Capacity",
    "CaptureResult",
    "Checkpoint",
    "Closed",
    "Compaction",
    "Conflict",
    "Consolidation",
    "ConsolidationResult",
    "ConsolidationRun",
    "ContextPack",
    "Copy",
    "Correction",
    "CurrentEmotion",
    "Deletion",
    "DoctorCheck",
    "DoctorReport",
    "Emotion",
    "Erasure",
    "Event",
    "EventReceipt",
    "Eviction",
    "EvictionSkip",
    "Evidence",
    "GraphCoverage",
    "GraphEdge",
    "GraphNode",
    "InvalidInput",
    "ListedEvent",
    "ListedMemory",
    "Listing",
    "Memory",
    "MemoryDraft",
    "MemoryGraph",
    "MemoryRecord",
    "NotFound",
    "Person",
    "Persona",
    "Promotion",
    "RecallItem",
    "RecallResult",
    "ReindexResult",
    "Relation",
    "Retraction",
    "RetryResult",
    "Scope",
    "ScopeSummary",
    "ScoreComponents",
    "Settings",
    "State",
    "Status",
    "StorageError",
    "TokenCounter",
    "TombstoneImport",
    "TurnEnd",
    "UpstreamError",
    "estimate_tokens",
    "open",
]


def __getattr__(name: str) -> _typing.Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'amem' has no attribute {name!r}")
    value = getattr(_importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later uses find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
