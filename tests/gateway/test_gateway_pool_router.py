"""Routing across pools: a Ready merged pool first, else the adapter's rank class (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lorafleet_core.planning.placement import owners
from lorafleet_core.wire.replica_state import MergedServing
from lorafleet_gateway.pool_router import (
    MERGED,
    AdapterPools,
    MergedTarget,
    plan_pool_route,
)
from lorafleet_gateway.router import ReplicaView, Thresholds

T = Thresholds(max_tokens_in_flight=1000, max_queue_depth=10)
HOT = "acme-hot-v1"
SUM = "sha256:" + "a" * 64
SHARED = [f"shared-{i}" for i in range(4)]
BIG = [f"rank64-{i}" for i in range(2)]
MERGED_IDS = ["hot-0", "hot-1"]
POOL_OF = (
    dict.fromkeys(SHARED, "shared")
    | dict.fromkeys(BIG, "rank64")
    | dict.fromkeys(MERGED_IDS, "hot-merged")
)
READY = AdapterPools("shared", (MergedTarget("hot-merged", SUM),))


def fleet(
    merged_load: tuple[int, int] = (0, 0),
    serves: str = HOT,
    checksum: str = SUM,
    queued: tuple[int, int] = (0, 0),
) -> dict[str, ReplicaView]:
    out = {r: ReplicaView() for r in SHARED + BIG}
    weights = MergedServing(adapter_id=serves, checksum=checksum)
    for rid, load, queue in zip(MERGED_IDS, merged_load, queued, strict=True):
        out[rid] = ReplicaView(tokens_in_flight=load, queue_depth=queue, merged=weights)
    return out


def test_ready_merged_pool_serves_least_loaded_replica_first_then_shared_fallbacks():
    plan = plan_pool_route(HOT, READY, fleet((700, 200)), POOL_OF, 2, T)
    assert plan.outcome == MERGED
    assert plan.candidates[:2] == ("hot-1", "hot-0")
    assert plan.merged == frozenset(MERGED_IDS)
    assert plan.pool == "hot-merged"
    assert plan.fallback is None
    # the retry order continues into the shared pool: a merged replica failing falls back
    assert set(plan.candidates[2:]) == set(SHARED)


def test_without_merged_pool_the_shared_pool_routes_to_owners():
    plan = plan_pool_route(HOT, AdapterPools("shared"), fleet(), POOL_OF, 2, T)
    assert plan.outcome == "owner"
    assert plan.candidates[0] in owners(HOT, SHARED, 2)
    assert set(plan.candidates) == set(SHARED)
    assert plan.merged == frozenset()
    assert plan.fallback is None


def test_merged_pool_without_healthy_replicas_falls_back_to_shared():
    views = {r: v for r, v in fleet().items() if r not in MERGED_IDS}  # not healthy: absent
    plan = plan_pool_route(HOT, READY, views, POOL_OF, 2, T)
    assert plan.outcome == "owner"
    assert plan.fallback == "unhealthy"
    assert set(plan.candidates) == set(SHARED)


def test_all_merged_replicas_overloaded_falls_back_to_shared():
    plan = plan_pool_route(HOT, READY, fleet((900, 900), queued=(11, 40)), POOL_OF, 2, T)
    assert plan.outcome == "owner"
    assert plan.fallback == "overloaded"
    assert not set(plan.candidates) & set(MERGED_IDS)


def test_busy_merged_replicas_keep_serving_under_bounded_load():
    # both past the absolute token threshold, neither queueing: still the merged pool's
    plan = plan_pool_route(HOT, READY, fleet((5000, 4000)), POOL_OF, 2, T)
    assert (plan.outcome, plan.candidates[0]) == (MERGED, "hot-1")


def test_merged_pool_past_its_queue_bound_spills_to_the_shared_owners():
    # queues just over merged_max_queue_depth (4), far under the shared pool's 10
    q = T.merged_max_queue_depth + 1
    plan = plan_pool_route(HOT, READY, fleet((100, 100), queued=(q, q)), POOL_OF, 2, T)
    assert (plan.outcome, plan.fallback, plan.left_pool) == ("owner", "overloaded", "hot-merged")
    assert plan.candidates[0] in owners(HOT, SHARED, 2)  # the adapter's LoRA owners
    assert not set(plan.candidates) & set(MERGED_IDS)
    at_bound = plan_pool_route(HOT, READY, fleet((100, 100), queued=(4, 4)), POOL_OF, 2, T)
    assert (at_bound.outcome, at_bound.fallback) == (MERGED, None)


def test_merged_pool_past_its_token_bound_spills_even_with_empty_queues():
    full = T.merged_max_tokens_in_flight + 1
    plan = plan_pool_route(HOT, READY, fleet((full, full)), POOL_OF, 2, T)
    assert (plan.outcome, plan.fallback) == ("owner", "overloaded")
    # one replica with room takes it, past the absolute threshold but within bounded load
    one = plan_pool_route(HOT, READY, fleet((full, full - 2000)), POOL_OF, 2, T)
    assert (one.outcome, one.candidates[0]) == (MERGED, "hot-1")


def test_merged_bounds_at_zero_are_off():
    off = Thresholds(
        max_tokens_in_flight=1000,
        max_queue_depth=10,
        merged_max_queue_depth=0,
        merged_max_tokens_in_flight=0,
    )
    plan = plan_pool_route(HOT, READY, fleet((10**6, 10**6), queued=(99, 99)), POOL_OF, 2, off)
    assert plan.outcome == MERGED


def test_full_merged_pool_serves_when_the_shared_pool_is_saturated_too():
    views = fleet((50_000, 60_000), queued=(9, 9))
    for rid in SHARED:
        views[rid] = ReplicaView(tokens_in_flight=5000, queue_depth=11)  # over the shared bounds
    plan = plan_pool_route(HOT, READY, views, POOL_OF, 2, T)
    assert (plan.outcome, plan.fallback) == (MERGED, None)
    assert plan.candidates[:2] == ("hot-0", "hot-1")  # least loaded first
    assert set(plan.candidates[2:]) == set(SHARED)


def test_merged_bounds_refuse_negative_values():
    with pytest.raises(ValueError, match="merged pool bounds"):
        Thresholds(merged_max_queue_depth=-1)


def test_unhealthy_merged_pool_names_the_pool_it_left():
    views = {r: v for r, v in fleet().items() if r not in MERGED_IDS}
    plan = plan_pool_route(HOT, READY, views, POOL_OF, 2, T)
    assert (plan.fallback, plan.left_pool) == ("unhealthy", "hot-merged")


def test_one_overloaded_merged_replica_leaves_the_other():
    plan = plan_pool_route(HOT, READY, fleet((5000, 10)), POOL_OF, 2, T)
    assert plan.outcome == MERGED
    assert plan.merged == frozenset({"hot-1"})
    assert plan.candidates[0] == "hot-1"
    assert "hot-0" not in plan.candidates


def test_replica_serving_other_weights_is_never_a_candidate():
    wrong_adapter = plan_pool_route(HOT, READY, fleet(serves="globex-bot-v1"), POOL_OF, 2, T)
    wrong_sum = plan_pool_route(HOT, READY, fleet(checksum="sha256:" + "f" * 64), POOL_OF, 2, T)
    for plan in (wrong_adapter, wrong_sum):
        assert plan.outcome == "owner"
        assert plan.fallback == "unhealthy"
        assert not set(plan.candidates) & set(MERGED_IDS)


def test_other_adapters_never_reach_a_merged_pool():
    plan = plan_pool_route("acme-other-v1", AdapterPools("shared"), fleet(), POOL_OF, 2, T)
    assert set(plan.candidates) == set(SHARED)


def test_rank_class_pool_routes_only_to_its_replicas():
    plan = plan_pool_route("acme-big-v1", AdapterPools("rank64"), fleet(), POOL_OF, 2, T)
    assert set(plan.candidates) == set(BIG)
    assert plan.pool == "rank64"


def test_no_pool_known_routes_over_every_replica_without_merged_weights():
    plan = plan_pool_route("acme-x-v1", AdapterPools(), fleet(), POOL_OF, 2, T)
    assert set(plan.candidates) == set(SHARED + BIG)


@given(
    loads=st.lists(st.integers(0, 40), min_size=2, max_size=2),
    healthy=st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_merged_replicas_serve_only_their_adapter_and_shared_never_loses_the_request(
    loads, healthy
):
    views = {
        r: v
        for (r, v), ok in zip(
            fleet((100, 100), queued=(loads[0], loads[1])).items(), healthy, strict=True
        )
        if ok or r in MERGED_IDS
    }
    plan = plan_pool_route(HOT, READY, views, POOL_OF, 2, T)
    other = plan_pool_route("acme-other-v1", AdapterPools("shared"), views, POOL_OF, 2, T)
    assert not set(other.candidates) & set(MERGED_IDS)
    shared_up = [r for r in SHARED if r in views]
    # nothing is refused for a merged pool's sake: the shared replicas are always candidates
    assert set(shared_up) <= set(plan.candidates)
    room = any(queue <= T.merged_max_queue_depth for queue in loads)
    # full merged replicas still serve when no shared replica can (nothing to spill to)
    assert (plan.outcome == MERGED) == (room or not shared_up)
