"""Request ids: one id follows a request through the gateway, the agent and vLLM.

A client may send `x-request-id` (to quote in a support ticket, or to join our logs to its
own); it is kept when it is at most MAX_CHARS characters of a safe set (letters, digits and
`._:-`), since it is echoed in headers and written in log lines; anything else is replaced by a
generated id. The gateway sends the id to the agent in the same header, and the agent to vLLM
(which uses `X-Request-Id` as its own request id, so its log lines carry it too).

`current` holds the id of the request being served (a ContextVar: it follows the request's
task and the tasks it starts), so error bodies (`openai_errors.error_body`) and log lines
(lorafleet_core.logs) pick it up without every function passing it along.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from contextvars import ContextVar
from typing import Any, Final

from lorafleet_core.wire.headers import HEADER_REQUEST_ID

_HEADER = HEADER_REQUEST_ID.encode("latin-1")  # ASGI header names are lower-case bytes
MAX_CHARS: Final = 128
_SAFE = re.compile(r"[A-Za-z0-9._:\-]{1,128}")

current: ContextVar[str | None] = ContextVar("lorafleet_request_id", default=None)


def new_request_id() -> str:
    return "req_" + secrets.token_hex(16)


def accept_request_id(value: str | bytes | None) -> str:
    """The client's id when it is safe to echo and log, else a new one."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if value is not None and _SAFE.fullmatch(value):
        return value
    return new_request_id()


_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class RequestIdMiddleware:
    """ASGI middleware: the request's id set for its context and echoed in `x-request-id`.

    Outermost on the gateway's public app and the agent's data app, so every answer (an edge
    refusal, a routing 404, a stream) carries the id and every error body and log line made
    while serving the request names it.
    """

    def __init__(self, app: Callable[[_Scope, _Receive, _Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = None
        for key, value in scope.get("headers", ()):
            if key == _HEADER:
                sent = value
                break
        request_id = accept_request_id(sent)
        header = (_HEADER, request_id.encode("latin-1"))

        async def send_with_id(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", ()) if h[0].lower() != header[0]]
                message = {**message, "headers": [*headers, header]}
            await send(message)

        token = current.set(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            current.reset(token)
