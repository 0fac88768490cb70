"""Settings, read from ``AMEM_*`` environment variables once, when asked, and passed in."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Configuration of one ``Memory``. Build it yourself or let ``amem.open`` read the env."""

    model_config = SettingsConfigDict(env_prefix="AMEM_", extra="ignore", frozen=True)

    db: Path | None = None
    """Database file used by the CLI when ``--db`` is not given (``AMEM_DB``)."""
    default_persona: str = "default"
    default_project: str = "default"
    readers: int = Field(default=2, ge=1, le=32)
    """Read-only connections in the reader pool."""

    extract_base_url: str | None = None
    extract_model: str | None = None
    extract_api_key: SecretStr | None = None

    embed_base_url: str | None = None
    embed_model: str | None = None
    embed_api_key: SecretStr | None = None
    embed_version: str = "1"

    @property
    def extraction_enabled(self) -> bool:
        """New conversation events wait for extraction (``pending``) only when configured."""
        return bool(self.extract_base_url and self.extract_model)
