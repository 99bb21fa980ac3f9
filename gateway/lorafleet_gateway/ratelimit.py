"""Per-tenant token buckets: requests per second and tokens per minute (pure, injectable clock).

A request is admitted when both buckets hold enough: one request, and its estimated tokens
(lorafleet_core.planning.tokens: prompt estimate + max_tokens). When it finishes, `settle` returns
the
difference between the estimate and the real usage, so a tenant is charged what it used, not
what it might have used. The request path calls both through one
`lorafleet_gateway.reservation.Reservation`, never by hand.

`Limiter` is the whole interface the request path needs; `RateLimiter` is the in-memory one
(standalone mode, one gateway pod). A backend shared by several gateway pods (Redis) implements
the same two coroutines. Its methods are coroutines for that backend's sake; this one never
awaits anything.

State is bounded: at most `max_tenants` tenants are tracked, least recently seen dropped first.
A dropped tenant comes back with full buckets, which is what an idle tenant's buckets would
have refilled to anyway (the LRU victim is the tenant idle the longest).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Limits:
    requests_per_second: float
    tokens_per_minute: int


@dataclass(slots=True)
class TokenBucket:
    """`capacity` tokens, refilled at `rate` per second."""

    rate: float
    capacity: float
    tokens: float
    updated: float

    def refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now

    def wait_for(self, amount: float) -> float:
        """Seconds until `amount` is available (after refill); 0 when available now."""
        missing = amount - self.tokens
        return 0.0 if missing <= 0 else missing / self.rate


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    retry_after_s: float = 0.0
    limit: str = ""  # "requests" | "tokens" when refused
    too_large: bool = False  # the request alone exceeds the tenant's tokens-per-minute


class Limiter(Protocol):
    """What the request path needs from a rate limiter."""

    async def acquire(self, tenant: str, tokens: int, limits: Limits) -> Decision:
        """Admit one request estimated at `tokens` under `limits` (taking both from the
        buckets), or refuse it (taking nothing) with the time to wait."""
        ...

    async def settle(self, tenant: str, estimated: int, actual: int) -> None:
        """Give back `estimated - actual` tokens (or charge the excess) when a request ends."""
        ...


@dataclass(slots=True)
class _TenantBuckets:
    limits: Limits
    requests: TokenBucket
    tokens: TokenBucket


class RateLimiter:
    def __init__(
        self,
        defaults: Limits,
        *,
        max_tenants: int = 20_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.defaults = defaults
        self.max_tenants = max_tenants
        self.clock = clock
        self._tenants: OrderedDict[str, _TenantBuckets] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tenants)

    def tokens_left(self, tenant: str) -> float | None:
        """What the tenant's token bucket holds now, as last refilled (None: not tracked). A
        bucket below zero is a debt: requests that used more than their estimate."""
        state = self._tenants.get(tenant)
        return state.tokens.tokens if state is not None else None

    def _buckets(self, tenant: str, limits: Limits, now: float) -> _TenantBuckets:
        state = self._tenants.get(tenant)
        if state is None or state.limits != limits:
            # New tenant or changed limits: start full (burst = one second of requests, at
            # least one; one minute of tokens).
            rps, tpm = limits.requests_per_second, float(limits.tokens_per_minute)
            burst = max(1.0, rps)
            state = _TenantBuckets(
                limits,
                TokenBucket(rps, burst, burst, now),
                TokenBucket(tpm / 60.0, tpm, tpm, now),
            )
            self._tenants[tenant] = state
            while len(self._tenants) > self.max_tenants:
                self._tenants.popitem(last=False)
        else:
            self._tenants.move_to_end(tenant)
        return state

    async def acquire(self, tenant: str, tokens: int, limits: Limits | None = None) -> Decision:
        """Admit one request estimated at `tokens`, or say how long to wait."""
        limits = limits or self.defaults
        now = self.clock()
        state = self._buckets(tenant, limits, now)
        state.requests.refill(now)
        state.tokens.refill(now)
        if tokens > state.tokens.capacity:
            return Decision(False, 60.0, "tokens", too_large=True)
        wait_requests = state.requests.wait_for(1.0)
        wait_tokens = state.tokens.wait_for(float(tokens))
        if wait_requests > 0 or wait_tokens > 0:
            limit = "requests" if wait_requests >= wait_tokens else "tokens"
            return Decision(False, max(wait_requests, wait_tokens), limit)
        state.requests.tokens -= 1.0
        state.tokens.tokens -= tokens
        return Decision(True)

    async def settle(self, tenant: str, estimated: int, actual: int) -> None:
        """Reconcile a finished request's estimate with its real token usage."""
        state = self._tenants.get(tenant)
        if state is None:
            return
        bucket = state.tokens
        bucket.refill(self.clock())
        # Refund (or charge) the difference; a debt may take the bucket below zero, which
        # delays the tenant's next requests, as real over-use should.
        bucket.tokens = min(bucket.capacity, bucket.tokens + (estimated - actual))


MAX_RETRY_AFTER_S = 3600.0


def retry_after_headers(seconds: float) -> dict[str, str]:
    """`Retry-After` (whole seconds, rounded up, as HTTP requires) and OpenAI's `retry-after-ms`.

    At most MAX_RETRY_AFTER_S: a tenant limit of 1e-320 requests/s made the wait infinite,
    and every refusal of that tenant a 500 (no integer is infinity); a NaN counts as the most.
    """
    seconds = min(seconds, MAX_RETRY_AFTER_S) if seconds == seconds else MAX_RETRY_AFTER_S
    return {
        "retry-after": str(max(1, math.ceil(seconds))),
        "retry-after-ms": str(max(1, math.ceil(seconds * 1000))),
    }
