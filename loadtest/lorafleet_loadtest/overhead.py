"""Adapter overhead (pure): throughput with 1, 8, 32 distinct adapters per batch vs the base model.

Each row is a closed-loop run (driver.saturate) at the same concurrency, prompt and output
length, repeated in rounds that interleave the rows (base, 1, 8, 32, base, 1, ...) so that a
change in the machine's load hits every row alike. A row's tokens/s is the median over its
rounds; the overhead is the throughput lost against the base model in the same round,
`1 - tokens/s(k adapters) / tokens/s(base)`, median over the rounds. The design assumes ~20%
for unmerged multi-LoRA on a GPU. A row's GPU share says whether its k adapters really sat in
GPU slots together: a pool with fewer slots than k swaps adapters mid-run, and the row then
measures that too.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from lorafleet_loadtest.probe.results import RequestResult
from lorafleet_loadtest.stats import Quantiles, tpot_s

DESIGN_OVERHEAD = 0.20


@dataclass(frozen=True)
class ThroughputRow:
    name: str  # "base" or "N adapters"
    distinct: int  # distinct models in every batch (0: the base model)
    requests: int
    ok: int
    completion_tokens: int
    elapsed_s: float
    gpu_share: float | None  # None for the base model (no adapter tier)
    ttft: Quantiles
    tpot: Quantiles
    rounds: tuple[float, ...] = ()  # tokens/s of each round

    @property
    def tokens_per_s(self) -> float:
        if self.rounds:
            return statistics.median(self.rounds)
        return self.completion_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0


def _tokens_per_s(results: list[RequestResult], elapsed_s: float) -> float:
    tokens = sum(r.completion_tokens or 0 for r in results if r.ok)
    return tokens / elapsed_s if elapsed_s > 0 else 0.0


def throughput_row(
    name: str, distinct: int, rounds: list[tuple[list[RequestResult], float]]
) -> ThroughputRow:
    """One row from its rounds: (results, elapsed seconds) of each."""
    results = [r for rs, _ in rounds for r in rs]
    elapsed_s = sum(e for _, e in rounds)
    ok = [r for r in results if r.ok]
    tiers = [r.tier for r in ok if r.tier]
    return ThroughputRow(
        name=name,
        distinct=distinct,
        requests=len(results),
        ok=len(ok),
        completion_tokens=sum(r.completion_tokens or 0 for r in ok),
        elapsed_s=elapsed_s,
        gpu_share=(sum(t == "gpu" for t in tiers) / len(tiers)) if tiers else None,
        ttft=Quantiles.of([r.ttft_s for r in ok if r.ttft_s is not None]),
        tpot=Quantiles.of([v for r in ok if (v := tpot_s(r)) is not None]),
        rounds=tuple(_tokens_per_s(rs, e) for rs, e in rounds),
    )


def overhead(row: ThroughputRow, base: ThroughputRow | None) -> float | None:
    """Throughput lost against the base model (0.2 = 20% fewer tokens/s); None without base."""
    if base is None or base.tokens_per_s <= 0 or row.distinct == 0:
        return None
    if len(row.rounds) == len(base.rounds) > 0 and all(b > 0 for b in base.rounds):
        return statistics.median(1.0 - r / b for r, b in zip(row.rounds, base.rounds, strict=True))
    return 1.0 - row.tokens_per_s / base.tokens_per_s


def rows_to_json(rows: list[ThroughputRow]) -> list[dict[str, Any]]:
    base = next((r for r in rows if r.distinct == 0), None)
    return [
        {
            "name": r.name,
            "distinct_adapters": r.distinct,
            "requests": r.requests,
            "ok": r.ok,
            "completion_tokens": r.completion_tokens,
            "elapsed_s": round(r.elapsed_s, 3),
            "tokens_per_s": round(r.tokens_per_s, 2),
            "rounds_tokens_per_s": [round(v, 2) for v in r.rounds],
            "overhead_vs_base": None if (o := overhead(r, base)) is None else round(o, 4),
            "gpu_share": None if r.gpu_share is None else round(r.gpu_share, 4),
            "ttft": r.ttft.as_ms(),
            "tpot": r.tpot.as_ms(),
        }
        for r in rows
    ]


def rows_passed(rows: list[dict[str, Any]], max_error_rate: float) -> bool:
    """Whether an overhead run passed: rows were measured, each answered something and failed
    at most `max_error_rate` of its requests."""
    return bool(rows) and all(
        r["ok"] > 0 and (r["requests"] - r["ok"]) / r["requests"] <= max_error_rate for r in rows
    )


def missing_aliases(counts: list[int], available: int) -> str | None:
    """Why the overhead mode cannot run against a deployment with `available` aliases."""
    need = max(counts, default=0)
    if need <= available:
        return None
    return (
        f"--overhead with {need} distinct adapters per batch needs {need} aliases, and the "
        f"gateway lists {available} for this key: push more adapter versions and alias them "
        f"(docs/reference/verification.md, 'More aliases for the overhead run'), or lower "
        f"--adapter-counts to at most {available}"
    )
