"""OpenAI-style error bodies: {"error": {"message", "type", "param", "code"}}.

The gateway and the agent both answer with these, so a client sees one format wherever an
error starts.
"""

from __future__ import annotations

from typing import Any

from lorafleet_core.web import request_ids

# OpenAI's `type` values by HTTP status; any other 4xx is the client's (invalid_request_error),
# any other status the server's.
_TYPE_BY_STATUS = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    429: "rate_limit_error",
}


def error_type(status: int) -> str:
    """OpenAI's error `type` for an HTTP status."""
    found = _TYPE_BY_STATUS.get(status)
    if found is not None:
        return found
    return "invalid_request_error" if 400 <= status < 500 else "server_error"


def error_body(
    status: int,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    type_: str | None = None,
) -> dict[str, Any]:
    """The JSON body for an error with HTTP `status` (with the request's id while serving one)."""
    error: dict[str, Any] = {
        "message": message,
        "type": type_ or error_type(status),
        "param": param,
        "code": code,
    }
    request_id = request_ids.current.get()
    if request_id is not None:
        error["request_id"] = request_id
    return {"error": error}
