"""The figures of one simulated run: hit rates, TTFT, per-adapter SLO, cost; markdown/JSON/PNG."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from lorafleet_core.wire.tiers import TIER_NAMES
from lorafleet_sim.engine import OUTCOMES, Engine
from lorafleet_sim.params import ReplicaParams

PROMPT_BUCKETS = ((0, 512), (512, 2048), (2048, 4096), (4096, 10**9))


def _pct(values: np.ndarray[Any, Any], q: float) -> float:
    return float(np.percentile(values, q)) if values.size else math.nan


@dataclass
class Summary:
    name: str
    figures: dict[str, Any] = field(default_factory=dict)
    series: dict[str, list[float]] = field(default_factory=dict)
    ttft_by_tier: dict[str, list[float]] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.figures[key]


def summarize(name: str, eng: Engine, measure_from: float = 0.0, hot: str | None = None) -> Summary:
    """Figures over requests arriving at or after `measure_from` (a warm-up is left out).

    `hot` names the adapter whose p95 is `hot_adapter_p95_ms` and which the long tail's
    figure leaves out; None: the busiest adapter (by requests measured). A scenario that adds
    a hot tenant names it: below ~4 requests/s (~900 tokens/s) the Zipf mix's first adapter
    has more requests than the hot tenant.
    """
    fp, rp = eng.fp, eng.rp
    arrival = np.asarray(eng.arrival)
    first = np.asarray(eng.first_token)
    finish = np.asarray(eng.finish_time)
    tier = np.asarray(eng.tier)
    outcome = np.asarray(eng.outcome)
    adapter = np.asarray(eng.adapter_of)
    prompt = np.asarray(eng.prompt)
    output = np.asarray(eng.output)
    sel = arrival >= measure_from
    done = sel & ~np.isnan(first)
    ttft = first - arrival
    n = int(sel.sum())
    routed = sel & (tier >= 0)
    n_routed = max(1, int(routed.sum()))
    f: dict[str, Any] = {"requests": n, "completed": int((sel & ~np.isnan(finish)).sum())}
    failed = int((sel & (outcome == OUTCOMES.index("failed"))).sum())
    f["failed"] = failed
    f.update(_stability(eng, sel, arrival, finish, outcome))
    for i, t in enumerate(TIER_NAMES):
        f[f"{t}_hit_pct"] = 100.0 * int((routed & (tier == i)).sum()) / n_routed
    all_ttft = ttft[done]
    for q in (50, 95, 99):
        f[f"ttft_p{q}_ms"] = 1000 * _pct(all_ttft, q)
    by_tier: dict[str, list[float]] = {}
    for i, t in enumerate(TIER_NAMES):
        vals = ttft[done & (tier == i)]
        for q in (50, 95, 99):
            f[f"ttft_p{q}_{t}_ms"] = 1000 * _pct(vals, q)
        by_tier[t] = np.sort(vals).tolist() if vals.size <= 20000 else np.sort(vals)[::10].tolist()
    for lo, hi in PROMPT_BUCKETS:
        label = f"{lo}-{hi}" if hi < 10**9 else f"{lo}+"
        vals = ttft[done & (prompt >= lo) & (prompt < hi)]
        f[f"ttft_p95_prompt_{label}_ms"] = 1000 * _pct(vals, 95)
    f.update(ttft_excess(eng, done, ttft))
    multi = done & ~np.isnan(finish) & (output > 1)
    tpot = (finish[multi] - first[multi]) / (output[multi] - 1)
    f["tpot_mean_ms"] = 1000 * float(tpot.mean()) if tpot.size else math.nan
    f["tpot_p95_ms"] = 1000 * _pct(tpot, 95)
    # Per adapter: p95 TTFT of adapters with enough requests to have one.
    order = np.argsort(adapter[done], kind="stable")
    a_sorted = adapter[done][order]
    t_sorted = ttft[done][order]
    bounds = np.flatnonzero(np.diff(a_sorted)) + 1
    worst, meeting, counted, worst_id = 0.0, 0, 0, ""
    busiest, busiest_n, busiest_p95 = "", 0, math.nan
    for chunk_a, chunk_t in zip(
        np.split(a_sorted, bounds), np.split(t_sorted, bounds), strict=True
    ):
        if chunk_t.size < fp.min_requests_per_adapter:
            continue
        p95 = float(np.percentile(chunk_t, 95))
        if chunk_t.size > busiest_n:
            busiest, busiest_n, busiest_p95 = eng.names[int(chunk_a[0])], chunk_t.size, p95
        counted += 1
        meeting += p95 < fp.slo_ttft_s
        if p95 > worst:
            worst, worst_id = p95, eng.names[int(chunk_a[0])]
    f["adapters_counted"] = counted
    f["worst_adapter_p95_ms"] = 1000 * worst
    f["worst_adapter"] = worst_id
    f["adapters_meeting_slo_pct"] = 100.0 * meeting / max(1, counted)
    f["busiest_adapter"] = busiest
    f["busiest_adapter_requests"] = busiest_n
    f["busiest_adapter_p95_ms"] = 1000 * busiest_p95
    hot = busiest if hot is None else hot
    hot_id = eng.names.index(hot) if hot in eng.names else -1
    f["hot_adapter"] = hot
    f["hot_adapter_p95_ms"] = 1000 * _pct(ttft[done & (adapter == hot_id)], 95)
    f["tail_worst_replica_p95_ms"] = 1000 * _tail_worst_replica_p95(eng, done, ttft, hot_id)
    # The hot adapter's requests on a merged pool's replicas and off them (merged_overflow).
    on_merged = np.isin(np.asarray(eng.replica_of), [r.index for r in eng.replicas if r.merged])
    hot_done = done & (adapter == hot_id)
    f["hot_merged_p95_ms"] = 1000 * _pct(ttft[hot_done & on_merged], 95)
    f["hot_fallback_p95_ms"] = 1000 * _pct(ttft[hot_done & ~on_merged], 95)
    hot_routed = int((sel & (adapter == hot_id) & (tier >= 0)).sum())
    left = int((sel & (adapter == hot_id) & (tier >= 0) & ~on_merged).sum())
    f["merged_fallback_pct"] = 100.0 * left / max(1, hot_routed) if eng.fp.merged_replicas else 0.0
    for o in OUTCOMES:
        f[f"route_{o}_pct"] = 100.0 * int((sel & (outcome == OUTCOMES.index(o))).sum()) / max(1, n)
    f["spill_pct"] = f["route_spill_pct"] + f["route_saturated_pct"]
    # Fleet: time on GPUs, throughput, evictions.
    end = eng.end_time
    span = max(end - measure_from, 1e-9)
    gpu_s = sum(
        max(0.0, (r.stopped_at or end) - max(r.started_at, measure_from)) for r in eng.replicas
    )
    tokens = int((prompt[done] + output[done]).sum())
    f["replicas_mean"] = gpu_s / span
    f["tokens_per_s_per_replica"] = tokens / max(gpu_s, 1e-9)
    busy = sum(r.busy_seq_s for r in eng.replicas) - _busy_before(eng, measure_from)
    f["utilisation_pct"] = 100.0 * busy / max(gpu_s * rp.max_seqs, 1e-9)
    f["usd_per_million_tokens"] = gpu_s / 3600 * fp.gpu_hour_usd / max(tokens / 1e6, 1e-9)
    ev_rates = _eviction_rates(eng, measure_from)
    f["evictions_per_min_per_replica"] = ev_rates[0]
    f["evictions_per_min_max_10m"] = ev_rates[1]
    f["eviction_alert_fires"] = ev_rates[1] > fp.evictions_alert_per_min
    f["gpu_swaps_per_min_per_replica"] = ev_rates[2]
    f["adapters_with_extra_owners"] = len(eng.k)
    f["extra_owners"] = dict(sorted(eng.k.items(), key=lambda kv: -kv[1])[:5])
    f["max_owner_count"] = max(eng.k.values(), default=fp.owners_per_adapter)
    f["replicas_max"] = max((p["provisioned"] for p in eng.timeline), default=fp.replicas)
    s = Summary(name, f, ttft_by_tier=by_tier)
    s.series = _series(eng, arrival, tier)
    return s


def _stability(
    eng: Engine,
    sel: np.ndarray[Any, Any],
    arrival: np.ndarray[Any, Any],
    finish: np.ndarray[Any, Any],
    outcome: np.ndarray[Any, Any],
) -> dict[str, Any]:
    """Did completions keep up with arrivals? A run that fell behind is not a result.

    At the last arrival a stable fleet holds about what it runs at once: the requests in its
    sequences (max_seqs per serving replica) and a few waiting a step or a load. A fleet
    whose completions fall behind its arrivals holds a backlog that grows with the run, and
    the figures of such a run depend on its length (its TTFTs grow without bound), so they
    are no answer. Unstable: more unfinished measured requests at the last arrival than the
    serving replicas' sequences, or any request left unfinished (not failed) once the
    simulation drained.
    """
    end = eng.duration
    failed = outcome == OUTCOMES.index("failed")
    arrived = sel & (arrival <= end) & ~failed
    backlog = int((arrived & ~(finish <= end)).sum())
    unfinished = int((sel & ~failed & np.isnan(finish)).sum())
    # serving replicas at the last 10 s sample before the end
    serving = eng.timeline[-1]["serving"] if eng.timeline else eng.fp.replicas
    slots = int(serving) * eng.rp.max_seqs
    return {
        "stable": bool(backlog <= slots and unfinished == 0),
        "backlog_at_end": backlog,
        "sequence_slots_at_end": slots,
        "unfinished": unfinished,
    }


def idle_ttft(rp: ReplicaParams, prompt: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Each prompt's TTFT on an idle replica with its adapter in a GPU slot: its own prefill
    chunks alone in their steps, and the path outside vLLM at an idle host."""
    budget = min(rp.step_token_budget, rp.long_prefill_token_threshold or rp.step_token_budget)
    step = rp.decode_s + rp.decode_s_per_seq  # one sequence running: this one
    full, rest = np.divmod(prompt.astype(float), budget)
    t_full = max(budget / rp.prefill_tps + rp.prefill_step_s, step)
    t_rest = np.where(rest > 0, np.maximum(rest / rp.prefill_tps + rp.prefill_step_s, step), 0.0)
    host = rp.host_ttft_cpu_s if rp.host_cores > 0 else 0.0
    return np.asarray(full * t_full + t_rest + rp.path_s + host)


