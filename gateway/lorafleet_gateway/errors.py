"""Gateway errors as exceptions that render as OpenAI-style JSON bodies.

Untrusted text (a model name, a path) is echoed only shortened (`shorten`), so an error or a
log line never grows with what a client sent.
"""

from __future__ import annotations

import json

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from lorafleet_core.wire.openai_errors import error_body


class APIError(Exception):
    """An error answered to the client: HTTP status + OpenAI error body (+ optional headers)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.headers = headers or {}

    def response(self) -> Response:
        return error_response(
            self.status, self.message, code=self.code, param=self.param, headers=self.headers
        )


def error_response(
    status: int,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body = json.dumps(error_body(status, message, code=code, param=param)).encode()
    return Response(body, status_code=status, media_type="application/json", headers=headers)


ECHO_CHARS = 80  # the most of an untrusted string an error message repeats


def shorten(text: str, limit: int = ECHO_CHARS) -> str:
    """`text` cut to `limit` characters (marked with an ellipsis), for echoing untrusted input."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def model_not_found(model: str) -> APIError:
    # Same words and code for "does not exist" and "belongs to another tenant": a caller must
    # not be able to tell the two apart.
    return APIError(
        404,
        f"The model `{shorten(model)}` does not exist or you do not have access to it.",
        code="model_not_found",
        param="model",
    )


def http_error_response(request: Request, exc: HTTPException) -> Response:
    """Starlette's routing errors (unknown path 404, wrong method 405) in OpenAI's shape."""
    where = f"{request.method} {shorten(request.url.path)}"
    if exc.status_code == 404:
        return error_response(404, f"Invalid URL ({where}).", code="unknown_url")
    if exc.status_code == 405:
        return error_response(
            405,
            f"Method not allowed ({where}).",
            code="method_not_allowed",
            headers=dict(exc.headers or {}),  # keeps `Allow`
        )
    return error_response(
        exc.status_code, shorten(str(exc.detail)), headers=dict(exc.headers or {})
    )


def sse_error_event(status: int, message: str, code: str) -> bytes:
    """An SSE event carrying an OpenAI error; the official client raises APIError on it."""
    return b"data: " + json.dumps(error_body(status, message, code=code)).encode() + b"\n\n"
