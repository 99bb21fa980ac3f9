"""Burst capacity: the prefill a fleet must absorb in a trace's busiest seconds.

A trace whose requests come in bursts puts TTFT where the fleet's prefill capacity decides,
not routing: no router drains a second's prompt tokens faster than replicas x prefill tokens/s,
and the autoscaler cannot add a replica within a burst. So a sizing reads, beside the
capacity search's answer, the prompt tokens arriving in each whole second of the workload as
simulated (the trace time-compressed to the run's rate) and the replicas whose combined
prefill rate takes the 95th and 99th percentile second within that second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lorafleet_sim.workload import Workload


@dataclass(frozen=True)
class Burst:
    """Prompt tokens arriving per second over `seconds` whole seconds."""

    seconds: int
    mean_tps: float
    p95_tps: float
    p99_tps: float
    max_tps: float
    empty_pct: float  # seconds with no arrival

    def replicas(self, tokens_per_s: float, prefill_tps: float) -> int:
        """Replicas whose prefill together takes `tokens_per_s` of prompts within a second."""
        return math.ceil(tokens_per_s / prefill_tps) if tokens_per_s > 0 else 0

    def line(self, prefill_tps: float) -> str:
        return (
            f"prefill bursts: {self.mean_tps:,.0f} prompt tokens/s on average, "
            f"{self.p95_tps:,.0f} in the 95th percentile second "
            f"({self.replicas(self.p95_tps, prefill_tps)} replicas at {prefill_tps:,.0f} "
            f"tokens/s), {self.p99_tps:,.0f} in the 99th "
            f"({self.replicas(self.p99_tps, prefill_tps)} replicas), {self.max_tps:,.0f} at most; "
            f"{self.empty_pct:.1f}% of {self.seconds} seconds without an arrival"
        )


def burst(workload: Workload, measure_from: float = 0.0) -> Burst:
    """Per-second prompt tokens of the requests arriving at or after `measure_from`."""
    at = np.asarray(workload.at, dtype=float)
    prompt = np.asarray(workload.prompt, dtype=float)
    sel = at >= measure_from
    if not sel.any():
        return Burst(0, 0.0, 0.0, 0.0, 0.0, 0.0)
    second = np.floor(at[sel] - measure_from).astype(int)
    per_s = np.bincount(second, weights=prompt[sel])
    return Burst(
        seconds=int(per_s.size),
        mean_tps=float(per_s.mean()),
        p95_tps=float(np.percentile(per_s, 95)),
        p99_tps=float(np.percentile(per_s, 99)),
        max_tps=float(per_s.max()),
        empty_pct=100.0 * float((per_s == 0).mean()),
    )
