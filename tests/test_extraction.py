"""Extraction: the background queue, its limit, its failures and how they recover.

Every test talks HTTP: to a real OpenAI-compatible server on 127.0.0.1
(``amem.testing.FakeOpenAI``) or, for faults a real server cannot easily produce, to an
endpoint behind ``httpx.MockTransport``. Nothing of amem itself is mocked.
"""

from __future__ import annotations

import inspect
import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, closing
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest
from helpers import rows

import amem
from amem.db.times import db_now
from amem.llm.client import MAX_RESPONSE_BYTES
from amem.store.extraction import complete_extraction
from amem.testing import FakeOpenAI, database

pytestmark = pytest.mark.anyio

KEY = "sk-secret-4f1c9e7a"
MARKER = "BODY-MARKER-123"
"""Put in every faulty response body; a stored error must never contain it."""
WAIT = 10
"""Seconds any awaited condition may take before the test fails instead of hanging."""
T = "2026-03-01T10:00:00+08:00"


def settings(base_url: str, **extra: Any) -> amem.Settings:
    return amem.Settings(
        extract_base_url=base_url, extract_model="fake", extract_api_key=KEY, **extra
    )


@asynccontextmanager
async def echoing(db_path: Path) -> AsyncIterator[tuple[FakeOpenAI, amem.Memory]]:
    """amem on ``db_path`` extracting through a ``FakeOpenAI`` that echoes each event."""
    with FakeOpenAI(answer=echo) as api:
        async with amem.open(db_path, settings=settings(api.base_url)) as mem:
            yield api, mem


def echo(event: dict[str, Any]) -> list[dict[str, Any]]:
    """A well-behaved model: one episode quoting the whole message."""
    basis = "user_statement" if event["role"] == "user" else "assistant_expression"
    draft = {"text": f"Said: {event['text']}", "quote": event["text"], "kind": "episode"}
    return [{**draft, "basis": basis}]


def sent_texts(api: FakeOpenAI) -> list[str]:
    """The event texts the fake server was asked about, in arrival order."""
    return [json.loads(r["messages"][-1]["content"])["text"] for r in api.chat_requests]


async def wait_until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(WAIT):
        while not condition():
            await anyio.sleep(0.005)


async def settled(scope: amem.Scope, event_id: str) -> amem.Evidence:
    """The event's page once its background extraction has finished (it is not pending)."""
    with anyio.fail_after(WAIT):
        while (page := await scope.read(event_id)).event.status == "pending":
            await anyio.sleep(0.005)
    return page


# --- the happy path, through a real server ----------------------------------------------


async def test_submit_returns_pending_and_the_event_is_extracted_in_the_background(
    db_path: Path,
) -> None:
    text = "你好！我最近搬到杭州了，离西湖很近。"

    def answer(event: dict[str, Any]) -> list[dict[str, Any]]:
        draft = {"text": "User lives in Hangzhou", "quote": "搬到杭州", "kind": "fact"}
        return [{**draft, "basis": "user_statement", "subject": "user", "fact_key": "residence"}]

    with FakeOpenAI(answer=answer) as api:
        api.gate.clear()  # the model answers nothing until the gate opens
        async with amem.open(db_path, settings=settings(api.base_url)) as mem:
            scope = mem.scope("assistant", "support")
            with anyio.fail_after(5):  # the model would block it for 60 s
                receipt = await scope.submit_event(text, role="user", event_id="e-1", occurred_at=T)
            assert (receipt.status, receipt.memory_ids, receipt.duplicate) == ("pending", [], False)
            await wait_until(lambda: api.in_flight == 1)  # the call waits in the server
            assert (await scope.read("e-1")).event.status == "pending"
            assert (await scope.status()).events["pending"] == 1

            api.gate.set()
            page = await settled(scope, "e-1")
            assert (page.event.status, page.event.error) == ("extracted", None)
            [memory] = page.memories
            assert text[memory.quote_start : memory.quote_end] == memory.quote == "搬到杭州"
            assert (memory.text, memory.basis, memory.fact_key, memory.event_id) == (
                "User lives in Hangzhou",
                "user_statement",
                "residence",
                "e-1",
            )
            assert memory.valid_at.isoformat() == "2026-03-01T02:00:00+00:00"
            [request] = api.chat_requests
            assert request["response_format"] == {"type": "json_object"}
            assert request["model"] == "fake"
            asked = json.loads(request["messages"][-1]["content"])
            assert (asked["text"], asked["role"]) == (text, "user")


