"""POSTing JSON to OpenAI-compatible endpoints, with errors that are safe to store and show.

No error raised here ever carries the response body, a header or the API key: only the
condition (HTTP status, timeout, connection failure, oversized or malformed answer).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, cast

import anyio
from pydantic import SecretStr

from ..errors import UpstreamError

if TYPE_CHECKING:
    import httpx

MAX_RESPONSE_BYTES = 4 * 1024 * 1024


class Refused(UpstreamError):
    """The endpoint answered, with an HTTP status other than 200."""

    def __init__(self, status: int, *, code: str) -> None:
        super().__init__(describe_status(status), code=code)
        self.status = status

    @property
    def by_input(self) -> bool:
        """Whether the texts sent may be the cause (not the key, the path or a rate limit)."""
        return self.status not in (401, 403, 404, 429)


async def post_json(
    client: httpx.AsyncClient,
    base_url: str,
    path: str,
    api_key: SecretStr | None,
    payload: dict[str, Any],
    *,
    seconds: float,
    code: str,
) -> dict[str, Any]:
    """POST ``payload`` and return the decoded JSON object, or raise ``UpstreamError(code)``."""
    import httpx  # loaded by the process that calls a model, never by one that does not

    headers = {"Authorization": f"Bearer {api_key.get_secret_value()}"} if api_key else {}
    body = bytearray()
    try:
        with anyio.fail_after(seconds):  # one deadline for connecting, sending and reading
            async with client.stream(
                "POST",
                base_url.rstrip("/") + path,
                json=payload,
                headers=headers,
                timeout=seconds,  # instead of the client's default of 5 s per phase
            ) as response:
                if response.status_code != 200:
                    raise Refused(response.status_code, code=code)
                if int(response.headers.get("content-length") or 0) > MAX_RESPONSE_BYTES:
                    raise UpstreamError(too_large(), code=code)  # refused before reading
                async with aclosing(
                    cast("AsyncGenerator[bytes, None]", response.aiter_bytes())
                ) as chunks:
                    async for chunk in chunks:
                        body += chunk
                        if len(body) > MAX_RESPONSE_BYTES:
                            raise UpstreamError(too_large(), code=code)
    except TimeoutError:
        raise UpstreamError(f"no answer within {seconds:g} s", code=code) from None
    except httpx.TimeoutException:
        raise UpstreamError(f"no answer within {seconds:g} s", code=code) from None
    except httpx.HTTPError as exc:
        raise UpstreamError(f"the request failed ({type(exc).__name__})", code=code) from None
    try:
        data = json.loads(body)
    except ValueError:
        raise UpstreamError("the answer is not valid JSON (truncated?)", code=code) from None
    if not isinstance(data, dict):
        raise UpstreamError("the answer is not a JSON object", code=code)
    return data


def too_large() -> str:
    return f"the answer is larger than {MAX_RESPONSE_BYTES} bytes"


def describe_status(status: int) -> str:
    if status == 429:
        return "rate limited (HTTP 429)"
    if status in (401, 403):
        return f"not authorised (HTTP {status}); check the API key"
    return f"the endpoint answered HTTP {status}"
