"""benchmarks/sim_annotation_churn.py on a short run: evictions split by tier and cause."""

from __future__ import annotations

import re

from benchmarks import sim_annotation_churn
from lorafleet_core.planning import prewarm


def test_evictions_by_cause_print_the_fleet_and_the_worst_pods_ten_minutes(
    capsys, monkeypatch, tmp_path
):
    # The benchmark sets the module's constants for its run; keep this process's as they were.
    for name in ("PREWARM_EVICTING_PULLS_PER_MIN", "KEPT_COLD_TPS", "KEPT_MARGIN_BANDS"):
        monkeypatch.setattr(prewarm, name, getattr(prewarm, name))
    argv = [
        "--scenario",
        "add-remove",
        "--duration",
        "300",
        "--warmup",
        "60",
        "--out",
        str(tmp_path),
    ]
    assert sim_annotation_churn.main([*argv, "--prewarm-pulls-per-min", "0"]) == 0
    out = capsys.readouterr().out
    rows = re.findall(r"^\| (disk|RAM), (pre-warm|requests) \| (\d+) \| (\d+) \|", out, re.M)
    assert rows
    fleet = sum(int(r[2]) for r in rows)
    worst = sum(int(r[3]) for r in rows)
    assert 0 < worst <= fleet
    assert "--prewarm-pulls-per-min 0" in out
