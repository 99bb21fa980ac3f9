"""A merged pool the operator created, through time: scaled with traffic, drained, deleted."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from lorafleet_core.api import reasons as R
from lorafleet_core.api.models import AdapterAlias, ConditionStatus, ReplicaPool, ReplicaPoolStatus
from lorafleet_core.api.names import (
    ANNOTATION_DRAINING_SINCE,
    LABEL_MERGED_ADAPTER,
    LABEL_MERGED_FROM,
)
from lorafleet_core.planning.conditions import find
from lorafleet_core.planning.fleet import FleetPlan, FleetSnapshot, plan_fleet
from lorafleet_core.planning.merged_lifecycle import (
    auto_created,
    plan_internal_secret,
    replicas_for,
)
from lorafleet_core.planning.pool_status import PoolObservation, plan_pool_status
from lorafleet_operator.sync_merged import patched
from tests.operator.factories import T0, alias_body, pool
from tests.operator.test_planning_merge_advice import PARAMS, applied, hot_states, snap

COOL, DRAIN = 600, 120
SHARED = pool(
    autoMerge={"enabled": True, "maxPools": 1, "coolDownSeconds": COOL, "drainSeconds": DRAIN},
    replicas={"min": 1, "max": 8},
)


def step(s: FleetSnapshot, plan: FleetPlan, tps_each: float, pools: list[ReplicaPool]):
    """The world after `plan` was written, with new traffic."""
    return dataclasses.replace(applied(s, plan), pools=pools, states=hot_states(tps_each))


def apply_changes(pools: list[ReplicaPool], plan: FleetPlan) -> list[ReplicaPool]:
    by = {p.metadata.name: p for p in pools}
    for c in plan.pool_changes:
        if c.delete:
            by.pop(c.pool)
        else:
            assert c.patch is not None
            by[c.pool] = patched(by[c.pool], c.patch)
    return list(by.values())


def created_world() -> tuple[FleetSnapshot, FleetPlan, list[ReplicaPool]]:
    s = snap(1000.0, SHARED)  # 2,000 tokens/s: created with min 4
    plan = plan_fleet(s, T0, PARAMS)
    [body] = plan.pools_to_create
    merged = ReplicaPool.model_validate(body)
    assert auto_created(merged)
    return s, plan, [SHARED, merged]


def changes(plan: FleetPlan) -> list[tuple[str, str]]:
    return [(c.pool, c.reason) for c in plan.pool_changes]


def test_merged_pool_follows_traffic_then_drains_after_the_cool_down_then_is_deleted():
    s, plan, pools = created_world()
    # more traffic: min follows ceil(3,000 / (640 x 2/3)) = 8 at once
    t1 = T0 + timedelta(minutes=2)
    s = step(s, plan, 1500.0, pools)
    plan = plan_fleet(s, t1, PARAMS)
    [scaled] = plan.pool_changes
    assert (scaled.reason, scaled.patch) == (
        R.MERGED_POOL_SCALED,
        {"spec": {"replicas": {"min": 8}}},
    )
    assert "3000 tokens/s" in scaled.message
    pools = apply_changes(pools, plan)
    # replanning the written world changes nothing (idempotent)
    s = step(s, plan, 1500.0, pools)
    assert plan_fleet(s, t1 + timedelta(seconds=5), PARAMS).pool_changes == []

    # traffic falls to 200 tokens/s: recommendation False, min back to 1, no drain yet
    t2 = t1 + timedelta(minutes=2)
    s = step(s, plan, 100.0, pools)
    plan = plan_fleet(s, t2, PARAMS)
    c = find(plan.adapter_status["hot"].conditions, R.MERGED_POOL_RECOMMENDED)
    assert c is not None
    assert (c.status, c.reason) == (ConditionStatus.FALSE, R.WITHIN_CAPACITY)
    assert "hot-merged drains after coolDownSeconds 600" in c.message
    assert changes(plan) == [("hot-merged", R.MERGED_POOL_SCALED)]
    pools = apply_changes(pools, plan)
    s = step(s, plan, 100.0, pools)
    assert plan_fleet(s, t2 + timedelta(seconds=COOL - 1), PARAMS).pool_changes == []

    # after the cool-down: draining (annotation), not deleted
    t3 = t2 + timedelta(seconds=COOL)
    plan = plan_fleet(s, t3, PARAMS)
    [drain] = plan.pool_changes
    assert drain.reason == R.MERGED_POOL_DRAINING
    assert drain.patch == {"metadata": {"annotations": {ANNOTATION_DRAINING_SINCE: t3.isoformat()}}}
    assert "deleted after drainSeconds 120" in drain.message
    pools = apply_changes(pools, plan)
    merged = next(p for p in pools if p.metadata.name == "hot-merged")
    # its status says so: Ready False, Draining
    status = plan_pool_status(
        "hot-merged", ReplicaPoolStatus(), merged, PoolObservation(pods=1, ready=1), t3
    )
    ready = find(status.conditions, R.READY)
    assert ready is not None
    assert (ready.status, ready.reason) == (ConditionStatus.FALSE, R.DRAINING)
    s = step(s, plan, 100.0, pools)
    assert plan_fleet(s, t3 + timedelta(seconds=DRAIN - 1), PARAMS).pool_changes == []

    # after the drain: deleted; the shared pool is never touched
    plan = plan_fleet(s, t3 + timedelta(seconds=DRAIN), PARAMS)
    [gone] = plan.pool_changes
    assert (gone.pool, gone.reason, gone.delete) == ("hot-merged", R.MERGED_POOL_DELETED, True)
    pools = apply_changes(pools, plan)
    assert [p.metadata.name for p in pools] == ["pool"]


def test_traffic_back_while_draining_cancels_the_drain():
    s, plan, pools = created_world()
    pools = [
        patched(p, {"metadata": {"annotations": {ANNOTATION_DRAINING_SINCE: T0.isoformat()}}})
        if p.metadata.name == "hot-merged"
        else p
        for p in pools
    ]
    s = step(s, plan, 1000.0, pools)  # still 2,000 tokens/s: recommendation True
    plan = plan_fleet(s, T0 + timedelta(hours=1), PARAMS)
    [cancel] = plan.pool_changes
    assert cancel.reason == R.MERGED_POOL_DRAIN_CANCELLED
    assert cancel.patch == {"metadata": {"annotations": {ANNOTATION_DRAINING_SINCE: None}}}
    assert ANNOTATION_DRAINING_SINCE not in patched(pools[1], cancel.patch).metadata.annotations


def test_a_merged_pool_a_person_created_is_never_scaled_drained_or_deleted():
    mine = pool("mine", merged={"adapter": "hot"}, replicas={"min": 3, "max": 4})
    # labels copied by hand, but no controller reference from the adapter: still theirs
    lookalike = pool("lookalike", merged={"adapter": "hot"})
    lookalike.metadata.labels.update({LABEL_MERGED_FROM: "pool", LABEL_MERGED_ADAPTER: "hot"})
    lookalike.metadata.labels["app.kubernetes.io/managed-by"] = "lorafleet-operator"
    assert not auto_created(mine)
    assert not auto_created(lookalike)
    s = snap(1000.0, SHARED, mine, lookalike)
    plan = plan_fleet(s, T0, PARAMS)
    later = T0
    for tps in (100.0, 100.0, 100.0):  # long after any cool-down and drain
        later += timedelta(hours=2)
        s = step(s, plan, tps, list(s.pools))
        plan = plan_fleet(s, later, PARAMS)
        assert plan.pool_changes == []
    c = find(plan.adapter_status["hot"].conditions, R.MERGED_POOL_RECOMMENDED)
    assert c is not None
    assert c.status == ConditionStatus.FALSE


def test_replica_floor_moves_up_at_once_and_down_with_hysteresis():
    # Each merged replica is planned at 2/3 of 640 = 426.7 tokens/s.
    assert replicas_for(2000, 1, 640, 8) == 5  # ceil(2000 / 426.7)
    assert replicas_for(1900, 5, 640, 8) == 5  # 4 would run at 111%: keep 5
    assert replicas_for(1500, 5, 640, 8) == 5  # 4 at 80% of the target carry 1,365: keep 5
    assert replicas_for(1300, 5, 640, 8) == 4  # fits 4 at 80% of the target
    assert replicas_for(9000, 4, 640, 8) == 8  # never above max
    assert replicas_for(0, 4, 640, 8) == 1  # never below one replica


def test_internal_secret_copies_the_callers_token_or_holds_none_in_token_review_mode():
    merged = ReplicaPool.model_validate(created_world()[1].pools_to_create[0])
    shared_token = plan_internal_secret(merged, "uid-pool", "secret", "tok", "fresh-key", "dtok")
    assert shared_token.body is not None
    body = shared_token.body
    assert body["metadata"]["name"] == "hot-merged-internal"
    assert body["stringData"] == {
        "vllm-api-key": "fresh-key",
        "agent-token": "tok",
        "data-token": "dtok",
    }
    [ref] = body["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        "ReplicaPool",
        "hot-merged",
        "uid-pool",
        True,
    )
    review = plan_internal_secret(merged, "uid-pool", "tokenReview", None, "fresh-key", "dtok")
    assert review.body is not None
    # No agents' token in tokenReview mode; the data port's shared token in every mode.
    assert review.body["stringData"] == {"vllm-api-key": "fresh-key", "data-token": "dtok"}
    missing = plan_internal_secret(merged, "uid-pool", "secret", None, "fresh-key", "dtok")
    assert missing.body is None
    assert missing.missing is not None
    assert "hot-merged-internal" in missing.missing
    no_data = plan_internal_secret(merged, "uid-pool", "tokenReview", None, "fresh-key")
    assert no_data.body is None
    assert no_data.missing is not None
    assert "REPLICA_DATA_TOKEN" in no_data.missing


def test_draining_since_is_read_as_a_time_and_a_bad_value_restarts_the_drain():
    _s, _plan, pools = created_world()
    bad = patched(pools[1], {"metadata": {"annotations": {ANNOTATION_DRAINING_SINCE: "soon"}}})
    s = snap(50.0, SHARED, bad)
    first = plan_fleet(s, T0, PARAMS)  # no condition yet: an adapter that never crossed it
    assert first.pool_changes == []
    seeded = dataclasses.replace(
        applied(snap(1000.0, SHARED, bad), plan_fleet(snap(1000.0, SHARED, bad), T0, PARAMS)),
        states=hot_states(50.0),
    )
    now = T0 + timedelta(minutes=2)
    fell = plan_fleet(seeded, now, PARAMS)
    [restart] = [c for c in fell.pool_changes if c.reason == R.MERGED_POOL_DRAINING]
    assert restart.patch is not None
    assert (
        datetime.fromisoformat(restart.patch["metadata"]["annotations"][ANNOTATION_DRAINING_SINCE])
        == now
    )


def deleting(s: FleetSnapshot, name: str = "hot") -> FleetSnapshot:
    """`s` with `kubectl delete lora <name>` issued (its finalizer holds it)."""
    return dataclasses.replace(
        s,
        adapters=[
            dataclasses.replace(e, deleting=True) if e.name == name else e for e in s.adapters
        ],
    )


def blocked(plan: FleetPlan, name: str = "hot"):
    return find(plan.adapter_status[name].conditions, R.DELETION_BLOCKED)


def test_deleting_an_adapter_a_persons_merged_pool_serves_waits_for_that_pool():
    mine = pool("mine-merged", merged={"adapter": "hot"})
    s = deleting(snap(100.0, SHARED, mine))
    plan = plan_fleet(s, T0, PARAMS)
    c = blocked(plan)
    assert c is not None
    assert (c.status, c.reason) == (ConditionStatus.TRUE, R.IN_USE_BY_MERGED_POOL)
    assert "ReplicaPool mine-merged serves it merged" in c.message
    assert plan.blocked_by_pools == {"hot": ["mine-merged"]}
    assert plan.adapter_status["hot"].owners  # still placed and served meanwhile
    assert plan.pool_changes == []  # a person's pool is never drained or deleted here
    # The person deletes the pool: nothing holds the adapter, it leaves placement.
    plan = plan_fleet(dataclasses.replace(s, pools=[SHARED]), T0, PARAMS)
    assert "hot" not in plan.adapter_status
    assert plan.blocked_by_pools == {}


def test_an_alias_and_a_merged_pool_both_name_the_blockers_aliases_first():
    mine = pool("mine-merged", merged={"adapter": "hot"})
    plain = snap(100.0, SHARED, mine)
    alias = AdapterAlias.model_validate(alias_body("hot-prod", "acme/hot:prod", "hot"))
    plan = plan_fleet(deleting(dataclasses.replace(plain, aliases=[alias])), T0, PARAMS)
    c = blocked(plan)
    assert c is not None
    assert c.reason == R.REFERENCED_BY_ALIAS
    assert "repoint: hot-prod" in c.message
    assert "mine-merged" in c.message


def test_a_hot_adapter_held_only_by_an_alias_gets_no_merged_pool_while_it_is_deleted():
    alias = AdapterAlias.model_validate(alias_body("hot-prod", "acme/hot:prod", "hot"))
    hot = dataclasses.replace(snap(1000.0, SHARED), aliases=[alias])
    assert plan_fleet(hot, T0, PARAMS).pools_to_create  # not deleting: one is created
    plan = plan_fleet(deleting(hot), T0, PARAMS)
    assert plan.pools_to_create == []
    assert plan.blocked_deletions == {"hot": ["hot-prod"]}


def test_deleting_the_adapter_of_an_auto_merged_pool_drains_it_at_once_then_deletes_both():
    s, plan, pools = created_world()
    s = deleting(step(s, plan, 1000.0, pools))  # still hot: traffic alone would keep it
    t1 = T0 + timedelta(minutes=1)
    plan = plan_fleet(s, t1, PARAMS)
    c = blocked(plan)
    assert c is not None
    assert c.reason == R.IN_USE_BY_MERGED_POOL
    assert "hot-merged" in c.message
    [drain] = plan.pool_changes
    assert (drain.pool, drain.reason) == ("hot-merged", R.MERGED_POOL_DRAINING)
    assert drain.patch == {"metadata": {"annotations": {ANNOTATION_DRAINING_SINCE: t1.isoformat()}}}
    assert "hot is being deleted" in drain.message
    pools = apply_changes(pools, plan)
    s = deleting(step(s, plan, 1000.0, pools))
    assert plan_fleet(s, t1 + timedelta(seconds=DRAIN - 1), PARAMS).pool_changes == []
    plan = plan_fleet(s, t1 + timedelta(seconds=DRAIN), PARAMS)
    assert changes(plan) == [("hot-merged", R.MERGED_POOL_DELETED)]
    assert blocked(plan) is not None  # until the pool is gone from the world
    pools = apply_changes(pools, plan)
    plan = plan_fleet(deleting(step(s, plan, 1000.0, pools)), t1 + timedelta(seconds=DRAIN), PARAMS)
    assert "hot" not in plan.adapter_status  # released: the finalizer may go
    assert plan.pools_to_create == []  # a deleting adapter gets no new merged pool
