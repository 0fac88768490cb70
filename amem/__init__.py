"""amem: long-term memory for LLM agents, on SQLite, awaited in-loop (asyncio or trio)."""

__version__ = "0.1.0"

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
    Checkpoint,
    Correction,
    Deletion,
    Emotion,
    Event,
    EventReceipt,
    Evidence,
    MemoryDraft,
    MemoryRecord,
    Persona,
    RecallItem,
    RecallResult,
    ReindexResult,
    Relation,
    RetryResult,
    ScoreComponents,
    Status,
)

__all__ = [
    "AmemError",
    "BudgetTooSmall",
    "Checkpoint",
    "Closed",
    "Conflict",
    "Correction",
    "Deletion",
    "Emotion",
    "Event",
    "EventReceipt",
    "Evidence",
    "InvalidInput",
    "Memory",
    "MemoryDraft",
    "MemoryRecord",
    "NotFound",
    "Persona",
    "RecallItem",
    "RecallResult",
    "ReindexResult",
    "Relation",
    "RetryResult",
    "Scope",
    "ScoreComponents",
    "Settings",
    "Status",
    "StorageError",
    "UpstreamError",
    "open",
]
