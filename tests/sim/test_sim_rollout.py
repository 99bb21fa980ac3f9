"""A weighted rollout replayed by the simulator, through the gateway's own choice."""

from __future__ import annotations

from dataclasses import replace

from lorafleet_sim import workload as wl
from lorafleet_sim.engine import Engine
from lorafleet_sim.report import summarize
from lorafleet_sim.scenarios import Inputs, engine_for, rollout


def test_the_rollout_moves_the_busiest_adapters_requests_by_the_weights_in_force():
    base = wl.build(mix=wl.Mix.zipf(50, 1.0), rate=40, duration_s=900, seed=4)
    steps = [(0.0, 5), (300.0, 50), (600.0, 100)]
    primary = base.names[0]  # Zipf rank 1, the busiest
    w = wl.rollout(base, primary, "a0-next", steps, seed=4)
    assert w.names == (*base.names, "a0-next")
    new = len(base.names)
    for start, end, percent in [(0, 300, 5), (300, 600, 50), (600, 900, 100)]:
        mine = [
            a for t, a, b in zip(w.at, w.adapter, base.adapter, strict=True)
            if start <= t < end and b == 0
        ]  # fmt: skip
        share = 100 * sum(a == new for a in mine) / len(mine)
        assert abs(share - percent) <= 3, (start, share, len(mine))
    # Only the rolled-out alias's requests move; the others are untouched.
    assert all(a == b for a, b in zip(w.adapter, base.adapter, strict=True) if b != 0)
    assert wl.rollout(base, primary, "a0-next", steps, seed=4).adapter == w.adapter


def test_the_rollout_scenario_runs_and_reports_the_new_version():
    i = replace(Inputs(), rate=10, duration_s=300, warmup_s=60, adapters=200, seed=1)
    (run,) = rollout(i)
    assert run.hot == f"{run.workload.names[0]}-next"
    eng = engine_for(run, 1, Engine)
    eng.run()
    summary = summarize(run.name, eng, run.measure_from, run.hot)
    assert summary.figures["hot_adapter"] == run.hot
