"""ASGI pieces both edges use before a route runs: the gateway's (lorafleet_gateway.edge) and the
control API's (lorafleet_operator.control.edge). Each reads a request's body itself, within its
own limits, before the app sees it; these are the parts that do not differ between them."""

from __future__ import annotations

import json
from collections.abc import Mapping

from starlette.types import Message, Receive, Scope, Send

from lorafleet_core.wire.openai_errors import error_body


def declared_length_over(scope: Scope, limit: int) -> bool:
    """Whether the request declares a `content-length` over `limit`: refused before a byte of
    the body is read."""
    return any(
        name == b"content-length" and value.isdigit() and int(value) > limit
        for name, value in scope.get("headers", ())
    )


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the app the body already read, then passes through (disconnects)."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replayed


async def send_error(
    send: Send, status: int, message: str, code: str, headers: Mapping[str, str]
) -> None:
    """An OpenAI-shaped JSON error answered by the edge itself (lorafleet_core.wire)."""
    content = json.dumps(error_body(status, message, code=code or None)).encode()
    raw: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(content)).encode()),
    ]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": content})
