"""The public port's edge: what a client may cost before the gateway knows what it wants.

`EdgeMiddleware` wraps the public app (an ASGI middleware, so every route gets it):

- the body is read here, whole, before any route runs: more than `max_body_bytes` (declared
  or sent) is answered 413, a body not complete within `body_timeout_s` of the request start
  408 (slow-body clients hold a connection, never a worker), both with `Connection: close`;
- except for a `/v1/` request without a valid key (`known_key`): its route answers 401
  before it would look at the body, so the body is not read at all and the connection closes
  after the answer. Otherwise every unauthenticated connection could make the gateway hold up
  to `max_body_bytes` (300 such connections grew it by 220 MB). No route outside `/v1/`
  takes a body (the probes are GETs), so a body there is never read either: key or not,
  `POST /nope` with a megabyte trickled in is answered (404) and closed at once;
- the bytes of bodies in transit are bounded per key and on the pod (body_budget.py): 429
  `concurrency_limit_exceeded` or 503 `server_busy`, connection closed;
- a client that disconnects before its body is complete is counted `client_closed`, not 500;
- an exception no route handled is answered with an OpenAI-shaped 500 (never text/plain);
- early failures (400, 401, 404, 405, 408, 413, 422, ...) are charged to a token bucket per
  client address and per presented key; an exhausted bucket is answered 429 before any work,
  so probing for models, keys or parser bugs is as rate limited as real traffic. A request
  with a valid key (`known_key`) is charged to and limited by its key's bucket only: its
  tenant's own failures limit that tenant, and a client sharing its address (a NAT, an
  ingress not named in `forwarded_allow_ips`, every local process under `lorafleet up`)
  cannot lock it out by failing. Without a valid key the address bucket applies too, so
  guessing keys (a new key per request) is limited by address.

Header size (431), the header timeout (408) and clients that stop reading are the HTTP
protocol's job: see `lorafleet_core.web.http_protocol`. The client address is uvicorn's view of
it (`--forwarded-allow-ips` decides whether an `X-Forwarded-For` from a proxy is believed).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lorafleet_core.web.asgi_edge import declared_length_over, replay, send_error
from lorafleet_gateway.auth import bearer_token
from lorafleet_gateway.body_budget import BodyBudget
from lorafleet_gateway.metrics import GatewayMetrics
from lorafleet_gateway.ratelimit import TokenBucket, retry_after_headers
from lorafleet_gateway.reqlog import log_request
from lorafleet_gateway.settings import GatewaySettings

EARLY_FAILURES = frozenset({400, 401, 403, 404, 405, 408, 411, 413, 414, 415, 422, 431})
ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    max_body_bytes: int = 1_048_576
    body_timeout_s: float = 30.0
    failures_per_second: float = 5.0
    failure_burst: int = 50


class FailureLimiter:
    """Token buckets of early failures, by client address and by key (bounded, LRU)."""

    def __init__(
        self,
        per_second: float,
        burst: int,
        *,
        max_entries: int = 50_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_second = per_second
        self.burst = float(burst)
        self.max_entries = max_entries
        self.clock = clock
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()

    def _prune(self, now: float) -> None:
        """Forget buckets that refilled (oldest first): they hold nothing a new one would not,
        and an empty table lets the middleware skip the lookup altogether."""
        while self._buckets:
            ident, bucket = next(iter(self._buckets.items()))
            bucket.refill(now)
            if bucket.tokens < self.burst:
                return
            del self._buckets[ident]

    def retry_after(self, *idents: str) -> float:
        """Seconds until every one of `idents` may fail again; 0 when all may now."""
        now = self.clock()
        self._prune(now)
        wait = 0.0
        for ident in idents:
            bucket = self._buckets.get(ident)
            if bucket is not None:
                bucket.refill(now)
                wait = max(wait, bucket.wait_for(1.0))
        return wait

    def charge(self, *idents: str) -> None:
        now = self.clock()
        self._prune(now)
        for ident in idents:
            bucket = self._buckets.get(ident)
            if bucket is None:
                bucket = TokenBucket(self.per_second, self.burst, self.burst, now)
                self._buckets[ident] = bucket
                while len(self._buckets) > self.max_entries:
                    self._buckets.popitem(last=False)
            else:
                self._buckets.move_to_end(ident)
                bucket.refill(now)
            bucket.tokens = max(bucket.tokens - 1.0, 0.0)

    def active(self) -> bool:
        """Whether any bucket is below full (prunes the refilled ones first)."""
        if self._buckets:
            self._prune(self.clock())
        return bool(self._buckets)

    def __len__(self) -> int:
        return len(self._buckets)


def _presented_key(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            return bearer_token(value.decode("latin-1"))
    return None


def _key_ident(token: str) -> str:
    # A digest: never the key itself in memory longer than the request.
    return "key:" + hashlib.sha256(token.encode()).hexdigest()[:32]


def _idents(scope: Scope, known_key: Callable[[str], bool] | None) -> tuple[str, ...]:
    """The buckets a request is limited by and charged to: its key's, and its address's
    unless the key is valid."""
    token = _presented_key(scope)
    key = (_key_ident(token),) if token else ()
    if token and known_key is not None and known_key(token):
        return key
    client = scope.get("client")
    return (f"addr:{client[0] if client else '-'}", *key)


class _Refused(Exception):
    """The edge answers the request itself: status, error code, message, headers."""

    def __init__(
        self,
        status: int | str,
        message: str = "",
        code: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or {}


class EdgeMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        limits: EdgeLimits,
        metrics: GatewayMetrics | None = None,
        known_key: Callable[[str], bool] | None = None,
        bodies: BodyBudget | None = None,
    ) -> None:
        """`known_key(token)`: whether a presented key is valid (its tenant's bucket only);
        `bodies`: the bytes of bodies in transit (the gateway's, or unbounded)."""
        self.app = app
        self.limits = limits
        self.metrics = metrics
        self.known_key = known_key
        self.failures = FailureLimiter(limits.failures_per_second, limits.failure_burst)
        self.bodies = bodies if bodies is not None else BodyBudget(1 << 62, 1 << 62)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        # Who to charge (address, key digest) is worked out only when a bucket exists or the
        # request failed early: the common request pays for neither the hash nor the lookup.
        idents = _idents(scope, self.known_key) if self.failures.active() else ()
        started: list[int] = []

        unread = False  # the body was left unread: the connection must not be reused

        async def watched_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.append(int(message["status"]))
                if unread:
                    headers = [*message.get("headers", ()), (b"connection", b"close")]
                    message = {**message, "headers": headers}
            await send(message)

        try:
            wait = self.failures.retry_after(*idents) if idents else 0.0
            if wait > 0:
                raise _Refused(
                    429,
                    "Too many failed requests from this client or key; "
                    f"please try again in {wait * 1000:.0f}ms.",
                    "rate_limit_exceeded",
                    retry_after_headers(wait),
                )
            inner_receive = receive
            if scope["method"] in _BODY_METHODS or _declares_body(scope):
                if self._without_valid_key(scope):
                    unread = True
                    inner_receive = replay(b"", receive)  # answered (401, 404...) unread
                else:
                    body = await self._read_body(scope, receive)
                    inner_receive = replay(body, receive)
            await self.app(scope, inner_receive, watched_send)
        except _Refused as refused:
            await self._refuse(scope, watched_send, refused, t0)
        except Exception:
            if started:
                raise  # the status line is out: all that is left is to drop the connection
            await self._refuse(
                scope,
                watched_send,
                _Refused(500, "The gateway had an internal error.", "internal_error"),
                t0,
            )
        finally:
            if started and started[0] in EARLY_FAILURES:
                self.failures.charge(*(idents or _idents(scope, self.known_key)))

    def _without_valid_key(self, scope: Scope) -> bool:
        """A request outside the `/v1/` API (no route there reads a body), or to it without
        a valid key."""
        if not scope.get("path", "").startswith("/v1/"):
            return True
        if self.known_key is None:
            return False
        token = _presented_key(scope)
        return token is None or not self.known_key(token)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        limit = self.limits.max_body_bytes
        if declared_length_over(scope, limit):
            raise _too_large(limit)
        # Counted against the key's and the pod's bytes in transit until the body is whole
        # or refused (body_budget.py: a key's trickled bodies once had no bound in all).
        key = _key_ident(_presented_key(scope) or "")
        counted = [0]  # bytes taken from the budget so far
        try:
            return await self._receive_body(receive, limit, key, counted)
        finally:
            self.bodies.give_back(key, counted[0])

    async def _receive_body(
        self, receive: Receive, limit: int, key: str, counted: list[int]
    ) -> bytes:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.limits.body_timeout_s
        chunks: list[bytes] = []
        size = 0
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise _Refused(
                    408,
                    f"The request body was not received within {self.limits.body_timeout_s:g} s.",
                    "request_timeout",
                    {"connection": "close"},
                ) from None
            if message["type"] == "http.disconnect":
                raise _Refused("client_closed")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            over = self.bodies.take(key, len(chunk))
            if over is not None:
                raise _too_many_bodies(over, self.bodies)
            counted[0] += len(chunk)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _refuse(self, scope: Scope, send: Send, refused: _Refused, t0: float) -> None:
        endpoint = ENDPOINTS.get(scope.get("path", ""), "other")
        if self.metrics is not None:
            self.metrics.child(self.metrics.requests, endpoint, str(refused.status)).inc()
        log_request(
            endpoint=endpoint,
            status=refused.status,
            error=refused.code or None,
            duration_ms=round((time.perf_counter() - t0) * 1000, 2),
        )
        if not isinstance(refused.status, int):
            return  # nobody is left to answer
        await send_error(send, refused.status, refused.message, refused.code, refused.headers)


def _declares_body(scope: Scope) -> bool:
    # A GET with a body is read (and bounded) too: left unread, a trickled body would hold
    # the connection open past every timeout.
    for name, value in scope.get("headers", ()):
        if (name == b"content-length" and value != b"0") or name == b"transfer-encoding":
            return True
    return False


def _too_large(limit: int) -> _Refused:
    return _Refused(
        413, f"Request body exceeds {limit} bytes.", "request_too_large", {"connection": "close"}
    )


def _too_many_bodies(over: str, budget: BodyBudget) -> _Refused:
    headers = {"connection": "close", **retry_after_headers(1.0)}
    if over == "key":
        return _Refused(
            429,
            f"Too many request bodies in transit for this API key: at most "
            f"{budget.per_key} bytes may be being uploaded at once. Send each body whole and "
            "promptly, or fewer at a time.",
            "concurrency_limit_exceeded",
            headers,
        )
    return _Refused(
        503,
        "The gateway is receiving too many request bodies at once; please retry shortly.",
        "server_busy",
        headers,
    )


def edge_limits(settings: GatewaySettings) -> EdgeLimits:
    """EdgeLimits from GatewaySettings."""
    return EdgeLimits(
        max_body_bytes=settings.max_body_bytes,
        body_timeout_s=settings.body_timeout_s,
        failures_per_second=settings.failed_requests_per_second,
        failure_burst=settings.failed_requests_burst,
    )
