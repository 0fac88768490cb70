"""Every error amem raises, with a stable ``code`` string.

AmemError (code: str)
  InvalidInput      invalid_input, invalid_time, quote_mismatch, role_violation,
                    not_configured, path_not_allowed, port_unavailable,
                    unsupported_database
  Conflict          duplicate_conflict, version_conflict, erased, person_in_use
  NotFound          not_found, erased
  BudgetTooSmall    insufficient_budget
  StorageError      schema_too_new, not_amem_database, not_a_database, read_only,
                    storage_full, database_busy, storage_error, archive_invalid,
                    target_exists, capacity_exceeded, no_database,
                    schema_too_old, database_unreachable
  UpstreamError     extraction_failed, embedding_failed
  Closed            closed

Messages name the field or condition that failed and never echo input values,
credentials or remote response bodies, so they are safe to log and to show to a model.
"""

from __future__ import annotations

__all__ = [
    "AmemError",
    "BudgetTooSmall",
    "Closed",
    "Conflict",
    "InvalidInput",
    "NotFound",
    "StorageError",
    "UpstreamError",
]


class AmemError(Exception):
    """Base of every amem error; ``code`` is stable and machine-readable."""

    default_code = "amem_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code or self.default_code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidInput(AmemError):
    """The request is malformed; nothing was written."""

    default_code = "invalid_input"


class Conflict(AmemError):
    """The request contradicts what is already stored; nothing was written.

    ``erased``: the event ID was erased from this scope, and its tombstone refuses it."""

    default_code = "duplicate_conflict"


class NotFound(AmemError):
    """No such ID in this scope (IDs of other scopes read as absent)."""

    default_code = "not_found"


class BudgetTooSmall(AmemError):
    """A context pack cannot fit even its mandatory parts."""

    default_code = "insufficient_budget"


class StorageError(AmemError):
    """The database cannot serve the request as asked (``capacity_exceeded``: the write
    would take its scope past a limit set with ``Scope.set_limits``;
    ``database_unreachable``: a PostgreSQL server refused the connection or did not answer)."""

    default_code = "storage_error"


class UpstreamError(AmemError):
    """An extraction or embedding endpoint failed; its response body is never included."""

    default_code = "upstream_error"


class Closed(AmemError):
    """The ``Memory`` was closed; open a new one."""

    default_code = "closed"
