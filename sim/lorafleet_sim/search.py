"""Fleet-size searches that do not trust the SLO test to be monotone in the replica count.

A simulated fleet's SLO test is monotone in expectation (more replicas, less load each) but
not draw by draw: adding a replica moves every adapter's rendezvous owners, so each count is
a fresh draw of which replicas and adapters collect the workload's prefill pile-ups. A binary
search over such a test can stop on a count whose neighbour above fails (docs/design/0015).

`fewest_stable` answers the question a capacity plan asks instead: the smallest count from
which every larger count (up to `high`) meets, so scaling up from the answer never breaks
the SLO. It scans down from `high` and stops at the first failure: high - answer + 2 tests.

`fewest_total` sizes a fleet of two pools (shared replicas beside a merged pool): for each
merged count, the shared pool's `fewest_stable` count, and the pair with the fewest GPUs in
all. Taking the fewest merged replicas that meet beside a large shared pool and shrinking the
shared pool afterwards is not that: once a merged pool's overflow spills to the shared pool,
one merged replica "meets" beside any shared pool big enough to take its overflow
(docs/design/0015: 29 + 1 where 25 + 3 met).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


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


def fewest_total(
    ok: Callable[[int, int], bool],
    merged_counts: Iterable[int],
    low: int,
    high: int,
    note: Callable[[str], None] = lambda _m: None,
) -> tuple[int, int] | None:
    """(shared, merged) with the fewest shared + merged, where shared is `fewest_stable` of
    ok(·, merged) over [low, high] for each merged count (None: no merged count meets).

    Ties keep the pair found first, so list the likeliest count first (it also prunes the
    most). A merged count is skipped without its scan when it cannot beat the best so far:
    when the count alone with `low` shared replicas reaches the best total, or when
    ok(best - merged - 1, merged) fails, since `fewest_stable`'s answer is a count that meets
    and every count above it up to `high` meets too, so it would lie above best - merged - 1.
    `ok` should remember its answers: the probe's count comes up again in the scan.
    """

    def beside(m: int) -> Callable[[int], bool]:
        return lambda shared: ok(shared, m)

    best: tuple[int, int] | None = None
    for m in merged_counts:
        if best is not None:
            beat = sum(best) - m - 1  # the most shared replicas that would beat the best
            if beat < low:
                note(f"  {m} merged: skipped, {m} + {low} shared reach the best {sum(best)}")
                continue
            if beat < high and not ok(beat, m):
                note(f"  {m} merged: skipped, {beat} shared (to beat {sum(best)}) misses")
                continue
        n = fewest_stable(beside(m), low, high)
        if n is None:
            note(f"  {m} merged: not met with {high} shared")
            continue
        better = best is None or n + m < sum(best)
        note(f"  {m} merged: fewest {n} shared, {n + m} GPUs" + (" (best)" if better else ""))
        if better:
            best = (n, m)
    return best
