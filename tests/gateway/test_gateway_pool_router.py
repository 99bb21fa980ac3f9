"""Routing across pools: a Ready merged pool first, else the adapter's rank class (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lorafleet_core.placement import owners
from lorafleet_core.replica_state import MergedServing
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
    assert (plan.outcome == MERGED) == any(queue <= T.max_queue_depth for queue in loads)
