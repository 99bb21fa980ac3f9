"""OpenAI-style error bodies: {"error": {"message", "type", "param", "code"}}.

The gateway and the agent both answer with these, so a client sees one format wherever an
error starts.
"""

from __future__ import annotations

from typing import Any

# OpenAI's `type` values by HTTP status.
_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "server_error",
    503: "server_error",
    504: "server_error",
}


def error_body(
    status: int,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    type_: str | None = None,
) -> dict[str, Any]:
    """The JSON body for an error with HTTP `status`."""
    return {
        "error": {
            "message": message,
            "type": type_ or _TYPE_BY_STATUS.get(status, "server_error"),
            "param": param,
            "code": code,
        }
    }
