"""Router: owner choice, residency, spill, retry order (pure)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lorafleet_core.planning.placement import owners, ranked
from lorafleet_gateway.router import POLICIES, ReplicaView, Thresholds, plan_route

R = [f"r{i}" for i in range(6)]
T = Thresholds(max_tokens_in_flight=1000, max_queue_depth=10)
A = "acme-support-v1"


def views(**tokens: int) -> dict[str, ReplicaView]:
    return {r: ReplicaView(tokens_in_flight=tokens.get(r, 0)) for r in R}


def test_least_loaded_owner_without_residency():
    own = owners(A, R, 2)
    v = views(**{own[0]: 500, own[1]: 100})
    plan = plan_route(A, v, 2, T)
    assert plan.outcome == "owner"
    assert plan.candidates[0] == own[1]
    assert plan.candidates[1] == own[0]
    assert set(plan.owners) == set(own)


def test_resident_owner_wins_even_if_busier():
    own = owners(A, R, 2)
    v = views(**{own[0]: 100, own[1]: 900})
    v[own[1]] = ReplicaView(900, 0, frozenset({A}))
    plan = plan_route(A, v, 2, T)
    assert (plan.candidates[0], plan.outcome) == (own[1], "owner_resident")


def test_resident_owner_over_threshold_is_skipped():
    own = owners(A, R, 2)
    v = views(**{own[0]: 100})
    v[own[1]] = ReplicaView(1001, 0, frozenset({A}))
    plan = plan_route(A, v, 2, T)
    assert (plan.candidates[0], plan.outcome) == (own[0], "owner")
    # queue depth counts too
    v[own[1]] = ReplicaView(0, 11, frozenset({A}))
    assert plan_route(A, v, 2, T).candidates[0] == own[0]


def test_all_owners_overloaded_spill_to_next_replica_in_rendezvous_order():
    order = ranked(A, R)
    own, others = order[:2], order[2:]
    # the first non-owner in rendezvous order is busier than the last, and still chosen: the
    # adapter's spills keep landing on one replica, which then has it cached
    v = views(**{own[0]: 5000, own[1]: 5000, others[0]: 300, others[-1]: 0})
    plan = plan_route(A, v, 2, T)
    assert (plan.candidates[0], plan.outcome) == (others[0], "spill")
    # retry order: other non-overloaded replicas in spill order, overloaded owners last
    assert list(plan.candidates[: len(others)]) == others
    assert list(plan.candidates[-2:]) == own
    assert len(plan.candidates) == len(R)


def test_spill_prefers_a_non_owner_holding_the_adapter_in_a_gpu_slot():
    order = ranked(A, R)
    own, others = order[:2], order[2:]
    v = views(**{own[0]: 5000, own[1]: 5000})
    v[others[2]] = ReplicaView(100, 0, frozenset({A}))
    assert plan_route(A, v, 2, T).candidates[0] == others[2]


def test_least_loaded_spill_rule_is_still_available():
    t = Thresholds(max_tokens_in_flight=1000, max_queue_depth=10, spill="least_loaded")
    order = ranked(A, R)
    own, others = order[:2], order[2:]
    v = views(**{own[0]: 5000, own[1]: 5000, **dict.fromkeys(others, 300)})
    v[others[-1]] = ReplicaView(0)
    assert plan_route(A, v, 2, t).candidates[0] == others[-1]


def test_long_prompts_over_the_fixed_threshold_everywhere_still_route_to_owners():
    # every replica above max_tokens_in_flight (trace prompts are long): bounded load compares
    # with the fleet mean, so the owner is chosen instead of least-loaded-of-all
    own = owners(A, R, 2)
    v = {r: ReplicaView(3000 + 10 * i) for i, r in enumerate(R)}
    plan = plan_route(A, v, 2, T)
    assert plan.outcome in ("owner", "owner_resident")
    assert plan.candidates[0] in own
    absolute = Thresholds(max_tokens_in_flight=1000, max_queue_depth=10, balance=0)
    assert plan_route(A, v, 2, absolute).outcome == "saturated"


def test_resident_owner_far_above_the_fleet_mean_yields_to_the_other_owner():
    own = owners(A, R, 2)
    v = {r: ReplicaView(2000) for r in R}
    v[own[0]] = ReplicaView(9000, 0, frozenset({A}))  # 9000 > 1.25 x mean (3167)
    plan = plan_route(A, v, 2, T)
    assert (plan.candidates[0], plan.outcome) == (own[1], "owner")


def test_least_loaded_policy_ignores_residency_among_owners_and_spills():
    t = Thresholds(max_tokens_in_flight=1000, max_queue_depth=10, policy="least_loaded")
    own = owners(A, R, 2)
    v = views(**{own[0]: 100})
    v[own[1]] = ReplicaView(900, 0, frozenset({A}))  # affinity would take this one
    assert plan_route(A, v, 2, T).candidates[0] == own[1]
    plan = plan_route(A, v, 2, t)
    assert (plan.candidates[0], plan.outcome) == (own[0], "owner")
    order = ranked(A, R)
    v = views(**{own[0]: 5000, own[1]: 5000})
    v[order[4]] = ReplicaView(100, 0, frozenset({A}))
    assert plan_route(A, v, 2, T).candidates[0] == order[4]
    assert plan_route(A, v, 2, t).candidates[0] == order[2]  # rendezvous order only


def test_random_policy_is_uniform_over_healthy_replicas_whatever_owns_or_holds():
    t = Thresholds(policy="random")
    v = views(**dict.fromkeys(owners(A, R, 2), 100000))  # owners overloaded: ignored too
    rng = random.Random(1)
    firsts = Counter(plan_route(A, v, 2, t, rng).candidates[0] for _ in range(6000))
    assert set(firsts) == set(R)
    assert all(800 < n < 1200 for n in firsts.values()), firsts
    plan = plan_route(A, v, 2, t, rng)
    assert plan.outcome == "random"
    assert sorted(plan.candidates) == sorted(R)  # the rest is the retry order
    assert plan_route(A, {}, 2, t).outcome == "none"


def test_same_seed_same_random_choices():
    t = Thresholds(policy="random")
    a, b = random.Random(5), random.Random(5)
    v = views()
    assert [plan_route(A, v, 2, t, a).candidates for _ in range(20)] == [
        plan_route(A, v, 2, t, b).candidates for _ in range(20)
    ]


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ({"policy": "round_robin"}, "routing policy must be one of affinity|least_loaded|random"),
        ({"spill": "anywhere"}, "routing spill must be one of rendezvous|least_loaded"),
        ({"balance": -0.5}, "routing balance must be 0 or more"),
        ({"balance": float("nan")}, "routing balance must be 0 or more"),
    ],
)
def test_unknown_routing_knobs_are_refused(knobs, message):
    with pytest.raises(ValueError, match=message.replace("|", r"\|")):
        Thresholds(**knobs)
    assert POLICIES == ("affinity", "least_loaded", "random")


def test_any_tier_residency_prefers_a_holder_over_a_replica_that_must_fetch():
    t = Thresholds(max_tokens_in_flight=1000, max_queue_depth=10, residency="any")
    order = ranked(A, R)
    own, others = order[:2], order[2:]
    held = frozenset({A})
    # an owner with it in RAM beats the less loaded owner without it
    v = views(**{own[0]: 100, own[1]: 500})
    v[own[1]] = ReplicaView(500, 0, frozenset(), held)
    assert plan_route(A, v, 2, t).candidates[0] == own[1]
    assert plan_route(A, v, 2, T).candidates[0] == own[0]  # gpu-only residency: load decides
    # no owner holds it: a non-owner holding it (GPU before RAM/disk) beats a cold owner
    v = views()
    v[others[3]] = ReplicaView(0, 0, frozenset(), held)
    v[others[1]] = ReplicaView(0, 0, held)
    plan = plan_route(A, v, 2, t)
    assert (plan.candidates[0], plan.outcome) == (others[1], "holder")
    v[others[1]] = ReplicaView(5000)  # overloaded holders do not count
    assert plan_route(A, v, 2, t).candidates[0] == others[3]
    # a GPU-resident owner still comes first
    v[own[0]] = ReplicaView(0, 0, held)
    assert plan_route(A, v, 2, t).outcome == "owner_resident"
    # residency="spill": owners still before non-owner holders; spills go to a holder
    spill_mode = Thresholds(max_tokens_in_flight=1000, max_queue_depth=10, residency="spill")
    v = views()
    v[others[3]] = ReplicaView(0, 0, frozenset(), held)
    assert plan_route(A, v, 2, spill_mode).outcome == "owner"
    v.update({own[0]: ReplicaView(5000), own[1]: ReplicaView(5000)})
    plan = plan_route(A, v, 2, spill_mode)
    assert (plan.candidates[0], plan.outcome) == (others[3], "spill")
    assert plan_route(A, v, 2, T).candidates[0] == others[0]  # gpu only: rendezvous order
    with pytest.raises(ValueError, match="residency must be one of gpu"):
        Thresholds(residency="ram")


def test_owner_count_from_status():
    v = views()
    assert set(plan_route(A, v, 3, T).owners) == set(owners(A, R, 3))
    assert plan_route(A, {}, 2, T).outcome == "none"


def test_ties_break_in_rendezvous_order():
    plan = plan_route(A, views(), 2, T)
    assert list(plan.candidates) == ranked(A, R)


@given(
    loads=st.lists(st.integers(0, 3000), min_size=1, max_size=8),
    k=st.integers(1, 4),
    resident=st.sets(st.integers(0, 7)),
)
def test_properties(loads, k, resident):
    reps = [f"r{i}" for i in range(len(loads))]
    v = {
        r: ReplicaView(load, 0, frozenset({A}) if i in resident else frozenset())
        for i, (r, load) in enumerate(zip(reps, loads, strict=True))
    }
    plan = plan_route(A, v, k, T)
    # every replica appears exactly once
    assert sorted(plan.candidates) == sorted(reps)
    own = owners(A, reps, k)
    cap = T.token_cap(v)
    assert cap >= T.max_tokens_in_flight
    ok_owners = [r for r in own if not T.overloaded(v[r], cap)]
    if ok_owners:
        assert plan.candidates[0] in own
    elif any(not T.overloaded(x, cap) for x in v.values()):
        assert plan.outcome == "spill"
        assert not T.overloaded(v[plan.candidates[0]], cap)
    else:
        assert plan.outcome == "saturated"
        assert v[plan.candidates[0]].tokens_in_flight == min(loads)
