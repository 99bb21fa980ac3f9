"""ReplicaPool: the autoscaler's decision and the pool's whole status, as pure functions."""

from __future__ import annotations

from lorafleet_core.api import reasons
from lorafleet_core.api.models import ConditionStatus, ReplicaPoolStatus
from lorafleet_core.planning.autoscale import ScaleState
from lorafleet_core.planning.conditions import find
from lorafleet_core.planning.pool_status import PoolObservation, plan_pool_status, plan_scale
from lorafleet_core.wire.replica_state import ReplicaState
from tests.operator.factories import T0, pool

SCALING = {"targetTokensInFlight": 1000, "targetQueueDepth": 4}


def busy(n: int, tokens: int) -> dict[str, ReplicaState]:
    return {f"r{i}": ReplicaState(replica_id=f"r{i}", tokens_in_flight=tokens) for i in range(n)}


def test_no_metrics_holds_the_current_count():
    p = pool(replicas={"min": 1, "max": 8}, autoscaling=SCALING)
    plan = plan_scale(p, 3, {}, ScaleState(), now_monotonic=0.0)
    assert (plan.desired, plan.reason) == (3, reasons.NO_METRICS)


def test_disabled_autoscaling_runs_the_desired_count_within_bounds():
    p = pool(replicas={"min": 2, "max": 4, "desired": 9}, autoscaling={"enabled": False})
    plan = plan_scale(p, 3, busy(3, 10**6), ScaleState(), now_monotonic=0.0)
    assert (plan.desired, plan.reason) == (4, reasons.AUTOSCALING_DISABLED)


def test_load_scales_up_at_once_when_the_window_allows():
    p = pool(
        replicas={"min": 1, "max": 8},
        autoscaling={**SCALING, "scaleUpStabilizationSeconds": 0},
    )
    plan = plan_scale(p, 2, busy(2, 2500), ScaleState(), now_monotonic=0.0)
    assert plan.recommended == 5
    assert plan.desired == 5
    assert plan.load.tokens_in_flight == 5000


def test_status_carries_counts_decision_and_selector():
    p = pool("main", replicas={"min": 1, "max": 8}, autoscaling=SCALING)
    scale = plan_scale(p, 3, {}, ScaleState(), now_monotonic=0.0)
    seen = PoolObservation(pods=3, ready=2, current=3, scale=scale)
    st = plan_pool_status("main", ReplicaPoolStatus(), p, seen, T0)
    assert (st.replicas, st.ready_replicas, st.desired_replicas) == (3, 2, 3)
    assert st.selector is not None
    assert "lorafleet.dev/pool=main" in st.selector
    ready = find(st.conditions, reasons.READY)
    assert ready is not None
    assert (ready.status, ready.reason) == (ConditionStatus.TRUE, reasons.REPLICAS_READY)
    scaling = find(st.conditions, reasons.SCALING)
    assert scaling is not None
    assert scaling.reason == reasons.NO_METRICS


def test_an_invalid_spec_is_reported_and_the_last_counts_are_kept():
    p = pool("main")
    seen = PoolObservation(pods=2, ready=2, current=2, scale=plan_scale(p, 2, {}, ScaleState()))
    good = plan_pool_status("main", ReplicaPoolStatus(), p, seen, T0)
    bad = plan_pool_status(
        "main", good, None, PoolObservation(), T0, invalid="replicas.min > max", generation=4
    )
    ready = find(bad.conditions, reasons.READY)
    assert ready is not None
    assert (ready.status, ready.reason) == (ConditionStatus.FALSE, reasons.INVALID_SPEC)
    assert ready.message == "replicas.min > max"
    assert (bad.replicas, bad.ready_replicas) == (2, 2)  # what still runs, until fixed
    assert bad.observed_generation == 4
    # Fixed: the same function writes the whole status again; nothing else overwrites it.
    again = plan_pool_status("main", bad, p, seen, T0)
    fixed = find(again.conditions, reasons.READY)
    assert fixed is not None
    assert fixed.reason == reasons.REPLICAS_READY


def test_replanning_an_unchanged_pool_changes_nothing():
    p = pool("main")
    seen = PoolObservation(pods=2, ready=1, current=2, scale=plan_scale(p, 2, {}, ScaleState()))
    first = plan_pool_status("main", ReplicaPoolStatus(), p, seen, T0)
    assert plan_pool_status("main", first, p, seen, T0) == first
