"""What a replica's non-200 answer means for the request, and what the client is told.

A replica's error body is never passed through: it may come from the agent or from vLLM, in
either's format, and may hold internal paths, object-store URIs, checksums or adapter ids. The
client gets an OpenAI error of the gateway's own making:

- 404 `adapter_not_registered`: the gateway posts the record and retries that replica once;
- 404 otherwise (vLLM lost the adapter), 429, 502, 503, 504, or a code `engine_unavailable`,
  `adapter_load_failed`, `cache_full` or `store_unavailable`: the next candidate; 503
  `upstream_unavailable` when none is left, or 503 `store_unavailable` (with Retry-After) when
  every candidate tried said its object store is unreachable (`no_candidate_answered`);
- `adapter_rejected` (the agent refused the files): 502 `adapter_rejected`, not retried (no
  replica will do better);
- 400, 413, 422 (the engine refused the request): 400 with the engine's message scrubbed of
  URIs, paths and digests, and shortened; a refusal of tools for want of a tool-call parser
  becomes 400 `tool_choice_unsupported`, naming the pool setting that enables them;
- 500 or anything else: 502 `upstream_error`, not retried (a replica bug triggered by this
  request must not be spread to every candidate).

Whatever it said, the connection it came on is closed, not returned to the pool: a replica
that failed may have closed its end after answering, and reusing that socket failed the next
request, another tenant's, with a 503.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from lorafleet_core.wire.error_codes import ErrorCode
from lorafleet_gateway.errors import APIError

RETRY_CODES = frozenset(
    {
        ErrorCode.ENGINE_UNAVAILABLE,
        ErrorCode.ADAPTER_LOAD_FAILED,
        ErrorCode.CACHE_FULL,
        ErrorCode.STORE_UNAVAILABLE,
    }
)
# The agent gives up on an unreachable store after about 2 x its 2 s connect timeout; asking
# the client back sooner would only meet the same outage.
STORE_RETRY_AFTER_S = 5
RETRY_STATUSES = frozenset({404, 429, 502, 503, 504})
MAX_ERROR_BODY = 65_536
MESSAGE_CHARS = 300

_URI = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://\S+")
_PATH = re.compile(r"(?<![\w/])(?:~|\.{1,2})?(?:/[\w.@+-]+){2,}/?")
# vLLM's refusal of tool_choice auto / required / a named function without a parser.
_NO_TOOL_PARSER = re.compile(r"--tool-call-parser|--enable-auto-tool-choice")
_DIGEST = re.compile(r"\b(?:sha256:)?[0-9a-fA-F]{32,}\b")


def scrub(message: str) -> str:
    """`message` without URIs, filesystem paths or digests, at most MESSAGE_CHARS long."""
    message = _URI.sub("<uri>", message)
    message = _DIGEST.sub("<digest>", message)
    message = _PATH.sub("<path>", message)
    if len(message) > MESSAGE_CHARS:
        message = message[: MESSAGE_CHARS - 1] + "\u2026"
    return message


@dataclass(frozen=True, slots=True)
class Verdict:
    """One of: retry on the next candidate, load-then-retry, or answer `error`."""

    retry: bool = False
    not_registered: bool = False
    error: APIError | None = None
    reason: str = ""
    code: str | None = None  # the replica's own error code, when it gave one


def _fields(body: bytes) -> tuple[str | None, str | None, str | None]:
    """(code, message, param) of an OpenAI-ish error body, whatever its exact shape."""
    try:
        data = json.loads(body)
    except ValueError:
        return None, None, None
    if not isinstance(data, dict):
        return None, None, None
    inner = data.get("error")
    err: dict[str, Any] = inner if isinstance(inner, dict) else data  # vLLM's older form
    code, message, param = err.get("code"), err.get("message"), err.get("param")
    return (
        code if isinstance(code, str) else None,
        message if isinstance(message, str) else None,
        param if isinstance(param, str) and len(param) <= 64 else None,
    )


def error_code(body: bytes) -> str | None:
    """The `code` of a replica's error body, or None."""
    return _fields(body)[0]


