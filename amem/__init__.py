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
from .models import Event, EventReceipt, Evidence, Persona

__all__ = [
    "AmemError",
    "BudgetTooSmall",
    "Closed",
    "Conflict",
    "Event",
    "EventReceipt",
    "Evidence",
    "InvalidInput",
    "Memory",
    "NotFound",
    "Persona",
    "Scope",
    "Settings",
    "StorageError",
    "UpstreamError",
    "open",
]
