"""One request's claim on shared capacity, taken on entry and given back exactly once on exit.

A request holds three things while it runs: one of its tenant's concurrent-request slots
(lorafleet_gateway.concurrency), its estimated tokens in its tenant's tokens-per-minute bucket
(lorafleet_gateway.ratelimit) and, once a replica is tried, the same tokens in that replica's
in-flight count (lorafleet_gateway.replica_poller), which the router reads. `async with
Reservation(...) as held:` takes the first two (or raises `ConcurrencyLimited` or
`RateLimited`, holding nothing) and `held.place(replica)` moves the third between candidates;
leaving the block, however it is left (an answer, an error, an exception, the client going
away mid-stream), releases all of them once and settles the tenant's bucket with what the
request really used:

- nothing answered yet (refused, failed, cancelled before an answer): a full refund;
- an answer began but its usage is unknown (aborted stream): the estimate stays charged;
- usage known (`held.used(...)`): charged exactly that.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

from lorafleet_gateway.concurrency import ConcurrencyLimiter
from lorafleet_gateway.errors import APIError
from lorafleet_gateway.ratelimit import Decision, Limiter, Limits, retry_after_headers
from lorafleet_gateway.replica_poller import ReplicaTracker


class RateLimited(APIError):
    """429: the tenant's bucket cannot admit the request now (or ever, when `too_large`)."""

    def __init__(self, decision: Decision) -> None:
        if decision.too_large:
            message = "Request too large: its estimated tokens exceed your tokens-per-minute limit."
        else:
            what = "requests per second" if decision.limit == "requests" else "tokens per minute"
            wait_ms = decision.retry_after_s * 1000
            message = f"Rate limit reached for {what}. Please try again in {wait_ms:.0f}ms."
        super().__init__(
            429,
            message,
            code="rate_limit_exceeded",
            headers=retry_after_headers(decision.retry_after_s),
        )
        self.limit = decision.limit


class Reservation:
    """`tokens` of `tenant`'s budget and of one replica's in-flight count, for one request."""

    __slots__ = (
        "_used",
        "concurrency",
        "limiter",
        "limits",
        "max_concurrent",
        "replica_id",
        "tenant",
        "tokens",
        "tracker",
    )

    def __init__(
        self,
        limiter: Limiter,
        tracker: ReplicaTracker,
        tenant: str,
        tokens: int,
        limits: Limits,
        *,
        concurrency: ConcurrencyLimiter | None = None,
        max_concurrent: int = 0,
    ) -> None:
        """`concurrency` None (or `max_concurrent` 0): no cap on requests at once."""
        self.concurrency = concurrency if max_concurrent > 0 else None
        self.max_concurrent = max_concurrent
        self.limiter = limiter
        self.tracker = tracker
        self.tenant = tenant
        self.tokens = tokens
        self.limits = limits
        self.replica_id: str | None = None
        self._used: int | None = 0  # None: an answer began, usage unknown (keep the estimate)

    async def __aenter__(self) -> Self:
        if self.concurrency is not None:  # first: a request refused here costs no budget
            self.concurrency.take(self.tenant, self.max_concurrent)
        try:
            decision = await self.limiter.acquire(self.tenant, self.tokens, self.limits)
        except BaseException:
            self._give_back_slot()
            raise
        if not decision.allowed:
            self._give_back_slot()
            raise RateLimited(decision)
        return self

    def _give_back_slot(self) -> None:
        if self.concurrency is not None:
            self.concurrency.give_back(self.tenant)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._leave_replica()
        self._give_back_slot()  # before the await: a second cancellation cannot skip it
        used = self.tokens if self._used is None else self._used
        await self.limiter.settle(self.tenant, self.tokens, used)

    def place(self, replica_id: str) -> None:
        """Count the tokens on `replica_id` (and no longer on a replica tried before)."""
        if replica_id == self.replica_id:
            return
        self._leave_replica()
        self.tracker.begin(replica_id, self.tokens)
        self.replica_id = replica_id

    def _leave_replica(self) -> None:
        if self.replica_id is not None:
            self.tracker.end(self.replica_id, self.tokens)
            self.replica_id = None

    def answered(self) -> None:
        """An answer is generating: from now on an unknown usage keeps the estimate charged."""
        if self._used == 0:
            self._used = None

    def used(self, tokens: int) -> None:
        """The request's real usage (prompt + completion tokens), charged on exit."""
        self._used = tokens

    def refund(self) -> None:
        """Nothing was generated (the engine refused the request): charge nothing on exit."""
        self._used = 0
