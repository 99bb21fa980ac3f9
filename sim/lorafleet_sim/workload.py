"""Arrivals, lengths and adapters of simulated requests, deterministic per seed.

Arrivals: a trace CSV with the columns of ../shared/traces (`TIMESTAMP, ContextTokens,
GeneratedTokens`) time-compressed so its mean rate becomes `rate`, repeated end to end until
`duration_s` (each pass draws fresh adapters); or Poisson arrivals at `rate` with lengths drawn
from the trace's rows. The trace carries no tenant, so adapters come from a popularity mix:
Zipf(s) over N adapters, or a tenant mix file (CSV `tenant,share[,tokens_per_s]`; a row with
generated tokens/s gets the share of requests that produces it instead).
"""

from __future__ import annotations

import csv
import os
import random
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime
from itertools import accumulate
from pathlib import Path

from lorafleet_core.planning.traffic_split import choose_version


def default_trace() -> Path:
    """`$LORAFLEET_TRACE`, else ../shared/traces beside the first checkout folder above here."""
    env = os.environ.get("LORAFLEET_TRACE")
    if env:
        return Path(env)
    name = Path("shared/traces/azure-llm-2023-conv.csv")
    for parent in Path(__file__).resolve().parents:
        if (parent / name).is_file():
            return parent / name
    return Path("/work") / name  # not found: the error names the path looked for


def adapter_name(rank: int) -> str:
    return f"adapter-{rank:05d}"


@dataclass(frozen=True)
class Mix:
    """Adapter names and their request weights (any positive scale)."""

    names: tuple[str, ...]
    weights: tuple[float, ...]
    label: str

    @classmethod
    def zipf(cls, n: int, s: float) -> Mix:
        names = tuple(adapter_name(r) for r in range(1, n + 1))
        return cls(names, tuple(1.0 / r**s for r in range(1, n + 1)), f"zipf(s={s:g}, n={n})")

    def with_hot(self, name: str, tokens_per_s: float, rate: float, mean_output: float) -> Mix:
        """Add (or replace) one adapter generating `tokens_per_s` at the given request rate."""
        share = min(0.95, tokens_per_s / max(rate * mean_output, 1e-9))
        rest = [(n, w) for n, w in zip(self.names, self.weights, strict=True) if n != name]
        total = sum(w for _, w in rest)
        hot_w = share / (1 - share) * total
        names = (name, *(n for n, _ in rest))
        weights = (hot_w, *(w for _, w in rest))
        label = f"{self.label} + {name} at {tokens_per_s:g} tokens/s"
        return Mix(names, weights, label)


def read_mix(path: Path, rate: float, mean_output: float) -> Mix:
    """A tenant mix file: `tenant,share[,tokens_per_s]`, header optional."""
    names: list[str] = []
    weights: list[float] = []
    hot: list[tuple[str, float]] = []
    with path.open(newline="") as f:
        for row in csv.reader(f):
            if not row or row[0].strip().lower() in ("tenant", "") or row[0].startswith("#"):
                continue
            name, share = row[0].strip(), float(row[1]) if len(row) > 1 and row[1] else 0.0
            if len(row) > 2 and row[2].strip():
                hot.append((name, float(row[2])))
            elif share > 0:
                names.append(name)
                weights.append(share)
    mix = Mix(tuple(names), tuple(weights), f"mix {path.name}")
    for name, tps in hot:
        mix = mix.with_hot(name, tps, rate, mean_output)
    return mix


@dataclass
class Workload:
    """Requests in arrival order, one column per field (cheap to build and to walk)."""

    at: list[float] = field(default_factory=list)
    prompt: list[int] = field(default_factory=list)
    output: list[int] = field(default_factory=list)
    adapter: list[int] = field(default_factory=list)  # index into names
    names: tuple[str, ...] = ()
    label: str = ""

    def __len__(self) -> int:
        return len(self.at)


