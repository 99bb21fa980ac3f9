"""A request's reservation: its tenant's tokens and one replica's in-flight count, released once
on every way out (answer, refusal, exception, cancellation), with the real limiter and tracker."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from lorafleet_gateway.catalog import ReplicaEndpoint
from lorafleet_gateway.ratelimit import Limits, RateLimiter
from lorafleet_gateway.replica_poller import ReplicaTracker
from lorafleet_gateway.reservation import RateLimited, Reservation

LIMITS = Limits(requests_per_second=1000.0, tokens_per_minute=1000)


class Clock:
    t = 100.0

    def __call__(self) -> float:
        return self.t  # frozen: no refill, so the bucket shows exactly what was charged


def _parts() -> tuple[RateLimiter, ReplicaTracker]:
    tracker = ReplicaTracker(httpx.AsyncClient())
    tracker.set_endpoints([ReplicaEndpoint(r, f"http://{r}", f"http://{r}") for r in ("a", "b")])
    return RateLimiter(LIMITS, clock=Clock()), tracker


def _bucket(limiter: RateLimiter) -> float | None:
    return limiter.tokens_left("t")


def _in_flight(tracker: ReplicaTracker) -> dict[str, int]:
    return tracker.local_tokens()


async def test_tokens_move_between_candidates_and_leave_with_the_request():
    limiter, tracker = _parts()
    async with Reservation(limiter, tracker, "t", 300, LIMITS) as held:
        assert _bucket(limiter) == 700
        held.place("a")
        assert _in_flight(tracker) == {"a": 300, "b": 0}
        held.place("b")  # a failed before the first byte: the retry counts on b only
        held.place("b")
        assert _in_flight(tracker) == {"a": 0, "b": 300}
        held.answered()
        held.used(40)
    assert _in_flight(tracker) == {"a": 0, "b": 0}
    assert _bucket(limiter) == 960  # charged the real usage, not the estimate


async def test_no_answer_refunds_everything_even_on_an_exception():
    limiter, tracker = _parts()

    async def failing_request() -> None:
        async with Reservation(limiter, tracker, "t", 300, LIMITS) as held:
            held.place("a")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await failing_request()
    assert _bucket(limiter) == 1000
    assert _in_flight(tracker) == {"a": 0, "b": 0}


async def test_an_answer_with_unknown_usage_keeps_the_estimate_charged():
    limiter, tracker = _parts()
    async with Reservation(limiter, tracker, "t", 300, LIMITS) as held:
        held.place("a")
        held.answered()  # the stream began, then the client left: usage never arrived
    assert _bucket(limiter) == 700
    assert _in_flight(tracker) == {"a": 0, "b": 0}


async def test_cancellation_mid_request_releases_once():
    limiter, tracker = _parts()
    entered = asyncio.Event()

    async def request() -> None:
        async with Reservation(limiter, tracker, "t", 300, LIMITS) as held:
            held.place("a")
            entered.set()
            await asyncio.Event().wait()  # the client goes away while this waits

    task = asyncio.create_task(request())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _bucket(limiter) == 1000
    assert _in_flight(tracker) == {"a": 0, "b": 0}


async def test_refused_request_takes_nothing_and_raises_429():
    limiter, tracker = _parts()

    async def too_large() -> None:
        async with Reservation(limiter, tracker, "t", 5000, LIMITS):
            raise AssertionError("never entered")

    with pytest.raises(RateLimited) as exc:
        await too_large()
    assert exc.value.status == 429
    assert exc.value.limit == "tokens"
    assert "too large" in exc.value.message
    assert _bucket(limiter) == 1000
