"""The simulator half of the calibration: measured parameters -> `lorafleet sim` -> the table.

Reads the JSON `benchmarks/sim_calibration.py --measure` wrote (no vLLM needed), derives the
simulator's parameters from the probes, runs the simulator on each replay's exact requests and
prints predicted vs measured p50/p95 TTFT and tier shares with their error; writes
`calibration.json`, `calibration.md` and `calibration.png` (TTFT CDFs) next to it.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import statistics
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.calibration_stall_fit import busy_fit, load_fit
from benchmarks.results import Result
from lorafleet_sim import calibration as cal
from lorafleet_sim import params
from lorafleet_sim.engine import Engine

# What `lorafleet up` configures for the calibration fleet (e2e.standalone_fleet, the demo pool)
# and vLLM's CPU-build defaults for the OpenAI server (engine/arg_utils.py get_batch_defaults):
# --max-num-seqs 128, --max-num-batched-tokens 2048 (chunked prefill).
FLEET = {
    "replicas": 1,
    "gpu_slots": 2,
    "ram_slots": 4,
    "max_seqs": 128,
    "step_token_budget": 2048,
    "disk_bytes": 2**30,  # demo pool's cache.diskBytes
    "adapter_bytes": 1_000_000,  # the canaries are ~0.5-2 MB; only the disk budget reads it
}


def measured_params(doc: dict[str, Any]) -> dict[str, float]:
    """Simulator parameters from the probes (seconds; prefill tokens/s)."""
    tiers = doc.get("tiers") or {}
    med = tiers.get("median_s", {})
    gpu = med.get("gpu", 0.0)

    def load(t: str, default: float) -> float:
        # A tier's load = its median TTFT minus the GPU median (same request, same path).
        return max(0.0, med[t] - gpu) if t in med else default

    a, b = doc["decode"]["fit_s"]  # vLLM's time per output token = a + b * batch
    host = doc.get("host")  # benchmarks/calibration_host_probe.py: the host CPU model's inputs
    stalls = doc.get("stalls")  # benchmarks/calibration_stall_probe.py: the hops' stops
    loaded = doc.get("load_stalls")  # the same probe over all aliases: stops per load
    busy = doc.get("busy_stalls")  # and beside a busy engine: stops per busy second
    return {
        **(host["fit"] if host else {}),
        **(stalls["fit"] if stalls and host else {}),
        **(load_fit(stalls, loaded) if stalls and loaded and host else {}),
        **(busy_fit(stalls, busy) if stalls and busy and host else {}),
        "prefill_tps": float(doc["prefill"]["prefill_tps"]),
        "prefill_step_s": max(0.0, float(doc["prefill"]["prefill_fit_s"][0])),
        "decode_s": max(0.0, float(a)),
        "decode_s_per_seq": max(0.0, float(b)),
        # Everything but the engine step that computes the prompt: the client's TTFT minus
        # vLLM's prefill time (so vLLM's own front end, tokenizing and IPC, is in it too).
        "path_s": statistics.median(
            r["client_ttft_s"] - r["vllm_prefill_s"] for r in doc["prefill"]["rows"]
        ),
        "ram_s": load("ram", 0.0),
        "disk_s": load("disk", 0.040),
        "remote_s": load("remote", 0.400),
    }


def _hops_seen(probe: dict[str, Any], *, collections: bool = False) -> str:
    """One stall probe's held pings per hop, as the parameter table shows them; with
    `collections`, also the client's garbage collections (the per-request probe has them)."""
    parts = []
    for hop, h in probe.get("hops", {}).items():
        if "share" in h:
            parts.append(
                f"{hop} {100 * h['share']:.1f}% of pings held, stops {1000 * h['stop_s']:.0f} ms"
            )
        elif collections:
            parts.append(f"{hop} {h['stops']} collections, {1000 * h['stop_s']:.0f} ms")
    return ", ".join(parts)


