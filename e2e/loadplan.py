"""The load test's plan (pure): trace requests -> aliases, lengths the target can serve, prompts.

The production trace (`benchmarks.workload`) has prompts of ~1,000 tokens (p95 ~4,000) and
answers of ~130 (p95 ~450); the demo's vLLM serves at most `--max-model-len 256` tokens per
request. Lengths are therefore mapped onto what the target serves, in one of two ways:

  scale  multiply every length by cap / (the window's p95 of that length), then clip at the
         cap: the shape of the distribution (short vs long requests) is kept;
  cap    clip at the cap only: most trace requests land exactly on the cap.

Both keep prompt + output within `max_model_len`, leaving `template_tokens` for the chat
template.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from benchmarks.workload import Request, WorkloadSpec, adapter_name, load_workload

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


def p95(values: list[int]) -> float:
    if not values:
        return 1.0
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)])


def scale_length(n: int, cap: int, factor: float, floor: int = 1) -> int:
    """One length mapped onto [floor, cap]: `n * factor`, rounded up, clipped."""
    return max(1, floor, min(cap, math.ceil(n * factor)))


def scale_requests(
    requests: list[Request], aliases: list[str], limits: LengthLimits
) -> list[PlannedRequest]:
    """Map trace requests onto aliases (Zipf rank r -> aliases[r-1]) and servable lengths."""
    by_rank = {adapter_name(rank): alias for rank, alias in enumerate(aliases, start=1)}
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
            alias=by_rank[r.adapter],
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


def native_rate(spec: WorkloadSpec, sample: int) -> float:
    """Requests/s of the uncompressed trace over its first `sample` requests."""
    head = load_workload(
        WorkloadSpec(spec.trace, 1.0, spec.n_adapters, spec.zipf_s, spec.seed, sample)
    )
    span = head[-1].at - head[0].at if len(head) > 1 else 0.0
    return (len(head) - 1) / span if span > 0 else 1.0


def plan_workload(
    *,
    spec: WorkloadSpec,
    aliases: list[str],
    limits: LengthLimits,
    max_requests: int,
    duration_s: float,
) -> list[PlannedRequest]:
    """The trace's first requests that fall inside `duration_s`, at most `max_requests`."""
    if not aliases:
        raise ValueError("no aliases to load")
    loaded = load_workload(
        WorkloadSpec(spec.trace, spec.speedup, len(aliases), spec.zipf_s, spec.seed, max_requests)
    )
    t0 = loaded[0].at if loaded else 0.0
    window = [r for r in loaded if r.at - t0 <= duration_s]
    return scale_requests(window, aliases, limits)


def prompt_text(tokens: int, index: int, tokens_per_word: float) -> str:
    """A plain-English prompt of about `tokens` tokens (distinct per request: no prefix cache)."""
    words = max(1, round(tokens / tokens_per_word))
    start = (index * 7) % len(_WORDS)
    body = [_WORDS[(start + i) % len(_WORDS)] for i in range(words)]
    return " ".join(body)
