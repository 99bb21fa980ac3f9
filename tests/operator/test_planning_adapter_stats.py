"""Adapter statistics: summed across replicas, written at most once a minute, only on change."""

from __future__ import annotations

import dataclasses
import random
from datetime import timedelta

from lorafleet_core.planning.adapter_stats import IDLE, Measured, aggregate, plan_stats
from lorafleet_core.planning.fleet import FleetParams, FleetSnapshot, plan_fleet
from lorafleet_core.wire.replica_state import AdapterActivity, ReplicaState
from tests.operator.factories import T0, entry, pod_views, pool


def state(rid: str, **adapters: AdapterActivity) -> ReplicaState:
    tps = {a: v.tokens_per_second for a, v in adapters.items()}
    return ReplicaState(replica_id=rid, adapters=adapters, tokens_per_second=tps)


def test_aggregate_adds_counts_across_replicas_and_derives_the_hit_rate():
    states = {
        "r0": state("r0", hot=AdapterActivity(requests=30, gpu_hits=30, tokens_per_second=900)),
        "r1": state("r1", hot=AdapterActivity(requests=10, gpu_hits=0, tokens_per_second=100)),
    }
    hot = aggregate(states)["hot"]
    assert (hot.requests, hot.gpu_hits, hot.replicas) == (40, 30, 2)
    assert hot.tokens_per_second == 1000
    assert hot.gpu_hit_rate == 0.75


def test_first_figure_is_written_at_once_and_idle_adapters_get_none():
    stats = plan_stats(None, Measured(12, 6, 50.0, 1), T0)
    assert stats is not None
    assert (stats.requests_per_minute, stats.gpu_hit_rate, stats.updated_at) == (12, 0.5, T0)
    assert plan_stats(None, IDLE, T0) is None


def test_within_a_minute_even_a_large_change_is_held_back():
    old = plan_stats(None, Measured(10, 10, 50.0, 1), T0)
    later = T0 + timedelta(seconds=59)
    assert plan_stats(old, Measured(500, 0, 5000.0, 4), later) is old


def test_after_a_minute_only_a_meaningful_change_is_written():
    old = plan_stats(None, Measured(100, 90, 400.0, 2), T0)
    later = T0 + timedelta(minutes=2)
    assert plan_stats(old, Measured(110, 95, 440.0, 2), later) is old  # +10%: noise
    new = plan_stats(old, Measured(200, 180, 800.0, 3), later)
    assert new is not None
    assert new is not old
    assert (new.tokens_per_second, new.updated_at) == (800.0, later)
    hit_rate_moved = plan_stats(old, Measured(100, 50, 400.0, 2), later)  # 0.9 -> 0.5
    assert hit_rate_moved is not None
    assert hit_rate_moved.gpu_hit_rate == 0.5


def test_an_adapter_that_goes_idle_gets_zeros_once_then_no_more_writes():
    old = plan_stats(None, Measured(100, 90, 400.0, 2), T0)
    idle = plan_stats(old, IDLE, T0 + timedelta(minutes=1))
    assert idle is not None
    assert (idle.requests_per_minute, idle.tokens_per_second, idle.gpu_hit_rate) == (0, 0, None)
    assert plan_stats(idle, IDLE, T0 + timedelta(minutes=5)) is idle


def test_no_state_at_all_keeps_what_was_written():
    old = plan_stats(None, Measured(100, 90, 400.0, 2), T0)
    assert plan_stats(old, None, T0 + timedelta(hours=1)) is old


def test_steady_noisy_traffic_writes_once_over_ten_minutes_of_passes():
    rng = random.Random(7)
    stats, writes = None, 0
    for second in range(600):  # one sync pass per second
        noise = 1 + rng.uniform(-0.1, 0.1)
        measured = Measured(round(120 * noise), round(100 * noise), 400.0 * noise, 2)
        new = plan_stats(stats, measured, T0 + timedelta(seconds=second))
        writes += new is not stats
        stats = new
    assert writes == 1