async def test_no_more_than_extract_concurrency_calls_are_in_flight(db_path: Path) -> None:
    texts = [f"Note number {n} about jazz" for n in range(6)]
    with FakeOpenAI(answer=echo) as api:
        api.gate.clear()
        async with amem.open(
            db_path, settings=settings(api.base_url, extract_concurrency=2)
        ) as mem:
            scope = mem.scope("assistant", "support")
            for n, text in enumerate(texts):
                receipt = await scope.submit_event(text, role="user", event_id=f"e-{n}")
                assert receipt.status == "pending"
            await wait_until(lambda: api.in_flight >= 2)
            await anyio.sleep(0.2)  # time for a third call to arrive, were the limit broken
            assert api.max_in_flight == 2

            api.gate.set()
            pages = [await settled(scope, f"e-{n}") for n in range(6)]
            assert [page.event.status for page in pages] == ["extracted"] * 6
            assert [page.memories[0].quote for page in pages] == texts
            assert api.max_in_flight == 2
            assert sorted(sent_texts(api)) == sorted(texts)


@pytest.mark.parametrize("category", ["reference", "persona"])
async def test_archived_events_are_stored_and_never_sent(db_path: Path, category: str) -> None:
    archived = "The office closes at 6 pm on Fridays"
    async with echoing(db_path) as (api, mem):
        scope = mem.scope("assistant", "support")
        receipt = await scope.submit_event(
            archived, role="user", event_id="e-archived", category=category
        )
        assert receipt.status == "stored"
        await scope.submit_event("I like jazz", role="user", event_id="e-1")
        assert (await settled(scope, "e-1")).event.status == "extracted"  # the queue ran
        assert (await scope.retry()).extracted == []
        assert (await scope.retry("e-archived")).extracted == []

        page = await scope.read("e-archived")
        assert (page.event.status, page.memories) == ("stored", [])
        assert sent_texts(api) == ["I like jazz"]


# --- the fault matrix, through httpx.MockTransport ----------------------------------------

BAD_TEXT = "I will remind you to call the dentist on Friday."
BAD_QUOTE = "remind you to call the dentist"
GOOD_TEXT = "I like jazz."


def completion(content: str | None, finish_reason: str = "stop") -> httpx.Response:
    return httpx.Response(
        200,
        json={
            "object": "chat.completion",
            "model": "fake",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": finish_reason,
                    "message": {"role": "assistant", "content": content},
                }
            ],
        },
    )


def answer(*drafts: dict[str, Any]) -> httpx.Response:
    return completion(json.dumps({"memories": list(drafts)}))


def promise(**change: Any) -> dict[str, Any]:
    """A valid draft for BAD_TEXT (an assistant event), with ``change`` applied."""
    return {
        "text": f"Assistant promised a reminder ({MARKER})",
        "quote": BAD_QUOTE,
        "kind": "agreement",
        "basis": "assistant_expression",
        **change,
    }


def raising(error: type[httpx.HTTPError]) -> Callable[[], httpx.Response]:
    def respond() -> httpx.Response:
        raise error(f"connection trouble {MARKER}")

    return respond


async def too_slow() -> httpx.Response:
    await anyio.sleep(60)
    return answer(promise())


