"""``Settings`` reads ``AMEM_<FIELD>`` variables when built: what the operator sets in the
environment configures every ``Memory`` and command, and what code passes wins."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from amem import Settings


def test_a_variable_sets_its_field_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMEM_READERS", "5")
    monkeypatch.setenv("amem_default_persona", "coach")
    monkeypatch.setenv("AMEM_DB", "/tmp/elsewhere.db")
    monkeypatch.setenv("AMEM_EMBED_BACKFILL", "false")
    settings = Settings()
    assert settings.readers == 5
    assert settings.default_persona == "coach"
    assert settings.db == Path("/tmp/elsewhere.db")
    assert settings.embed_backfill is False


def test_what_code_passes_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMEM_READERS", "5")
    assert Settings(readers=3).readers == 3


def test_unknown_variables_are_ignored_and_an_api_key_stays_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AMEM_NO_SUCH_SETTING", "1")
    monkeypatch.setenv("AMEM_EXTRACT_API_KEY", "sk-secret-value")
    settings = Settings()
    assert settings.extract_api_key is not None
    assert "sk-secret-value" not in repr(settings)


def test_a_bad_value_is_refused_without_echoing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMEM_READERS", "many-SECRET")
    with pytest.raises(pydantic.ValidationError) as raised:
        Settings()
    assert "readers" in str(raised.value)
    assert "SECRET" not in str(raised.value)


def test_settings_are_read_when_built_not_when_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    before = Settings()
    monkeypatch.setenv("AMEM_DEFAULT_PROJECT", "later")
    assert before.default_project == "default"
    assert Settings().default_project == "later"