def _param_lines(m: dict[str, float], doc: dict[str, Any]) -> list[str]:
    pre = doc["prefill"]
    a, b = pre["prefill_fit_s"]
    lines = [
        "| parameter | measured | how |",
        "|---|---|---|",
        f"| prefill_step_s, prefill_tps | {1000 * m['prefill_step_s']:.1f} ms + "
        f"{m['prefill_tps']:,.0f} tokens/s | vLLM prefill time = "
        f"{1000 * a:.1f} ms + {1e6 * b:.1f} us/token (fit over {len(pre['rows'])} requests) |",
        f"| path_s | {1000 * m['path_s']:.1f} ms | client TTFT - vLLM prefill time, median, "
        f"idle (of which client TTFT - vLLM TTFT {1000 * pre['path_s_median']:.1f} ms) |",
    ]
    lines.append(
        f"| decode_s, decode_s_per_seq | {1000 * m['decode_s']:.1f} ms + "
        f"{1000 * m['decode_s_per_seq']:.2f} ms/sequence | line through vLLM's ITL by batch: "
        + ", ".join(
            f"{k}: {1000 * (d['vllm_itl_s'] or math.nan):.1f} ms "
            f"(client {1000 * (d['client_tpot_s'] or math.nan):.1f})"
            for k, d in sorted(doc["decode"]["batches"].items(), key=lambda kv: int(kv[0]))
        )
        + " |"
    )
    host = doc.get("host")
    if host:
        fit = host["fit"]
        groups = ", ".join(
            f"max_tokens {g['max_tokens']} x{g['concurrency']}: "
            f"{1000 * g['path_cpu_per_request_s']:.1f} ms ({g['tokens_per_request']:.1f} tokens)"
            for g in host["groups"]
        )
        lines += [
            f"| host_cores | {fit['host_cores']:.0f} | CPUs the path's processes may run on |",
            f"| host_ttft_cpu_s | {1000 * fit['host_ttft_cpu_s']:.1f} ms | CPU of gateway, "
            "agent, vLLM API server and client from sending to the client's first token "
            "(concurrency 1) |",
            f"| host_token_cpu_s | {1000 * fit['host_token_cpu_s']:.2f} ms | slope of path CPU "
            f"per request vs tokens; per request: {groups} |",
            f"| host_end_cpu_s | {1000 * fit['host_end_cpu_s']:.1f} ms | one-token request's "
            "CPU after its first token |",
            f"| host_background | {fit['host_background']:.2f} | cores the idle fleet uses |",
            f"| host_engine_busy | {fit['host_engine_busy']:.2f} | cores vLLM's engine "
            "processes use above idle while stepping |",
        ]
    stalls = doc.get("stalls")
    if stalls and host:
        fit = stalls["fit"]
        seen = _hops_seen(stalls, collections=True)
        lines.append(
            f"| host_pause_per_request, host_pause_s | {fit['host_pause_per_request']:.3f}, "
            f"{1000 * fit['host_pause_s']:.0f} ms | stops per request under "
            f"{stalls['rate']:g} req/s for {stalls['duration_s']:.0f} s "
            f"({stalls['requests']} requests): {seen} |"
        )
    loaded = doc.get("load_stalls")
    if stalls and loaded and host:
        seen = _hops_seen(loaded)
        if "sentinel" in loaded and "sentinel" in stalls:
            seen = (
                f"a stream through the gateway held {loaded['sentinel']['holds']} times in "
                f"{loaded['sentinel']['streaming_s']:.0f} s (over 3 aliases: "
                f"{stalls['sentinel']['holds']} in {stalls['sentinel']['streaming_s']:.0f} s); "
                f"pings: {seen}"
            )
        lines.append(
            f"| host_pause_per_load, host_pause_load_s | {m['host_pause_per_load']:.3f}, "
            f"{1000 * m['host_pause_load_s']:.0f} ms | the same probe over all "
            f"{loaded['aliases']} aliases ({loaded['requests']} requests, {loaded['loads']} "
            f"loaded from disk), stops beyond the per-request rate, per load: {seen} |"
        )
    busy = doc.get("busy_stalls")
    if stalls and busy and host:
        seen = _hops_seen(busy)
        kept = busy.get("busy", {}).get("busy_s") or busy.get("sentinel", {}).get("streaming_s")
        lines.append(
            f"| host_pause_per_busy_s, host_pause_busy_s | {m['host_pause_per_busy_s']:.3f}, "
            f"{1000 * m['host_pause_busy_s']:.0f} ms | the same probe over {busy['aliases']} "
            f"aliases beside requests keeping the engine stepping ({kept or 0:.0f} of "
            f"{busy['duration_s']:.0f} s), stops beyond the per-request rate, per second of "
            f"engine busy time: {seen} |"
        )
    for t in ("ram", "disk", "remote"):
        lines.append(
            f"| {t}_s | {1000 * m[f'{t}_s']:.1f} ms | agent_tier_ttft median {t} - median gpu |"
        )
    return lines


