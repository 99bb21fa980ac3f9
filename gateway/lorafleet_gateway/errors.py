"""Gateway errors as exceptions that render as OpenAI-style JSON bodies."""

from __future__ import annotations

import json

from starlette.responses import Response

from lorafleet_core.openai_errors import error_body


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


def model_not_found(model: str) -> APIError:
    # Same words and code for "does not exist" and "belongs to another tenant": a caller must
    # not be able to tell the two apart.
    return APIError(
        404,
        f"The model `{model}` does not exist or you do not have access to it.",
        code="model_not_found",
        param="model",
    )


def sse_error_event(status: int, message: str, code: str) -> bytes:
    """An SSE event carrying an OpenAI error; the official client raises APIError on it."""
    return b"data: " + json.dumps(error_body(status, message, code=code)).encode() + b"\n\n"
