"""Fleet-size searches that do not trust the SLO test to be monotone in the replica count.

A simulated fleet's SLO test is monotone in expectation (more replicas, less load each) but
not draw by draw: adding a replica moves every adapter's rendezvous owners, so each count is
a fresh draw of which replicas and adapters collect the workload's prefill pile-ups. A binary
search over such a test can stop on a count whose neighbour above fails (docs/performance.md,
"Hot tenant: more owners or a merged pool", two runs that disagreed).

`fewest_stable` answers the question a capacity plan asks instead: the smallest count from
which every larger count (up to `high`) meets, so scaling up from the answer never breaks
the SLO. It scans down from `high` and stops at the first failure: high - answer + 2 tests.
"""

from __future__ import annotations

from collections.abc import Callable


def fewest_stable(ok: Callable[[int], bool], low: int, high: int) -> int | None:
    """The smallest n in [low, high] with ok(m) for every m in [n, high] (None: not ok(high))."""
    if low > high:
        raise ValueError(f"empty range [{low}, {high}]")
    found = None
    for n in range(high, low - 1, -1):
        if not ok(n):
            break
        found = n
    return found
