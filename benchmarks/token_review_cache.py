"""What `internalAuth: tokenReview` costs an agent per load/unload call: a cached check vs a
TokenReview round trip.

    .venv/bin/python -m benchmarks.token_review_cache [--calls 2000]

Starts the emulated API server the tests use (kmock plus a TokenReview handler,
tests/agent/kube_emulation.py) and times `TokenReviewer.check` for one allowed token: with the
cache (sha256 of the token, one dict lookup) and without it (cache time 0: every call is a
TokenReview over loopback HTTP). Prints the median µs of each. On a cluster a review is a TLS
round trip to the API server (typically 1-5 ms), paid once per token per 30 s.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.results import Result, module_command
from lorafleet_agent.kube import AgentKube
from lorafleet_core.kube.token_review import TokenReviewer
from tests.agent.kube_emulation import AUDIENCE, GATEWAY_SA, emulated_cluster


async def median_us(reviewer: TokenReviewer, calls: int) -> float:
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        verdict = await reviewer.check("gateway-token")
        samples.append(time.perf_counter() - t0)
        assert verdict.allowed
    return statistics.median(samples) * 1e6


async def run(url: str, calls: int) -> tuple[float, float]:
    kube = AgentKube(url)
    try:
        cached = TokenReviewer(kube.api, accounts={GATEWAY_SA}, audiences=(AUDIENCE,))
        uncached = TokenReviewer(kube.api, accounts={GATEWAY_SA}, audiences=(AUDIENCE,), cache_s=0)
        await uncached.check("gateway-token")  # warm the client's connection
        return await median_us(cached, calls), await median_us(uncached, min(calls, 300))
    finally:
        await kube.aclose()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=None, help="result JSON (or a folder)")
    args = parser.parse_args(argv)
    command = module_command("token_review_cache", None if argv is None else list(argv))
    result = Result("token_review_cache", ["check", "median µs"], command=command)
    result.notes.append("TokenReview against the emulated API server (kmock) on loopback")
    for cluster, _ in emulated_cluster():
        cached, reviewed = asyncio.run(run(cluster.url, args.calls))
        cached_check = "cached (sha256 of the token, one lookup)"
        result.add(check=cached_check, **{"median µs": round(cached, 1)})
        result.add(check="TokenReview round trip", **{"median µs": round(reviewed)})
    result.emit(args.out)


if __name__ == "__main__":
    main()
