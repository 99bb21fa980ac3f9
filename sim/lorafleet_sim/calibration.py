"""Calibration against the real stack (pure): one replay, fed to the simulator, compared.

`benchmarks/sim_calibration.py --measure` replays a trace slice against a real `lorafleet up`
and records, per request, when it was sent, which adapter its alias resolved to, the prompt's
tokens as the engine counts them, the tokens generated, the `x-adapter-tier` header and the
client's TTFT. Here:

- `replayed` reads those rows; `workload_of` turns them into the simulator's `Workload`, so
  both sides see the same arrival times, the same adapter per request and the same lengths;
- `sim_params` turns the measured figures (prefill and decode rates, request path, tier load
  times) and the fleet's configuration into the simulator's parameters;
- `figures` computes p50/p95 TTFT and tier shares the same way for both sides (nearest-rank
  percentiles over requests sent at or after `measure_from`), and `compare` the errors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

from lorafleet_core.stats import percentile
from lorafleet_core.wire.tiers import TIER_NAMES
from lorafleet_sim.params import FleetParams, ReplicaParams
from lorafleet_sim.workload import Workload

TARGET_ERROR = 0.20  # the calibration's target: predicted within 20% of measured
# The host CPU model's parameters (ReplicaParams.host_*), from calibration_host_probe's fit.
HOST_PARAMS = (
    "host_cores",
    "host_background",
    "host_engine_busy",
    "host_ttft_cpu_s",
    "host_token_cpu_s",
    "host_end_cpu_s",
    "host_pause_per_request",
    "host_pause_s",
    "host_pause_per_load",
    "host_pause_load_s",
    "host_pause_per_busy_s",
    "host_pause_busy_s",
)


@dataclass(frozen=True, slots=True)
class Replayed:
    """One request of a replay: what was sent (both sides) and what the client saw."""

    at: float  # planned send time, seconds after the replay's start
    adapter: str  # adapter id the alias resolves to
    prompt_tokens: int  # as the engine counts them (tokenizer + chat template)
    output_tokens: int  # generated (max_tokens when the request failed)
    tier: str | None = None  # x-adapter-tier; None when the request failed
    ttft_s: float | None = None


def replayed(rows: Sequence[Mapping[str, Any]]) -> list[Replayed]:
    """Rows of `benchmarks/sim_calibration.py`'s JSON as `Replayed`, in send order."""
    out = []
    for r in rows:
        ok = r.get("status") == "200" and r.get("ttft_s") is not None
        out.append(
            Replayed(
                at=float(r["scheduled_at"]),
                adapter=str(r["adapter"]),
                prompt_tokens=int(r["engine_prompt_tokens"]),
                output_tokens=int(r.get("completion_tokens") or r["max_tokens"]),
                tier=r.get("tier") if ok else None,
                ttft_s=float(r["ttft_s"]) if ok else None,
            )
        )
    return sorted(out, key=lambda x: x.at)


def workload_of(reqs: Sequence[Replayed], label: str = "replay") -> Workload:
    """The same requests as a simulator workload (request i of both sides is the same one)."""
    if any(b.at < a.at for a, b in pairwise(reqs)):
        raise ValueError("replayed requests must be in send order")
    names = tuple(sorted({r.adapter for r in reqs}))
    index = {name: i for i, name in enumerate(names)}
    return Workload(
        at=[r.at for r in reqs],
        prompt=[max(1, r.prompt_tokens) for r in reqs],
        output=[max(1, r.output_tokens) for r in reqs],
        adapter=[index[r.adapter] for r in reqs],
        names=names,
        label=label,
    )


def sim_params(
    measured: Mapping[str, float], fleet: Mapping[str, int]
) -> tuple[ReplicaParams, FleetParams]:
    """The simulator's parameters from measured figures and the real fleet's configuration.

    `measured`: prefill_tps, prefill_step_s, decode_s, decode_s_per_seq, path_s, ram_s,
    disk_s, remote_s (seconds; prefill in tokens/s), optionally the host CPU's HOST_PARAMS.
    `fleet`: replicas, gpu_slots, ram_slots, max_seqs, step_token_budget, disk_bytes.

    `path_s` is the whole measured path outside the engine at idle; with a host CPU model
    (host_cores > 0) its CPU part (`host_ttft_cpu_s`) is taken out of it, since the host then
    serves that part and it would otherwise count twice.
    """
    host = {k: float(measured[k]) for k in HOST_PARAMS if k in measured}
    path_s = float(measured["path_s"])
    if host.get("host_cores", 0.0) > 0:
        path_s = max(0.0, path_s - host.get("host_ttft_cpu_s", 0.0))
    rp = replace(
        ReplicaParams(),
        max_seqs=int(fleet["max_seqs"]),
        step_token_budget=int(fleet["step_token_budget"]),
        # the engine's --long-prefill-token-threshold (unset on the calibrated layout)
        long_prefill_token_threshold=int(fleet.get("long_prefill_token_threshold", 0)),
        gpu_slots=int(fleet["gpu_slots"]),
        ram_slots=int(fleet["ram_slots"]),
        disk_bytes=int(fleet["disk_bytes"]),
        adapter_bytes=int(fleet.get("adapter_bytes", 1_000_000)),
        prefill_tps=float(measured["prefill_tps"]),
        decode_s=float(measured["decode_s"]),
        decode_s_per_seq=float(measured.get("decode_s_per_seq", 0.0)),
        prefill_step_s=float(measured.get("prefill_step_s", 0.0)),
        path_s=path_s,
        ram_s=float(measured["ram_s"]),
        disk_s=float(measured["disk_s"]),
        remote_s=float(measured["remote_s"]),
        **host,
    )
    # One gateway process (standalone mode), polling every second as its settings default.
    fp = replace(FleetParams(), replicas=int(fleet["replicas"]), gateways=1)
    return rp, fp


