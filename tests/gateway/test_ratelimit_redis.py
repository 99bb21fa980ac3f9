"""The Redis limiter against a real redis-server: the in-memory limiter's answers, one limit
across processes, and the stated behaviour when Redis is down."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from lorafleet_gateway.ratelimit import Limits, RateLimiter
from lorafleet_gateway.ratelimit_redis import RedisRateLimiter
from tests.conftest import free_port
from tests.gateway.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]


def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def limiter(url: str, **kw) -> RedisRateLimiter:
    return RedisRateLimiter.from_url(url, Limits(5, 1000), password=None, timeout_s=0.5, **kw)


async def test_burst_then_refusal_match_the_in_memory_limiter(redis_server):
    shared, local, t = limiter(redis_server.url), RateLimiter(Limits(5, 1000)), tenant()
    try:
        remote = [await shared.acquire(t, 10) for _ in range(7)]
        memory = [await local.acquire(t, 10) for _ in range(7)]
        assert (
            [d.allowed for d in remote] == [d.allowed for d in memory] == [True] * 5 + [False] * 2
        )
        refused = remote[-1]
        assert refused.limit == "requests"
        assert 0 < refused.retry_after_s <= 0.2  # one request refills in 1/5 s
        too_big = await shared.acquire(tenant(), 5000)
        assert (too_big.allowed, too_big.too_large, too_big.limit) == (False, True, "tokens")
    finally:
        await shared.aclose()


async def test_settle_refunds_what_a_request_did_not_use(redis_server):
    shared, t = limiter(redis_server.url), tenant()
    try:
        assert (await shared.acquire(t, 900)).allowed
        refused = await shared.acquire(t, 900)
        assert (refused.allowed, refused.limit) == (False, "tokens")
        await shared.settle(t, 900, 100)  # used 100 of the 900 estimated
        assert (await shared.acquire(t, 700)).allowed
    finally:
        await shared.aclose()


async def test_settling_finished_requests_does_not_hold_back_the_request_bucket(redis_server):
    """Each bucket refills on its own clock: a request finishing (settle) while the tenant
    waits for its next request slot must not restart that slot's refill."""
    shared, t = limiter(redis_server.url), tenant()
    try:
        for _ in range(5):
            assert (await shared.acquire(t, 10)).allowed
        state = await shared.client.hgetall(shared.key(t))
        await shared.settle(t, 10, 5)
        after = await shared.client.hgetall(shared.key(t))
        token_fields = {b"t", b"tts"}
        assert {k: v for k, v in after.items() if k not in token_fields} == {
            k: v for k, v in state.items() if k not in token_fields
        }
        assert float(after[b"t"]) > float(state[b"t"])  # the refund landed
    finally:
        await shared.aclose()


async def test_tenant_state_expires_once_the_buckets_would_be_full(redis_server):
    shared, t = limiter(redis_server.url), tenant()
    try:
        await shared.acquire(t, 10)
        ttl = await shared.client.ttl(shared.key(t))
        # Tokens refill 1000 per minute: a full bucket after 60 s, plus one second.
        assert 0 < ttl <= 61
    finally:
        await shared.aclose()


@pytest.mark.parametrize("rps", [1e-20, 1e-320])
async def test_a_tenant_with_a_tiny_rate_is_refused_and_others_keep_their_limits(
    redis_server, rps: float
):
    """Any positive rate is a valid tenant limit. 1e-20 requests/s made an EXPIRE of
    '1e+20', which Redis refused: the script failed, the limiter marked the backend down
    and, failing open, admitted every tenant unchecked (failing closed, refused them all)."""
    shared, slow, other = limiter(redis_server.url), tenant(), tenant()
    try:
        admitted = [(await shared.acquire(slow, 10, Limits(rps, 1000))).allowed for _ in range(3)]
        assert admitted == [True, False, False]  # the burst of one, then the wait
        assert shared.backend_up
        assert await shared.client.ttl(shared.key(slow)) > 0
        others = [(await shared.acquire(other, 10)).allowed for _ in range(7)]
        assert others == [True] * 5 + [False] * 2
    finally:
        await shared.aclose()


def test_two_processes_sharing_one_redis_enforce_one_tenant_limit(redis_server):
    rps, seconds, t = 40.0, 5.0, tenant()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "tests.gateway.ratelimit_worker", redis_server.url, t]
    argv += [str(rps), str(seconds), "2"]
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=REPO, env=env)
        for _ in range(2)
    ]
    counts = [int(p.communicate(timeout=120)[0].strip()) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert all(c > 0 for c in counts), counts  # both processes were admitted some
    burst = rps  # the bucket starts full: one second of requests
    admitted_rate = (sum(counts) - burst) / seconds
    print(f"admitted {counts} in {seconds} s: {admitted_rate:.1f}/s against a limit of {rps}/s")
    assert abs(admitted_rate - rps) <= 0.1 * rps


@pytest.fixture
def lonely_redis(tmp_path: Path):
    server = RedisServer(free_port(), tmp_path / "redis").start()
    yield server
    server.stop()


def backend_metrics():
    registry = CollectorRegistry()
    errors = Counter("errors", "", ["operation"], registry=registry)
    up = Gauge("up", "", registry=registry)
    return registry, errors, up


async def test_redis_down_fails_open_with_a_metric_and_recovers(lonely_redis):
    registry, errors, up = backend_metrics()
    now = [0.0]
    shared = limiter(lonely_redis.url, errors=errors, up=up, retry_s=1.0, clock=lambda: now[0])
    t = tenant()
    try:
        assert (await shared.acquire(t, 10)).allowed
        assert registry.get_sample_value("up") == 1
        lonely_redis.stop()
        decisions = [await shared.acquire(t, 10) for _ in range(20)]  # far above 5/s
        assert all(d.allowed for d in decisions)
        assert registry.get_sample_value("errors_total", {"operation": "acquire"}) == 20
        assert registry.get_sample_value("up") == 0
        assert not shared.backend_up  # later calls skip Redis instead of timing out again
        lonely_redis.start()
        now[0] = 1.5
        assert (await shared.acquire(t, 10)).allowed
        assert registry.get_sample_value("up") == 1
    finally:
        await shared.aclose()


async def test_redis_down_fails_closed_when_configured(lonely_redis):
    _, errors, up = backend_metrics()
    shared = limiter(lonely_redis.url, errors=errors, up=up, on_error="closed")
    try:
        lonely_redis.stop()
        refused = await shared.acquire(tenant(), 10)
        assert not refused.allowed
        assert refused.retry_after_s == shared.retry_s
    finally:
        await shared.aclose()