def test_fleet_plan_puts_stats_in_the_status_and_hot_traffic_raises_owners():
    hot = AdapterActivity(requests=600, gpu_hits=540, tokens_per_second=1500)
    states = {
        "pool-0": state("pool-0", hot=hot),
        "pool-1": state("pool-1", hot=hot),
    }
    snap = FleetSnapshot(
        pools=[pool()],
        adapters=[entry("hot"), entry("cold")],
        aliases=[],
        pods=pod_views("pool", 8),
        states=states,
    )
    plan = plan_fleet(snap, T0, FleetParams(replica_capacity_tps=2000, hot_share=0.5))
    st = plan.adapter_status["hot"]
    assert st.stats is not None
    assert (st.stats.requests_per_minute, st.stats.tokens_per_second) == (1200, 3000.0)
    assert st.stats.gpu_hit_rate == 0.9
    assert st.owner_count == 3  # 3000 tok/s over 1000 per owner
    assert plan.adapter_status["cold"].stats is None
    # Re-planning a moment later with the same traffic changes nothing (no write).
    applied = dataclasses.replace(
        snap,
        adapters=[
            dataclasses.replace(e, status=plan.adapter_status[e.name]) for e in snap.adapters
        ],
    )
    again = plan_fleet(applied, T0 + timedelta(seconds=5), FleetParams(2000, 0.5))
    assert again.adapter_status["hot"].stats == st.stats


def test_placements_list_owners_then_spills_by_tier_and_refresh_only_when_asked():
    from lorafleet_core.api.models.adapter import MAX_PLACEMENTS
    from lorafleet_core.planning.adapter_stats import plan_placements

    states = {
        "r0": ReplicaState(replica_id="r0", disk_adapters=["a"]),
        "r1": ReplicaState(
            replica_id="r1", gpu_adapters=["a"], adapters={"a": AdapterActivity(requests=3)}
        ),
        "r2": ReplicaState(replica_id="r2", ram_adapters=["a"]),
        "r3": ReplicaState(replica_id="r3"),
    }
    got = plan_placements("a", [], ["r0", "r3"], states, T0, refresh=True)
    assert [(p.replica, p.role, p.tier) for p in got] == [
        ("r0", "owner", "disk"),
        ("r3", "owner", "remote"),
        ("r1", "spill", "gpu"),
        ("r2", "spill", "ram"),
    ]
    assert [p.last_used for p in got] == [None, None, T0, None]
    later = T0 + timedelta(minutes=3)
    moved = {**states, "r1": ReplicaState(replica_id="r1", disk_adapters=["a"])}
    assert plan_placements("a", got, ["r0", "r3"], moved, later, refresh=False) == got
    again = plan_placements("a", got, ["r0", "r3"], moved, later, refresh=True)
    r1 = next(p for p in again if p.replica == "r1")
    assert (r1.tier, r1.last_used) == ("disk", T0)  # last use remembered
    many = {
        f"r{i:03d}": ReplicaState(replica_id=f"r{i:03d}", disk_adapters=["a"]) for i in range(99)
    }
    assert len(plan_placements("a", [], [], many, T0, refresh=True)) == MAX_PLACEMENTS


def test_fleet_plan_writes_placements_with_the_stats_not_on_every_tier_change():
    hot = AdapterActivity(requests=60, gpu_hits=60, tokens_per_second=100)
    states = {f"pool-{i}": ReplicaState(replica_id=f"pool-{i}") for i in range(3)}
    states["pool-2"] = ReplicaState(replica_id="pool-2", gpu_adapters=["a"], adapters={"a": hot})
    snap = FleetSnapshot(
        pools=[pool()], adapters=[entry("a")], aliases=[], pods=pod_views("pool", 3), states=states
    )
    first = plan_fleet(snap, T0).adapter_status["a"]
    assert {p.replica for p in first.placements} >= set(first.owners)
    assert any(p.tier == "gpu" for p in first.placements)
    # The GPU copy is evicted seconds later: placements wait for the next stats refresh.
    moved = {**states, "pool-2": ReplicaState(replica_id="pool-2", adapters={"a": hot})}
    applied = dataclasses.replace(
        snap, adapters=[dataclasses.replace(snap.adapters[0], status=first)], states=moved
    )
    assert plan_fleet(applied, T0 + timedelta(seconds=5)).adapter_status["a"] == first
