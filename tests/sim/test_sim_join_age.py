"""The simulated gateway's replica ages (ReplicaView.serving_s) and the remote-load breakdown."""

from __future__ import annotations

import re

import pytest

import lorafleet_gateway.router as router
from benchmarks.sim_remote_loads import main as remote_loads
from lorafleet_sim.engine import Engine
from lorafleet_sim.gateway import GatewayView
from lorafleet_sim.params import FleetParams, ReplicaParams
from lorafleet_sim.workload import Mix, build

NONE: frozenset[str] = frozenset()


def state(rid: str, tokens: int = 0) -> tuple[str, int, int, frozenset[str], frozenset[str]]:
    return (rid, tokens, 0, NONE, NONE)


def test_a_replica_ages_from_its_first_poll_and_rejoins_afresh_after_missing_a_round():
    gw = GatewayView()
    gw.poll(0.0, [state("a"), state("b")])
    gw.poll(10.0, [state("a")])  # b dead or warming: out of this round
    gw.poll(20.0, [state("a"), state("b")])
    assert gw.views["a"].serving_s == 20.0
    assert gw.views["b"].serving_s == 0.0
    gw.begin("b", 100)  # a local change keeps the age of the last poll
    assert (gw.views["b"].tokens_in_flight, gw.views["b"].serving_s) == (100, 0.0)


def test_the_engine_hands_the_settle_knobs_to_the_gateways_own_thresholds():
    w = build(mix=Mix.zipf(50, 1.0), rate=5, duration_s=30, seed=3)
    fp = FleetParams(replicas=4, settle_s=60.0, settle_rules="spill")
    eng = Engine(w, ReplicaParams(), fp)
    assert isinstance(eng.thresholds, router.Thresholds)
    assert (eng.thresholds.settle_s, eng.thresholds.settle_rules) == (60.0, "spill")
    with pytest.raises(ValueError, match="settle rules must be one of"):
        Engine(w, ReplicaParams(), FleetParams(replicas=4, settle_rules="never"))


def test_remote_load_breakdown_adds_up_to_the_runs_remote_loads(capsys, tmp_path):
    argv = [
        "--scenario",
        "add-remove",
        "--duration",
        "120",
        "--warmup",
        "30",
        "--out",
        str(tmp_path),
    ]
    assert remote_loads(argv) == 0
    out = capsys.readouterr().out
    total = int(re.search(r"remote loads (\d+)", out).group(1))  # type: ignore[union-attr]
    rows = re.findall(
        r"^\| (?:owner|spill|saturated|holder|owner_resident) \| [^|]+ \| (\d+) \|", out, re.M
    )
    assert total > 0  # the first minutes after the warm-up still fetch
    assert sum(int(n) for n in rows) == total
    assert "command: .venv/bin/python -m benchmarks.sim_remote_loads --scenario add-remove" in out
