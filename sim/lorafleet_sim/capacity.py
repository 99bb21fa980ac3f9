"""Capacity search: the fewest replicas that meet the SLO on a workload.

Meets = a stable run (completions kept up with arrivals) with worst-adapter p95 TTFT
(adapters with >= 20 requests) under the SLO and GPU hits at or above 95%. Fewer replicas
load each one more and shrink the fleet's slot count, so in expectation a count that fails
makes every smaller one fail too, and a binary search over [low, high] is used. Draw by draw
that is not so: the worst adapter's p95 moves by ±150 ms between neighbouring counts
(`search.fewest_stable` explains why and is the sound search the hot-tenant comparison
uses); treat a count found here as ±a few replicas.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from lorafleet_sim.engine import Engine
from lorafleet_sim.params import FleetParams, ReplicaParams
from lorafleet_sim.report import Summary, summarize
from lorafleet_sim.workload import Workload

MIN_GPU_HIT_PCT = 95.0


def meets(s: Summary, slo_ms: float) -> bool:
    """An unstable run (report._stability) never meets, whatever its figures say."""
    return bool(
        s["stable"] and s["worst_adapter_p95_ms"] < slo_ms and s["gpu_hit_pct"] >= MIN_GPU_HIT_PCT
    )


def search(
    workload: Workload,
    rp: ReplicaParams,
    fp: FleetParams,
    *,
    router: str,
    seed: int,
    low: int,
    high: int,
    measure_from: float = 0.0,
    on_run: Callable[[int, Summary], None] | None = None,
) -> tuple[int | None, dict[int, Summary]]:
    tried: dict[int, Summary] = {}

    def run(n: int) -> bool:
        eng = Engine(workload, rp, replace(fp, replicas=n), router=router, seed=seed).run()
        s = summarize(f"{n} replicas", eng, measure_from)
        tried[n] = s
        if on_run is not None:
            on_run(n, s)
        return meets(s, fp.slo_ttft_s * 1000)

    if not run(high):
        return None, tried
    lo, hi = low, high  # invariant: hi meets
    while lo < hi:
        mid = (lo + hi) // 2
        if run(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi, tried


def pure_work_replicas(workload: Workload, rp: ReplicaParams) -> float:
    """Replicas of pure work: prefill and decode time of the requests over the run's length.

    Prefill at prefill_tps; decode as `max_seqs` sequences sharing one decode step each.
    """
    duration = max(workload.at[-1] if len(workload) else 0.0, 1e-9)
    prefill = sum(workload.prompt) / rp.prefill_tps
    decode = sum(o - 1 for o in workload.output) * rp.decode_s / rp.max_seqs
    return (prefill + decode) / duration if math.isfinite(duration) else math.nan