def judge(status: int, body: bytes) -> Verdict:
    """What to do with a replica's non-200 answer (see the module table)."""
    code, message, param = _fields(body)
    if status == 404 and code == ErrorCode.ADAPTER_NOT_REGISTERED:
        return Verdict(not_registered=True, reason=ErrorCode.ADAPTER_NOT_REGISTERED)
    if code == ErrorCode.ADAPTER_REJECTED:
        return Verdict(
            error=APIError(
                502,
                "The model's adapter could not be loaded; the operator has been notified.",
                code=ErrorCode.ADAPTER_REJECTED,
            ),
            reason=code,
        )
    if status in RETRY_STATUSES or code in RETRY_CODES:
        return Verdict(retry=True, reason=f"{status} {code or ''}".strip(), code=code)
    if status in (400, 413, 422):
        text = scrub(message) if message else "The engine refused the request."
        if message and _NO_TOOL_PARSER.search(message):
            return Verdict(error=no_tool_parser(text), reason=str(status))
        return Verdict(error=APIError(400, text, param=param, code=code), reason=str(status))
    return Verdict(
        error=APIError(502, "The replica failed to process this request.", code="upstream_error"),
        reason=str(status),
    )


def no_tool_parser(engine_message: str) -> APIError:
    """The 400 for tools on a pool whose vLLM runs without a tool-call parser.

    vLLM itself decides (a Mistral tokenizer or a harmony model needs no parser, so the gateway
    does not guess from the pool's spec); its message names vLLM flags the API's caller cannot
    set, so the client is told what the fleet's operator can: the pool's toolCallParser.
    """
    return APIError(
        400,
        f"Tool calls are not enabled for this model (the engine said: {engine_message}). Its "
        "ReplicaPool needs spec.engine.toolCallParser, the base model's vLLM tool-call "
        'parser; until then only tool_choice "none" is served.',
        param="tool_choice",
        code="tool_choice_unsupported",
    )


def no_candidate_answered(codes: Sequence[str | None]) -> APIError:
    """The 503 for a request no candidate took; `codes` holds each tried candidate's reason.

    When every candidate tried failed because it could not reach the object store (a cold
    adapter while the store is down), that is what the client is told, with Retry-After:
    retrying elsewhere cannot help, waiting for the store can. Anything else, or a mix, is
    the generic `upstream_unavailable`.
    """
    if codes and all(code == ErrorCode.STORE_UNAVAILABLE for code in codes):
        return APIError(
            503,
            "The model's adapter weights cannot be fetched from the object store right now. "
            "Please retry shortly.",
            code=ErrorCode.STORE_UNAVAILABLE,
            headers={"retry-after": str(STORE_RETRY_AFTER_S)},
        )
    return APIError(
        503,
        "No replica is available to serve this model right now. Please retry.",
        code="upstream_unavailable",
    )


async def read_and_drop(response: httpx.Response) -> bytes:
    """Up to MAX_ERROR_BODY bytes of an error answer; then its connection is closed for good.

    Closing the network stream first makes httpcore see the connection as gone (its socket
    reads as closed) and discard it instead of keeping it for the next request.
    """
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in response.aiter_raw():
            chunks.append(chunk)
            size += len(chunk)
            if size >= MAX_ERROR_BODY:
                break
    except httpx.HTTPError:
        pass  # whatever arrived is all there is
    finally:
        await drop_connection(response)
    return b"".join(chunks)[:MAX_ERROR_BODY]


async def drop_connection(response: httpx.Response) -> None:
    """Close `response` and the connection it came on, which is then never reused."""
    stream = response.extensions.get("network_stream")
    if stream is not None:
        await stream.aclose()
    await response.aclose()