# Where the excess over the floor goes, in the order a request meets them.
EXCESS_PARTS = ("load", "sequence", "prefill", "path")
_PART_TEXT = {
    "load": "adapter load",
    "sequence": "queue for a sequence",
    "prefill": "behind other prefill",
    "path": "path",
}


def ttft_excess(
    eng: Engine, done: np.ndarray[Any, Any], ttft: np.ndarray[Any, Any]
) -> dict[str, Any]:
    """TTFT split into the floor (`idle_ttft`) and the excess, per prompt bucket and adapter.

    The excess, per request: `load` (the agent has it until vLLM does: a load, or a wait on
    another request's load or on a RAM slot), `sequence` (from vLLM's next step boundary until
    it gets a sequence), `prefill` (the step in progress when it reached vLLM, and its prompt's
    steps beyond its idle time: other prompts' chunks and decodes share them) and `path`
    (the hops outside vLLM beyond their idle time). The parts add up to TTFT minus the floor.
    """
    arrival = np.asarray(eng.arrival)
    prompt = np.asarray(eng.prompt)
    adapter = np.asarray(eng.adapter_of)
    rp = eng.rp
    floor = idle_ttft(rp, prompt)
    engine_prefill = idle_ttft(replace(rp, path_s=0.0, host_cores=0.0), prompt)
    agent_in = np.asarray(eng.agent_in)
    engine_in = np.asarray(eng.engine_in)
    boundary = np.asarray(eng.boundary)
    admitted = np.asarray(eng.admitted)
    engine_first = np.asarray(eng.engine_first)
    first = np.asarray(eng.first_token)
    parts = {
        "load": engine_in - agent_in,
        "sequence": admitted - boundary,
        "prefill": (boundary - engine_in) + (engine_first - admitted - engine_prefill),
        "path": (agent_in - arrival) + (first - engine_first) - (floor - engine_prefill),
    }
    excess = ttft - floor
    f: dict[str, Any] = {}
    for lo, hi in PROMPT_BUCKETS:
        label = f"{lo}-{hi}" if hi < 10**9 else f"{lo}+"
        m = done & (prompt >= lo) & (prompt < hi)
        f[f"floor_p95_prompt_{label}_ms"] = 1000 * _pct(floor[m], 95)
        f[f"excess_p50_prompt_{label}_ms"] = 1000 * _pct(excess[m], 50)
        f[f"excess_p95_prompt_{label}_ms"] = 1000 * _pct(excess[m], 95)
        # What the slowest 5% waited on: the p95's own story.
        cut = _pct(ttft[m], 95)
        tail = m & (ttft >= cut) if m.any() else m
        for part in EXCESS_PARTS:
            vals = parts[part][tail]
            f[f"tail_{part}_prompt_{label}_ms"] = (
                1000 * float(vals.mean()) if vals.size else math.nan
            )
    # Per adapter (those with enough requests for a p95): p95 of the excess.
    per: dict[str, dict[str, float]] = {}
    idx = np.flatnonzero(done)
    order = idx[np.argsort(adapter[idx], kind="stable")]
    bounds = np.flatnonzero(np.diff(adapter[order])) + 1
    for chunk in np.split(order, bounds):
        if chunk.size < eng.fp.min_requests_per_adapter:
            continue
        per[eng.names[int(adapter[chunk[0]])]] = {
            "requests": int(chunk.size),
            "ttft_p95_ms": 1000 * float(np.percentile(ttft[chunk], 95)),
            "floor_p95_ms": 1000 * float(np.percentile(floor[chunk], 95)),
            "excess_p95_ms": 1000 * float(np.percentile(excess[chunk], 95)),
        }
    worst = max(per, key=lambda a: per[a]["excess_p95_ms"], default="")
    f["worst_excess_adapter"] = worst
    f["worst_adapter_excess_p95_ms"] = per[worst]["excess_p95_ms"] if worst else math.nan
    f["worst_excess_adapter_floor_p95_ms"] = per[worst]["floor_p95_ms"] if worst else math.nan
    f["excess_by_adapter"] = per
    return f


