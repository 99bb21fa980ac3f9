"""Hot tenant: more owners in the shared pool, or a merged pool? (`--scenario hot-tenant-merged`)

For each hot-tenant rate (generated tokens/s of one adapter on top of the steady workload) two
fleets are sized on the same requests and seed, each to the fewest GPUs that meet the SLO
(worst-adapter p95 TTFT under 1 s; the capacity search's second test, GPU hits >= 95%, is
left out: it measures the shared pool's slot warmth, which a merged pool's requests, always
"gpu", would flatter):

- more owners: one shared pool; the operator's planner grows the hot adapter's owners from
  its measured tokens/s (what lorafleet does without a merged pool);
- merged pool: M replicas serving only the hot adapter merged into the base weights
  (`decode_s_merged`, 40 ms per step in the design, no adapter loads), routed by the shipped
  `lorafleet_gateway.pool_router` (merged first, shared fallback), beside N shared replicas.
  M is the fewest that meet the SLO with the shared pool at the first fleet's size, then N
  the fewest that still meet it with those M.

GPUs used are replica-hours over the measured period; cost per million tokens at the
FleetParams price. The merged pool "wins" at a rate when it needs fewer GPUs (cost per token
follows), or as many with a lower hot-adapter p95. The smallest rate from which it wins at
every higher rate tried is the operator's recommendation threshold
(lorafleet_core.planning.merge_advice.MERGE_THRESHOLD_SHARE, as a share of one replica's
capacity, max_seqs / decode_s).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from lorafleet_cli.sim import workload as wl
from lorafleet_cli.sim.engine import Engine
from lorafleet_cli.sim.params import FleetParams
from lorafleet_cli.sim.report import Summary, summarize
from lorafleet_cli.sim.scenarios import Inputs

HOT = "hot-tenant"


def meets(s: Summary, slo_ms: float) -> bool:
    return bool(s["worst_adapter_p95_ms"] < slo_ms)


SCENARIO = "hot-tenant-merged"


@dataclass
class Sized:
    """One fleet at its fewest GPUs meeting the SLO (None: not met within the bounds)."""

    shared: int | None
    merged: int = 0
    summary: Summary | None = None

    @property
    def gpus(self) -> float | None:
        return self.summary["replicas_mean"] if self.summary is not None else None


@dataclass
class Row:
    tokens_per_s: float
    owners: Sized
    merged: Sized

    @property
    def merged_wins(self) -> bool:
        a, b = self.owners, self.merged
        if b.gpus is None:
            return False
        if a.gpus is None:
            return True
        if round(b.gpus, 1) != round(a.gpus, 1):
            return b.gpus < a.gpus
        assert a.summary is not None
        assert b.summary is not None
        return bool(b.summary["busiest_adapter_p95_ms"] < a.summary["busiest_adapter_p95_ms"])


def fewest(ok: Callable[[int], bool], low: int, high: int) -> int | None:
    """The smallest n in [low, high] with ok(n), for ok monotone in n (None if not even high)."""
    if not ok(high):
        return None
    lo, hi = low, high
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def compare(
    inputs: Inputs,
    rates: list[float],
    *,
    low: int,
    high: int,
    merged_high: int = 32,
    on_run: Callable[[str], None] = lambda _m: None,
) -> list[Row]:
    return [_compare_at(inputs, tps, low, high, merged_high, on_run) for tps in rates]


def _compare_at(
    inputs: Inputs,
    tps: float,
    low: int,
    high: int,
    merged_high: int,
    on_run: Callable[[str], None],
) -> Row:
    slo_ms = inputs.fleet.slo_ttft_s * 1000
    mean = wl.mean_output_tokens(inputs.trace or wl.default_trace())
    # The hot tenant's requests come on top of the steady workload's rate.
    total = replace(inputs, rate=inputs.rate + tps / mean)
    workload = total.workload(mix=total.mix().with_hot(HOT, tps, total.rate, mean))
    runs: dict[tuple[int, int], Summary] = {}

    def run(shared: int, merged: int) -> Summary:
        if (shared, merged) not in runs:
            fp: FleetParams = replace(
                inputs.fleet, replicas=shared, merged_replicas=merged, merged_adapter=HOT
            )
            eng = Engine(workload, inputs.replica, fp, router=inputs.router, seed=inputs.seed)
            name = f"{tps:g} tok/s: {shared} shared + {merged} merged"
            s = summarize(name, eng.run(), inputs.warmup_s)
            runs[(shared, merged)] = s
            on_run(
                f"  {name}: worst p95 {s['worst_adapter_p95_ms']:.0f} ms, hot p95 "
                f"{s['busiest_adapter_p95_ms']:.0f} ms, gpu {s['gpu_hit_pct']:.1f}%"
            )
        return runs[(shared, merged)]

    n_a = fewest(lambda n: meets(run(n, 0), slo_ms), low, high)
    owners = Sized(n_a, 0, runs[(n_a, 0)] if n_a is not None else None)
    base = n_a if n_a is not None else high
    m = fewest(lambda k: meets(run(base, k), slo_ms), 1, merged_high)
    if m is None:
        return Row(tps, owners, Sized(None))
    n_b = fewest(lambda n: meets(run(n, m), slo_ms), low, base)
    merged = Sized(n_b, m, runs[(n_b, m)]) if n_b is not None else Sized(None)
    return Row(tps, owners, merged)


def threshold(rows: list[Row]) -> float | None:
    """The smallest rate from which the merged pool wins at every higher rate tried."""
    found = None
    for row in sorted(rows, key=lambda r: r.tokens_per_s, reverse=True):
        if not row.merged_wins:
            break
        found = row.tokens_per_s
    return found


def table(rows: list[Row], capacity_tps: float) -> str:
    def cells(s: Sized) -> str:
        if s.summary is None:
            return "not met | | |"
        f = s.summary.figures
        count = f"{s.shared}" if not s.merged else f"{s.shared} + {s.merged} merged"
        return (
            f"{count} ({f['replicas_mean']:.1f}) | {f['ttft_p95_ms']:.0f} ms | "
            f"{f['busiest_adapter_p95_ms']:.0f} ms | {f['usd_per_million_tokens']:.3f}"
        )

    out = [
        "| hot tenant tokens/s (share of a replica) | more owners: GPUs | p95 TTFT | hot p95 "
        "| $/M tok | merged pool: GPUs | p95 TTFT | hot p95 | $/M tok | merged wins |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        share = r.tokens_per_s / capacity_tps
        out.append(
            f"| {r.tokens_per_s:g} ({share:.2f}) | {cells(r.owners)} | {cells(r.merged)} | "
            f"{'yes' if r.merged_wins else 'no'} |"
        )
    return "\n".join(out)
