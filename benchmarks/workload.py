"""The design's workload from the real trace: arrivals and lengths, adapters by a Zipf mix.

The Azure LLM conversation trace (../shared/traces/, CC-BY 4.0, Patel et al., Splitwise, ISCA
2024) has arrival times and token counts but no tenant, so each request gets an adapter drawn
from Zipf(s) over `n_adapters` ranks with a fixed seed. Time compression ×7 turns the trace's
5.5 requests/s into the design's ~40 requests/s. State the mix and the seed with every result.
"""

from __future__ import annotations

import random
from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

# One reader of the trace format and one adapter naming, shared with `lorafleet sim`.
from lorafleet_sim.workload import adapter_name, default_trace, read_trace

DEFAULT_TRACE = default_trace()


@dataclass(frozen=True, slots=True)
class Request:
    at: float  # seconds since the first request, after compression
    prompt_tokens: int
    output_tokens: int
    adapter: str


@dataclass(frozen=True)
class WorkloadSpec:
    trace: Path = DEFAULT_TRACE
    speedup: float = 7.0
    n_adapters: int = 5000
    zipf_s: float = 1.0
    seed: int = 0
    limit: int | None = None

    def describe(self) -> str:
        return (
            f"trace={self.trace.name} speedup=x{self.speedup:g} adapters={self.n_adapters} "
            f"zipf_s={self.zipf_s:g} seed={self.seed}"
        )


def load_workload(spec: WorkloadSpec) -> list[Request]:
    """Requests in arrival order, adapters drawn from Zipf(spec.zipf_s) by rank."""
    rng = random.Random(spec.seed)
    weights = [1.0 / (rank**spec.zipf_s) for rank in range(1, spec.n_adapters + 1)]
    cumulative = list(accumulate(weights))
    total = cumulative[-1]
    at, prompt, output = read_trace(spec.trace)
    n = len(at) if spec.limit is None else min(spec.limit, len(at))
    out = [
        Request(
            at=at[i] / spec.speedup,
            prompt_tokens=prompt[i],
            output_tokens=output[i],
            adapter=adapter_name(bisect_left(cumulative, rng.random() * total) + 1),
        )
        for i in range(n)
    ]
    out.sort(key=lambda r: r.at)
    return out


__all__ = ["DEFAULT_TRACE", "Request", "WorkloadSpec", "adapter_name", "load_workload"]
