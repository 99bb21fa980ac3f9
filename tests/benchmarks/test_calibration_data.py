"""The calibration run the design record cites still gives the record's table: the measured data
kept compressed in benchmarks/calibration/, run through `sim_calibration.py --from` (the
simulator side only, no vLLM), predicts the TTFT the record states, to the millisecond."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "docs" / "design" / "0012-simulator-calibration.md"
PINNED = ROOT / "benchmarks" / "calibration" / "pinned-2026-12-01.json.gz"


def record_rows() -> dict[str, list[int]]:
    """'TTFT p50' -> [2 req/s measured, predicted, 5 req/s measured, predicted] (ms), from the
    record's first table (the pinned run)."""
    rows: dict[str, list[int]] = {}
    for line in RECORD.read_text().splitlines():
        match = re.match(r"\| (TTFT p50|TTFT p95) \|(.*)\|$", line)
        if match and match.group(1) not in rows:
            cells = [c.strip() for c in match.group(2).split("|")]
            rows[match.group(1)] = [int(c.removesuffix(" ms")) for c in cells if c.endswith("ms")]
    return rows


def test_the_committed_pinned_run_reproduces_the_records_table(tmp_path):
    out = tmp_path / "out"
    subprocess.run(
        [sys.executable, "benchmarks/sim_calibration.py", "--from", str(PINNED), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        check=False,  # exit 1 means some figure is off by more than 20%: judged below
    )
    runs = json.loads((out / "calibration.json").read_text())["details"]["runs"]
    assert [r["rate"] for r in runs] == [2.0, 5.0]
    found = {
        name: [
            round(value)
            for run in runs
            for row in run["rows"]
            if row["name"] == name
            for value in (row["measured"], row["predicted"])
        ]
        for name in ("TTFT p50", "TTFT p95")
    }
    expected = record_rows()
    assert set(expected) == {"TTFT p50", "TTFT p95"}, expected
    assert found == expected
