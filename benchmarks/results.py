"""One result format for every benchmark: a JSON document of one shape, and a table printed with
the command that reproduces it.

    result = Result("placement_bench", ["measure", "value"], notes=["2-core machine"])
    result.add(measure="owners() with 26 replicas", value="22.1 µs")
    result.emit(out)                     # prints the table and the command, writes the JSON

The JSON (`bench-results/<benchmark>.json` unless `--out` says otherwise):

    {"benchmark": "placement_bench", "command": ".venv/bin/python -m benchmarks.placement_bench",
     "measured_at": "2026-12-05T12:00:00Z", "host": {"cpus": 2, "load_average": [1.2, 0.9, 0.8]},
     "columns": ["measure", "value"], "rows": [{"measure": ..., "value": ...}],
     "notes": [...], "details": {...}}

`rows` is what the table shows (values as printed, strings or numbers); `details` is whatever
else the benchmark keeps for a later reader (samples, per-round figures, a plot's data). The
command is the benchmark's own argv, so pasting it reruns the measurement as it was.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench-results"


def command_line(argv: list[str] | None = None) -> str:
    """How this run was started, as a user types it from the repository root: the venv's python
    and the script's path, or `-m benchmarks.<module>` when it was run as a module."""
    args = list(sys.argv if argv is None else argv)
    if not args:
        return ""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if argv is None and spec is not None and str(spec.name).startswith("benchmarks."):
        head = [".venv/bin/python", "-m", str(spec.name)]
    else:
        script = Path(args[0]).resolve()
        shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else Path(args[0])
        head = [".venv/bin/python", str(shown)]
    return shlex.join([*head, *args[1:]])


def module_command(module: str, argv: list[str] | None = None) -> str:
    """`.venv/bin/python -m benchmarks.<module> ARGS`: for a main() also called with an argv of
    its own (from a test), whose command is that argv, not the calling process's."""
    args = sys.argv[1:] if argv is None else argv
    return shlex.join([".venv/bin/python", "-m", f"benchmarks.{module}", *args])


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value).replace("|", "\\|")


@dataclass
class Result:
    """One benchmark run: its table, notes, extra details and the command that reproduces it."""

    benchmark: str
    columns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    command: str = field(default_factory=command_line)
    measured_at: str = field(
        default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    )

    def add(self, **row: Any) -> None:
        unknown = set(row) - set(self.columns)
        if unknown:
            raise ValueError(f"{self.benchmark}: no column {sorted(unknown)}")
        self.rows.append(row)

    def document(self) -> dict[str, Any]:
        load = list(os.getloadavg()) if hasattr(os, "getloadavg") else []
        return {
            "benchmark": self.benchmark,
            "command": self.command,
            "measured_at": self.measured_at,
            "host": {"cpus": os.cpu_count(), "load_average": [round(x, 2) for x in load]},
            "columns": self.columns,
            "rows": self.rows,
            "notes": self.notes,
            "details": self.details,
        }

    def table(self) -> str:
        lines = [
            "| " + " | ".join(self.columns) + " |",
            "|" + "---|" * len(self.columns),
            *(
                "| " + " | ".join(_cell(row.get(c, "")) for c in self.columns) + " |"
                for row in self.rows
            ),
        ]
        return "\n".join(lines)

    def text(self) -> str:
        parts = [f"## {self.benchmark} ({self.measured_at})", "", self.table()]
        if self.notes:
            parts += ["", *self.notes]
        parts += ["", f"command: {self.command}"]
        return "\n".join(parts)

    def emit(self, out: Path | None = None) -> Path:
        """Print the table and the command; write the JSON document. Returns its path."""
        path = out if out is not None else RESULTS / f"{self.benchmark}.json"
        if path.suffix != ".json":
            path = path / f"{self.benchmark}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.document(), indent=1, default=str) + "\n")
        print(self.text())
        print(f"json: {path}")
        return path


def load(path: Path) -> dict[str, Any]:
    """A result document written by `Result.emit`."""
    doc: dict[str, Any] = json.loads(path.read_text())
    if not {"benchmark", "command", "rows"} <= set(doc):
        raise ValueError(f"{path}: not a benchmark result document")
    return doc
