"""`lorafleet sim`: run a scenario of the fleet digital twin and print its figures.

Examples (docs/reference/simulator.md; the figures they gave: docs/design/):
    lorafleet sim                                  # steady peak: 1 h at 40 req/s, 26 replicas
    lorafleet sim --scenario routing-ab --duration 900
    lorafleet sim --scenario thrash --set gpu_slots=8
    lorafleet sim --capacity --duration 900        # fewest replicas that meet the SLO
    lorafleet sim --scenario hot-tenant-merged --hot-rates 320,640,1280,2000 --duration 900
                                                   # more owners vs a merged pool, per rate
    lorafleet sim --scenario merged-overflow --duration 900 --warmup 300
                                                   # an undersized merged pool's overflow
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from lorafleet_cli.arg_options import options_from_args
from lorafleet_cli.exit_codes import UsageError
from lorafleet_sim import capacity, merged, merged_overflow, params, report
from lorafleet_sim.engine import ROUTERS, Engine
from lorafleet_sim.scenarios import SCENARIOS, Inputs, Run, engine_for

# Inputs fields named otherwise than their flags (arg_options.options_from_args).
INPUT_ARGS = {"duration_s": "duration", "warmup_s": "warmup", "zipf_s": "zipf", "mix_file": "mix"}


def register(sub: Any) -> None:
    p = sub.add_parser(
        "sim",
        help="simulate the fleet with the shipped router, planners and cache policy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--scenario",
        choices=sorted([*SCENARIOS, merged.SCENARIO, merged_overflow.SCENARIO]),
        default="steady",
        metavar="SCENARIO",
        help="%(choices)s (default steady; each is described in docs/reference/simulator.md)",
    )
    p.add_argument(
        "--hot-rates",
        default="2000",
        help="hot-tenant-merged: the hot tenant's generated tokens/s to compare at (comma list)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        default=merged.SEEDS,
        help="hot-tenant-merged: seeds (from --seed) the SLO must hold on (default 3)",
    )
    p.add_argument(
        "--merged-high",
        type=int,
        default=None,
        help="hot-tenant-merged: most merged replicas to try (default 2 x the tenant's "
        "share of a replica, + 2)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="hot-tenant-merged: processes running the seeds of one fleet size (same figures)",
    )
    p.add_argument("--rate", type=float, default=40.0, help="requests/s (default 40)")
    p.add_argument(
        "--duration", type=float, default=3600.0, help="simulated seconds (default 3600)"
    )
    p.add_argument(
        "--warmup",
        type=float,
        default=600.0,
        help="simulated first, left out of the figures (default 600)",
    )
    p.add_argument("--adapters", type=int, default=5000, help="adapters (default 5000)")
    p.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of popularity")
    p.add_argument(
        "--mix", type=Path, default=None, help="tenant mix CSV: tenant,share[,tokens_per_s]"
    )
    p.add_argument("--trace", type=Path, default=None, help="trace CSV (default ../shared/traces)")
    p.add_argument("--poisson", action="store_true", help="Poisson arrivals, trace lengths")
    p.add_argument("--seed", type=int, default=0, help="same seed, same figures (default 0)")
    p.add_argument(
        "--router",
        choices=ROUTERS,
        default="affinity",
        help="the gateway routing_policy to simulate (default affinity, as shipped)",
    )
    p.add_argument("--replicas", type=int, default=None, help="replica count (default 26)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a model parameter (see sim/lorafleet_sim/params.py)",
    )
    p.add_argument(
        "--capacity", action="store_true", help="search the fewest replicas meeting the SLO"
    )
    p.add_argument("--low", type=int, default=10, help="capacity search lower bound")
    p.add_argument("--high", type=int, default=40, help="capacity search upper bound")
    p.add_argument(
        "--prefill-rates",
        default="8000,12000,16000",
        help="capacity search: prefill tokens/s to search at (design 8,000; GPUs measure more)",
    )
    p.add_argument("--out", type=Path, default=Path("bench-results/sim"), help="JSON/PNG/markdown")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _inputs(args: argparse.Namespace) -> Inputs:
    bad = params.unknown_settings(args.set)
    if bad:
        raise UsageError(f"unknown model parameter(s) for --set: {', '.join(bad)}")
    try:
        rp = params.with_overrides(params.ReplicaParams(), args.set)
        fp = params.with_overrides(params.FleetParams(), args.set)
    except ValueError as exc:
        raise UsageError(f"--set: {exc}") from exc
    if args.replicas is not None:
        fp = replace(fp, replicas=args.replicas)
    return options_from_args(Inputs, args, INPUT_ARGS, replica=rp, fleet=fp)


def simulate(run_: Run, seed: int, progress: bool) -> report.Summary:
    from tqdm import tqdm

    with tqdm(
        total=len(run_.workload), desc=run_.name, unit="req", disable=not progress, mininterval=0.5
    ) as bar:
        eng = engine_for(run_, seed, Engine, progress=bar.update).run()
    return report.summarize(run_.name, eng, run_.measure_from, hot=run_.hot)


def run(args: argparse.Namespace) -> int:
    inputs = _inputs(args)
    started = time.perf_counter()
    progress = not args.no_progress and sys.stderr.isatty()
    if args.capacity:
        return _capacity(args, inputs, progress, started)
    if args.scenario == merged.SCENARIO:
        return _merged(args, inputs, progress, started)
    scenario = SCENARIOS.get(args.scenario, merged_overflow.runs)
    runs = scenario(inputs)
    summaries = [simulate(r, inputs.seed, progress) for r in runs]
    elapsed = time.perf_counter() - started
    title = f"lorafleet sim --scenario {args.scenario}: {runs[0].workload.label}"
    md = [f"## {title}", "", report.table(summaries), ""]
    if args.scenario == merged_overflow.SCENARIO:
        md += [merged_overflow.table(summaries), ""]
    md += [report.detail(s) for s in summaries]
    md.append(f"model parameters: {json.dumps(params.describe(runs[0].replica, runs[0].fleet))}")
    md.append(
        f"\nsimulated in {elapsed:.1f} s wall; command: lorafleet sim {' '.join(_argv(args))}"
    )
    text = "\n".join(md)
    print(text)
    stem = args.out / f"sim-{args.scenario}"
    meta = {
        "scenario": args.scenario,
        "workload": runs[0].workload.label,
        "seed": inputs.seed,
        "params": params.describe(runs[0].replica, runs[0].fleet),
        "wall_s": elapsed,
    }
    report.write_json(stem.with_suffix(".json"), meta, summaries)
    stem.with_suffix(".md").write_text(text + "\n")
    report.plot(stem.with_suffix(".png"), summaries, title)
    print(f"wrote {stem}.md, .json, .png")
    return 0


def _capacity(args: argparse.Namespace, inputs: Inputs, progress: bool, started: float) -> int:
    workload = inputs.workload()
    rows: list[str] = []
    summaries: list[report.Summary] = []
    for prefill in sorted({float(x) for x in args.prefill_rates.split(",")}):
        rp = replace(inputs.replica, prefill_tps=prefill)

        def show(n: int, s: report.Summary, prefill: float = prefill) -> None:
            if progress:
                print(
                    f"  prefill {prefill:g}: {n} replicas -> worst p95 "
                    f"{s['worst_adapter_p95_ms']:.0f} ms, gpu {s['gpu_hit_pct']:.1f}%",
                    file=sys.stderr,
                )

        best, tried = capacity.search(
            workload,
            rp,
            inputs.fleet,
            router=inputs.router,
            seed=inputs.seed,
            low=args.low,
            high=args.high,
            measure_from=inputs.warmup_s,
            on_run=show,
        )
        pure = capacity.pure_work_replicas(workload, rp)
        rows.append(
            f"| {prefill:g} | {best if best is not None else f'> {args.high}'} | {pure:.1f} | "
            + ", ".join(
                f"{n}: {s['worst_adapter_p95_ms']:.0f} ms / {s['gpu_hit_pct']:.1f}%"
                for n, s in sorted(tried.items())
            )
            + " |"
        )
        for n, s in sorted(tried.items()):
            s.name = f"prefill {prefill:g}, {n} replicas"
            summaries.append(s)
    elapsed = time.perf_counter() - started
    text = "\n".join(
        [
            f"## Capacity search: {workload.label}, router {inputs.router}",
            "",
            "meets = worst-adapter p95 TTFT < 1 s and GPU hits >= 95% "
            "(design: 26 replicas; pure work below)",
            "",
            "| prefill tokens/s | fewest replicas meeting | pure work (replicas) "
            "| tried: worst p95 / GPU hits |",
            "|---|---|---|---|",
            *rows,
            "",
            report.table(summaries),
            "",
            f"searched in {elapsed:.1f} s wall; command: lorafleet sim {' '.join(_argv(args))}",
        ]
    )
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sim-capacity.md").write_text(text + "\n")
    return 0


def _merged(args: argparse.Namespace, inputs: Inputs, progress: bool, started: float) -> int:
    rates = sorted({float(x) for x in args.hot_rates.split(",") if x.strip()})

    def show(line: str) -> None:
        if not args.no_progress:  # one line per fleet size tried: the search's evidence
            print(line, file=sys.stderr, flush=True)

    if args.seeds < 1 or args.jobs < 1:
        raise UsageError("--seeds and --jobs must be at least 1")
    rows = merged.compare(
        inputs,
        rates,
        low=args.low,
        high=args.high,
        merged_high=args.merged_high,
        seeds=args.seeds,
        jobs=args.jobs,
        on_run=show,
    )
    rp = inputs.replica
    capacity_tps = inputs.fleet.replica_capacity_tps or rp.max_seqs / rp.decode_s
    found = merged.threshold(rows)
    verdict = (
        f"merged pool wins from {found:g} tokens/s ({found / capacity_tps:.2f} x one replica's "
        f"{capacity_tps:g} tokens/s) at every rate tried above"
        if found is not None
        else "merged pool never wins at the rates tried"
    )
    workload = inputs.workload()
    text = "\n".join(
        [
            f"## Hot tenant: more owners vs a merged pool ({workload.label}, router "
            f"{inputs.router})",
            "",
            "each fleet at its fewest GPUs (the merged one: fewest shared + merged over every "
            "merged count), each pool at a count from which every larger count meets, on each "
            f"of {args.seeds} seeds from {inputs.seed}: hot adapter p95 TTFT < 1 s and long-tail "
            "worst p95 (the worst replica's p95 over the other adapters' requests) < 1 s; "
            f"merged replicas decode at {rp.decode_s_merged * 1000:g} ms/step vs "
            f"{rp.decode_s * 1000:g} ms, one adapter, no loads; GPUs = replica-hours / hour",
            "",
            merged.table(rows, capacity_tps),
            "",
            verdict,
            "",
            f"searched in {time.perf_counter() - started:.1f} s wall; command: lorafleet sim "
            f"{' '.join(_argv(args))}",
        ]
    )
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"sim-{merged.SCENARIO}.md").write_text(text + "\n")
    return 0


def _argv(args: argparse.Namespace) -> list[str]:
    return sys.argv[2:] if len(sys.argv) > 1 and sys.argv[1] == "sim" else []
