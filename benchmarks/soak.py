"""Soak: twice the design's per-replica load for 10 minutes, with RSS sampled and slow clients.

    .venv/bin/python -m benchmarks.soak --start                                    # 10 min
    .venv/bin/python -m benchmarks.soak --start --duration 60 --slow-clients 30      # a quick one
    .venv/bin/python -m benchmarks.soak --base-url http://127.0.0.1:8080/v1 \\
        --state-dir .lorafleet --manifests .lorafleet/manifests        # a running `lorafleet up`

Load. The design serves 40 requests/s at peak with 26 replicas: 1.54 requests/s per replica,
and with the production trace's mean lengths (1,155 prompt, 211 output tokens) 1,777 prompt +
325 output tokens/s per replica. `--load-factor 2` sends twice that request rate per replica
(3.08 req/s x replicas), open loop, with the trace's arrivals and its prompt/output lengths
(`lorafleet_loadtest.plan`) scaled to what the demo model serves (a 256-token
context: each length x cap / the window's p95, clipped at `--max-prompt-tokens` 160 and
`--max-output-tokens` 64), to aliases drawn from Zipf(1.0) over the demo's aliases (three
canaries plus `--copies` versions of each, tiny GPU/RAM slot counts so adapters keep moving
between tiers). So the request rate - what the gateway and the agent do per request, where a
leak would be - is the design's x2; the token rate is that of the scaled lengths, ~1/20 of a
7B replica's, and is printed beside it. Every request is a streaming chat completion through
the official `openai` client, its answer checked for the alias's canary marker.

Memory. RSS of every process of the stack (gateway, agents, vLLM's API server and its engine
core child, the control API, `lorafleet up` itself) every `--sample-interval` s; per process
first/last/max and a fitted slope (MiB/min) after `--warmup`, flagged when the rise it implies
exceeds both `--min-rise-mib` and `--rel-rise` of the process's RSS (`benchmarks.soak_rss`).

Slow clients. From `--slow-start` for `--slow-duration`, `--slow-clients` raw-socket clients
trickle headers (expect 408 after the gateway's 10 s header timeout), trickle a body (408
after 30 s) or read a stream slowly (`benchmarks.soak_slow`), while the normal traffic goes
on; TTFT is reported before, during and after that phase.

Output: the figures, JSON (`--out`), a PNG (`--plot`: RSS over time, TTFT over time) and the
command that reproduces the run. Exit status 0 when there were no 5xx, no marker mismatches and
no growing process; 1 otherwise; 2 when the stack could not start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.results import Result
from benchmarks.soak_report import format_verdict, passed, verdict, write_plot
from benchmarks.soak_rss import RssSampler, mapping_growth, summarize_rss
from benchmarks.soak_slow import MODES, SlowResult, SlowTarget, run_slow_clients
from benchmarks.workload import WorkloadSpec
from e2e.standalone_fleet import FleetOptions, started_fleet
from lorafleet_loadtest.driver import Target, replay
from lorafleet_loadtest.plan import LengthLimits, ReplaySpec, plan_replay
from lorafleet_loadtest.probe.markers import markers_from_manifests, parse_marker_args
from lorafleet_sim.params import FleetParams
from lorafleet_sim.scenarios import Inputs
from lorafleet_sim.workload import read_trace

# The design's peak (../shared/DESIGN.md), from the simulator's defaults: one home.
DESIGN_FLEET_RPS = Inputs().rate
DESIGN_REPLICAS = FleetParams().replicas


@dataclass(frozen=True)
class Stack:
    target: Target
    roots: Callable[[], dict[str, int]]  # process label -> pid, re-read at every sample
    gateway_metrics_url: str | None
    replicas: int


def design_load(trace: Path, factor: float, replicas: int) -> dict[str, float]:
    """Requests/s and tokens/s per replica at the design's peak, x `factor`, for `replicas`."""
    _, prompt, output = read_trace(trace)
    per_replica = DESIGN_FLEET_RPS / DESIGN_REPLICAS
    mean_prompt, mean_output = sum(prompt) / len(prompt), sum(output) / len(output)
    return {
        "fleet_rps": DESIGN_FLEET_RPS,
        "replicas": DESIGN_REPLICAS,
        "per_replica_rps": per_replica,
        "per_replica_prompt_tps": per_replica * mean_prompt,
        "per_replica_output_tps": per_replica * mean_output,
        "factor": factor,
        "offered_rps": factor * per_replica * replicas,
        "offered_design_tps": factor * per_replica * (mean_prompt + mean_output) * replicas,
    }


