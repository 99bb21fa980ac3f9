"""Small fleets whose answers can be worked out by hand, and determinism per seed."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from lorafleet_sim.engine import Engine, FleetEvent
from lorafleet_sim.params import FleetParams, ReplicaParams
from lorafleet_sim.replica import Replica
from lorafleet_sim.report import summarize
from lorafleet_sim.workload import Mix, build
from tests.sim.hand_made import requests

RP = ReplicaParams()
ONE = FleetParams(replicas=1, owners_per_adapter=1, gateways=1, prewarm=False)


def ttfts(eng: Engine) -> list[float]:
    return [f - a for f, a in zip(eng.first_token, eng.arrival, strict=True)]


def test_one_replica_one_adapter_ttft_is_load_plus_prefill():
    # 1,000 prompt tokens fit one step: 1000 / 8000 = 0.125 s (> 50 ms decode step).
    w = requests((0.0, 1000, 4, 0), (5.0, 1000, 4, 0))
    eng = Engine(w, RP, ONE).run()
    first, second = ttfts(eng)
    assert first == pytest.approx(RP.remote_s + 0.125)  # cold: from the object store
    assert second == pytest.approx(0.125)  # now in a GPU slot
    assert eng.tier == [3, 0]
    # 3 more tokens after the first, one decode step each
    assert eng.finish_time[1] - eng.first_token[1] == pytest.approx(3 * RP.decode_s)


def test_long_prompt_is_chunked_across_steps():
    w = requests((0.0, 5000, 2, 0))
    eng = Engine(w, RP, ONE).run()
    # 2048 + 2048 + 904 tokens: two full steps of 0.256 s and one of 0.113 s
    assert ttfts(eng)[0] == pytest.approx(RP.remote_s + 5000 / RP.prefill_tps)


def test_requests_queue_when_every_sequence_is_busy():
    rp = replace(RP, max_seqs=1)
    w = requests((0.0, 400, 10, 0), (0.0, 400, 10, 0))
    eng = Engine(w, rp, ONE).run()
    a, b = ttfts(eng)
    # the second waits for the first to finish: its 9 decode steps after the first token
    assert b - a == pytest.approx(9 * RP.decode_s + RP.decode_s)


def test_concurrent_remote_loads_share_the_object_store_link():
    w = requests((0.0, 100, 1, 0), (0.0, 100, 1, 1))
    eng = Engine(w, RP, ONE).run()
    a, b = sorted(ttfts(eng))
    assert a == pytest.approx(RP.remote_s + RP.decode_s)
    assert b == pytest.approx(2 * RP.remote_s + RP.decode_s)


def test_load_waits_for_a_ram_slot_while_every_registered_adapter_runs():
    rp = replace(RP, ram_slots=1, gpu_slots=1)
    w = requests((0.0, 100, 40, 0), (0.1, 100, 1, 1))
    eng = Engine(w, rp, ONE).run()
    # b's adapter is fetched by 0.5 s but can only be registered once a's request ends
    assert eng.first_token[1] > eng.finish_time[0]
    assert eng.replicas[0].evictions == 1


def test_thrash_evicts_and_the_alert_fires():
    # 400 adapters spread evenly over 2 replicas with 16 GPU / 40 RAM slots each
    rp = replace(RP, gpu_slots=16, ram_slots=40)
    w = build(mix=Mix.zipf(400, 0.6), rate=2, duration_s=700, seed=2)
    s = summarize("thrash", Engine(w, rp, FleetParams(replicas=2)).run())
    assert s["evictions_per_min_per_replica"] > 30
    assert s["eviction_alert_fires"] is True
    assert s["gpu_hit_pct"] < 50


def test_same_seed_same_figures_other_seed_other_figures():
    def figures(seed: int) -> str:
        w = build(mix=Mix.zipf(300, 1.0), rate=10, duration_s=120, seed=seed)
        s = summarize("x", Engine(w, RP, FleetParams(replicas=4), seed=seed).run())
        return json.dumps(s.figures, sort_keys=True)  # NaN-safe comparison

    assert figures(3) == figures(3)
    assert figures(3) != figures(4)


def test_failed_replica_loses_its_requests_and_returns_cold():
    w = build(mix=Mix.zipf(50, 1.0), rate=10, duration_s=120, seed=1)
    fail = [FleetEvent(30.0, "fail", 0)]
    eng = Engine(w, RP, FleetParams(replicas=3), events=fail).run()
    s = summarize("fail", eng)
    assert s["failed"] > 0
    r0 = eng.replicas[0]
    assert r0.alive  # recreated after base start + warm-up
    served_later = [i for i, r in enumerate(eng.replica_of) if r == 0 and eng.arrival[i] > 60]
    assert served_later
    assert all(not math.isnan(eng.finish_time[i]) for i in served_later)


def test_autoscaler_adds_replicas_when_load_ramps():
    w = build(mix=Mix.zipf(50, 1.0), rate=12, duration_s=240, seed=1, rate_at=[(60.0, 1.0)])
    fp = FleetParams(replicas=2, autoscale=True, min_replicas=2, scale_up_window_s=10)
    eng = Engine(w, RP, fp).run()
    assert max(p["provisioned"] for p in eng.timeline) > 2
    assert any(reason == "ScaleUp" for _, _, reason in eng.scale_events)


def test_decode_stretches_as_one_event_match_the_step_by_step_loop(monkeypatch):
    w = build(mix=Mix.zipf(200, 1.0), rate=6, duration_s=300, seed=5)
    fast = Engine(w, RP, FleetParams(replicas=3)).run()
    monkeypatch.setattr(Replica, "batch_decode_steps", False)
    slow = Engine(w, RP, FleetParams(replicas=3)).run()
    assert fast.tier == slow.tier
    assert fast.replica_of == slow.replica_of
    assert fast.first_token == pytest.approx(slow.first_token, abs=1e-6)
    assert fast.finish_time == pytest.approx(slow.finish_time, abs=1e-6)
    busy = [r.busy_seq_s for r in fast.replicas]
    assert busy == pytest.approx([r.busy_seq_s for r in slow.replicas], rel=1e-6)


def test_a_joining_replica_serves_only_after_its_prewarm_pass_or_the_timeout():
    from lorafleet_core.planning.placement import owners

    w = build(mix=Mix.zipf(200, 1.0), rate=10, duration_s=200, seed=1)
    joined = 30.0 + RP.base_start_s + RP.warmup_s  # the add event, then base start + warm-up

    def run(gate_s: float) -> tuple[float, int]:
        fp = FleetParams(replicas=3, prewarm_gate_s=gate_s)
        eng = Engine(w, RP, fp, events=[FleetEvent(30.0, "add")]).run()
        members = tuple(r.id for r in eng.replicas)
        mine = [i for i, r in enumerate(eng.replica_of) if r == 3]
        owned = [i for i in mine if "replica-3" in owners(eng.names[eng.adapter_of[i]], members, 2)]
        first = min(eng.arrival[i] for i in mine)
        return first - joined, sum(eng.tier[i] == 3 for i in owned)  # 3: remote

    ungated_wait, ungated_remote = run(0.0)
    gated_wait, gated_remote = run(180.0)
    bounded_wait, _ = run(5.0)
    assert ungated_wait < 1.0  # served while pre-warming: it fetches what it owns
    assert ungated_remote > 0
    # ~100 owned adapters at 0.4 s each: the pass takes tens of seconds; none fetched after
    assert gated_wait > 20.0
    assert gated_remote == 0
    assert 5.0 <= bounded_wait < 6.0  # the timeout bounds the wait


def test_a_joining_replica_prewarms_its_hottest_owned_adapters_first():
    from lorafleet_core.planning.placement import owners

    # RAM for 5 of the ~70 adapters the newcomer owns (the pass pulls the rest to disk):
    # which 5 decides how many of its owned requests load from disk or the object store.
    # Zipf names rank r `adapter-r`, so id order would be hottest first by accident:
    # reversed names make it the coldest first, as arbitrary real ids can be.
    w = build(mix=Mix.zipf(200, 1.0), rate=10, duration_s=300, seed=1)
    w.names = tuple(reversed(w.names))
    rp = replace(RP, ram_slots=5)

    def owner_loads(by_traffic: bool) -> int:
        fp = FleetParams(replicas=3, prewarm_by_traffic=by_traffic)
        eng = Engine(w, rp, fp, events=[FleetEvent(60.0, "add")]).run()  # after 2 operator passes
        members = tuple(r.id for r in eng.replicas)
        mine = [i for i, r in enumerate(eng.replica_of) if r == 3]
        owned = [i for i in mine if "replica-3" in owners(eng.names[eng.adapter_of[i]], members, 2)]
        return sum(eng.tier[i] >= 2 for i in owned)  # 2, 3: disk, remote

    assert owner_loads(True) < owner_loads(False)


def test_prewarm_next_hot_loads_the_hottest_adapter_on_its_next_rendezvous_replica():
    from collections import Counter

    from lorafleet_core.planning.placement import owners

    w = build(mix=Mix.zipf(50, 1.0), rate=3, duration_s=120, seed=2)
    hottest = w.names[Counter(w.adapter).most_common(1)[0][0]]

    def next_replica_holds(n_hot: int) -> bool:
        fp = FleetParams(replicas=5, prewarm=False, operator_interval_s=20, prewarm_next_hot=n_hot)
        fp = replace(fp, max_tokens_in_flight=10**9, max_queue_depth=10**6)  # never a spill
        eng = Engine(w, RP, fp).run()
        members = tuple(r.id for r in eng.replicas)
        k = eng.k.get(hottest, fp.owners_per_adapter)
        nxt = owners(hottest, members, k + 1)[k]
        return eng._by_id[nxt].cache.slots.is_registered(hottest)

    assert next_replica_holds(1)
    assert not next_replica_holds(0)
