"""Routing policies compare as the design says, and `lorafleet sim` writes its report."""

from __future__ import annotations

import json

from lorafleet_cli.main import main
from lorafleet_sim.engine import Engine
from lorafleet_sim.params import FleetParams, ReplicaParams
from lorafleet_sim.report import summarize
from lorafleet_sim.workload import Mix, build


def test_affinity_beats_random_and_residency_beats_least_loaded_owner():
    w = build(mix=Mix.zipf(600, 1.0), rate=8, duration_s=600, seed=0)
    rp = ReplicaParams(gpu_slots=30, ram_slots=60)
    fp = FleetParams(replicas=6)
    hits = {
        r: summarize(r, Engine(w, rp, fp, router=r).run(), 200.0)["gpu_hit_pct"]
        for r in ("random", "least_loaded", "affinity")
    }
    assert hits["random"] + 10 < hits["least_loaded"] <= hits["affinity"]


def test_sim_command_prints_table_and_writes_json_markdown_plot(tmp_path, capsys):
    rc = main(
        [
            "sim",
            "--scenario",
            "routing-ab",
            "--duration",
            "60",
            "--warmup",
            "0",
            "--rate",
            "5",
            "--adapters",
            "100",
            "--replicas",
            "3",
            "--seed",
            "7",
            "--set",
            "gpu_slots=10",
            "--no-progress",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "| random |" in out
    assert "| shipped |" in out
    assert "seed 7" in out
    doc = json.loads((tmp_path / "sim-routing-ab.json").read_text())
    assert doc["meta"]["seed"] == 7
    assert doc["meta"]["params"]["replica"]["gpu_slots"] == 10
    assert len(doc["runs"]) == 4
    assert (tmp_path / "sim-routing-ab.png").stat().st_size > 10_000
    assert (tmp_path / "sim-routing-ab.md").read_text().startswith("## lorafleet sim")


def test_unknown_parameter_is_a_usage_error(capsys):
    assert main(["sim", "--set", "gpu_slotz=3", "--no-progress"]) == 2
    assert "gpu_slotz" in capsys.readouterr().err
