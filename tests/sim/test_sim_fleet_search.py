"""The fleet-size searches (`lorafleet_sim.search`) on hand-written SLO tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lorafleet_sim.search import fewest_stable, fewest_total


def test_fewest_stable_on_a_monotone_test_is_the_smallest_passing_count():
    tried: list[int] = []

    def ok(n: int) -> bool:
        tried.append(n)
        return n >= 7

    assert fewest_stable(ok, 1, 12) == 7
    assert tried == [12, 11, 10, 9, 8, 7, 6]  # down from the top, stops at the first failure
    assert fewest_stable(lambda n: False, 1, 8) is None
    assert fewest_stable(lambda n: True, 3, 8) == 3


def test_fewest_stable_skips_a_count_that_meets_below_one_that_fails():
    # Meets from 7 except at 12: a binary search over [1, 32] tries 16, 8, 4, 6, 7 and answers
    # 7, a fleet that breaks the SLO when scaled to 12. From 13 on every count meets.
    def ok(n: int) -> bool:
        return n >= 7 and n != 12

    assert fewest_stable(ok, 1, 32) == 13
    with pytest.raises(ValueError, match="empty range"):
        fewest_stable(ok, 5, 4)


# Shared replicas each merged count needs (1,280 tokens/s in docs/design/0015): one merged
# replica meets beside 29 shared (its overflow has room there), three beside 25.
NEED = {1: 29, 2: 27, 3: 25, 4: 25, 5: 24, 6: 24}


def _ok(tried: list[tuple[int, int]]) -> Callable[[int, int], bool]:
    cache: dict[tuple[int, int], bool] = {}

    def ok(shared: int, merged: int) -> bool:
        if (shared, merged) not in cache:
            tried.append((shared, merged))
            cache[(shared, merged)] = shared >= NEED[merged]
        return cache[(shared, merged)]

    return ok


def test_fewest_total_is_the_cheapest_pair_not_the_fewest_merged():
    tried: list[tuple[int, int]] = []
    # The fewest merged replicas meeting beside the 29-replica shared pool is 1: 30 GPUs.
    assert fewest_stable(lambda m: NEED[m] <= 29, 1, 6) == 1
    assert fewest_total(_ok(tried), [1, 2, 3, 4, 5, 6], 20, 29) == (25, 3)  # 28 GPUs
    # Each merged count gets its own scan from the top once a probe says it could beat the
    # best so far: 2 merged could beat 30 with 27 shared, 3 could beat 29 with 25; then 4, 5
    # and 6 merged would need 23, 22, 21 shared to beat 28 and miss there.
    assert tried == [
        (29, 1), (28, 1),
        (27, 2), (29, 2), (28, 2), (26, 2),
        (25, 3), (29, 3), (28, 3), (27, 3), (26, 3), (24, 3),
        (23, 4), (22, 5), (21, 6),
    ]  # fmt: skip


def test_fewest_total_skips_counts_that_cannot_beat_the_best_with_one_probe():
    tried: list[tuple[int, int]] = []
    notes: list[str] = []
    found = fewest_total(_ok(tried), [3, 1, 2, 4, 5, 6], 20, 29, notes.append)
    assert found == (25, 3)
    scan = [(n, 3) for n in range(29, 23, -1)]  # 29 down to 25 meet, 24 misses
    # Best 28: 1 merged needs <= 26 shared, 2 <= 25, 4 <= 23, 5 <= 22 (one probe each, all
    # miss); 6 merged would need <= 21 shared.
    assert tried == [*scan, (26, 1), (25, 2), (23, 4), (22, 5), (21, 6)]
    assert notes[0] == "  3 merged: fewest 25 shared, 28 GPUs (best)"
    assert notes[1] == "  1 merged: skipped, 26 shared (to beat 28) misses"


def test_fewest_total_stops_trying_merged_counts_that_alone_reach_the_best():
    tried: list[tuple[int, int]] = []
    need = {1: 9, 2: 3, 9: 1}
    cache: dict[tuple[int, int], bool] = {}

    def ok(shared: int, merged: int) -> bool:
        tried.append((shared, merged))
        return cache.setdefault((shared, merged), shared >= need[merged])

    # 2 merged + 3 shared = 5; 9 merged cannot beat it with any shared fleet (low is 1).
    assert fewest_total(ok, [2, 1, 9], 1, 10) == (3, 2)
    assert all(m != 9 for _, m in tried)
    assert (3, 1) in tried  # 1 merged had to meet with at most 3 shared: probed, missed


def test_fewest_total_keeps_each_pools_stability_and_none_when_nothing_meets():
    # 3 merged meets at 20 shared but not at 27: scaling the shared pool up from 20 would
    # break the SLO, so its answer is 28 + 3 and 2 merged (26 + 2) is cheaper.
    def ok(shared: int, merged: int) -> bool:
        return shared >= {2: 26, 3: 20}[merged] and (shared, merged) != (27, 3)

    assert fewest_total(ok, [3, 2], 20, 29) == (26, 2)
    assert fewest_total(lambda n, m: False, [1, 2], 20, 29) is None
