"""Per-tenant cap on requests running at once (streams included), on this gateway pod.

Rate limits bound how fast a tenant starts requests, not how many it keeps open: at 20
requests/s a tenant that never reads its streams (or asks for 4,096 slow tokens each) holds
thousands of them within minutes, each a connection, a relay task and tokens in flight on a
replica, until other tenants queue behind them. So each tenant may also have at most
`max_concurrent_requests` requests running (the gateway default, or its key Secret's
`maxConcurrentRequests`); one more is refused at once with 429 `concurrency_limit_exceeded`
and `Retry-After: 1` (nobody knows when a stream ends; a second is a polite first guess).

A slot is taken before the rate-limit buckets are asked (a refused request costs no budget)
and given back exactly once when the request ends, however it ends: the answer sent, the
stream's last byte, an error, or the client going away (lorafleet_gateway.reservation holds it
for the request's whole life, its `async with` around the response).

Per gateway pod, in memory, on purpose: a count shared in Redis would need a lease per request
that expires with a crashed pod (else a dead pod's streams hold slots for ever) and a Redis
round trip on every request's end as well as its start. With P gateway pods behind a balancer
a tenant may run up to P x the cap, which is what the cap is for: no one tenant fills a pod.
Set the default per pod (docs/reference/gateway.md, "Concurrency").
"""

from __future__ import annotations

from lorafleet_gateway.errors import APIError
from lorafleet_gateway.ratelimit import retry_after_headers

RETRY_AFTER_S = 1.0


class ConcurrencyLimited(APIError):
    """429: the tenant already has `limit` requests running on this gateway pod."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            429,
            f"Too many concurrent requests: at most {limit} may run at once. "
            "Please retry when one of them has finished.",
            code="concurrency_limit_exceeded",
            headers=retry_after_headers(RETRY_AFTER_S),
        )
        self.limit = "concurrency"  # the label of lorafleet_gateway_rate_limited_total


class ConcurrencyLimiter:
    """Running requests per tenant; a tenant with none has no entry (bounded by the running)."""

    def __init__(self) -> None:
        self._running: dict[str, int] = {}

    def running(self, tenant: str) -> int:
        return self._running.get(tenant, 0)

    def take(self, tenant: str, limit: int) -> None:
        """One slot of `tenant`'s `limit`, or ConcurrencyLimited (nothing taken)."""
        count = self._running.get(tenant, 0)
        if count >= limit:
            raise ConcurrencyLimited(limit)
        self._running[tenant] = count + 1

    def give_back(self, tenant: str) -> None:
        count = self._running.get(tenant, 0) - 1
        if count > 0:
            self._running[tenant] = count
        else:
            self._running.pop(tenant, None)
