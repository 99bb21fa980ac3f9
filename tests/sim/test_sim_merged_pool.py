"""The simulator's merged pool: the shipped pool router sends only the merged adapter there,
merged replicas decode at decode_s_merged with no loads, and the comparison sizes both fleets."""

from __future__ import annotations

import json

import pytest

from lorafleet_sim.engine import OUTCOMES, Engine
from lorafleet_sim.merged import Row, Sized, compare, meets, threshold
from lorafleet_sim.params import FleetParams, ReplicaParams
from lorafleet_sim.report import Summary, summarize
from lorafleet_sim.scenarios import Inputs
from lorafleet_sim.workload import Workload

RP = ReplicaParams()
FP = FleetParams(replicas=2, owners_per_adapter=1, gateways=1, prewarm=False)


def requests(rows: list[tuple[float, int]], names: tuple[str, ...]) -> Workload:
    w = Workload(names=names, label="hand-made")
    for at, a in rows:
        w.at.append(at)
        w.prompt.append(800)
        w.output.append(5)
        w.adapter.append(a)
    return w


def test_merged_replica_serves_only_its_adapter_without_loads_at_merged_speed():
    w = requests([(i * 2.0, i % 2) for i in range(10)], ("hot", "cold"))
    fp = FleetParams(
        replicas=2,
        owners_per_adapter=1,
        gateways=1,
        prewarm=False,
        merged_replicas=1,
        merged_adapter="hot",
    )
    eng = Engine(w, RP, fp).run()
    merged = eng.replicas[-1]
    assert merged.id == "merged-0"
    hot = [i for i in range(10) if i % 2 == 0]
    cold = [i for i in range(10) if i % 2 == 1]
    assert {eng.replica_of[i] for i in hot} == {merged.index}
    assert merged.index not in {eng.replica_of[i] for i in cold}
    assert all(eng.outcome[i] == OUTCOMES.index("merged") for i in hot)
    assert all(eng.tier[i] == 0 for i in hot)  # never loaded
    assert merged.loads == 0
    for i in hot:  # 800 prompt tokens in one 0.1 s step, then 4 merged decode steps
        assert eng.first_token[i] - eng.arrival[i] == pytest.approx(800 / RP.prefill_tps)
        assert eng.finish_time[i] - eng.first_token[i] == pytest.approx(4 * RP.decode_s_merged)


def _sized(gpus: float, hot_p95: float, merged: int = 0) -> Sized:
    return Sized(
        int(gpus),
        merged,
        [Summary("x", {"replicas_mean": gpus, "hot_adapter_p95_ms": hot_p95})],
    )


def test_threshold_is_the_lowest_rate_from_which_merged_always_wins():
    rows = [
        Row(320, _sized(26, 700), _sized(27, 650, 1)),  # one GPU more: loses
        Row(640, _sized(27, 700), _sized(27, 650, 2)),  # same GPUs, faster hot tenant: wins
        Row(1280, _sized(28, 700), _sized(26, 800, 3)),
        Row(2000, _sized(30, 700), Sized(None)),  # merged never met the SLO: loses
    ]
    assert threshold(rows) is None
    assert threshold(rows[:3]) == 640


def test_long_tail_worst_p95_is_per_replica_and_leaves_the_hot_adapter_out():
    # One replica, requests 2 s apart: each alone, TTFT = its prefill (prompt / 8,000 tok/s).
    n_hot, n_cold = 150, 120
    w = Workload(names=("hot", "cold"), label="hand-made")
    for i in range(n_hot + n_cold):
        cold = i % 2 == 1 and i < 2 * n_cold  # interleaved, then the rest of the hot ones
        w.at.append(i * 2.0)
        w.prompt.append(800 if cold else 1600)  # both one prefill step
        w.output.append(2)
        w.adapter.append(1 if cold else 0)
    assert sum(w.adapter) == n_cold
    fp = FleetParams(replicas=1, owners_per_adapter=1, gateways=1, prewarm=False)
    s = summarize("x", Engine(w, RP, fp).run())
    assert s["busiest_adapter"] == "hot"
    assert s["hot_adapter_p95_ms"] == pytest.approx(1600 / RP.prefill_tps * 1000)
    # The cold requests' first one pays a remote load; the p95 is the plain prefill.
    assert s["tail_worst_replica_p95_ms"] == pytest.approx(800 / RP.prefill_tps * 1000)
    # A named hot adapter need not be the busiest (the Zipf head outnumbers a slow hot tenant).
    named = summarize("x", Engine(w, RP, fp).run(), hot="cold")
    assert named["hot_adapter_p95_ms"] == pytest.approx(800 / RP.prefill_tps * 1000)
    assert named["tail_worst_replica_p95_ms"] == pytest.approx(1600 / RP.prefill_tps * 1000)


def test_meets_needs_the_hot_and_the_long_tail_p95_under_the_slo_on_every_seed():
    def run(hot: float, tail: float, stable: bool = True) -> Summary:
        figures = {"hot_adapter_p95_ms": hot, "tail_worst_replica_p95_ms": tail, "stable": stable}
        return Summary("x", figures)

    assert meets([run(900, 950), run(990, 800)], 1000)
    assert not meets([run(900, 950), run(1010, 800)], 1000)  # one seed's hot tenant misses
    assert not meets([run(900, 1000)], 1000)  # the long tail at the SLO is not under it
    assert not meets([run(900, 950), run(900, 950, stable=False)], 1000)  # one seed fell behind


TINY = Inputs(rate=3.0, duration_s=120.0, warmup_s=30.0, adapters=100)


def _figures(rows: list[Row]) -> str:
    # JSON, so that a NaN figure (a tier no request used) compares equal to itself.
    return json.dumps(
        [
            (r.tokens_per_s, s.shared, s.merged, [run.figures for run in s.runs])
            for r in rows
            for s in (r.owners, r.merged)
        ],
        sort_keys=True,
    )


def test_comparison_is_deterministic_and_the_same_in_parallel():
    first = compare(TINY, [150.0], low=1, high=4, seeds=2)
    again = compare(TINY, [150.0], low=1, high=4, seeds=2)
    parallel = compare(TINY, [150.0], low=1, high=4, seeds=2, jobs=2)
    assert first[0].owners.shared is not None
    assert len(first[0].owners.runs) == 2
    assert _figures(first) == _figures(again) == _figures(parallel)
