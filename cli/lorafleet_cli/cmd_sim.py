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
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from lorafleet_cli.arg_options import options_from_args
from lorafleet_cli.exit_codes import UsageError
from lorafleet_sim import merged, params, session
from lorafleet_sim.engine import ROUTERS
from lorafleet_sim.scenarios import Inputs

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
        choices=sorted([*session.SCENARIO_NAMES, merged.SCENARIO]),
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


def inputs_from_args(args: argparse.Namespace) -> Inputs:
    """The simulation's inputs from the command line (`--set` checked against the model)."""
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


def run(args: argparse.Namespace) -> int:
    inputs = inputs_from_args(args)
    command = f"lorafleet sim {' '.join(_argv(args))}"
    if args.capacity:
        rates = [float(x) for x in args.prefill_rates.split(",")]
        progress = not args.no_progress and sys.stderr.isatty()
        print(
            session.search_capacity(
                inputs,
                rates,
                low=args.low,
                high=args.high,
                out=args.out,
                command=command,
                on_line=_to_stderr if progress else None,
            )
        )
        return 0
    if args.scenario == merged.SCENARIO:
        if args.seeds < 1 or args.jobs < 1:
            raise UsageError("--seeds and --jobs must be at least 1")
        rates = [float(x) for x in args.hot_rates.split(",") if x.strip()]
        print(
            session.compare_merged(
                inputs,
                rates,
                low=args.low,
                high=args.high,
                merged_high=args.merged_high,
                seeds=args.seeds,
                jobs=args.jobs,
                out=args.out,
                command=command,
                # one line per fleet size tried: the search's evidence
                on_line=None if args.no_progress else _to_stderr,
            )
        )
        return 0
    progress = not args.no_progress and sys.stderr.isatty()
    text, stem = session.run_scenario(
        inputs, args.scenario, progress=progress, out=args.out, command=command
    )
    print(text)
    print(f"wrote {stem}.md, .json, .png")
    return 0


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _argv(args: argparse.Namespace) -> list[str]:
    return sys.argv[2:] if len(sys.argv) > 1 and sys.argv[1] == "sim" else []
