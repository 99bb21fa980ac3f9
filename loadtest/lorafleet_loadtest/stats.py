"""What one load-test run measured, reduced to figures (pure): by tier, by alias, errors.

TTFT is the time to the first chunk that carries text; time per output token (TPOT) is the rest
of the stream spread over the tokens after the first, `(total - TTFT) / (completion tokens - 1)`
(requests with one token or no usage have none). The tier is the gateway's `x-adapter-tier`:
where the replica found the adapter (gpu | ram | disk | remote), so the GPU tier's share is the
routing's hit rate. A 429 is the rate limiter, counted apart from the other errors.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from lorafleet_core.stats import percentile
from lorafleet_loadtest.probe.results import TIER_ORDER, RequestResult

QUANTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True)
class Quantiles:
    """p50 / p95 / p99 in seconds (None: no values)."""

    n: int
    p50: float | None
    p95: float | None
    p99: float | None

    @classmethod
    def of(cls, values: list[float]) -> Quantiles:
        p50, p95, p99 = (percentile(values, q) for q in QUANTILES)
        return cls(len(values), p50, p95, p99)

    def as_ms(self) -> dict[str, Any]:
        return {
            "n": self.n,
            **{k: None if v is None else round(1000 * v, 3) for k, v in self._items()},
        }

    def _items(self) -> list[tuple[str, float | None]]:
        return [("p50_ms", self.p50), ("p95_ms", self.p95), ("p99_ms", self.p99)]


def tpot_s(r: RequestResult) -> float | None:
    """Seconds per output token after the first one; None when it cannot be told."""
    if not r.ok or r.ttft_s is None or r.total_s is None or (r.completion_tokens or 0) < 2:
        return None
    return max(0.0, r.total_s - r.ttft_s) / ((r.completion_tokens or 0) - 1)


@dataclass(frozen=True)
class TierStats:
    tier: str
    share: float  # of the run's successful requests
    ttft: Quantiles
    tpot: Quantiles


@dataclass
class RunStats:
    """One run (one offered rate) as the JSON, the tables and the exit code see it."""

    label: str
    offered_rps: float
    achieved_rps: float
    elapsed_s: float
    requests: int
    ok: int
    rate_limited: int  # 429s
    errors: dict[str, int]  # status -> count, every unsuccessful request (429s included)
    ttft: Quantiles
    tpot: Quantiles
    tiers: list[TierStats]
    aliases: dict[str, Quantiles]  # alias -> its TTFT quantiles
    completion_tokens: int
    mismatches: int
    client_wait_p95_s: float | None
    mismatch_examples: list[str] = field(default_factory=list)

    @property
    def error_count(self) -> int:
        return self.requests - self.ok

    @property
    def error_rate(self) -> float:
        return self.error_count / self.requests if self.requests else 0.0

    @property
    def gpu_share(self) -> float:
        return next((t.share for t in self.tiers if t.tier == "gpu"), 0.0)

    @property
    def tokens_per_s(self) -> float:
        return self.completion_tokens / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def worst_alias(self) -> tuple[str, float] | None:
        """The alias with the highest p95 TTFT (the per-adapter SLO's weakest point)."""
        scored = [(a, q.p95) for a, q in self.aliases.items() if q.p95 is not None]
        return max(scored, key=lambda item: item[1]) if scored else None


def summarize(
    results: list[RequestResult], *, elapsed_s: float, planned_span_s: float, label: str = ""
) -> RunStats:
    """The figures of one run. `planned_span_s` is the trace window the plan covered."""
    ok = [r for r in results if r.ok]
    by_tier: dict[str, list[RequestResult]] = {}
    by_alias: dict[str, list[float]] = {}
    for r in ok:
        by_tier.setdefault(r.tier or "?", []).append(r)
        if r.ttft_s is not None:
            by_alias.setdefault(r.alias, []).append(r.ttft_s)
    tiers = [
        TierStats(
            tier=t,
            share=len(rs) / len(ok),
            ttft=Quantiles.of([r.ttft_s for r in rs if r.ttft_s is not None]),
            tpot=Quantiles.of([v for r in rs if (v := tpot_s(r)) is not None]),
        )
        for t in TIER_ORDER
        if (rs := by_tier.get(t))
    ]
    errors = Counter(r.status for r in results if not r.ok)
    mismatched = [r for r in results if r.marker_ok is False]
    return RunStats(
        label=label,
        offered_rps=len(results) / planned_span_s if planned_span_s > 0 else 0.0,
        achieved_rps=len(ok) / elapsed_s if elapsed_s > 0 else 0.0,
        elapsed_s=elapsed_s,
        requests=len(results),
        ok=len(ok),
        rate_limited=errors.get("429", 0),
        errors=dict(sorted(errors.items())),
        ttft=Quantiles.of([r.ttft_s for r in ok if r.ttft_s is not None]),
        tpot=Quantiles.of([v for r in ok if (v := tpot_s(r)) is not None]),
        tiers=tiers,
        aliases={a: Quantiles.of(v) for a, v in sorted(by_alias.items())},
        completion_tokens=sum(r.completion_tokens or 0 for r in ok),
        mismatches=len(mismatched),
        client_wait_p95_s=percentile([r.started_at - r.scheduled_at for r in results], 0.95),
        mismatch_examples=[
            f"#{r.index} {r.alias} adapter={r.adapter_id} replica={r.replica}: {r.text[:60]!r}"
            for r in mismatched[:10]
        ],
    )


def stats_to_json(s: RunStats) -> dict[str, Any]:
    return {
        "label": s.label,
        "offered_rps": round(s.offered_rps, 4),
        "achieved_rps": round(s.achieved_rps, 4),
        "elapsed_s": round(s.elapsed_s, 3),
        "requests": s.requests,
        "ok": s.ok,
        "errors": s.errors,
        "rate_limited": s.rate_limited,
        "error_rate": round(s.error_rate, 6),
        "gpu_share": round(s.gpu_share, 6),
        "completion_tokens": s.completion_tokens,
        "tokens_per_s": round(s.tokens_per_s, 2),
        "ttft": s.ttft.as_ms(),
        "tpot": s.tpot.as_ms(),
        "tiers": {
            t.tier: {"share": round(t.share, 6), "ttft": t.ttft.as_ms(), "tpot": t.tpot.as_ms()}
            for t in s.tiers
        },
        "aliases": {a: q.as_ms() for a, q in s.aliases.items()},
        "mismatches": s.mismatches,
        "mismatch_examples": s.mismatch_examples,
        "client_wait_p95_ms": None
        if s.client_wait_p95_s is None
        else round(1000 * s.client_wait_p95_s, 3),
    }


def verdict(runs: list[RunStats], max_error_rate: float) -> int:
    """0 every run answered within the error budget with no wrong marker; 1 otherwise."""
    if not runs or any(r.requests == 0 or r.mismatches for r in runs):
        return 1
    return 1 if any(r.error_rate > max_error_rate for r in runs) else 0
