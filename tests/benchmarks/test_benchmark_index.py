"""benchmarks/README.md indexes every benchmark module, every benchmark command the docs give
names a module that exists, and every benchmark reports in the one result format
(benchmarks/results.py): a new script that prints its own way, or a renamed one the docs still
cite, fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.results import Result, load, module_command

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
INDEX = BENCHMARKS / "README.md"
# Runnable modules that are parts of another benchmark or tools, reporting through it or not
# measuring at all: the calibration's probes (their JSON is sim_calibration's input), the
# gateway benchmark's stand-in servers, the plotting tool, and sim_calibration itself, whose
# report (sim_calibration_report) writes the result.
NOT_REPORTING = {
    "calibration_host_probe",
    "calibration_stall_probe",
    "gateway_overhead_servers",
    "sim_compare_plot",
    "sim_calibration",
}
COMMAND = re.compile(r"(?:-m\s+benchmarks\.(\w+)|(?<![\w/])benchmarks/(\w+)\.py)")


def modules() -> list[str]:
    return sorted(p.stem for p in BENCHMARKS.glob("*.py") if p.stem != "__init__")


def test_every_benchmark_module_is_in_the_index():
    index = INDEX.read_text()
    missing = [m for m in modules() if f"`{m}`" not in index]
    assert not missing, f"benchmarks/README.md does not name: {missing}"


def test_every_benchmark_the_docs_name_exists():
    docs = [ROOT / "README.md", INDEX, ROOT / "e2e" / "README.md", *(ROOT / "docs").rglob("*.md")]
    known = set(modules())
    wrong = []
    for path in docs:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "# at " in line or "git checkout" in line:  # a script a named commit still has
                continue
            for a, b in COMMAND.findall(line):
                if (a or b) not in known:
                    wrong.append(f"{path.relative_to(ROOT)}:{number}: no benchmark {a or b}")
    assert not wrong, "\n".join(wrong)


def test_every_runnable_benchmark_reports_in_the_one_format():
    runnable = [p for p in BENCHMARKS.glob("*.py") if '__name__ == "__main__"' in p.read_text()]
    assert len(runnable) > 10  # none found means a bug here
    own_way = [
        p.stem for p in runnable if p.stem not in NOT_REPORTING and "Result(" not in p.read_text()
    ]
    assert not own_way, f"report through benchmarks.results.Result: {own_way}"


def test_a_result_is_one_json_shape_and_a_table_with_its_command(tmp_path, capsys):
    result = Result("example", ["measure", "value"], command=module_command("example", ["--x"]))
    result.add(measure="owners() | 26 replicas", value=22.14)
    result.notes.append("a note")
    path = result.emit(tmp_path)
    printed = capsys.readouterr().out
    assert path == tmp_path / "example.json"
    doc = load(path)
    assert doc == json.loads(path.read_text())
    assert set(doc) == {
        "benchmark", "command", "measured_at", "host", "columns", "rows", "notes", "details"
    }  # fmt: skip
    assert doc["rows"] == [{"measure": "owners() | 26 replicas", "value": 22.14}]
    assert "| owners() \\| 26 replicas | 22.1 |" in printed
    assert "command: .venv/bin/python -m benchmarks.example --x" in printed
    with pytest.raises(ValueError, match="valu"):
        result.add(measure="x", valu=1)
