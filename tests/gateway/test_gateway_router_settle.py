"""Router: join-aware bounded load (`Thresholds.settle_s`, the simulator's experiment; pure)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lorafleet_core.planning.placement import ranked
from lorafleet_gateway.router import ReplicaView, Thresholds, plan_route

R = [f"r{i}" for i in range(6)]
A = "acme-support-v1"
OFF = Thresholds(max_tokens_in_flight=100, max_queue_depth=10, balance=1.25)
SETTLE = replace(OFF, settle_s=60.0)


def fleet(loads: dict[str, int], young: set[str]) -> dict[str, ReplicaView]:
    """Replicas in `young` joined 5 s ago; the rest have served for an hour."""
    return {r: ReplicaView(loads.get(r, 0), serving_s=5.0 if r in young else 3600.0) for r in R}


def test_just_joined_empty_replicas_do_not_lower_the_cap_so_owners_keep_their_requests():
    order = ranked(A, R)
    own, others = order[:2], order[2:]
    new = set(others[:2])  # two empty newcomers, not owners of A
    loads = {own[0]: 1100, own[1]: 1150, others[2]: 500, others[3]: 1000}
    v = fleet(loads, new)
    # all six in the mean: 1.25 x 625 = 781 < 1100, both owners "overloaded" -> spill to the
    # first newcomer in rendezvous order, which must fetch A
    before = plan_route(A, v, 2, OFF)
    assert (before.candidates[0], before.outcome) == (others[0], "spill")
    # settled replicas only: 1.25 x 937 = 1171, the less loaded owner takes it
    after = plan_route(A, v, 2, SETTLE)
    assert (after.candidates[0], after.outcome) == (own[0], "owner")
    # "spill" alone keeps the all-replica cap but sends the spill to a settled replica
    spill_only = replace(OFF, settle_s=60.0, settle_rules="spill")
    plan = plan_route(A, v, 2, spill_only)
    assert (plan.candidates[0], plan.outcome) == (others[2], "spill")


def test_just_joined_replica_takes_a_spill_only_when_every_settled_replica_is_over_the_cap():
    order = ranked(A, R)
    own, others = order[:2], order[2:]
    new = {others[0]}
    v = fleet({own[0]: 5000, own[1]: 5000, others[1]: 300, others[2]: 300, others[3]: 300}, new)
    plan = plan_route(A, v, 2, SETTLE)
    # the first settled non-owner in rendezvous order, though the newcomer is idler
    assert (plan.candidates[0], plan.outcome) == (others[1], "spill")
    assert plan.candidates.index(others[0]) == 3  # after the settled spill targets
    assert plan_route(A, v, 2, OFF).candidates[0] == others[0]
    # every settled replica over the queue threshold: the newcomer rather than saturating
    v = {r: ReplicaView(5000, 11, serving_s=3600.0) for r in R}
    v[others[0]] = ReplicaView(0, 0, serving_s=5.0)
    plan = plan_route(A, v, 2, SETTLE)
    assert (plan.candidates[0], plan.outcome) == (others[0], "spill")


def test_just_joined_owner_still_serves_what_it_owns():
    own = ranked(A, R)[:2]
    v = fleet({own[1]: 500}, {own[0]})
    assert plan_route(A, v, 2, SETTLE).candidates[0] == own[0]


def test_just_joined_replica_holding_the_adapter_in_a_gpu_slot_is_a_spill_target():
    order = ranked(A, R)
    own, others = order[:2], order[2:]
    v = fleet({own[0]: 5000, own[1]: 5000}, {others[3]})
    v[others[3]] = ReplicaView(0, 0, frozenset({A}), serving_s=5.0)  # an earlier spill there
    assert plan_route(A, v, 2, SETTLE).candidates[0] == others[3]


@given(
    loads=st.lists(st.integers(0, 3000), min_size=1, max_size=8),
    ages=st.lists(st.floats(0, 100), min_size=8, max_size=8),
    settle=st.floats(0, 120),
)
def test_a_fleet_all_young_or_all_settled_routes_as_without_the_rule(loads, ages, settle):
    reps = [f"r{i}" for i in range(len(loads))]
    # all ages on one side of `settle`: a gateway that just started sees every replica as new
    same_side = [settle / 2] * len(loads) if ages[0] < 50 else [settle + a for a in ages]
    v = {
        r: ReplicaView(load, serving_s=age)
        for r, load, age in zip(reps, loads, same_side, strict=False)
    }
    with_rule = replace(OFF, settle_s=settle)
    assert plan_route(A, v, 2, with_rule) == plan_route(A, v, 2, OFF)


def test_unknown_age_is_settled_and_settle_knobs_are_checked():
    assert ReplicaView().serving_s == math.inf
    with pytest.raises(ValueError, match="settle rules must be one of cap"):
        Thresholds(settle_rules="never")
    with pytest.raises(ValueError, match="settle time must be 0 or more"):
        Thresholds(settle_s=float("nan"))