def _up_roots(state: Path) -> Callable[[], dict[str, int]]:
    def roots() -> dict[str, int]:
        try:
            doc = json.loads((state / "up.json").read_text())
        except (OSError, ValueError):
            return {}
        out = {"up": int(doc["pid"])} if "pid" in doc else {}
        for name, proc in doc.get("processes", {}).items():
            out[name] = int(proc["pid"])
        return out

    return roots


def _parse_pids(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        label, _, pid = item.partition("=")
        if not pid.isdigit():
            raise SystemExit(f"--pid wants LABEL=PID, not {item!r}")
        out[label] = int(pid)
    return out


@contextlib.contextmanager
def resolve_stack(args: argparse.Namespace) -> Iterator[Stack]:
    if args.start:
        opts = FleetOptions(
            replicas=args.replicas, gpu_slots=args.gpu_slots, host_ram_slots=args.host_ram_slots,
            copies=args.copies, keep_state=args.keep_state,
        )  # fmt: skip
        with started_fleet(opts) as fleet:
            doc = json.loads((fleet.state_dir / "up.json").read_text())
            markers = markers_from_manifests(fleet.manifests)
            yield Stack(
                Target(fleet.base_url, fleet.api_key, markers, tuple(fleet.aliases)),
                _up_roots(fleet.state_dir),
                doc["gateway"]["internalUrl"] + "/metrics",
                args.replicas,
            )
        return
    if args.base_url is None:
        raise SystemExit("pass --start, or --base-url of a running gateway")
    from lorafleet_loadtest.probe.client import read_key

    markers = markers_from_manifests(args.manifests) if args.manifests else {}
    markers |= parse_marker_args(args.markers)
    aliases = args.aliases or sorted(markers)
    if not aliases:
        raise SystemExit("no aliases: pass --aliases or --manifests")
    pids = _parse_pids(args.pid)
    up_roots = _up_roots(args.state_dir) if args.state_dir else None
    metrics = args.gateway_metrics
    if metrics is None and args.state_dir:
        with contextlib.suppress(OSError, ValueError, KeyError):
            doc = json.loads((args.state_dir / "up.json").read_text())
            metrics = doc["gateway"]["internalUrl"] + "/metrics"

    def roots() -> dict[str, int]:
        return {**(up_roots() if up_roots else {}), **pids}

    key = args.api_key or read_key(args.api_key_file)
    yield Stack(Target(args.base_url, key, markers, tuple(aliases)), roots, metrics, args.replicas)


def gateway_statuses(url: str | None) -> dict[str, float] | None:
    """The gateway's own count of answers by status (`lorafleet_gateway_requests_total`)."""
    if url is None:
        return None
    try:
        text = httpx.get(url, timeout=10).text
    except httpx.HTTPError:
        return None
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "lorafleet_gateway_requests":
            continue
        for s in family.samples:
            if s.name.endswith("_total"):
                status = s.labels.get("status", "?")
                out[status] = out.get(status, 0.0) + s.value
    return dict(sorted(out.items()))


async def soak(
    stack: Stack, args: argparse.Namespace, limits: LengthLimits, rate: float
) -> dict[str, Any]:
    target = stack.target
    max_requests = math.ceil(rate * args.duration * 1.2) + 10
    spec = ReplaySpec(args.trace, rate, args.duration, max_requests, args.zipf, args.seed)
    plan = plan_replay(spec, list(target.aliases), limits)
    t0 = time.perf_counter()
    sampler = RssSampler(stack.roots, args.sample_interval, t0)
    stop = asyncio.Event()
    maps_start = sampler.mappings()
    sampling = asyncio.create_task(sampler.run(stop))
    slow_window: tuple[float, float] | None = None
    slow_task: asyncio.Task[list[SlowResult]] | None = None
    if args.slow_clients > 0:
        start = args.duration / 3 if args.slow_start is None else args.slow_start
        length = args.duration / 3 if args.slow_duration is None else args.slow_duration
        slow_window = (start, start + length)
        url = urlsplit(target.base_url)
        slow_target = SlowTarget(
            url.hostname or "127.0.0.1", url.port or 80, target.api_key, target.aliases[0],
            own_addresses=not args.slow_same_address,
        )  # fmt: skip
        slow_task = asyncio.create_task(
            run_slow_clients(
                slow_target, args.slow_clients, modes=args.slow_modes, t0=t0,
                start_at=slow_window[0], stop_at=slow_window[1], trickle_s=args.trickle_s,
            )
        )  # fmt: skip
    load_start = os.getloadavg()
    results, elapsed = await replay(
        target, plan, concurrency=args.concurrency, timeout_s=args.timeout,
        tokens_per_word=args.tokens_per_word, progress=not args.no_progress,
    )  # fmt: skip
    slow = await slow_task if slow_task is not None else []
    stop.set()
    await sampling
    load_end = os.getloadavg()
    maps_end = sampler.mappings()
    growth = {
        label: mapping_growth(maps_start.get(label, {}), end) for label, end in maps_end.items()
    }
    warmup = args.warmup if args.warmup is not None else min(60.0, args.duration / 5)
    rss = summarize_rss(
        sampler.samples, warmup_s=warmup, min_rise_mib=args.min_rise_mib, rel_rise=args.rel_rise
    )
    return {
        "workload": spec.describe(len(target.aliases)),
        "planned_requests": len(plan),
        "verdict": verdict(results, slow, rss, elapsed_s=elapsed, slow_window=slow_window),
        "gateway_statuses": gateway_statuses(stack.gateway_metrics_url),
        "loadavg": {"start": list(load_start), "end": list(load_end)},
        "warmup_s": warmup,
        "mapping_growth": growth,
        "_samples": sampler.samples,
        "_results": results,
        "_slow": slow,
        "_slow_window": slow_window,
    }


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t = ap.add_argument_group("target: --start, or a running gateway")
    t.add_argument("--start", action="store_true", help="run a throwaway `lorafleet up`")
    t.add_argument("--replicas", type=int, default=1)
    t.add_argument("--gpu-slots", type=int, default=2)
    t.add_argument("--host-ram-slots", type=int, default=4)
    t.add_argument("--copies", type=int, default=3, help="extra versions+aliases per canary")
    t.add_argument("--keep-state", action="store_true")
    t.add_argument("--base-url", default=None)
    t.add_argument("--api-key", default=None)
    t.add_argument("--api-key-file", type=Path, default=None)
    t.add_argument("--aliases", nargs="+", default=None, help="hottest first")
    t.add_argument("--manifests", type=Path, default=None, help="aliases and markers")
    t.add_argument("--markers", nargs="*", default=[], metavar="ALIAS=MARKER")
    t.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="a `lorafleet up` state folder: its up.json names the processes to sample and "
        "the gateway's metrics URL",
    )
    t.add_argument("--pid", action="append", default=[], metavar="LABEL=PID",
                   help="another process to sample (with its descendants)")  # fmt: skip
    t.add_argument("--gateway-metrics", default=None, help="the gateway's /metrics URL")
    w = ap.add_argument_group("load")
    w.add_argument("--duration", type=float, default=600.0, help="seconds of load")
    w.add_argument("--load-factor", type=float, default=2.0, help="x the design per replica")
    w.add_argument("--rate", type=float, default=None, help="requests/s (overrides the factor)")
    w.add_argument("--trace", type=Path, default=WorkloadSpec.trace)
    w.add_argument("--zipf", type=float, default=1.0)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--concurrency", type=int, default=64)
    w.add_argument("--timeout", type=float, default=120.0)
    w.add_argument("--max-prompt-tokens", type=int, default=160)
    w.add_argument("--max-output-tokens", type=int, default=64)
    w.add_argument("--min-output-tokens", type=int, default=8)
    w.add_argument("--max-model-len", type=int, default=256)
    w.add_argument("--tokens-per-word", type=float, default=2.4)
    m = ap.add_argument_group("memory")
    m.add_argument("--sample-interval", type=float, default=2.0)
    m.add_argument("--warmup", type=float, default=None, help="default min(60, duration/5)")
    m.add_argument("--min-rise-mib", type=float, default=16.0)
    m.add_argument("--rel-rise", type=float, default=0.05)
    s = ap.add_argument_group("slow clients")
    s.add_argument("--slow-clients", type=int, default=60)
    s.add_argument("--slow-start", type=float, default=None, help="default duration/3")
    s.add_argument("--slow-duration", type=float, default=None, help="default duration/3")
    s.add_argument("--slow-modes", type=lambda v: v.split(","), default=list(MODES))
    s.add_argument("--trickle-s", type=float, default=1.0)
    s.add_argument("--slow-same-address", action="store_true",
                   help="slow clients share the normal traffic's address")  # fmt: skip
    o = ap.add_argument_group("output")
    o.add_argument("--out", type=Path, default=Path("bench-results/soak.json"))
    o.add_argument("--plot", type=Path, default=Path("bench-results/soak.png"))
    o.add_argument("--no-progress", action="store_true")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if unknown := set(args.slow_modes) - set(MODES):
        print(f"error: unknown --slow-modes {sorted(unknown)}", file=sys.stderr)
        return 2
    try:
        limits = LengthLimits(
            args.max_prompt_tokens, args.max_output_tokens, args.max_model_len,
            min_output_tokens=args.min_output_tokens,
        )  # fmt: skip
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    command = _reproduce(sys.argv[1:] if argv is None else argv)
    design = design_load(args.trace, args.load_factor, args.replicas)
    rate = args.rate if args.rate is not None else design["offered_rps"]
    try:
        with resolve_stack(args) as stack:
            print(describe_load(design, rate, limits, stack))
            out = asyncio.run(soak(stack, args, limits, rate))
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    samples, results = out.pop("_samples"), out.pop("_results")
    slow, slow_window = out.pop("_slow"), out.pop("_slow_window")
    v = out["verdict"]
    title = f"soak: {rate:.2f} req/s for {args.duration:g} s ({out['workload']})"
    doc = {
        "command": command.removeprefix("command: "),
        "title": title,
        "design": design,
        "offered_rps": rate,
        **out,
        "rss_samples": [[round(s.t, 2), s.label, s.pid, round(s.rss_mib, 2)] for s in samples],
        "slow_results": [s.as_dict() for s in slow],
        # [sent at (s), TTFT (ms) or null, status] per normal request, for other windows
        "requests": [[round(r.started_at, 2), _ms(r.ttft_s), r.status] for r in results],
    }
    result = Result("soak", RSS_COLUMNS, command=command.removeprefix("command: "))
    for s in v["rss"]:
        result.add(**dict(zip(RSS_COLUMNS, rss_row(s), strict=True)))
    # Statuses, TTFT by phase and the slow clients: the verdict's text above its RSS table.
    result.notes.append(format_verdict(v).split("\n\nRSS MiB")[0])
    for label, rows in out["mapping_growth"].items():
        grew = "; ".join(
            f"{r['path']} {r['addr']}: size {r['size_mib']} MiB, resident "
            f"{r['rss_before_mib']} -> {r['rss_after_mib']} MiB"
            for r in rows
        )
        result.notes.append(f"where {label}'s RSS grew (top mappings): {grew}")
    la = out["loadavg"]
    result.notes += [
        f"gateway's count by status: {out['gateway_statuses']}",
        f"load average (1/5/15 min) at start {la['start']}, at end {la['end']}",
        f"plot: {write_plot(args.plot, title, samples, results, slow_window)}",
    ]
    result.details = doc
    result.emit(args.out)
    return 0 if passed(v) else 1


