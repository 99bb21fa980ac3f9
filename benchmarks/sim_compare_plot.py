"""One PNG comparing `lorafleet sim` runs from their JSON files (`--out` folders): GPU hits
by minute and replicas over time, one column per scenario, one line per variant.

    .venv/bin/python -m benchmarks.sim_compare_plot bench-results/sim-compare.png \\
        "ramp=before:old/sim-ramp.json,after:new/sim-ramp.json" \\
        "failure=before:old/sim-failure.json,after:new/sim-failure.json"

Each argument after the output path is `SCENARIO=LABEL:PATH[,LABEL:PATH...]`; a JSON holding
several runs contributes its last one (the scenario's measured run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _parse(spec: str) -> tuple[str, list[tuple[str, Path]]]:
    scenario, _, variants = spec.partition("=")
    out = []
    for item in variants.split(","):
        label, _, path = item.partition(":")
        out.append((label, Path(path)))
    return scenario, out


def _last_run(path: Path) -> dict[str, Any]:
    runs: list[dict[str, Any]] = json.loads(path.read_text())["runs"]
    return runs[-1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("scenarios", nargs="+", help="SCENARIO=LABEL:PATH[,LABEL:PATH...]")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    specs = [_parse(s) for s in args.scenarios]
    fig, axes = plt.subplots(2, len(specs), figsize=(5.5 * len(specs), 7), squeeze=False)
    for col, (scenario, variants) in enumerate(specs):
        hits, replicas = axes[0][col], axes[1][col]
        for label, path in variants:
            run = _last_run(path)
            f, series = run["figures"], run["series"]
            legend = (
                f"{label}: remote {f['remote_hit_pct']:.2f}%, p95 {f['ttft_p95_ms']:.0f} ms, "
                f"gpu {f['gpu_hit_pct']:.1f}%"
            )
            hits.plot(series["gpu_hit_pct_by_minute"], label=legend, linewidth=0.9)
            replicas.step(series["t"], series["serving"], where="post", label=label)
        hits.set_title(f"{scenario}: GPU hits by minute", fontsize=9)
        hits.set_xlabel("minute")
        hits.set_ylabel("GPU hits (%)")
        hits.legend(fontsize=7)
        replicas.set_title(f"{scenario}: replicas serving", fontsize=9)
        replicas.set_xlabel("time (s)")
        replicas.set_ylabel("replicas")
        replicas.legend(fontsize=7)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=100)
    plt.close(fig)
    given = " ".join(argv if argv is not None else sys.argv[1:])
    print(f"wrote {args.out}; command: python -m benchmarks.sim_compare_plot {given}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
