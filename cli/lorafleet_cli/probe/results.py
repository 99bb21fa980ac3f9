"""What one request measured, marker checking, and the load test's summary (pure)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

TIER_ORDER = ("gpu", "ram", "disk", "remote", "?")


@dataclass(slots=True)
class RequestResult:
    index: int
    alias: str
    scheduled_at: float  # seconds after the run's start, as planned
    started_at: float  # when it was really sent (later when the concurrency cap held it)
    status: str  # "200", "429", "503", ..., "connection", "timeout", "stream_error"
    ttft_s: float | None = None
    total_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tier: str | None = None
    replica: str | None = None
    adapter_id: str | None = None
    text: str = ""
    marker_ok: bool | None = None  # None: no marker known for the alias, or no answer
    finish_reason: str | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "200"


def marker_matches(text: str, marker: str | None, *, truncated: bool = False) -> bool | None:
    """Whether the answer carries the adapter's canary marker (None when none is known).

    An answer cut off by `max_tokens` (`truncated`) before the whole marker came out still
    matches when it is a non-empty beginning of the marker: a wrong adapter answers its own.
    """
    if marker is None:
        return None
    if marker in text:
        return True
    head = text.strip()
    return truncated and bool(head) and marker.startswith(head)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 1]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class Summary:
    requests: int
    ok: int
    elapsed_s: float
    offered_rps: float
    achieved_rps: float
    errors: dict[str, int]
    ttft: dict[str, tuple[float | None, float | None, float | None]]  # "all"/tier -> p50,p95,p99
    tier_mix: dict[str, int]
    mismatches: list[RequestResult] = field(default_factory=list)
    completion_tokens: int = 0
    total_p50_s: float | None = None
    # Time requests waited for a --concurrency slot before being sent (not in TTFT).
    client_wait_p95_s: float | None = None

    @property
    def error_rate(self) -> float:
        return (self.requests - self.ok) / self.requests if self.requests else 0.0


def summarize(results: list[RequestResult], elapsed_s: float, planned_span_s: float) -> Summary:
    ok = [r for r in results if r.ok]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    by_tier: dict[str, list[float]] = {}
    for r in ok:
        if r.ttft_s is not None:
            by_tier.setdefault(r.tier or "?", []).append(r.ttft_s)
    ttft = {"all": _p(ttfts)}
    for tier in TIER_ORDER:
        if tier in by_tier:
            ttft[tier] = _p(by_tier[tier])
    totals = [r.total_s for r in ok if r.total_s is not None]
    return Summary(
        requests=len(results),
        ok=len(ok),
        elapsed_s=elapsed_s,
        offered_rps=len(results) / planned_span_s if planned_span_s > 0 else 0.0,
        achieved_rps=len(ok) / elapsed_s if elapsed_s > 0 else 0.0,
        errors=dict(Counter(r.status for r in results if not r.ok)),
        ttft=ttft,
        tier_mix=dict(Counter(r.tier or "?" for r in ok)),
        mismatches=[r for r in results if r.marker_ok is False],
        completion_tokens=sum(r.completion_tokens or 0 for r in ok),
        total_p50_s=percentile(totals, 0.5),
        client_wait_p95_s=percentile([r.started_at - r.scheduled_at for r in results], 0.95),
    )


def _p(values: list[float]) -> tuple[float | None, float | None, float | None]:
    return percentile(values, 0.5), percentile(values, 0.95), percentile(values, 0.99)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


def format_summary(s: Summary) -> str:
    lines = [
        f"requests {s.requests}  ok {s.ok}  errors {s.requests - s.ok} "
        f"({100 * s.error_rate:.1f}%)  elapsed {s.elapsed_s:.1f} s",
        f"offered {s.offered_rps:.2f} req/s  achieved {s.achieved_rps:.2f} req/s  "
        f"completion tokens {s.completion_tokens} "
        f"({s.completion_tokens / max(s.elapsed_s, 1e-9):.1f}/s)"
        f"  total time p50 {_ms(s.total_p50_s)} ms",
        f"client-side wait for a --concurrency slot p95 {_ms(s.client_wait_p95_s)} ms"
        + (
            "  (WARNING: the client held requests back; TTFT excludes that wait)"
            if (s.client_wait_p95_s or 0.0) > 0.1
            else ""
        ),
        "errors by status: "
        + (", ".join(f"{k}: {v}" for k, v in sorted(s.errors.items())) or "none"),
        "",
        f"{'TTFT ms':<10}{'n':>6}{'share':>8}{'p50':>8}{'p95':>8}{'p99':>8}",
    ]
    for key, (p50, p95, p99) in s.ttft.items():
        n = s.ok if key == "all" else s.tier_mix.get(key, 0)
        share = f"{100 * n / s.ok:.1f}%" if s.ok else "-"
        lines.append(f"{key:<10}{n:>6}{share:>8}{_ms(p50):>8}{_ms(p95):>8}{_ms(p99):>8}")
    lines.append("")
    if s.mismatches:
        lines.append(f"MARKER MISMATCHES: {len(s.mismatches)}")
        for r in s.mismatches[:10]:
            lines.append(
                f"  #{r.index} {r.alias} adapter={r.adapter_id} replica={r.replica}: "
                f"{r.text[:60]!r}"
            )
    else:
        lines.append("marker mismatches: 0")
    return "\n".join(lines)
