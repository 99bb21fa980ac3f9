"""The design's workload from the real trace: arrivals and lengths, adapters by a Zipf mix.

The Azure LLM conversation trace (../shared/traces/, CC-BY 4.0, Patel et al., Splitwise, ISCA
2024) has arrival times and token counts but no tenant, so each request gets an adapter drawn
from Zipf(s) over `n_adapters` ranks with a fixed seed. Time compression ×7 turns the trace's
5.5 requests/s into the design's ~40 requests/s. State the mix and the seed with every result.
"""

from __future__ import annotations

import csv
import random
from bisect import bisect_left
from dataclasses import dataclass
from datetime import datetime
from itertools import accumulate
from pathlib import Path

DEFAULT_TRACE = Path(__file__).resolve().parents[1].parent / "shared/traces/azure-llm-2023-conv.csv"


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


def adapter_name(rank: int) -> str:
    return f"adapter-{rank:05d}"


def load_workload(spec: WorkloadSpec) -> list[Request]:
    """Requests in arrival order, adapters drawn from Zipf(spec.zipf_s) by rank."""
    rng = random.Random(spec.seed)
    weights = [1.0 / (rank**spec.zipf_s) for rank in range(1, spec.n_adapters + 1)]
    cumulative = list(accumulate(weights))
    total = cumulative[-1]
    out: list[Request] = []
    t0: datetime | None = None
    with spec.trace.open(newline="") as f:
        for row in csv.DictReader(f):
            ts = datetime.fromisoformat(row["TIMESTAMP"][:26])
            t0 = t0 or ts
            rank = bisect_left(cumulative, rng.random() * total) + 1  # ranks start at 1
            out.append(
                Request(
                    at=(ts - t0).total_seconds() / spec.speedup,
                    prompt_tokens=int(row["ContextTokens"]),
                    output_tokens=max(1, int(row["GeneratedTokens"])),
                    adapter=adapter_name(rank),
                )
            )
            if spec.limit is not None and len(out) >= spec.limit:
                break
    out.sort(key=lambda r: r.at)
    return out
