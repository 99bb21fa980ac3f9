"""The merged-pool recommendation: condition, event, and the merged ReplicaPool to create."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from lorafleet_core.api import reasons as R
from lorafleet_core.api.models import ConditionStatus, ReplicaPool
from lorafleet_core.api.names import LABEL_MERGED_ADAPTER, LABEL_MERGED_FROM
from lorafleet_core.planning.conditions import find
from lorafleet_core.planning.fleet import FleetParams, FleetSnapshot, plan_fleet
from lorafleet_core.planning.merge_advice import merged_pool_name
from lorafleet_core.wire.replica_state import AdapterActivity, ReplicaState
from tests.operator.factories import T0, entry, pod_views, pool

PARAMS = FleetParams(replica_capacity_tps=640, merge_threshold_share=1.0)


def hot_states(tps_each: float, n: int = 2) -> dict[str, ReplicaState]:
    activity = AdapterActivity(requests=300, gpu_hits=290, tokens_per_second=tps_each)
    return {
        f"pool-{i}": ReplicaState(
            replica_id=f"pool-{i}", adapters={"hot": activity}, tokens_per_second={"hot": tps_each}
        )
        for i in range(n)
    }


def snap(tps_each: float, *pools: ReplicaPool, uid: str | None = "uid-hot") -> FleetSnapshot:
    return FleetSnapshot(
        pools=list(pools) or [pool()],
        adapters=[dataclasses.replace(entry("hot"), uid=uid), entry("cold")],
        aliases=[],
        pods=pod_views("pool", 6),
        states=hot_states(tps_each),
    )


def applied(s: FleetSnapshot, plan) -> FleetSnapshot:
    return dataclasses.replace(
        s,
        adapters=[
            dataclasses.replace(e, status=plan.adapter_status.get(e.name, e.status))
            for e in s.adapters
        ],
    )


def merged_cond(plan, name: str = "hot"):
    return find(plan.adapter_status[name].conditions, R.MERGED_POOL_RECOMMENDED)


def test_adapter_over_a_replicas_capacity_gets_the_condition_and_one_event():
    s = snap(500.0)  # 1,000 tokens/s sustained > 640
    plan = plan_fleet(s, T0, PARAMS)
    c = merged_cond(plan)
    assert c is not None
    assert (c.status, c.reason) == (ConditionStatus.TRUE, R.SUSTAINED_TRAFFIC)
    assert "1000 tokens/s" in c.message
    assert "spec.merged.adapter: hot" in c.message
    assert plan.merge_events == {"hot": (R.SUSTAINED_TRAFFIC, c.message)}
    assert plan.pools_to_create == []  # autoMerge is off by default
    # a quiet adapter carries no such condition at all (no write for the long tail)
    assert merged_cond(plan, "cold") is None
    # re-planning the applied status: no new event, nothing changes
    again = plan_fleet(applied(s, plan), T0 + timedelta(seconds=5), PARAMS)
    assert again.merge_events == {}
    assert again.adapter_status == plan.adapter_status


def test_below_the_threshold_nothing_and_the_recommendation_has_hysteresis():
    assert merged_cond(plan_fleet(snap(300.0), T0, PARAMS)) is None  # 600 < 640
    s = snap(500.0)
    plan = plan_fleet(s, T0, PARAMS)
    # traffic falls to 560 tokens/s (under 640, over 0.8 x 640 = 512): still recommended
    later = T0 + timedelta(minutes=2)
    dipped = dataclasses.replace(applied(s, plan), states=hot_states(280.0))
    still = plan_fleet(dipped, later, PARAMS)
    stats = still.adapter_status["hot"].stats
    assert stats is not None
    assert stats.tokens_per_second == 560.0
    assert merged_cond(still).status == ConditionStatus.TRUE
    # then to 400: withdrawn, the condition stays with status False
    fell = dataclasses.replace(applied(dipped, still), states=hot_states(200.0))
    gone = plan_fleet(fell, later + timedelta(minutes=2), PARAMS)
    c = merged_cond(gone)
    assert (c.status, c.reason) == (ConditionStatus.FALSE, R.WITHIN_CAPACITY)
    assert gone.merge_events == {}


def test_auto_merge_creates_the_merged_pool_owned_by_the_adapter():
    shared = pool(autoMerge={"enabled": True, "maxPools": 1}, replicas={"min": 1, "max": 6})
    plan = plan_fleet(snap(1000.0, shared), T0, PARAMS)  # 2,000 tokens/s
    c = merged_cond(plan)
    assert (c.status, c.reason) == (ConditionStatus.TRUE, R.MERGED_POOL_CREATED)
    [body] = plan.pools_to_create
    created = ReplicaPool.model_validate(body)  # a valid ReplicaPool as the CRD takes it
    assert created.metadata.name == "hot-merged"
    assert created.spec.merged is not None
    assert created.spec.merged.adapter == "hot"
    assert created.spec.auto_merge.enabled is False
    assert created.spec.base_model == shared.spec.base_model
    assert created.spec.replicas.min == 5  # ceil(2000 / (640 x 2/3))
    assert created.spec.replicas.max == 6
    assert created.metadata.labels[LABEL_MERGED_FROM] == "pool"
    assert created.metadata.labels[LABEL_MERGED_ADAPTER] == "hot"
    [ref] = body["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        "LoRAAdapter",
        "hot",
        "uid-hot",
        True,
    )
    # once the pool exists it is named, and never created twice
    exists = plan_fleet(applied(snap(1000.0, shared, created), plan), T0, PARAMS)
    c2 = merged_cond(exists)
    assert (c2.reason, exists.pools_to_create) == (R.MERGED_POOL_EXISTS, [])
    assert "served by hot-merged" in c2.message
    # a merged pool is never a placement: the adapter stays owned in the shared pool
    assert all(o.startswith("pool-") for o in exists.adapter_status["hot"].owners)


def test_auto_merge_stops_at_max_pools():
    shared = pool(autoMerge={"enabled": True, "maxPools": 1})
    other = pool("other-merged", merged={"adapter": "someone-else"})
    other.metadata.labels[LABEL_MERGED_FROM] = "pool"
    plan = plan_fleet(snap(1000.0, shared, other), T0, PARAMS)
    c = merged_cond(plan)
    assert (c.reason, plan.pools_to_create) == (R.AUTO_MERGE_LIMIT, [])
    assert "maxPools=1" in c.message


def test_long_adapter_names_give_valid_short_pool_names():
    name = merged_pool_name("a" * 60 + "-v1")
    assert len(name) <= 52
    assert name.endswith("-merged")
    assert name == merged_pool_name("a" * 60 + "-v1")
    assert name != merged_pool_name("a" * 60 + "-v2")