def _layout_text(layout: dict[str, Any] | None) -> str:
    if not layout or layout.get("layout") == "shared":
        return "shared (as `lorafleet up` leaves it: vLLM's worker on core 0, the rest anywhere)."
    return (
        f"pinned (vLLM's EngineCore and worker on CPUs {layout['engine_cpus']}, the supervisor, "
        f"gateway, agent, vLLM's API server and the load client on {layout['path_cpus']}; "
        f"threads set: {layout['threads_pinned']})."
    )


def _plot(path: Path, curves: list[tuple[str, list[float], list[float]]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for label, measured, predicted in curves:
        for vals, style, side in ((measured, "-", "measured"), (predicted, "--", "predicted")):
            v = sorted(vals)
            if v:
                ax.plot([1000 * x for x in v], [i / len(v) for i in range(1, len(v) + 1)],
                        style, label=f"{label} {side}")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (ms)")
    ax.set_ylabel("share of requests")
    ax.set_title("lorafleet sim vs the real lorafleet up (1 CPU replica)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _variant_rows(
    label: str,
    m: dict[str, float],
    w: Any,
    meas: dict[str, float],
    args: argparse.Namespace,
) -> list[cal.Row]:
    """TTFT p50/p95 predicted with other measured parameters (a model term left out)."""
    rp, fp = cal.sim_params(m, FLEET)
    rp = params.with_overrides(rp, [s for s in args.set if not s.startswith("host_")])
    fp = params.with_overrides(fp, args.set)
    eng = Engine(w, rp, fp, router="shipped", seed=args.seed).run()
    pred = cal.predicted_figures(w.at, eng.first_token, eng.tier, args.measure_from)
    rows = []
    for q in (50, 95):
        key = f"ttft_p{q}_ms"
        mv, pv = meas[key], pred[key]
        rows.append(cal.Row(f"TTFT p{q}, {label}", mv, pv, pv / mv - 1 if mv else math.nan, "ms"))
    return rows


def report(doc: dict[str, Any], args: argparse.Namespace) -> int:
    m = measured_params(doc)
    rp, fp = cal.sim_params(m, FLEET)
    rp = params.with_overrides(rp, args.set)
    fp = params.with_overrides(fp, args.set)
    md = [
        f"## Simulator calibration against `lorafleet up` (measured {doc['started']})",
        "",
        f"Fleet: {FLEET['replicas']} replica, gpuSlots {FLEET['gpu_slots']}, hostRamSlots "
        f"{FLEET['ram_slots']}, 12 aliases; load average at start {doc['loadavg_start']:.1f}, "
        f"probes {doc['loadavg_probes']:.1f}, end {doc['loadavg_end']:.1f}. CPU layout: "
        + _layout_text(doc.get("layout")),
        "",
        *_param_lines(m, doc),
        "",
    ]
    out_runs: list[dict[str, Any]] = []
    curves: list[tuple[str, list[float], list[float]]] = []
    worst = 0.0
    for rep in doc["replays"]:
        if "probes" in rep:  # probed just before this replay: its own parameters
            local = {**doc, **{k: v for k, v in rep["probes"].items() if v is not None}}
            m = measured_params(local)
            rp, fp = cal.sim_params(m, FLEET)
            rp = params.with_overrides(rp, args.set)
            fp = params.with_overrides(fp, args.set)
            head = f"Probed before the {rep['rate']:g} req/s replay (load average "
            md += [f"{head}{rep['probes']['loadavg']:.1f}):", "", *_param_lines(m, local), ""]
        reqs = cal.replayed(rep["requests"])
        w = cal.workload_of(reqs, rep["workload"])
        eng = Engine(w, rp, fp, router="shipped", seed=args.seed).run()
        meas = cal.measured_figures(reqs, args.measure_from)
        pred = cal.predicted_figures(w.at, eng.first_token, eng.tier, args.measure_from)
        rows = cal.compare(meas, pred)
        worst = max([worst, *(abs(r.error) for r in rows[:2] if not math.isnan(r.error))])
        e = rep.get("engine", {})
        in_engine = e.get("request_queue_time_mean_s", 0.0) + e.get(
            "request_prefill_time_mean_s", 0.0
        )
        rows += cal.inside_outside(
            reqs, eng.first_token, eng.engine_in, eng.engine_first, in_engine
        )
        if rp.host_cores > 0:  # the same requests without the host's stops, and without it
            no_load = {**m, "host_pause_per_load": 0.0, "host_pause_per_busy_s": 0.0}
            no_stops = {**no_load, "host_pause_per_request": 0.0}
            const = {k: v for k, v in m.items() if k not in cal.HOST_PARAMS}
            variants = [("host CPU, no stops", no_stops), ("path constant", const)]
            if m.get("host_pause_per_load") or m.get("host_pause_per_busy_s"):
                variants.insert(0, ("no stops per load or busy second", no_load))
            for label, variant in variants:
                rows += _variant_rows(label, variant, w, meas, args)
        tok = [r["engine_prompt_tokens"] / r["planned_prompt_tokens"] for r in rep["requests"]]
        got = [r["prompt_tokens"] for r in rep["requests"] if r["prompt_tokens"]]
        eng_tok = [r["engine_prompt_tokens"] for r in rep["requests"] if r["prompt_tokens"]]
        same = sum(a == b for a, b in zip(got, eng_tok, strict=True))
        md += [
            f"### {rep['rate']:g} req/s: {len(reqs)} requests, {rep['workload']}",
            "",
            f"elapsed {rep['elapsed_s']:.0f} s, load average {rep['loadavg_before']:.1f} -> "
            f"{rep['loadavg_after']:.1f}; requests from {args.measure_from:g} s on: "
            f"{meas['requests']:.0f} measured ok, {pred['requests']:.0f} predicted; engine "
            f"prompt tokens / planned: median {statistics.median(tok):.2f} "
            f"(usage agrees for {same}/{len(got)}); vLLM's own means over the replay: "
            + ", ".join(f"{k} {1000 * v:.1f} ms" for k, v in rep.get("engine", {}).items()),
            "",
            cal.table(rows),
            "",
        ]
        sel = [i for i, r in enumerate(reqs) if r.at >= args.measure_from]
        measured_ttft = [reqs[i].ttft_s for i in sel if reqs[i].ttft_s is not None]
        predicted_ttft = [
            eng.first_token[i] - w.at[i] for i in sel if not math.isnan(eng.first_token[i])
        ]
        curves.append((f"{rep['rate']:g} req/s", measured_ttft, predicted_ttft))  # type: ignore[arg-type]
        out_runs.append(
            {
                "rate": rep["rate"],
                "measured": meas,
                "predicted": pred,
                "rows": [asdict(r) for r in rows],
            }
        )
    md.append(f"simulator parameters: {json.dumps(params.describe(rp, fp))}")
    command = f".venv/bin/python benchmarks/sim_calibration.py {shlex.join(sys.argv[1:])}"
    md.append(f"\nmeasured by: .venv/bin/python {doc['command']}\ncommand: {command}")
    text = "\n".join(md)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "calibration.md").write_text(text + "\n")
    _plot(args.out / "calibration.png", curves)
    # The benchmarks' one result format: every compared figure of every replay, the full
    # report beside it (calibration.md) and what the simulator ran with in `details`.
    columns = ["rate req/s", "figure", "measured", "predicted", "error", "unit"]
    result = Result("sim_calibration", columns, command=command)
    for run in out_runs:
        for row in run["rows"]:
            result.add(**{"rate req/s": run["rate"], "figure": row["name"],
                          "measured": row["measured"], "predicted": row["predicted"],
                          "error": row["error"], "unit": row["unit"]})  # fmt: skip
    result.notes.append(f"the full report with every probe: {args.out / 'calibration.md'}")
    result.details = {"params": m, "sim": params.describe(rp, fp), "runs": out_runs}
    print(text, file=sys.stderr)
    result.emit(args.out / "calibration.json")
    return 0 if worst <= cal.TARGET_ERROR else 1
