"""What both agent ports do before a route sees a request: bounded, strict JSON bodies and
OpenAI-shaped answers for the framework's own errors.

The data port is meant for the gateway only (a NetworkPolicy on a cluster, loopback in
standalone mode), but it must not fail worse when something else reaches it, or when the
gateway passes on what it should not have: a body over `max_bytes` is a 413 read no further,
and what `lorafleet_core.wire.strict_json` refuses (NaN, out-of-range numbers, lone surrogates,
deep nesting) is a 400. Left to Starlette's `request.json()`, each of these would come back as
a text/plain 500 (the deep nesting as a RecursionError), or be passed to vLLM whole.

FastAPI answers unknown paths, wrong methods and its own validation errors as
`{"detail": ...}`; `install_openai_errors` makes them the OpenAI error body every other answer
of the agent has, and the OpenAPI schema and docs are not served (`APP_OPTIONS`).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from lorafleet_core.wire.openai_errors import error_body
from lorafleet_core.wire.strict_json import StrictJsonError, loads_strict

# FastAPI(**APP_OPTIONS): no /docs, /redoc or /openapi.json on either port; a trailing slash
# is a 404, not a 307 pointing at whatever host the request's Host header named.
APP_OPTIONS: dict[str, Any] = {
    "docs_url": None,
    "redoc_url": None,
    "openapi_url": None,
    "redirect_slashes": False,
}
MAX_JSON_DEPTH = 256  # above the gateway's default 64: a backstop, not a second policy


def error_response(status: int, message: str, code: str, **headers: str) -> JSONResponse:
    """An answer with `status` and the OpenAI error body every answer of the agent has."""
    return JSONResponse(error_body(status, message, code=code), status_code=status, headers=headers)


class BodyRefused(Exception):
    """A request body refused before any route logic: answered with `status` and `code`."""

    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, self.code)


async def read_json(request: Request, max_bytes: int) -> Any:
    """The request's JSON body, read at most `max_bytes` far (BodyRefused: 413 or 400)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(max_bytes)
        chunks.append(chunk)
    try:
        return loads_strict(b"".join(chunks), MAX_JSON_DEPTH)
    except StrictJsonError as exc:
        raise BodyRefused(400, exc.message, exc.code) from None


def _too_large(max_bytes: int) -> BodyRefused:
    return BodyRefused(413, f"request body exceeds {max_bytes} bytes", "request_too_large")


def install_openai_errors(app: FastAPI) -> None:
    """Routing (404, 405) and validation (422) errors as OpenAI error bodies."""

    async def http_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        status = exc.status_code
        code = {404: "unknown_url", 405: "method_not_allowed"}.get(status, "invalid_request")
        message = exc.detail if isinstance(exc.detail, str) else "invalid request"
        return JSONResponse(
            error_body(status, message[:200], code=code),
            status_code=status,
            headers=dict(exc.headers or {}),  # keeps a 405's Allow
        )

    async def validation_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return JSONResponse(
            error_body(422, "invalid request parameters", code="invalid_request"),
            status_code=422,
        )

    async def body_refused(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, BodyRefused)
        return exc.response()

    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(BodyRefused, body_refused)
