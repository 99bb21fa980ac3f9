"""One `lorafleet sim` scenario run for the benchmarks that look inside it: the command line
(scenario, seed, duration, warm-up, `--set`), the scenario's last run built from it, and an
`Engine` subclass run over it exactly as `lorafleet sim` runs it (the same figures for the same
seed and values). Used by `sim_annotation_churn` and `sim_remote_loads`."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from lorafleet_sim.engine import Engine
from lorafleet_sim.params import with_overrides
from lorafleet_sim.scenarios import SCENARIOS, Inputs, Run, engine_for

E = TypeVar("E", bound=Engine)


def add_run_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--scenario", default="ramp", choices=sorted(SCENARIOS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--duration", type=float, default=3600.0, help="measured seconds")
    ap.add_argument("--warmup", type=float, default=600.0, help="simulated first, left out")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--out", type=Path, default=None, help="result JSON (or a folder)")


def scenario_run(args: argparse.Namespace) -> Run:
    """The scenario's last run, with the command line's seed, lengths and `--set` values."""
    base = Inputs(seed=args.seed, duration_s=args.duration, warmup_s=args.warmup)
    inputs = replace(
        base,
        fleet=with_overrides(base.fleet, args.set),
        replica=with_overrides(base.replica, args.set),
    )
    return SCENARIOS[args.scenario](inputs)[-1]


def run_engine(engine: type[E], run: Run, seed: int) -> E:
    eng = engine_for(run, seed, engine)
    eng.run()
    return eng