def oversized() -> httpx.Response:
    return completion(MARKER * (MAX_RESPONSE_BYTES // len(MARKER) + 1))


class Trickle:
    """A streamed response body: ``chunk`` ``count`` times, then (if ``stall``) no more bytes
    for a minute. ``count=None`` streams forever."""

    def __init__(self, chunk: bytes, *, count: int | None, stall: bool) -> None:
        self.chunk, self.left, self.stall = chunk, count, stall

    def __aiter__(self) -> Trickle:
        return self

    async def __anext__(self) -> bytes:
        if self.left is not None:
            if self.left == 0:
                if self.stall:
                    await anyio.sleep(60)
                raise StopAsyncIteration
            self.left -= 1
        await anyio.lowlevel.checkpoint()
        return self.chunk


def stalls_mid_body() -> httpx.Response:
    head = b'{"choices": [' + MARKER.encode()
    return httpx.Response(200, content=Trickle(head, count=1, stall=True))


def endless_body() -> httpx.Response:
    return httpx.Response(200, content=Trickle(MARKER.encode() * 4096, count=None, stall=False))


@dataclass(frozen=True)
class Fault:
    respond: Callable[[], httpx.Response | Awaitable[httpx.Response]]
    says: str
    """The stored error contains this..."""
    code: str = "extraction_failed"
    """... and starts with ``code:``."""
    timeout: float = 10.0
    on_trio: pytest.MarkDecorator | None = None
    """A mark for the trio run only (a known problem that shows on trio)."""


HTTPX_ABANDONS_STREAM = pytest.mark.xfail(
    strict=False,
    reason="httpx's own stream generators are abandoned too (encode/httpx#3686)",
)

FAULTS = [
    pytest.param(
        Fault(
            lambda: httpx.Response(500, json={"error": {"message": MARKER}}),
            "HTTP 500",
        ),
        id="http-500",
    ),
    pytest.param(
        Fault(
            lambda: httpx.Response(429, headers={"Retry-After": "1"}, text=MARKER),
            "HTTP 429",
        ),
        id="http-429",
    ),
    pytest.param(
        Fault(raising(httpx.ReadTimeout), "no answer within"),
        id="read-timeout",
    ),
    pytest.param(
        Fault(too_slow, "no answer within 0.3 s", timeout=0.3),
        id="slower-than-extract-timeout",
    ),
    pytest.param(Fault(raising(httpx.ConnectError), "ConnectError"), id="connect-error"),
    pytest.param(
        Fault(raising(httpx.RemoteProtocolError), "RemoteProtocolError"),
        id="connection-reset",
    ),
    pytest.param(
        Fault(
            lambda: httpx.Response(200, text='{"choices": [' + MARKER),
            "not valid JSON",
        ),
        id="body-not-json",
    ),
    pytest.param(
        Fault(lambda: httpx.Response(200, json=[MARKER]), "not a JSON object"),
        id="body-not-an-object",
    ),
    pytest.param(
        Fault(
            lambda: httpx.Response(200, json={"error": {"message": MARKER}}),
            "not a chat completion",
        ),
        id="not-a-completion",
    ),
    pytest.param(Fault(lambda: completion(None), "no text content"), id="no-content"),
    pytest.param(
        Fault(lambda: completion(f"Sure! {MARKER}"), "did not answer valid JSON"),
        id="content-not-json",
    ),
    pytest.param(
        Fault(
            lambda: completion(json.dumps({"memories": [promise()]})[:-3], "length"),
            "cut off",
        ),
        id="truncated",
    ),
    pytest.param(
        Fault(lambda: completion(json.dumps({"facts": [MARKER]})), "schema"),
        id="not-memories",
    ),
    pytest.param(
        Fault(lambda: completion(json.dumps({"memories": MARKER})), "schema"),
        id="memories-not-a-list",
    ),
    pytest.param(Fault(lambda: answer(promise(kind=MARKER)), "schema"), id="bad-kind"),
    pytest.param(Fault(lambda: answer(promise(note=MARKER)), "schema"), id="extra-field"),
    pytest.param(
        Fault(lambda: answer(promise(confidence=2)), "schema"),
        id="confidence-out-of-range",
    ),
    pytest.param(
        Fault(lambda: answer(*[promise()] * 51), "schema"),
        id="too-many-memories",
    ),
    pytest.param(
        Fault(lambda: answer(promise(**{MARKER: 1})), "schema"),
        id="extra-field-named-by-the-model",
    ),
    pytest.param(
        Fault(
            lambda: completion(json.dumps({"memories": [], MARKER: 1})),
            "schema",
        ),
        id="extra-key-named-by-the-model",
    ),
    pytest.param(
        Fault(lambda: answer(promise(quote=MARKER)), "memories[0]", code="quote_mismatch"),
        id="quote-not-in-source",
    ),
    pytest.param(
        Fault(
            lambda: answer(promise(), promise(quote=MARKER)), "memories[1]", code="quote_mismatch"
        ),
        id="one-bad-draft-of-two",
    ),
    pytest.param(
        Fault(
            lambda: answer(promise(basis="user_statement")), "user_statement", code="role_violation"
        ),
        id="user-statement-on-an-assistant-event",
    ),
    pytest.param(
        Fault(
            oversized,
            f"larger than {MAX_RESPONSE_BYTES}",
        ),
        id="oversized-body",
    ),
    pytest.param(
        Fault(
            endless_body,
            f"larger than {MAX_RESPONSE_BYTES}",
            on_trio=HTTPX_ABANDONS_STREAM,
        ),
        id="endless-body",
    ),
    pytest.param(
        Fault(stalls_mid_body, "no answer within 0.3 s", timeout=0.3),
        id="stalls-mid-body",
    ),
]


class Endpoint:
    """A chat completions endpoint for ``httpx.MockTransport``: it answers BAD_TEXT with
    ``fault`` until ``healed``, and everything else like ``echo``."""

    def __init__(self, fault: Callable[[], httpx.Response | Awaitable[httpx.Response]]) -> None:
        self.fault = fault
        self.healed = False
        self.requests: list[httpx.Request] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        event = json.loads(json.loads(request.content)["messages"][-1]["content"])
        if event["text"] == BAD_TEXT and not self.healed:
            response = self.fault()
            return await response if inspect.isawaitable(response) else response
        return answer(*echo(event))


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_failed_extraction_is_kept_sanitized_and_retry_recovers_it(
    db_path: Path, fault: Fault, anyio_backend: str, request: pytest.FixtureRequest
) -> None:
    if anyio_backend == "trio" and fault.on_trio is not None:
        request.applymarker(fault.on_trio)
    endpoint = Endpoint(fault.respond)
    config = settings("http://model.invalid/v1", extract_timeout=fault.timeout)
    async with (
        httpx.AsyncClient(transport=httpx.MockTransport(endpoint)) as client,
        amem.open(db_path, settings=config, http_client=client) as mem,
    ):
        scope = mem.scope("assistant", "support")
        bad = await scope.submit_event(BAD_TEXT, role="assistant", event_id="e-bad")
        good = await scope.submit_event(GOOD_TEXT, role="user", event_id="e-good")
        assert bad.status == good.status == "pending"

        page = await settled(scope, "e-bad")
        assert page.event.status == "failed"
        error = page.event.error
        assert error is not None
        assert error.startswith(f"{fault.code}: ")
        assert fault.says in error
        assert MARKER not in error
        assert KEY not in error
        assert page.memories == []
        other = await settled(scope, "e-good")
        assert other.event.status == "extracted"
        assert [memory.quote for memory in other.memories] == [GOOD_TEXT]
        counts = (await scope.status()).events
        assert (counts["failed"], counts["extracted"], counts["pending"]) == (1, 1, 0)

        endpoint.healed = True
        result = await scope.retry("e-bad")
        assert (result.extracted, result.failed) == (["e-bad"], [])
        page = await scope.read("e-bad")
        assert (page.event.status, page.event.error) == ("extracted", None)
        assert [memory.quote for memory in page.memories] == [BAD_TEXT]
        assert result.memory_ids == [memory.id for memory in page.memories]
        assert {r.headers["authorization"] for r in endpoint.requests} == {f"Bearer {KEY}"}


async def test_retry_that_fails_again_reports_it_and_keeps_the_error(db_path: Path) -> None:
    with FakeOpenAI(answer=echo) as api:
        api.fail_status = 503
        async with amem.open(db_path, settings=settings(api.base_url)) as mem:
            scope = mem.scope("assistant", "support")
            await scope.submit_event("I like jazz", role="user", event_id="e-1")
            assert (await settled(scope, "e-1")).event.status == "failed"
            result = await scope.retry("e-1")
            assert (result.extracted, result.failed, result.memory_ids) == ([], ["e-1"], [])
            page = await scope.read("e-1")
            assert page.event.status == "failed"
            assert page.event.error == "extraction_failed: the endpoint answered HTTP 503"
            assert rows(db_path, "select attempts from events where id = 'e-1'") == [(2,)]


# --- resuming and repeating -----------------------------------------------------------------


async def test_resubmitting_a_failed_event_resumes_its_extraction(db_path: Path) -> None:
    with FakeOpenAI(answer=echo) as api:
        api.fail_status = 500
        async with amem.open(db_path, settings=settings(api.base_url)) as mem:
            scope = mem.scope("assistant", "support")
            first = await scope.submit_event(
                "I like jazz", role="user", event_id="e-1", occurred_at=T
            )
            assert (await settled(scope, "e-1")).event.status == "failed"

            api.fail_status = None
            again = await scope.submit_event(
                "I like jazz", role="user", event_id="e-1", occurred_at=T
            )
            assert (again.status, again.duplicate, again.seq) == ("pending", True, first.seq)
            page = await settled(scope, "e-1")
            assert (page.event.status, page.event.error) == ("extracted", None)
            assert [memory.quote for memory in page.memories] == ["I like jazz"]
            assert sent_texts(api) == ["I like jazz"]


async def test_an_extracted_event_is_never_extracted_again(db_path: Path) -> None:
    async with echoing(db_path) as (api, mem):
        scope = mem.scope("assistant", "support")
        await scope.submit_event("I like jazz", role="user", event_id="e-1")
        [memory] = (await settled(scope, "e-1")).memories

        again = await scope.retry("e-1")  # reports the event, derives nothing new
        assert (again.extracted, again.failed, again.memory_ids) == (["e-1"], [], [])
        assert (await scope.retry()).extracted == []
        receipt = await scope.submit_event("I like jazz", role="user", event_id="e-1")
        assert (receipt.status, receipt.duplicate) == ("extracted", True)
        assert receipt.memory_ids == [memory.id]
        assert len(api.chat_requests) == 1
        assert (await scope.read("e-1")).memories == [memory]


async def test_completing_an_extracted_event_again_returns_its_memories(db_path: Path) -> None:
    async with echoing(db_path) as (_api, mem):
        scope = mem.scope("assistant", "support")
        await scope.submit_event("I like jazz and blues", role="user", event_id="e-1")
        [memory] = (await settled(scope, "e-1")).memories

        late = amem.MemoryDraft(
            text="User likes blues", quote="blues", kind="preference", basis="user_statement"
        )
        outcome = await database(mem).write(
            partial(
                complete_extraction,
                event_id="e-1",
                drafts=[late],
                segmented=["blues"],
                now=db_now(),
                working_ttl=mem.settings.working_ttl,
            )
        )
        assert (outcome.status, outcome.memory_ids, outcome.new) == (
            "extracted",
            [memory.id],
            False,
        )
        assert (await scope.read("e-1")).memories == [memory]


# --- transactions, shutdown ---------------------------------------------------------------


async def test_no_transaction_is_open_while_a_model_call_waits(db_path: Path) -> None:
    with FakeOpenAI(answer=echo) as api:
        api.gate.clear()
        async with amem.open(db_path, settings=settings(api.base_url)) as mem:
            scope = mem.scope("assistant", "support")
            await scope.submit_event("I like jazz", role="user", event_id="e-1")
            await wait_until(lambda: api.in_flight == 1)

            with closing(sqlite3.connect(db_path, timeout=0, isolation_level=None)) as conn:
                conn.execute("begin immediate")  # "database is locked" if amem held the lock
                conn.execute("commit")
            with anyio.fail_after(5):
                receipt = await scope.submit_event("I like blues", role="user", event_id="e-2")
            assert receipt.status == "pending"
            assert api.chat_requests == []  # the first call is still waiting

            api.gate.set()
            assert (await settled(scope, "e-1")).event.status == "extracted"
            assert (await settled(scope, "e-2")).event.status == "extracted"


async def test_closing_cancels_calls_in_flight_and_retry_resumes_them(db_path: Path) -> None:
    ids = ["e-0", "e-1", "e-2"]
    with FakeOpenAI(answer=echo) as stuck:
        stuck.gate.clear()
        with anyio.fail_after(5):  # the server would hold every call for 60 s
            async with amem.open(db_path, settings=settings(stuck.base_url)) as mem:
                scope = mem.scope("assistant", "support")
                for event_id in ids:
                    text = f"Remember {event_id}"
                    await scope.submit_event(text, role="user", event_id=event_id)
                await wait_until(lambda: stuck.in_flight == 3)
        assert rows(db_path, "select id, status, error from events order by seq") == [
            (event_id, "pending", None) for event_id in ids
        ]
        assert rows(db_path, "select count(*) from memories") == [(0,)]
        stuck.gate.set()  # let the abandoned handler threads finish
        await wait_until(lambda: stuck.in_flight == 0)

    async with echoing(db_path) as (_api, mem):
        scope = mem.scope("assistant", "support")
        result = await scope.retry()
        assert sorted(result.extracted) == ids
        assert result.failed == []
        for event_id in ids:
            page = await scope.read(event_id)
            assert page.event.status == "extracted"
            assert [memory.quote for memory in page.memories] == [f"Remember {event_id}"]
        assert len(result.memory_ids) == 3


# --- retry's contract -------------------------------------------------------------------------


async def test_retry_without_an_extraction_endpoint_is_not_configured(scope: amem.Scope) -> None:
    await scope.submit_event("I like jazz", role="user", event_id="e-1")
    for event_id in (None, "e-1"):
        with pytest.raises(amem.InvalidInput) as caught:
            await scope.retry(event_id)
        assert caught.value.code == "not_configured"
    assert (await scope.read("e-1")).event.status == "stored"


async def test_retry_of_an_unknown_or_foreign_event_is_not_found(db_path: Path) -> None:
    async with echoing(db_path) as (api, mem):
        home, other = mem.scope("a", "x"), mem.scope("a", "y")
        await home.submit_event("I like jazz", role="user", event_id="e-1")
        await settled(home, "e-1")
        for scope, event_id in ((home, "unknown-id"), (other, "e-1")):
            with pytest.raises(amem.NotFound):
                await scope.retry(event_id)
        assert len(api.chat_requests) == 1


async def test_retry_extracts_stored_events_named_explicitly(db_path: Path) -> None:
    async with amem.open(db_path, settings=amem.Settings()) as mem:
        receipt = await mem.scope("a", "x").submit_event("I like jazz", role="user", event_id="e-1")
        assert receipt.status == "stored"
    async with echoing(db_path) as (_api, mem):
        scope = mem.scope("a", "x")
        assert (await scope.retry()).extracted == []  # stored events wait to be named
        result = await scope.retry("e-1")
        assert result.extracted == ["e-1"]
        assert (await scope.read("e-1")).event.status == "extracted"


async def test_retry_reports_progress(db_path: Path) -> None:
    ids = ["e-0", "e-1", "e-2"]
    with FakeOpenAI(answer=echo) as api:
        api.fail_status = 500
        async with amem.open(db_path, settings=settings(api.base_url)) as mem:
            scope = mem.scope("assistant", "support")
            for event_id in ids:
                await scope.submit_event(f"Remember {event_id}", role="user", event_id=event_id)
            for event_id in ids:
                assert (await settled(scope, event_id)).event.status == "failed"

            api.fail_status = None
            calls: list[tuple[int, int]] = []
            result = await scope.retry(progress=lambda done, total: calls.append((done, total)))
            assert calls == [(1, 3), (2, 3), (3, 3)]
            assert sorted(result.extracted) == ids
