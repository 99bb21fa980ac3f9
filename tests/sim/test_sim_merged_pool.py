"""The simulator's merged pool: the shipped pool router sends only the merged adapter there,
merged replicas decode at decode_s_merged with no loads, and the comparison sizes both fleets."""

from __future__ import annotations

import pytest

from lorafleet_cli.sim.engine import OUTCOMES, Engine
from lorafleet_cli.sim.merged import Row, Sized, fewest, threshold
from lorafleet_cli.sim.params import FleetParams, ReplicaParams
from lorafleet_cli.sim.report import Summary
from lorafleet_cli.sim.workload import Workload

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


def test_fewest_is_a_binary_search_for_the_smallest_passing_count():
    tried: list[int] = []

    def ok(n: int) -> bool:
        tried.append(n)
        return n >= 7

    assert fewest(ok, 1, 32) == 7
    assert len(tried) <= 7
    assert fewest(lambda n: False, 1, 8) is None


def _sized(gpus: float, hot_p95: float, merged: int = 0) -> Sized:
    return Sized(
        int(gpus), merged, Summary("x", {"replicas_mean": gpus, "busiest_adapter_p95_ms": hot_p95})
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