RSS_COLUMNS = ["process", "first MiB", "last MiB", "max MiB", "MiB/min", "later half MiB/min",
               "rise MiB", "restarts", "verdict"]  # fmt: skip


def rss_row(s: dict[str, Any]) -> list[Any]:
    return [
        s["label"],
        round(s["first_mib"], 1),
        round(s["last_mib"], 1),
        round(s["max_mib"], 1),
        round(s["slope_mib_per_min"], 2),
        round(s["late_slope_mib_per_min"], 2),
        round(s["rise_mib"], 1),
        len(s["pids"]) - 1,
        "growing" if s["growing"] else "flat",
    ]


def _reproduce(argv: list[str]) -> str:
    """The command line that reruns this, with an `--api-key` value hidden."""
    shown = ["$LORAFLEET_API_KEY" if i and argv[i - 1] == "--api-key" else a
             for i, a in enumerate(argv)]  # fmt: skip
    line = shlex.join(shown).replace("'$LORAFLEET_API_KEY'", '"$LORAFLEET_API_KEY"')
    return "command: .venv/bin/python -m benchmarks.soak " + line


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def describe_load(design: dict[str, float], rate: float, limits: LengthLimits, stack: Stack) -> str:
    return (
        f"design: {design['fleet_rps']:g} req/s over {design['replicas']} replicas = "
        f"{design['per_replica_rps']:.2f} req/s, {design['per_replica_prompt_tps']:.0f} prompt + "
        f"{design['per_replica_output_tps']:.0f} output tokens/s per replica (trace means); "
        f"x{design['factor']:g} x {stack.replicas} replica(s) = {design['offered_rps']:.2f} "
        f"req/s ({design['offered_design_tps']:.0f} tokens/s at trace lengths)\n"
        f"offered here: {rate:.2f} req/s, lengths scaled to prompt <= "
        f"{limits.max_prompt_tokens}, output <= {limits.max_output_tokens} tokens; Zipf over "
        f"{len(stack.target.aliases)} aliases, hottest first: "
        f"{', '.join(stack.target.aliases[:4])}, ..."
    )


if __name__ == "__main__":
    sys.exit(main())