# A replica's long-tail p95 counts only with this many requests (~1 per second of a 15-minute
# run on a 40-replica fleet; a few hundred on every replica in the runs documented).
MIN_REQUESTS_PER_REPLICA = 100


def _tail_worst_replica_p95(
    eng: Engine, done: np.ndarray[Any, Any], ttft: np.ndarray[Any, Any], hot: int
) -> float:
    """The worst replica's p95 TTFT over the long tail's requests (all but adapter `hot`).

    Every long-tail adapter draws its prompts from the same trace and is served by its owners
    (and spill targets), so its p95 is that of a mixture of those replicas' requests, which is
    at most the worst of their p95s. Estimated per replica from hundreds of requests, this
    bound moves smoothly with the fleet size, where the worst adapter's own p95 (the second
    largest of ~20 samples for most counted adapters) is a lottery ticket: see
    docs/design/0015.
    """
    replica = np.asarray(eng.replica_of)
    sel = done & (np.asarray(eng.adapter_of) != hot)
    worst = 0.0
    for r in np.unique(replica[sel]):
        vals = ttft[sel & (replica == r)]
        if vals.size >= MIN_REQUESTS_PER_REPLICA:
            worst = max(worst, float(np.percentile(vals, 95)))
    return worst


def _busy_before(eng: Engine, t: float) -> float:
    """Sequence-seconds of work done before `t` (from the 10 s samples)."""
    before = [p["busy_seq_s"] for p in eng.timeline if p["t"] <= t]
    return float(before[-1]) if before and t > 0 else 0.0


