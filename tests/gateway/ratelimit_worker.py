"""One "gateway" hammering a shared Redis limiter for one tenant; prints its admitted count.

    python -m tests.gateway.ratelimit_worker URL TENANT RPS SECONDS WORKERS

Started WORKERS times by test_ratelimit_redis to show processes enforce one limit together.
They meet at a barrier in the same Redis (a counter each increments) so their windows overlap.
"""

from __future__ import annotations

import asyncio
import sys
import time

from redis.asyncio import Redis

from lorafleet_gateway.ratelimit import Limits
from lorafleet_gateway.ratelimit_redis import RedisRateLimiter


async def hammer(url: str, tenant: str, rps: float, seconds: float, workers: int) -> int:
    # This measures enforcement, not the outage policy: on a loaded CI machine a Redis call can
    # take over a second, and failing open would then admit everything for `retry_s`. So a
    # generous timeout, and a slow call denies instead of admitting.
    limiter = RedisRateLimiter.from_url(
        url, Limits(rps, 10_000_000), password=None, timeout_s=10.0, on_error="closed"
    )
    # Barrier: the last worker to arrive releases everyone (BLPOP blocks in Redis).
    barrier = Redis.from_url(url)
    if await barrier.incr(f"test-barrier:{tenant}") == workers:
        await barrier.rpush(f"test-go:{tenant}", *["go"] * workers)
    await barrier.blpop([f"test-go:{tenant}"], timeout=60)
    await barrier.aclose()
    end = time.monotonic() + seconds
    admitted = 0

    async def client() -> None:
        nonlocal admitted
        while time.monotonic() < end:
            decision = await limiter.acquire(tenant, 10)
            admitted += decision.allowed

    await asyncio.gather(*(client() for _ in range(8)))
    await limiter.aclose()
    return admitted


if __name__ == "__main__":
    url, tenant, rps, seconds, workers = sys.argv[1:6]
    print(asyncio.run(hammer(url, tenant, float(rps), float(seconds), int(workers))))
