"""Rendezvous placement benchmark: cost of owners() and movement when a replica joins.

    .venv/bin/python -m benchmarks.placement_bench
    .venv/bin/python -m benchmarks.placement_bench --adapters 5000 --replicas 26 --large 1000 --k 2

Prints
- microseconds per `owners()` call with the design's fleet (26 replicas) and a large one
  (1,000 replicas): the gateway computes owners on every request;
- when replica N+1 joins: the fraction of adapters whose owner set changed, against the ideal
  k/(N+1) (2/27 for the design), and whether every move went onto the new replica;
- the balance: busiest replica's share against the mean.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from benchmarks.results import Result, module_command
from lorafleet_core.planning.placement import owners


def replica_ids(n: int) -> list[str]:
    # StatefulSet pod names: what the operator and gateway actually hash.
    return [f"lorafleet-pool-{i}" for i in range(n)]


def adapter_ids(n: int) -> list[str]:
    return [f"tenant{i:05d}-support-v{i % 5 + 1}" for i in range(n)]


def micros_per_call(adapters: Sequence[str], replicas: Sequence[str], k: int, rounds: int) -> float:
    """Best-of-`rounds` mean time of one owners() call, in microseconds."""
    per_round: list[float] = []
    for _ in range(rounds):
        start = time.perf_counter()
        for a in adapters:
            owners(a, replicas, k)
        per_round.append((time.perf_counter() - start) / len(adapters) * 1e6)
    return min(per_round)


def movement(adapters: Sequence[str], n: int, k: int) -> tuple[float, bool]:
    """(fraction of adapters whose owners changed, all moves went onto the new replica)."""
    before_pool, after_pool = replica_ids(n), replica_ids(n + 1)
    new = after_pool[-1]
    moved = 0
    only_onto_new = True
    for a in adapters:
        before, after = set(owners(a, before_pool, k)), set(owners(a, after_pool, k))
        if before != after:
            moved += 1
            only_onto_new &= after - before == {new}
    return moved / len(adapters), only_onto_new


def balance(adapters: Sequence[str], n: int, k: int) -> tuple[int, float, float]:
    """(busiest replica's count, mean, population stdev) of owned adapters per replica."""
    counts: Counter[str] = Counter()
    pool = replica_ids(n)
    for a in adapters:
        counts.update(owners(a, pool, k))
    values = [counts[r] for r in pool]
    return max(values), statistics.fmean(values), statistics.pstdev(values)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapters", type=int, default=5000, help="adapter ids (default 5000)")
    parser.add_argument("--replicas", type=int, default=26, help="fleet size (default 26)")
    parser.add_argument("--large", type=int, default=1000, help="large fleet (default 1000)")
    parser.add_argument("--k", type=int, default=2, help="owners per adapter (default 2)")
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds, best kept")
    parser.add_argument("--out", type=Path, default=None, help="result JSON (or a folder)")
    args = parser.parse_args(argv)

    adapters = adapter_ids(args.adapters)
    n, k = args.replicas, args.k
    command = module_command("placement_bench", None if argv is None else list(argv))
    result = Result("placement_bench", ["measure", "value"], command=command)
    result.notes.append(f"{len(adapters)} adapter ids, k={k}, Python {sys.version.split()[0]}")
    for size, sample in ((n, adapters), (args.large, adapters[:500])):
        us = micros_per_call(sample, replica_ids(size), k, args.rounds)
        result.add(measure=f"owners() with {size} replicas", value=f"{us:.1f} µs per call")

    fraction, only_new = movement(adapters, n, k)
    ideal = min(k, n + 1) / (n + 1)
    result.add(
        measure=f"replica {n + 1} joins {n}: adapters whose owners changed",
        value=f"{100 * fraction:.1f}% (ideal {k}/{n + 1} = {100 * ideal:.1f}%)",
    )
    result.add(measure="every move onto the new replica", value="yes" if only_new else "no")
    busiest, mean, stdev = balance(adapters, n, k)
    result.add(
        measure=f"balance, {len(adapters)} adapters x {n} replicas x k={k}",
        value=f"busiest {busiest / mean:.2f} x the mean (stdev {stdev:.1f}; target <= 1.25)",
    )
    result.emit(args.out)
    return 0 if only_new and busiest <= 1.25 * mean else 1


if __name__ == "__main__":
    sys.exit(main())
