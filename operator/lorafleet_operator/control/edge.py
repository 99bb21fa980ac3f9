"""What the control API does before a route sees a request: who is asking, then the body.

The control API shares the operator's process (and its reconcile loop), so whatever any pod
that reaches its port can make it hold is the operator's memory. FastAPI reads and parses a
body before it runs any dependency, the credential check included: one unauthenticated
100 MB POST grew the process by 300 MB. `ControlEdge` (an ASGI middleware around the app)
therefore, before reading a byte of the body:

- refuses two or more `Authorization` headers (400 `duplicate_authorization`, as the gateway
  does: a proxy in front could check one credential while the API used the other);
- refuses a request without a valid credential (401), except a GET of the OpenAPI document;
- refuses a declared `content-length` over `max_body_bytes` (413 `request_too_large`);

and then reads the body itself, at most `max_body_bytes` far (413 as soon as more arrives),
and hands it to the route. A refusal closes the connection, so an unread body is never parsed
as the next request.

Header size (431), header and body timeouts (408 `request_timeout`) and clients that stop
reading are the HTTP protocol's: `control_protocol()` is the gateway's and agent's
`lorafleet_core.web.http_protocol` with the agent's limits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from lorafleet_core.web.asgi_edge import declared_length_over, replay, send_error
from lorafleet_core.web.http_protocol import hardened_protocol

MAX_BODY_BYTES = 1_048_576  # a registration is a few hundred bytes
MAX_HEADER_BYTES = 32_768
HEADER_TIMEOUT_S = 10.0  # the gateway's and the agent's
BODY_TIMEOUT_S = 10.0
WRITE_TIMEOUT_S = 60.0


def control_protocol(
    header_timeout_s: float = HEADER_TIMEOUT_S, body_timeout_s: float = BODY_TIMEOUT_S
) -> type[asyncio.Protocol]:
    """uvicorn's `http=` for the control API: header size and time, body time, stalled readers."""
    return hardened_protocol(
        MAX_HEADER_BYTES, header_timeout_s, WRITE_TIMEOUT_S, body_timeout_s=body_timeout_s
    )


class _Refused(Exception):
    def __init__(self, status: int, message: str, code: str) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


class ControlEdge:
    def __init__(
        self,
        app: ASGIApp,
        *,
        allows: Callable[[str | None], Awaitable[bool]],
        open_paths: frozenset[str] = frozenset(),
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        """`allows(authorization)`: whether the Authorization header's credential passes;
        `open_paths`: paths a GET may read without one (the OpenAPI document)."""
        self.app = app
        self.allows = allows
        self.open_paths = open_paths
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            await self._authenticate(scope)
            body = await self._read_body(scope, receive)
        except _Refused as refused:
            await _answer(send, refused)
            return
        await self.app(scope, replay(body, receive), send)

    async def _authenticate(self, scope: Scope) -> None:
        values = [v for n, v in scope.get("headers", ()) if n == b"authorization"]
        if len(values) > 1:
            raise _Refused(
                400,
                f"The request has {len(values)} Authorization headers: send exactly one.",
                "duplicate_authorization",
            )
        if scope["method"] == "GET" and scope["path"] in self.open_paths:
            return
        if not await self.allows(values[0].decode("latin-1") if values else None):
            raise _Refused(401, "a valid control credential is required", "unauthorized")

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        limit = self.max_body_bytes
        too_large = _Refused(413, f"request body exceeds {limit} bytes", "request_too_large")
        if declared_length_over(scope, limit):
            raise too_large
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left: nothing to answer
                raise _Refused(400, "the client closed the connection", "client_closed")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise too_large
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


async def _answer(send: Send, refused: _Refused) -> None:
    headers = {"connection": "close"}  # the body may be unread: never parse it as a request
    if refused.status == 401:
        headers["www-authenticate"] = "Bearer"
    await send_error(send, refused.status, refused.message, refused.code, headers)
