"""An undersized merged pool in the simulator: the shipped pool router's merged bounds spill
its overflow to the shared pool's owners, and the scenario that measured them runs."""

from __future__ import annotations

from dataclasses import replace

from lorafleet_sim import merged_overflow
from lorafleet_sim.engine import Engine, FleetEvent
from lorafleet_sim.params import FleetParams, ReplicaParams
from lorafleet_sim.report import summarize
from lorafleet_sim.scenarios import Inputs
from lorafleet_sim.workload import Workload

RP = ReplicaParams()
# 3 shared replicas beside 1 merged one; no pre-warm: a spill's first request loads remotely.
FP = FleetParams(replicas=3, gateways=1, prewarm=False, merged_replicas=1, merged_adapter="hot")


def hot_requests(per_s: float, seconds: float = 60.0) -> Workload:
    """The hot adapter alone, 1,000-token prompts, 50-349 output tokens (spread, so that the
    merged replica's sequences do not all end in the same step)."""
    w = Workload(names=("hot",), label="hand-made")
    for i in range(int(per_s * seconds)):
        w.at.append(i / per_s)
        w.prompt.append(1000)
        w.output.append(50 + (i * 37) % 300)
        w.adapter.append(0)
    return w


def test_an_undersized_merged_pool_spills_its_overflow_and_keeps_the_slo():
    # 8 requests/s: twice what one merged replica decodes (32 sequences of ~8 s)
    w = hot_requests(8.0)
    s = summarize("shipped", Engine(w, RP, FP).run(), 10.0, hot="hot")
    assert s["hot_adapter_p95_ms"] < 1000
    assert 30 < s["merged_fallback_pct"] < 80  # the merged replica still serves its share
    # The rule before: spill only past the shared pool's queue threshold (32): the hot tenant
    # queued on its merged replica for seconds.
    old = replace(FP, merged_max_queue_depth=32, merged_max_tokens_in_flight=0)
    before = summarize("before", Engine(w, RP, old).run(), 10.0, hot="hot")
    assert before["hot_merged_p95_ms"] > 5000


def test_a_merged_pool_within_its_capacity_keeps_every_request():
    w = hot_requests(2.0)
    s = summarize("x", Engine(w, RP, FP).run(), 10.0, hot="hot")
    assert s["merged_fallback_pct"] == 0
    assert s["hot_fallback_p95_ms"] != s["hot_fallback_p95_ms"]  # NaN: no request left
    assert s["hot_adapter_p95_ms"] == s["hot_merged_p95_ms"]


def test_a_merged_replica_down_sends_its_adapter_to_the_shared_pool_until_it_returns():
    w = hot_requests(2.0)
    # replica index 3 is merged-0 (the shared pool's come first); down from 20 s to 40 s
    eng = Engine(w, RP, FP, events=[FleetEvent(20.0, "fail", 3, down_s=20.0)]).run()
    merged = eng.replicas[3]
    assert merged.merged == "hot"
    on = [i for i in range(len(w)) if eng.replica_of[i] == merged.index]
    down = [i for i in range(len(w)) if 21.0 < w.at[i] < 40.0]
    assert down
    assert not set(down) & set(on)
    assert [i for i in on if w.at[i] > 42.0]  # back after the poll that sees it again


def test_the_merged_overflow_scenario_compares_pool_sizes_on_the_same_requests():
    inputs = Inputs(duration_s=60.0, warmup_s=10.0, adapters=200)
    runs = merged_overflow.runs(inputs)
    assert [r.fleet.merged_replicas for r in runs] == [0, 5, 4, 3, 2, 5]
    assert all(r.workload is runs[0].workload and r.hot == "hot-tenant" for r in runs)
    assert all(r.fleet.replicas == merged_overflow.SHARED for r in runs)
    (fail,) = runs[-1].events
    assert (fail.kind, fail.index, fail.down_s) == ("fail", merged_overflow.SHARED, 300.0)
    one = runs[2]
    s = summarize(one.name, Engine(one.workload, one.replica, one.fleet).run(), 10.0, hot=one.hot)
    table = merged_overflow.table([s])
    assert one.name in table
    assert f"{s['merged_fallback_pct']:.1f}%" in table