def rollout(
    w: Workload, primary: str, version: str, weights_at: list[tuple[float, int]], seed: int
) -> Workload:
    """`w` with a weighted rollout of `primary`'s alias to `version`: from each (time, percent)
    of `weights_at` on, that percent of `primary`'s requests go to `version` (100: promoted,
    spec.adapter moved to it), chosen by the gateway's own `choose_version` with a seeded draw
    (the trace names no users)."""
    steps = sorted(weights_at)
    names = (*w.names, version)
    src, dst = w.names.index(primary), len(w.names)
    rng = random.Random(seed)
    adapters = list(w.adapter)
    for k, (t, a) in enumerate(zip(w.at, w.adapter, strict=True)):
        if a != src:
            continue
        weight = next((p for at, p in reversed(steps) if at <= t), 0)
        chosen = choose_version(primary, primary, [(version, weight)], None, rng.randrange)
        adapters[k] = dst if chosen == version else src
    plan = ", ".join(f"{p}% at {at:g} s" for at, p in steps)
    label = f"{w.label}, {primary} -> {version}: {plan}"
    return Workload(list(w.at), list(w.prompt), list(w.output), adapters, names, label)


def read_trace(path: Path) -> tuple[list[float], list[int], list[int]]:
    """(seconds since the first request, prompt tokens, output tokens) of a trace CSV."""
    at: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    t0: datetime | None = None
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            ts = datetime.fromisoformat(row["TIMESTAMP"][:26])
            t0 = t0 or ts
            at.append((ts - t0).total_seconds())
            prompt.append(max(1, int(row["ContextTokens"])))
            output.append(max(1, int(row["GeneratedTokens"])))
    order = sorted(range(len(at)), key=at.__getitem__)
    return [at[i] for i in order], [prompt[i] for i in order], [output[i] for i in order]


_TRACE_CACHE: dict[Path, tuple[list[float], list[int], list[int]]] = {}


def _trace(path: Path) -> tuple[list[float], list[int], list[int]]:
    if path not in _TRACE_CACHE:
        _TRACE_CACHE[path] = read_trace(path)
    return _TRACE_CACHE[path]


def mean_output_tokens(path: Path) -> float:
    _, _, o = _trace(path)
    return sum(o) / max(1, len(o))


def build(
    *,
    mix: Mix,
    rate: float,
    duration_s: float,
    seed: int,
    trace: Path | None = None,
    poisson: bool = False,
    rate_at: list[tuple[float, float]] | None = None,
) -> Workload:
    """The requests of one run. `rate_at` [(time, factor)] scales the rate from each time on
    (a ramp); arrivals are thinned/compressed accordingly."""
    trace = trace or default_trace()
    t_at, t_prompt, t_output = _trace(trace)
    rng = random.Random(seed)
    cumulative = list(accumulate(mix.weights))
    total = cumulative[-1]
    w = Workload(names=mix.names)
    n_rows = len(t_at)
    span = t_at[-1] - t_at[0] if n_rows > 1 else 1.0
    trace_rate = n_rows / span
    factors = sorted(rate_at or [])
    t = 0.0
    i = 0
    base = 0.0  # trace time where this pass started
    offset = 0.0  # simulated time where this pass started
    while True:
        r = rate * _factor(factors, t)
        if poisson:
            t += rng.expovariate(r)
            j = rng.randrange(n_rows)
        else:
            if i >= n_rows:
                i, base = 0, t_at[0]
                offset = t
            gap = (t_at[i] - (t_at[i - 1] if i > 0 else base)) if i > 0 else 0.0
            t = (offset if i == 0 else t) + gap * trace_rate / r
            j = i
            i += 1
        if t >= duration_s:
            break
        w.at.append(t)
        w.prompt.append(t_prompt[j])
        w.output.append(t_output[j])
        w.adapter.append(bisect_left(cumulative, rng.random() * total))
    source = "poisson" if poisson else f"trace {trace.name}"
    w.label = f"{source} at {rate:g} req/s for {duration_s:g} s, {mix.label}, seed {seed}"
    return w


def _factor(factors: list[tuple[float, float]], t: float) -> float:
    f = 1.0
    for at, value in factors:
        if t >= at:
            f = value
        else:
            break
    return max(f, 1e-6)
