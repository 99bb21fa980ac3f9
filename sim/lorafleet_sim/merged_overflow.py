"""An undersized merged pool: where its overflow goes (`--scenario merged-overflow`).

The hot tenant at 2,000 generated tokens/s met the SLO with 24 shared + 5 merged replicas
(`--scenario hot-tenant-merged`, docs/design/0015). Here the same requests meet a merged
pool with too few replicas, as during a surge before its autoscaler adds one (the tenant's
traffic 1.25x, 1.67x, 2.5x what 4, 3, 2 replicas are sized for) or while a replica is down
(one of the 5 fails at 1/3 of the run and is back 5 minutes later), beside the same 24
shared replicas; and, for reference, no merged pool at all. Routing is the shipped
`lorafleet_gateway.pool_router`: what it does with the merged pool's overflow decides the hot
tenant's p95 and how much the long tail pays for taking it.

Figures per run (`table`): the hot adapter's p95 TTFT, over the requests its merged pool
served and over those that left it (`pool_router` fell back to the shared pool: the share
is `merged_fallback_pct`), and the long tail's worst replica p95 (`merged.meets`' second
test).
"""

from __future__ import annotations

import math
from dataclasses import replace

from lorafleet_sim.engine import FleetEvent
from lorafleet_sim.merged import HOT, hot_workload
from lorafleet_sim.report import Summary
from lorafleet_sim.scenarios import Inputs, Run

SCENARIO = "merged-overflow"
HOT_TPS = 2000.0
SHARED = 24  # the shared pool beside 5 merged replicas that met the SLO at 2,000 tokens/s
SIZED = 5
# A merged replica lost with its node: rescheduled, its merged weights fetched again, vLLM
# started; minutes, not the simulator's default 24 s restart in place.
DOWN_S = 300.0


def runs(i: Inputs) -> list[Run]:
    w = hot_workload(i, HOT_TPS)
    fp = replace(i.fleet, replicas=SHARED, merged_adapter=HOT)
    out = [Run("no merged pool", w, i.replica, fp, i.router, [], i.warmup_s, HOT)]
    for m in (SIZED, 4, 3, 2):
        label = "sized" if m == SIZED else f"traffic {SIZED / m:.3g}x its capacity"
        name = f"{m} merged ({label})"
        sized = replace(fp, merged_replicas=m)
        out.append(Run(name, w, i.replica, sized, i.router, [], i.warmup_s, HOT))
    # merged-0 is the first replica after the shared pool's (Engine creates those first).
    ev = [FleetEvent(i.warmup_s + i.duration_s / 3, "fail", SHARED, DOWN_S)]
    name = f"{SIZED} merged, one down {DOWN_S / 60:g} min from 1/3"
    out.append(
        Run(name, w, i.replica, replace(fp, merged_replicas=SIZED), i.router, ev, i.warmup_s, HOT)
    )
    return out


def table(summaries: list[Summary]) -> str:
    def ms(value: float) -> str:
        return "n/a" if math.isnan(value) else f"{value:.0f} ms"

    out = [
        "| run | hot p95 | hot p95, in merged pool | hot p95, left it | hot requests that left "
        "the merged pool | long-tail worst replica p95 | p95 TTFT (all) |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        f = s.figures
        out.append(
            f"| {s.name} | {ms(f['hot_adapter_p95_ms'])} | {ms(f['hot_merged_p95_ms'])} | "
            f"{ms(f['hot_fallback_p95_ms'])} | {f['merged_fallback_pct']:.1f}% | "
            f"{ms(f['tail_worst_replica_p95_ms'])} | {ms(f['ttft_p95_ms'])} |"
        )
    return "\n".join(out)
