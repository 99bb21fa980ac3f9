"""The load test's plan (pure): trace requests -> aliases, lengths the target can serve, prompts.

The production trace (../shared/traces, read by `lorafleet_sim.workload`, the one reader
of the trace format) has prompts of ~1,000 tokens (p95 ~4,000) and answers of ~130 (p95 ~450);
the demo's vLLM serves at most `--max-model-len 256` tokens per request. Lengths are therefore
mapped onto what the target serves, in one of two ways:

  scale  multiply every length by cap / (the window's p95 of that length), then clip at the
         cap: the shape of the distribution (short vs long requests) is kept;
  cap    clip at the cap only: most trace requests land exactly on the cap.

Both keep prompt + output within `max_model_len`, leaving `template_tokens` for the chat
template.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from lorafleet_sim import workload

# Plain words for synthetic prompts. Real BPE tokenizers spend ~1.3 tokens per English word;
# the demo's 384-token vocabulary spends ~2.4 (measured), hence `tokens_per_word`.
_WORDS = [
    "the",
    "customer",
    "asked",
    "about",
    "the",
    "order",
    "status",
    "and",
    "the",
    "delivery",
    "window",
    "for",
    "a",
    "new",
    "device",
    "please",
    "summarise",
    "the",
    "account",
    "history",
    "and",
    "suggest",
    "what",
    "support",
    "should",
    "answer",
    "next",
]


@dataclass(frozen=True)
class LengthLimits:
    max_prompt_tokens: int = 64
    max_output_tokens: int = 32
    max_model_len: int = 256
    template_tokens: int = 16
    # The demo canaries need up to 8 tokens for their marker; shorter answers prove little.
    min_output_tokens: int = 8
    mode: str = "scale"  # or "cap"

    def __post_init__(self) -> None:
        if self.mode not in ("scale", "cap"):
            raise ValueError(f"length mode must be 'scale' or 'cap', not {self.mode!r}")
        if min(self.max_prompt_tokens, self.max_output_tokens) < 1:
            raise ValueError("length caps must be >= 1")
        room = self.max_model_len - self.template_tokens
        if self.max_prompt_tokens + self.max_output_tokens > room:
            raise ValueError(
                f"--max-prompt-tokens + --max-output-tokens ({self.max_prompt_tokens} + "
                f"{self.max_output_tokens}) exceed --max-model-len {self.max_model_len} minus "
                f"{self.template_tokens} tokens of chat template"
            )


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    index: int
    at: float  # seconds after the start of the run
    alias: str
    prompt_tokens: int  # as scaled (what the prompt is built for)
    max_tokens: int
    trace_prompt_tokens: int
    trace_output_tokens: int


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of the replayed trace: arrival, trace lengths, Zipf rank (1 = hottest)."""

    at: float
    prompt_tokens: int
    output_tokens: int
    rank: int


@dataclass(frozen=True)
class ReplaySpec:
    """Which stretch of which trace, how fast, and how requests spread over the aliases."""

    trace: Path
    rate: float  # offered requests/s over the replayed window
    duration_s: float
    max_requests: int
    zipf_s: float = 1.0
    seed: int = 0

    def describe(self, n_aliases: int) -> str:
        return (
            f"trace={self.trace.name} rate={self.rate:g} req/s duration={self.duration_s:g} s "
            f"Zipf(s={self.zipf_s:g}) over {n_aliases} aliases, seed={self.seed}"
        )


def p95(values: list[int]) -> float:
    if not values:
        return 1.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)])


def scale_length(n: int, cap: int, factor: float, floor: int = 1) -> int:
    """One length mapped onto [floor, cap]: `n * factor`, rounded up, clipped."""
    return max(1, floor, min(cap, math.ceil(n * factor)))


def scale_requests(
    requests: list[TraceRequest], aliases: list[str], limits: LengthLimits
) -> list[PlannedRequest]:
    """Map trace requests onto aliases (Zipf rank r -> aliases[r-1]) and servable lengths."""
    if limits.mode == "scale":
        f_prompt = limits.max_prompt_tokens / p95([r.prompt_tokens for r in requests])
        f_output = limits.max_output_tokens / p95([r.output_tokens for r in requests])
    else:
        f_prompt = f_output = 1.0
    t0 = requests[0].at if requests else 0.0
    return [
        PlannedRequest(
            index=i,
            at=r.at - t0,
            alias=aliases[r.rank - 1],
            prompt_tokens=scale_length(r.prompt_tokens, limits.max_prompt_tokens, f_prompt),
            max_tokens=scale_length(
                r.output_tokens,
                limits.max_output_tokens,
                f_output,
                min(limits.min_output_tokens, limits.max_output_tokens),
            ),
            trace_prompt_tokens=r.prompt_tokens,
            trace_output_tokens=r.output_tokens,
        )
        for i, r in enumerate(requests)
    ]


def _head(spec: ReplaySpec, n_aliases: int, n: int) -> list[TraceRequest]:
    """The trace's first `n` requests at its own pace (compression 1), adapters drawn."""
    horizon = 60.0
    while True:
        # The simulator's workload is the one reader of the trace and of the Zipf draw; at a
        # nominal rate of 1 req/s it keeps the trace's gaps (scaled by its mean rate).
        w = workload.build(
            mix=workload.Mix.zipf(n_aliases, spec.zipf_s),
            rate=1.0,
            duration_s=horizon,
            seed=spec.seed,
            trace=spec.trace,
        )
        if len(w) >= n:
            return [
                TraceRequest(w.at[i], w.prompt[i], w.output[i], w.adapter[i] + 1) for i in range(n)
            ]
        horizon *= 2


def trace_window(spec: ReplaySpec, n_aliases: int) -> list[TraceRequest]:
    """The trace's first requests, compressed so that the window offers exactly `spec.rate`.

    The trace's mean rate is not its first minutes' rate (they are sparser), so the compression
    is set on the window itself: the first `rate * duration + 1` requests (at most
    `max_requests`), their arrival times scaled so that they span `(n - 1) / rate` seconds.
    The adapter draw does not depend on the rate: a faster replay sends the same first requests
    to the same aliases, closer together, and more of them.
    """
    if n_aliases < 1:
        raise ValueError("no aliases to load")
    if spec.rate <= 0 or spec.duration_s <= 0 or spec.max_requests < 1:
        raise ValueError("rate, duration and max requests must be positive")
    n = max(1, min(spec.max_requests, math.floor(spec.rate * spec.duration_s) + 1))
    head = _head(spec, n_aliases, n)
    span = head[-1].at - head[0].at
    factor = (n - 1) / (spec.rate * span) if n > 1 and span > 0 else 1.0
    t0 = head[0].at
    return [
        TraceRequest((r.at - t0) * factor, r.prompt_tokens, r.output_tokens, r.rank) for r in head
    ]


def plan_replay(spec: ReplaySpec, aliases: list[str], limits: LengthLimits) -> list[PlannedRequest]:
    """The requests of one replay, mapped onto `aliases` (hottest first) and servable lengths."""
    return scale_requests(trace_window(spec, len(aliases)), aliases, limits)


def prompt_text(tokens: int, index: int, tokens_per_word: float) -> str:
    """A plain-English prompt of about `tokens` tokens (distinct per request: no prefix cache)."""
    words = max(1, round(tokens / tokens_per_word))
    start = (index * 7) % len(_WORDS)
    body = [_WORDS[(start + i) % len(_WORDS)] for i in range(words)]
    return " ".join(body)
