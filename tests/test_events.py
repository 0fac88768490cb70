"""Original events: storage, idempotent resubmission, times, validation, reading back."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

import amem

# what the markers mean: tests/conftest.py
pytestmark = [pytest.mark.both_databases, pytest.mark.anyio, pytest.mark.one_backend]

T0 = "2026-11-30T09:00:00+08:00"


async def test_receipt_echoes_scope_and_normalises_time_to_utc(scope: amem.Scope) -> None:
    receipt = await scope.submit_event(
        "I moved to Hangzhou", role="user", event_id="m-1", session="chat-7", occurred_at=T0
    )
    assert (receipt.event_id, receipt.persona, receipt.project) == ("m-1", "assistant", "support")
    assert receipt.session == "chat-7"
    assert receipt.occurred_at == datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
    assert receipt.occurred_at.utcoffset() is not None
    assert receipt.ingested_at != receipt.occurred_at
    assert (receipt.duplicate, receipt.status, receipt.memory_ids) == (False, "stored", [])


async def test_sequence_increases_across_scopes(mem: amem.Memory) -> None:
    a, b = mem.scope("p1", "x"), mem.scope("p2", "y")
    seqs = [
        (await s.submit_event(f"turn {i}", role="user")).seq for i, s in enumerate([a, b, a, b])
    ]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == 4


async def test_omitted_event_id_gets_a_fresh_one(scope: amem.Scope) -> None:
    first = await scope.submit_event("same text", role="user")
    second = await scope.submit_event("same text", role="user")
    assert first.event_id != second.event_id
    assert not first.duplicate
    assert not second.duplicate


async def test_resubmitting_same_payload_returns_existing_receipt(scope: amem.Scope) -> None:
    original = await scope.submit_event("我搬到杭州了", role="user", event_id="m-1", occurred_at=T0)
    again = await scope.submit_event("我搬到杭州了", role="user", event_id="m-1", occurred_at=T0)
    assert again.duplicate
    assert (again.seq, again.occurred_at, again.ingested_at) == (
        original.seq,
        original.occurred_at,
        original.ingested_at,
    )


async def test_resubmission_without_time_reuses_original_occurrence(scope: amem.Scope) -> None:
    original = await scope.submit_event("hello", role="user", event_id="m-1", occurred_at=T0)
    again = await scope.submit_event("hello", role="user", event_id="m-1")
    assert again.duplicate
    assert again.occurred_at == original.occurred_at


@pytest.mark.parametrize(
    "change",
    [
        {"text": "different text"},
        {"role": "assistant"},
        {"session": "other-session"},
        {"source": "other-source"},
        {"category": "reference"},
        {"occurred_at": "2026-11-30T10:00:00+08:00"},
    ],
)
async def test_resubmission_with_other_payload_conflicts(
    scope: amem.Scope, change: dict[str, str]
) -> None:
    payload = {"text": "hello", "role": "user", "session": "s", "source": "chat", "occurred_at": T0}
    await scope.submit_event(event_id="m-1", **payload)
    with pytest.raises(amem.Conflict) as caught:
        await scope.submit_event(event_id="m-1", **{**payload, **change})
    assert caught.value.code == "duplicate_conflict"
    page = await scope.read("m-1")
    assert page.text == "hello"


async def test_event_ids_are_unique_across_scopes(mem: amem.Memory) -> None:
    await mem.scope("assistant", "a").submit_event("hello", role="user", event_id="m-1")
    with pytest.raises(amem.Conflict):
        await mem.scope("assistant", "b").submit_event("hello", role="user", event_id="m-1")
    with pytest.raises(amem.NotFound):
        await mem.scope("assistant", "b").read("m-1")


@pytest.mark.parametrize("when", ["2026-11-30T09:00:00", datetime(2026, 11, 30, 9, 0)])
async def test_naive_time_is_rejected_naming_the_field(
    scope: amem.Scope, when: str | datetime
) -> None:
    with pytest.raises(amem.InvalidInput) as caught:
        await scope.submit_event("hello", role="user", event_id="m-1", occurred_at=when)
    assert caught.value.code == "invalid_time"
    assert "occurred_at" in caught.value.message
    with pytest.raises(amem.NotFound):
        await scope.read("m-1")


async def test_unparseable_time_is_invalid_time(scope: amem.Scope) -> None:
    with pytest.raises(amem.InvalidInput) as caught:
        await scope.submit_event("hello", role="user", occurred_at="next tuesday")
    assert caught.value.code == "invalid_time"


async def test_a_plain_date_is_the_start_of_that_day_in_utc(scope: amem.Scope) -> None:
    receipt = await scope.submit_event("hello", role="user", occurred_at="2026-11-25")
    event = (await scope.read(receipt.event_id)).event
    assert event.occurred_at == datetime(2026, 11, 25, tzinfo=UTC)
    assert (await scope.recall("hello", as_of="2026-11-26")).items
    assert not (await scope.recall("hello", as_of="2026-11-24")).items


async def test_datetime_objects_are_accepted(scope: amem.Scope) -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    receipt = await scope.submit_event("hello", role="user", occurred_at=when)
    assert receipt.occurred_at == when


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"text": "hi", "role": "robot-SECRET"}, "role"),
        ({"text": "hi", "role": "user", "category": "diary-SECRET"}, "category"),
        ({"text": "hi", "role": "user", "category": "correction"}, "correction"),
        ({"text": "", "role": "user"}, "text"),
        ({"text": "   ", "role": "user"}, "text"),
        ({"text": "SECRET" * 20_000, "role": "user"}, "100000"),
        ({"text": "SECRET\x00x", "role": "user"}, "NUL"),
        ({"text": "SECRET\ud800", "role": "user"}, "surrogate"),
        ({"text": "hi", "role": "user", "event_id": "SECRET\n"}, "event_id"),
        ({"text": "hi", "role": "user", "event_id": "x" * 201 + "SECRET"}, "event_id"),
        ({"text": "hi", "role": "user", "session": ""}, "session"),
    ],
)
async def test_bad_input_is_refused_without_echo_and_writes_nothing(
    mem: amem.Memory, scope: amem.Scope, kwargs: dict[str, str], field: str
) -> None:
    with pytest.raises(amem.InvalidInput) as caught:
        await scope.submit_event(**kwargs)
    assert field in caught.value.message
    assert "SECRET" not in str(caught.value)
    assert (await scope.submit_event("after", role="user")).seq == 1


async def test_text_at_the_size_limit_is_stored_whole(scope: amem.Scope) -> None:
    text = "长" * 100_000
    await scope.submit_event(text, role="user", event_id="big")
    page = await scope.read("big", limit=100_000)
    assert page.text == text
    assert page.next_offset is None


async def test_status_is_stored_without_an_extractor(scope: amem.Scope) -> None:
    receipt = await scope.submit_event("hello", role="user", event_id="m-1")
    assert receipt.status == "stored"
    assert (await scope.read("m-1")).event.status == "stored"


async def test_conversation_waits_for_a_configured_extractor(db_path: Path) -> None:
    settings = amem.Settings(extract_base_url="http://127.0.0.1:9/v1", extract_model="m")
    async with amem.open(db_path, settings=settings) as mem:
        scope = mem.scope()
        chat = await scope.submit_event("hello", role="user")
        manual = await scope.submit_event("a manual", role="system", category="reference")
        persona = await scope.submit_event("be kind", role="system", category="persona")
    assert chat.status == "pending"
    assert (manual.status, persona.status) == ("stored", "stored")


async def test_default_scope_comes_from_settings(db_path: Path) -> None:
    settings = amem.Settings(default_persona="helper", default_project="notes")
    async with amem.open(db_path, settings=settings) as mem:
        receipt = await mem.scope().submit_event("hello", role="user")
    assert (receipt.persona, receipt.project) == ("helper", "notes")


async def test_read_pages_the_original_text(scope: amem.Scope) -> None:
    text = "第一页内容。" * 10 + "English tail"
    await scope.submit_event(text, role="assistant", event_id="m-1", session="s", source="chat")
    first = await scope.read("m-1", limit=25)
    second = await scope.read("m-1", offset=first.next_offset or 0, limit=1000)
    assert first.text + second.text == text
    assert (first.total_chars, first.next_offset, second.next_offset) == (len(text), 25, None)
    event = first.event
    assert (event.role, event.session, event.source, event.chars) == (
        "assistant",
        "s",
        "chat",
        len(text),
    )


async def test_read_of_unknown_or_foreign_id_is_not_found(mem: amem.Memory) -> None:
    await mem.scope("assistant", "support").submit_event("hello", role="user", event_id="m-1")
    for scope in (mem.scope("assistant", "other"), mem.scope("other", "support")):
        with pytest.raises(amem.NotFound) as caught:
            await scope.read("m-1")
        assert caught.value.code == "not_found"
    with pytest.raises(amem.NotFound):
        await mem.scope("assistant", "support").read("missing")


@pytest.mark.parametrize(("offset", "limit"), [(-1, 10), (0, 0), (0, -1), (0, 10**9)])
async def test_read_rejects_bad_paging(scope: amem.Scope, offset: int, limit: int) -> None:
    await scope.submit_event("hello", role="user", event_id="m-1")
    with pytest.raises(amem.InvalidInput):
        await scope.read("m-1", offset=offset, limit=limit)


async def test_scope_names_are_validated(mem: amem.Memory) -> None:
    with pytest.raises(amem.InvalidInput, match="persona"):
        mem.scope(persona="bad\tname")
    with pytest.raises(amem.InvalidInput, match="project"):
        mem.scope(project="x" * 101)


async def test_closed_memory_refuses_work(db_path: Path) -> None:
    async with amem.open(db_path) as mem:
        scope = mem.scope()
    with pytest.raises(amem.Closed):
        await scope.submit_event("late", role="user")
    with pytest.raises(amem.Closed):
        await scope.read("anything")


async def test_events_survive_reopening(db_path: Path) -> None:
    async with amem.open(db_path) as mem:
        await mem.scope().submit_event("持久", role="user", event_id="m-1", occurred_at=T0)
    async with amem.open(db_path) as mem:
        page = await mem.scope().read("m-1")
    assert page.text == "持久"
    assert page.event.occurred_at == datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
