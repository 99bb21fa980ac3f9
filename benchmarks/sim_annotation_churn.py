"""Why a simulated run's owned-adapters annotations change: each re-plan by its cause.

    .venv/bin/python -m benchmarks.sim_annotation_churn --scenario ramp
    .venv/bin/python -m benchmarks.sim_annotation_churn --scenario ramp --kept-cold-tps 0.001

Runs one `lorafleet sim` scenario (its last run; seed and `--set` as on the command line) and
splits the operator's re-plans (`OwnedAnnotations.plan`) by what changed since the one before:
the live replicas (a join, a leave, a failure), an owner count, or neither (only traffic: the
kept set of a pod owning more than its annotation holds). For each cause: the re-plans, the
pods whose annotation changed (each starts an agent pass) and the ids newly listed on a pod
that already had a list (each a pull to disk, and a disk eviction once the cache is full).
Then the measured period's evictions by tier (disk, RAM) and by who caused them (the agent's
pre-warm pass or a request's load), for the fleet and for the worst pod's worst ten minutes:
the thrashing alert's window (`report`'s figure slides over 10 s samples, this one whole
minutes, so the two can differ a little).
Then the run's figures as `lorafleet sim` prints them (the same for the same seed and values).

`--kept-cold-tps` / `--kept-margin` replace `lorafleet_core.planning.prewarm.KEPT_COLD_TPS` and
`KEPT_MARGIN_BANDS` for the run (the kept set's floor and hysteresis;
docs/design/0022-kept-set-hysteresis.md): the values it was measured against.
`--prewarm-pulls-per-min` replaces `PREWARM_EVICTING_PULLS_PER_MIN` (the pace of pre-warm pulls that
evict from a full disk; 0: unpaced; docs/design/0025-prewarm-pull-pacing.md). Against a checkout
from before them (this file copied in) it counts the planner as it was.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.results import Result, module_command
from benchmarks.sim_scenario_run import add_run_args, run_engine, scenario_run
from lorafleet_core.planning import prewarm
from lorafleet_sim import report
from lorafleet_sim.engine import Engine
from lorafleet_sim.replica import Replica

CAUSES = ("membership", "owner counts", "traffic only")


class ChurnEngine(Engine):
    """The simulator's engine, counting each annotation re-plan by its cause."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.churn: Counter[tuple[str, str]] = Counter()
        self.evicted: Counter[tuple[str, int, str]] = Counter()  # (pod, minute, cause)
        self._counted = 0  # evictions counted so far (a nested step's are not its caller's)
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

    def _new_replica(self, now: float, ready_at: float | None) -> Replica:
        replica = super()._new_replica(now, ready_at)
        fetched, register = replica._fetched, replica._register

        def counted_fetch(at: float, arg: tuple[int, str]) -> None:
            self._count(replica, at, arg[1], "disk", lambda: fetched(at, arg))

        def counted_register(name: str) -> bool:
            return bool(self._count(replica, self.now, name, "RAM", lambda: register(name)))

        replica._fetched = counted_fetch  # type: ignore[method-assign,assignment]
        replica._register = counted_register  # type: ignore[method-assign]
        return replica

    def _count(self, replica: Replica, at: float, name: str, tier: str, act: Any) -> Any:
        """Run one cache step; count its evictions by tier and by who asked: the pre-warm pass
        (the adapter it is loading) or a request, per pod and minute."""
        before, nested = replica.evictions, self._counted
        by = "pre-warm" if name == replica.warm.current else "requests"  # before it moves on
        result = act()
        # A fetch goes on to register (counted there, as RAM): count only this step's own.
        own = replica.evictions - before - (self._counted - nested)
        if own:
            self.evicted[(replica.id, int(at // 60), f"{tier}, {by}")] += own
            self._counted += own
        return result


def _evictions_by_cause(eng: ChurnEngine, since: float) -> str:
    """The measured period's evictions by cause: the fleet's, and the worst pod's worst ten
    minutes (the thrashing alert's window; its sliding figure is the report's)."""
    first = int(since // 60)
    total: Counter[str] = Counter()
    per_pod: dict[str, Counter[int]] = {}
    for (rid, minute, cause), n in eng.evicted.items():
        if minute >= first:
            total[cause] += n
            per_pod.setdefault(rid, Counter())[minute] += n
    worst = max(
        (
            (sum(c[m] for m in range(m0, m0 + 10)), rid, m0)
            for rid, c in per_pod.items()
            for m0 in c
        ),
        default=(0, "-", first),
    )
    _, rid, m0 = worst
    window: Counter[str] = Counter()
    for (r, minute, cause), n in eng.evicted.items():
        if r == rid and m0 <= minute < m0 + 10:
            window[cause] += n
    lines = [
        f"| evictions by cause | measured period, fleet | {rid}, minutes {m0}-{m0 + 10} |",
        "|---|---|---|",
    ]
    for cause in sorted(set(total) | set(window)):
        lines.append(f"| {cause} | {total[cause]} | {window[cause]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_run_args(ap)
    hysteresis = hasattr(prewarm, "KEPT_COLD_TPS")
    ap.add_argument("--kept-cold-tps", type=float, default=getattr(prewarm, "KEPT_COLD_TPS", 0))
    ap.add_argument("--kept-margin", type=float, default=getattr(prewarm, "KEPT_MARGIN_BANDS", 0))
    paced = hasattr(prewarm, "PREWARM_EVICTING_PULLS_PER_MIN")
    ap.add_argument(
        "--prewarm-pulls-per-min",
        type=float,
        default=getattr(prewarm, "PREWARM_EVICTING_PULLS_PER_MIN", 0),
    )
    args = ap.parse_args(argv)
    if paced:  # 0: no pace (a rate too high to ever wait)
        prewarm.PREWARM_EVICTING_PULLS_PER_MIN = args.prewarm_pulls_per_min or float("inf")
    if hysteresis and args.kept_cold_tps <= 0:
        ap.error("--kept-cold-tps must be > 0 (use 0.001 for no floor)")
    if hysteresis:
        prewarm.KEPT_COLD_TPS, prewarm.KEPT_MARGIN_BANDS = args.kept_cold_tps, args.kept_margin
    run = scenario_run(args)
    eng = run_engine(ChurnEngine, run, args.seed)
    planner = "" if hysteresis else " (a planner without the kept set's hysteresis)"
    columns = ["re-planned on", "re-plans", "pods rewritten", "ids newly listed"]
    command = module_command("sim_annotation_churn", argv)
    result = Result("sim_annotation_churn", columns, command=command)
    for cause in CAUSES:
        result.add(**{
            "re-planned on": cause,
            "re-plans": eng.churn[(cause, "re-plans")],
            "pods rewritten": eng.churn[(cause, "pods rewritten")],
            "ids newly listed": eng.churn[(cause, "ids newly listed")],
        })  # fmt: skip
    summary = report.summarize(run.name, eng, run.measure_from, hot=run.hot)
    knobs = (
        f"kept-cold-tps {getattr(prewarm, 'KEPT_COLD_TPS', 0):g}, "
        f"kept-margin {getattr(prewarm, 'KEPT_MARGIN_BANDS', 0):g}, "
    )
    knobs += f"pre-warm pulls per minute {args.prewarm_pulls_per_min:g}" if paced else ""
    result.notes += [
        f"{run.name}, seed {args.seed}, the whole run{planner}; {knobs}",
        _evictions_by_cause(eng, run.measure_from),
        f"{report.table([summary])}\n\n{report.detail(summary)}",
    ]
    result.emit(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