def figures(
    at: Sequence[float],
    ttft_s: Sequence[float | None],
    tier: Sequence[str | None],
    measure_from: float = 0.0,
) -> dict[str, float]:
    """p50/p95 TTFT (ms) overall and per tier, and tier shares (%) of completed requests."""
    sel = [
        i
        for i in range(len(at))
        if at[i] >= measure_from and ttft_s[i] is not None and tier[i] is not None
    ]
    ttfts = [float(ttft_s[i]) for i in sel]  # type: ignore[arg-type]
    out: dict[str, float] = {"requests": float(len(sel))}
    for q in (50, 95):
        v = percentile(ttfts, q / 100)
        out[f"ttft_p{q}_ms"] = math.nan if v is None else 1000 * v
    for t in TIER_NAMES:
        of_tier = [float(ttft_s[i]) for i in sel if tier[i] == t]  # type: ignore[arg-type]
        out[f"{t}_pct"] = 100.0 * len(of_tier) / len(sel) if sel else math.nan
        v = percentile(of_tier, 0.5)
        out[f"ttft_p50_{t}_ms"] = math.nan if v is None else 1000 * v
    return out


def measured_figures(reqs: Sequence[Replayed], measure_from: float) -> dict[str, float]:
    return figures(
        [r.at for r in reqs], [r.ttft_s for r in reqs], [r.tier for r in reqs], measure_from
    )


def predicted_figures(
    at: Sequence[float],
    first_token: Sequence[float],
    tier_code: Sequence[int],
    measure_from: float,
) -> dict[str, float]:
    """The same figures from a simulator run (`Engine.arrival/first_token/tier`)."""
    ttft = [None if math.isnan(f) else f - a for a, f in zip(at, first_token, strict=True)]
    tier = [TIER_NAMES[c] if c >= 0 else None for c in tier_code]  # codes 0..3 index it
    return figures(at, ttft, tier, measure_from)


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    measured: float
    predicted: float
    error: float  # predicted / measured - 1 (TTFT); predicted - measured in points (shares)
    unit: str  # "ms" or "pp"

    @property
    def within_target(self) -> bool:
        if self.unit == "ms":
            return abs(self.error) <= TARGET_ERROR
        # A share: 20% of the measured share, but at least 2 points (small shares are noisy).
        return abs(self.error) <= max(2.0, TARGET_ERROR * self.measured)


COMPARED = (
    ("TTFT p50", "ttft_p50_ms", "ms"),
    ("TTFT p95", "ttft_p95_ms", "ms"),
    *((f"{t} share", f"{t}_pct", "pp") for t in TIER_NAMES),
    *((f"TTFT p50 {t}", f"ttft_p50_{t}_ms", "ms") for t in TIER_NAMES),
)


def compare(measured: Mapping[str, float], predicted: Mapping[str, float]) -> list[Row]:
    rows = []
    for name, key, unit in COMPARED:
        m, p = measured.get(key, math.nan), predicted.get(key, math.nan)
        if math.isnan(m) and math.isnan(p):
            continue
        relative = p / m - 1 if m and not math.isnan(m) else math.nan
        err = relative if unit == "ms" else p - m
        rows.append(Row(name, m, p, err, unit))
    return rows


def inside_outside(
    reqs: Sequence[Replayed],
    first_token: Sequence[float],
    engine_in: Sequence[float],
    engine_first: Sequence[float],
    engine_mean_s: float,
) -> list[Row]:
    """Mean TTFT split at the engine's queue, over every request of the replay (as vLLM's
    metrics are).

    Measured: vLLM's own mean queue + prefill time (`request_queue_time_seconds`,
    `request_prefill_time_seconds`: waiting for, then computing, the prompt) and the client's
    mean TTFT minus it (gateway, agent, adapter loads, vLLM's front end, the way back).
    Predicted: the simulator's time from handing a request to vLLM to its first token
    (`Engine.engine_in`, `engine_first`), and the rest of its TTFT.
    """
    client = [r.ttft_s for r in reqs if r.ttft_s is not None]
    pred = [
        (e - i, f - r.at - (e - i))
        for r, f, i, e in zip(reqs, first_token, engine_in, engine_first, strict=True)
        if not math.isnan(f)
    ]
    if not client or not pred or not engine_mean_s:
        return []
    m_in = 1000 * engine_mean_s
    m_out = 1000 * (sum(client) / len(client)) - m_in
    p_in = 1000 * sum(i for i, _ in pred) / len(pred)
    p_out = 1000 * sum(o for _, o in pred) / len(pred)
    return [
        Row("mean TTFT in vLLM's engine", m_in, p_in, p_in / m_in - 1, "ms"),
        Row(
            "mean TTFT outside the engine",
            m_out,
            p_out,
            p_out / m_out - 1 if m_out else math.nan,
            "ms",
        ),
    ]


def table(rows: Sequence[Row]) -> str:
    lines = ["| figure | measured | predicted | error | within 20% |", "|---|---|---|---|---|"]
    for r in rows:
        if r.unit == "ms":
            cells = (f"{r.measured:.0f} ms", f"{r.predicted:.0f} ms", f"{100 * r.error:+.0f}%")
        else:
            cells = (f"{r.measured:.1f}%", f"{r.predicted:.1f}%", f"{r.error:+.1f} pp")
        ok = "n/a" if math.isnan(r.error) else ("yes" if r.within_target else "**no**")
        lines.append(f"| {r.name} | " + " | ".join(cells) + f" | {ok} |")
    return "\n".join(lines)
