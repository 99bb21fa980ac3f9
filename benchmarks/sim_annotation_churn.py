"""Why a simulated run's owned-adapters annotations change: each re-plan by its cause.

    .venv/bin/python -m benchmarks.sim_annotation_churn --scenario ramp
    .venv/bin/python -m benchmarks.sim_annotation_churn --scenario ramp --kept-cold-tps 0.001

Runs one `lorafleet sim` scenario (its last run; seed and `--set` as on the command line) and
splits the operator's re-plans (`OwnedAnnotations.plan`) by what changed since the one before:
the live replicas (a join, a leave, a failure), an owner count, or neither (only traffic: the
kept set of a pod owning more than its annotation holds). For each cause: the re-plans, the
pods whose annotation changed (each starts an agent pass) and the ids newly listed on a pod
that already had a list (each a pull to disk, and a disk eviction once the cache is full).
Then the run's figures as `lorafleet sim` prints them (the same for the same seed and values).

`--kept-cold-tps` / `--kept-margin` replace `lorafleet_core.planning.prewarm.KEPT_COLD_TPS` and
`KEPT_MARGIN_BANDS` for the run (the kept set's floor and hysteresis; docs/performance.md,
"Kept set with hysteresis"): the values it was measured against. Against a checkout from
before them (this file copied in) it counts the planner as it was.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from lorafleet_cli.sim import report
from lorafleet_cli.sim.engine import Engine
from lorafleet_cli.sim.params import with_overrides
from lorafleet_cli.sim.scenarios import SCENARIOS, Inputs
from lorafleet_core.planning import prewarm

CAUSES = ("membership", "owner counts", "traffic only")


class ChurnEngine(Engine):
    """The simulator's engine, counting each annotation re-plan by its cause."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.churn: Counter[tuple[str, str]] = Counter()
        self._last: tuple[tuple[str, ...], Any] | None = None
        super().__init__(*args, **kwargs)
        plan = self.annotations.plan

        def counted(
            members: Sequence[str], k_by: Mapping[str, int] | int, traffic: Mapping[str, float]
        ) -> dict[str, tuple[list[str], frozenset[str]]]:
            changed = plan(members, k_by, traffic)
            k = k_by if isinstance(k_by, int) else dict(k_by)
            last, self._last = self._last, (tuple(members), k)
            cause = (
                CAUSES[0]
                if last is None or last[0] != tuple(members)
                else CAUSES[1]
                if last[1] != k
                else CAUSES[2]
            )
            self.churn[(cause, "re-plans")] += 1
            for ids, before in changed.values():
                self.churn[(cause, "pods rewritten")] += 1
                if before:
                    self.churn[(cause, "ids newly listed")] += len(set(ids) - before)
            return changed

        self.annotations.plan = counted  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="ramp", choices=sorted(SCENARIOS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--duration", type=float, default=3600.0, help="measured seconds")
    ap.add_argument("--warmup", type=float, default=600.0, help="simulated first, left out")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    hysteresis = hasattr(prewarm, "KEPT_COLD_TPS")
    ap.add_argument("--kept-cold-tps", type=float, default=getattr(prewarm, "KEPT_COLD_TPS", 0))
    ap.add_argument("--kept-margin", type=float, default=getattr(prewarm, "KEPT_MARGIN_BANDS", 0))
    args = ap.parse_args(argv)
    if hysteresis and args.kept_cold_tps <= 0:
        ap.error("--kept-cold-tps must be > 0 (use 0.001 for no floor)")
    if hysteresis:
        prewarm.KEPT_COLD_TPS, prewarm.KEPT_MARGIN_BANDS = args.kept_cold_tps, args.kept_margin
    base = Inputs(seed=args.seed, duration_s=args.duration, warmup_s=args.warmup)
    inputs = replace(
        base,
        fleet=with_overrides(base.fleet, args.set),
        replica=with_overrides(base.replica, args.set),
    )
    run = SCENARIOS[args.scenario](inputs)[-1]
    eng = ChurnEngine(
        run.workload,
        run.replica,
        run.fleet,
        router=run.router,
        seed=args.seed,
        events=run.events,
        duration_s=run.workload.at[-1],
    )
    eng.run()
    flags = "".join(f" --set {s}" for s in args.set)
    if (args.duration, args.warmup) != (3600.0, 600.0):
        flags = f" --duration {args.duration:g} --warmup {args.warmup:g}{flags}"
    if hysteresis:
        flags += f" --kept-cold-tps {args.kept_cold_tps:g} --kept-margin {args.kept_margin:g}"
    planner = "" if hysteresis else ", a planner without the kept set's hysteresis"
    print(f"## annotation churn: {run.name}, seed {args.seed}{flags} (whole run{planner})\n")
    print("| re-planned on | re-plans | pods rewritten | ids newly listed |\n|---|---|---|---|")
    for cause in CAUSES:
        row = [eng.churn[(cause, what)] for what in ("re-plans", "pods rewritten")]
        print(f"| {cause} | {row[0]} | {row[1]} | {eng.churn[(cause, 'ids newly listed')]} |")
    summary = report.summarize(run.name, eng, run.measure_from, hot=run.hot)
    print(f"\n{report.table([summary])}\n\n{report.detail(summary)}")
    print(
        f"\ncommand: python -m benchmarks.sim_annotation_churn --scenario {args.scenario}"
        f" --seed {args.seed}{flags}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
