"""Where a simulated run's remote loads (object-store fetches) come from.

    .venv/bin/python -m benchmarks.sim_remote_loads --scenario ramp
    .venv/bin/python -m benchmarks.sim_remote_loads --scenario ramp --set settle_s=60

Runs one `lorafleet sim` scenario (its last run; seed and `--set` as on the command line) and
splits the measured requests that loaded their adapter from the object store by
- the routing outcome (`owner`, `spill`, ...), and
- how long the routing gateway pod had been routing to the chosen replica
  (`ReplicaView.serving_s`: < 60 s, < 300 s, older), the signal of the join-aware cap
  (docs/design/0006-routing-bounded-load.md);
- for owner fetches: whether that replica had been asked to pre-warm the adapter (its
  owned-adapters annotation listed it: the agent's pass registers the first RAM slots' worth
  and pulls the rest to disk) or never was (the annotation's size bound left it out).
It also counts spills by the same age buckets, cached or fetched. Figures are deterministic
for a seed; the command is printed with them.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from benchmarks.results import Result, module_command
from benchmarks.sim_scenario_run import add_run_args, run_engine, scenario_run
from lorafleet_core.planning.prewarm import PrewarmPass
from lorafleet_sim.engine import OUTCOMES, Engine
from lorafleet_sim.replica import Replica

REMOTE = 3  # lorafleet_sim.replica.TIER_CODE[Tier.REMOTE]


class RecordingEngine(Engine):
    """The simulator's engine, also noting each request's replica age and every pre-warm ask."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.age_at: dict[int, float] = {}
        self.asked: defaultdict[str, set[str]] = defaultdict(set)
        super().__init__(*args, **kwargs)

    def _route(self, req: int, now: float) -> None:
        super()._route(req, now)
        index = self.replica_of[req]
        if index >= 0:
            gw = self.gateways[self._gateway_of[req]]
            self.age_at[req] = gw.serving_s.get(self.replicas[index].id, float("inf"))

    def _new_replica(self, now: float, ready_at: float | None) -> Replica:
        replica = super()._new_replica(now, ready_at)
        start_pass, prewarm = replica.start_pass, replica.prewarm

        def asked_pass(plan: PrewarmPass[str]) -> None:
            self.asked[replica.id].update([*plan.register, *plan.to_disk])
            start_pass(plan)

        def asked(names: Sequence[str]) -> None:
            self.asked[replica.id].update(names)
            prewarm(names)

        replica.start_pass = asked_pass  # type: ignore[method-assign]
        replica.prewarm = asked  # type: ignore[method-assign]
        return replica

    def _instant_prewarm(self, replica: Replica, plan: PrewarmPass[str]) -> None:
        super()._instant_prewarm(replica, plan)
        self.asked[replica.id].update([*plan.register, *plan.to_disk])


def _age(seconds: float) -> str:
    return "< 60 s" if seconds < 60 else "< 300 s" if seconds < 300 else ">= 300 s"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_run_args(ap)
    args = ap.parse_args(argv)
    run = scenario_run(args)
    eng = run_engine(RecordingEngine, run, args.seed)
    remote: Counter[tuple[str, str]] = Counter()
    owner_fetch: Counter[str] = Counter()
    spills: Counter[tuple[str, str]] = Counter()
    routed = 0
    for req, at in enumerate(eng.arrival):
        if at < run.measure_from or eng.tier[req] < 0:
            continue
        routed += 1
        outcome = OUTCOMES[eng.outcome[req]]
        age = _age(eng.age_at[req])
        fetched = eng.tier[req] == REMOTE
        if outcome in ("spill", "saturated"):
            spills[(age, "fetched" if fetched else "cached")] += 1
        if not fetched:
            continue
        remote[(outcome, age)] += 1
        if outcome == "owner":
            rid = eng.replicas[eng.replica_of[req]].id
            name = eng.names[eng.adapter_of[req]]
            owner_fetch["asked to pre-warm" if name in eng.asked[rid] else "never asked"] += 1
    total = sum(remote.values())
    columns = ["outcome", "replica served for", "requests", "% of requests"]
    result = Result("sim_remote_loads", columns, command=module_command("sim_remote_loads", argv))
    for (outcome, age), n in sorted(remote.items(), key=lambda kv: -kv[1]):
        result.add(outcome=outcome, requests=n, **{
            "replica served for": age, "% of requests": round(100 * n / routed, 2)})  # fmt: skip
    owners = ["| owner fetch | requests | % of requests |", "|---|---|---|"]
    owners += [
        f"| {why} | {n} | {100 * n / routed:.2f} |" for why, n in sorted(owner_fetch.items())
    ]
    spilled = ["| spill onto a replica served for | cached | fetched |", "|---|---|---|"]
    spilled += [
        f"| {age} | {spills[(age, 'cached')]} | {spills[(age, 'fetched')]} |"
        for age in ("< 60 s", "< 300 s", ">= 300 s")
    ]
    result.notes += [
        f"{run.name}, seed {args.seed}: measured requests {routed}, remote loads {total} "
        f"({100 * total / routed:.2f}%)",
        "\n".join(owners),
        "\n".join(spilled),
    ]
    result.emit(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