def _eviction_rates(eng: Engine, since: float) -> tuple[float, float, float]:
    tl = [p for p in eng.timeline if p["t"] >= since]
    if len(tl) < 2:
        return 0.0, 0.0, 0.0
    minutes = (tl[-1]["t"] - tl[0]["t"]) / 60
    serving = max(1.0, sum(p["serving"] for p in tl) / len(tl))
    ev = (tl[-1]["evictions"] - tl[0]["evictions"]) / max(minutes, 1e-9) / serving
    swaps = (tl[-1]["gpu_swaps"] - tl[0]["gpu_swaps"]) / max(minutes, 1e-9) / serving
    # The alert: one pod's evictions over 10 minutes, per minute (monitoring.yaml's rule).
    worst = 0.0
    window = 60  # samples are 10 s apart
    for i in range(len(tl)):
        j = min(len(tl) - 1, i + window)
        if j == i:
            break
        mins = (tl[j]["t"] - tl[i]["t"]) / 60
        per_pod = [b - a for a, b in zip(tl[i]["per_replica"], tl[j]["per_replica"], strict=False)]
        worst = max(worst, max(per_pod, default=0) / max(mins, 1e-9))
        if j == len(tl) - 1:
            break
    return ev, worst, swaps


def _series(
    eng: Engine, arrival: np.ndarray[Any, Any], tier: np.ndarray[Any, Any]
) -> dict[str, list[float]]:
    minute = (arrival // 60).astype(int)
    routed = tier >= 0
    n_min = int(minute.max()) + 1 if minute.size else 0
    total = np.bincount(minute[routed], minlength=n_min)
    hits = np.bincount(minute[routed & (tier == 0)], minlength=n_min)
    rate = np.where(total > 0, 100.0 * hits / np.maximum(total, 1), np.nan)
    return {
        "gpu_hit_pct_by_minute": rate.tolist(),
        "t": [p["t"] for p in eng.timeline],
        "serving": [p["serving"] for p in eng.timeline],
        "provisioned": [p["provisioned"] for p in eng.timeline],
    }


# ---------------------------------------------------------------------- output

COLUMNS = (
    ("gpu %", "gpu_hit_pct", "{:.1f}"),
    ("ram %", "ram_hit_pct", "{:.1f}"),
    ("disk %", "disk_hit_pct", "{:.1f}"),
    ("remote %", "remote_hit_pct", "{:.2f}"),
    ("spill %", "spill_pct", "{:.1f}"),
    ("TTFT p50", "ttft_p50_ms", "{:.0f} ms"),
    ("p95", "ttft_p95_ms", "{:.0f} ms"),
    ("p99", "ttft_p99_ms", "{:.0f} ms"),
    ("worst adapter p95", "worst_adapter_p95_ms", "{:.0f} ms"),
    ("adapters < SLO", "adapters_meeting_slo_pct", "{:.1f}%"),
    ("TPOT", "tpot_mean_ms", "{:.0f} ms"),
    ("evict/min/replica", "evictions_per_min_per_replica", "{:.2f}"),
    ("replicas", "replicas_mean", "{:.1f}"),
    ("util", "utilisation_pct", "{:.0f}%"),
    ("$/M tok", "usd_per_million_tokens", "{:.3f}"),
)


# What an unstable run's row leaves out: its latencies grow with the run's length.
_UNSTABLE_HIDES = frozenset(
    ("ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms", "worst_adapter_p95_ms",
     "adapters_meeting_slo_pct", "tpot_mean_ms")
)  # fmt: skip


def unstable_text(f: dict[str, Any]) -> str:
    """Why a run is no result, in one sentence (empty when it is stable)."""
    if f.get("stable", True):
        return ""
    return (
        f"UNSTABLE, not a result: completions fell behind arrivals, {f['backlog_at_end']} "
        f"requests unfinished at the last arrival where the fleet runs "
        f"{f['sequence_slots_at_end']} at once"
        + (f", {f['unfinished']} never finished" if f["unfinished"] else "")
    )


def table(summaries: list[Summary]) -> str:
    head = "| run | " + " | ".join(c[0] for c in COLUMNS) + " |"
    rule = "|" + "---|" * (len(COLUMNS) + 1)
    rows = [head, rule]
    for s in summaries:
        cells = []
        stable = s.figures.get("stable", True)
        for _, key, fmt in COLUMNS:
            if not stable and key in _UNSTABLE_HIDES:
                cells.append("unstable")
                continue
            value = s.figures.get(key, math.nan)
            cells.append(
                "n/a" if isinstance(value, float) and math.isnan(value) else fmt.format(value)
            )
        rows.append(f"| {s.name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def excess_lines(f: dict[str, Any]) -> list[str]:
    """TTFT's floor and excess per prompt bucket (markdown table) and the worst adapter's."""
    rows = [
        "| prompt tokens | TTFT p95 | floor p95 | excess p50 | excess p95 | slowest 5% waited: "
        + " / ".join(_PART_TEXT[p] for p in EXCESS_PARTS)
        + " (mean) |",
        "|---|---|---|---|---|---|",
    ]
    for lo, hi in PROMPT_BUCKETS:
        label = f"{lo}-{hi}" if hi < 10**9 else f"{lo}+"
        tail = " / ".join(f"{f[f'tail_{p}_prompt_{label}_ms']:.0f}" for p in EXCESS_PARTS)
        rows.append(
            f"| {label} | {f[f'ttft_p95_prompt_{label}_ms']:.0f} ms "
            f"| {f[f'floor_p95_prompt_{label}_ms']:.0f} ms "
            f"| {f[f'excess_p50_prompt_{label}_ms']:.0f} ms "
            f"| {f[f'excess_p95_prompt_{label}_ms']:.0f} ms | {tail} ms |"
        )
    worst = f["worst_excess_adapter"]
    per = f["excess_by_adapter"]
    rows.append("")
    if worst:
        w = per[worst]
        rows.append(
            f"worst adapter by excess: {worst} excess p95 {w['excess_p95_ms']:.0f} ms over a "
            f"floor p95 of {w['floor_p95_ms']:.0f} ms (TTFT p95 {w['ttft_p95_ms']:.0f} ms, "
            f"{w['requests']} requests)"
            + (
                f"; worst by TTFT {f['worst_adapter']}: excess p95 "
                f"{per[f['worst_adapter']]['excess_p95_ms']:.0f} ms"
                if f["worst_adapter"] in per
                else ""
            )
        )
    return rows


def detail(s: Summary) -> str:
    f = s.figures
    lines = [f"### {s.name}", ""]
    if not f.get("stable", True):
        lines += [f"**{unstable_text(f)}**", ""]
    lines.append(
        f"requests {f['requests']}, completed {f['completed']}, failed {f['failed']}; "
        f"TTFT p50/p95/p99 by tier: "
        + ", ".join(
            f"{t} {f[f'ttft_p50_{t}_ms']:.0f}/{f[f'ttft_p95_{t}_ms']:.0f}/"
            f"{f[f'ttft_p99_{t}_ms']:.0f} ms"
            for t in TIER_NAMES
            if not math.isnan(f[f"ttft_p95_{t}_ms"])
        )
    )
    buckets = [k for k in f if k.startswith("ttft_p95_prompt_")]
    lines.append(
        "TTFT p95 by prompt tokens: "
        + ", ".join(
            f"{k.removeprefix('ttft_p95_prompt_').removesuffix('_ms')}: {f[k]:.0f} ms"
            for k in buckets
        )
    )
    lines.append(
        f"worst adapter ({f['adapters_counted']} with >= 20 requests): {f['worst_adapter']} "
        f"p95 {f['worst_adapter_p95_ms']:.0f} ms; routes: "
        + ", ".join(f"{o} {f[f'route_{o}_pct']:.1f}%" for o in OUTCOMES if f[f"route_{o}_pct"] > 0)
    )
    lines.append(
        f"tokens/s per replica {f['tokens_per_s_per_replica']:.0f}; evictions/min per replica "
        f"{f['evictions_per_min_per_replica']:.2f} (worst pod over 10 min "
        f"{f['evictions_per_min_max_10m']:.1f}/min, alert "
        f"{'FIRES' if f['eviction_alert_fires'] else 'quiet'}); "
        f"GPU slot swaps/min per replica {f['gpu_swaps_per_min_per_replica']:.1f}"
    )
    lines.append(
        f"owners: {f['adapters_with_extra_owners']} adapters above the default "
        f"{f['extra_owners']}; busiest adapter {f['busiest_adapter']} "
        f"({f['busiest_adapter_requests']} requests) p95 {f['busiest_adapter_p95_ms']:.0f} ms; "
        f"replicas provisioned at most {f['replicas_max']}"
    )
    lines.append(
        f"backlog at the last arrival {f['backlog_at_end']} requests "
        f"(sequences {f['sequence_slots_at_end']}): {'stable' if f['stable'] else 'UNSTABLE'}"
    )
    if "worst_excess_adapter" in f:
        lines += [
            "",
            "TTFT = floor (the prompt alone on an idle replica, adapter resident) + excess:",
            "",
        ]
        lines += excess_lines(f)
    return "\n".join(lines) + "\n"


def write_json(path: Path, meta: dict[str, Any], summaries: list[Summary]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "meta": meta,
        "runs": [{"name": s.name, "figures": s.figures, "series": s.series} for s in summaries],
    }
    path.write_text(json.dumps(doc, indent=1, default=str, allow_nan=True))


def _plot_excess(ax: Any, s: Summary) -> None:
    """Per prompt bucket: the slowest 5%'s mean floor and excess parts, stacked."""
    f = s.figures
    labels = [f"{lo}-{hi}" if hi < 10**9 else f"{lo}+" for lo, hi in PROMPT_BUCKETS]
    if not f.get("stable", True) or "worst_excess_adapter" not in f:
        ax.set_title("TTFT floor + excess: unstable run, no result")
        return
    bottom = np.zeros(len(labels))
    floor = np.array([f[f"floor_p95_prompt_{b}_ms"] for b in labels])
    ax.bar(labels, floor, label="floor (p95)")
    bottom += floor
    for part in EXCESS_PARTS:
        vals = np.nan_to_num([f[f"tail_{part}_prompt_{b}_ms"] for b in labels])
        ax.bar(labels, vals, bottom=bottom, label=_PART_TEXT[part])
        bottom += vals
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("ms")
    ax.set_title(f"{s.name}: slowest 5%'s excess over the floor")
    ax.legend(fontsize=7)


def plot(path: Path, summaries: list[Summary], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(21, 4.5))
    ax = axes[0]
    for s in summaries[:4]:
        for t, vals in s.ttft_by_tier.items():
            if len(vals) > 1:
                y = np.linspace(0, 1, len(vals))
                ax.plot(vals, y, label=f"{s.name}: {t}" if len(summaries) > 1 else t)
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (s)")
    ax.set_ylabel("share of requests")
    ax.set_title("TTFT CDF by tier")
    ax.legend(fontsize=7)
    ax = axes[1]
    for s in summaries:
        ax.plot(s.series["gpu_hit_pct_by_minute"], label=s.name)
    ax.set_xlabel("minute")
    ax.set_ylabel("GPU hits (%)")
    ax.set_title("GPU hit rate over time")
    ax.legend(fontsize=7)
    ax = axes[2]
    for s in summaries:
        ax.step(s.series["t"], s.series["serving"], where="post", label=f"{s.name} serving")
        ax.step(
            s.series["t"],
            s.series["provisioned"],
            where="post",
            linestyle=":",
            label=f"{s.name} provisioned",
        )
    ax.set_xlabel("time (s)")
    ax.set_ylabel("replicas")
    ax.set_title("Replicas over time")
    ax.legend(fontsize=7)
    ax = axes[3]
    _plot_excess(ax, summaries[0])
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
