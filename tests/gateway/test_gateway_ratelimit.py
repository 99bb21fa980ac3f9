"""Token buckets: requests/s and tokens/min, reconciliation, bounded state (injected clock)."""

from __future__ import annotations

import pytest

from lorafleet_gateway.ratelimit import Limits, RateLimiter, retry_after_headers


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def test_requests_per_second_bucket():
    clock = Clock()
    rl = RateLimiter(Limits(2.0, 10**6), clock=clock)
    assert (await rl.acquire("a", 1)).allowed
    assert (await rl.acquire("a", 1)).allowed
    d = await rl.acquire("a", 1)
    assert not d.allowed
    assert d.limit == "requests"
    assert d.retry_after_s == pytest.approx(0.5)
    clock.t += 0.5
    assert (await rl.acquire("a", 1)).allowed
    assert not (await rl.acquire("a", 1)).allowed


async def test_tokens_per_minute_bucket_and_settle():
    clock = Clock()
    rl = RateLimiter(Limits(100.0, 600), clock=clock)  # 10 tokens/s
    assert (await rl.acquire("a", 500)).allowed
    d = await rl.acquire("a", 200)
    assert not d.allowed
    assert d.limit == "tokens"
    assert d.retry_after_s == pytest.approx(10.0)  # 100 missing at 10/s
    await rl.settle("a", estimated=500, actual=50)  # refund 450
    assert (await rl.acquire("a", 200)).allowed
    await rl.settle("a", estimated=10, actual=400)  # under-estimate: charged afterwards
    assert not (await rl.acquire("a", 100)).allowed


async def test_refused_request_consumes_nothing():
    clock = Clock()
    rl = RateLimiter(Limits(1.0, 600), clock=clock)
    assert (await rl.acquire("a", 590)).allowed
    clock.t += 1.0  # request bucket full again; tokens 20
    assert not (await rl.acquire("a", 100)).allowed
    assert (await rl.acquire("a", 15)).allowed  # the refused one did not take the request token


async def test_too_large_request():
    rl = RateLimiter(Limits(1.0, 100), clock=Clock())
    d = await rl.acquire("a", 101)
    assert not d.allowed
    assert d.too_large


async def test_tenants_are_independent_and_overrides_apply():
    clock = Clock()
    rl = RateLimiter(Limits(1.0, 10**6), clock=clock)
    assert (await rl.acquire("a", 1)).allowed
    assert not (await rl.acquire("a", 1)).allowed
    assert (await rl.acquire("b", 1)).allowed
    vip = Limits(5.0, 10**6)
    assert all([(await rl.acquire("c", 1, vip)).allowed for _ in range(5)])
    assert not (await rl.acquire("c", 1, vip)).allowed


async def test_state_is_bounded_lru():
    clock = Clock()
    rl = RateLimiter(Limits(1.0, 1000), max_tenants=100, clock=clock)
    for i in range(5000):
        await rl.acquire(f"t{i}", 1)
    assert len(rl) == 100
    # the most recent tenants are the ones kept
    assert not (await rl.acquire("t4999", 1)).allowed


def test_retry_after_headers():
    h = retry_after_headers(0.123)
    assert h == {"retry-after": "1", "retry-after-ms": "123"}
    assert retry_after_headers(2.5)["retry-after"] == "3"


@pytest.mark.parametrize("seconds", [float("inf"), float("nan"), 1e300])
def test_retry_after_is_a_sane_number_whatever_the_wait(seconds: float):
    assert retry_after_headers(seconds) == {"retry-after": "3600", "retry-after-ms": "3600000"}


async def test_a_tiny_request_rate_is_refused_with_a_bounded_retry_after():
    rl = RateLimiter(Limits(5e-324, 10**6), clock=Clock())
    assert (await rl.acquire("t", 1)).allowed
    decision = await rl.acquire("t", 1)
    assert not decision.allowed
    assert retry_after_headers(decision.retry_after_s)["retry-after"] == "3600"
