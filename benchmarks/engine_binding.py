"""Two CPU engines of `lorafleet up`: both workers on one core vs one core each, side by side.

    .venv/bin/python -m benchmarks.engine_binding [--rounds 4] [--duration 15]

vLLM's CPU build binds each engine's worker to the cores `VLLM_CPU_OMP_THREADS_BIND=auto`
picks: all but the last, the same cores for every engine, so `lorafleet up --replicas 2` used
to put both workers on core 0 of a 2-core machine. `up` now gives each engine its own cores
(lorafleet_standalone.cpu_binding). This starts one 2-replica demo fleet
(e2e/standalone_fleet.py) and alternates the two layouts on it, re-pinning every thread of
both workers with `sched_setaffinity` between rounds (the worker runs one OpenMP thread per
core it was given, so a re-pin is the layout it would have had from the start):

- `shared`: both workers on vLLM's `auto` cores (the old behaviour);
- `split`: each worker on its own share (`engine_core_sets`, the new behaviour).

Each round is a closed loop through the gateway (`lorafleet loadtest`'s saturate: 16 requests
in flight over the fleet's aliases, 32-token prompts, exactly 32 output tokens), in the order
shared, split, split, shared, ... so a drift in the machine's load hits both alike. Printed:
tokens/s per round and the median, TTFT p50/p95, and the CPU seconds the two workers got per
wall second (above 1.0 only if they ran on more than one core at once). JSON in
bench-results/engine-binding/.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.calibration_host_probe import FleetProcesses
from benchmarks.calibration_layout import pin_threads
from benchmarks.results import Result
from e2e.standalone_fleet import FleetOptions, started_fleet
from lorafleet_loadtest.driver import saturate
from lorafleet_loadtest.session import load_average
from lorafleet_loadtest.stats import Quantiles
from lorafleet_standalone.cpu_binding import engine_core_sets


def layouts(cpus: set[int]) -> dict[str, list[set[int]]]:
    """Each layout's cores per worker."""
    auto = set(engine_core_sets(cpus, 1)[0])
    return {"shared": [auto, auto], "split": [set(c) for c in engine_core_sets(cpus, 2)]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4, help="rounds per layout")
    ap.add_argument("--duration", type=float, default=15.0, help="seconds per round")
    ap.add_argument("--out", type=Path, default=Path("bench-results/engine-binding"))
    args = ap.parse_args()
    cpus = os.sched_getaffinity(0)
    plan = layouts(cpus)
    order = [
        n
        for r in range(args.rounds)
        for n in (("shared", "split") if r % 2 == 0 else ("split", "shared"))
    ]
    rows: dict[str, list[dict[str, Any]]] = {"shared": [], "split": []}
    doc: dict[str, Any] = {
        "cpus": sorted(cpus),
        "load_average_before": load_average(),
    }
    with started_fleet(FleetOptions(replicas=2, copies=1)) as fleet:
        procs = FleetProcesses.of(fleet.proc.pid)
        workers = procs.roles.get("worker", [])
        assert len(workers) == 2, f"want 2 vLLM workers, found {len(workers)}"
        doc["layouts"] = {n: [sorted(c) for c in cores] for n, cores in plan.items()}
        for name in order:
            for worker, cores in zip(workers, plan[name], strict=True):
                pin_threads(worker.pid, cores)
            cpu0, t0 = procs.cpu().get("worker", 0.0), time.monotonic()
            results, elapsed = asyncio.run(
                saturate(fleet.base_url, fleet.api_key, fleet.aliases, concurrency=16,
                         duration_s=args.duration, max_tokens=32, prompt_tokens=32,
                         tokens_per_word=2.4, timeout_s=120.0, progress=False)
            )  # fmt: skip
            worker_cpu = (procs.cpu().get("worker", 0.0) - cpu0) / (time.monotonic() - t0)
            ok = [r for r in results if r.ok]
            if not ok:  # a round that measured nothing: say why instead of printing zeros
                bad = next((r for r in results), None)
                raise SystemExit(f"no request answered; first: {bad}")
            tokens = sum(r.completion_tokens or 0 for r in ok)
            row = {
                "tokens_per_s": tokens / elapsed,
                "requests": len(results),
                "errors": len(results) - len(ok),
                "ttft_s": [r.ttft_s for r in ok if r.ttft_s is not None],
                "worker_cpu_per_s": worker_cpu,
                "load_average": load_average(),
            }
            rows[name].append(row)
            print(
                f"{name:6s} {row['tokens_per_s']:7.0f} tokens/s, {row['errors']} errors, "
                f"workers {worker_cpu:.2f} CPU-s/s, load {row['load_average']}",
                flush=True,
            )
    doc["load_average_after"] = load_average()
    columns = ["layout", "tokens/s per round", "median tokens/s", "TTFT p50 ms", "TTFT p95 ms",
               "workers' CPU-s per s", "errors"]  # fmt: skip
    result = Result("engine_binding", columns)
    result.notes.append(
        f"cores {sorted(cpus)}; layouts {doc['layouts']}; load average "
        f"{doc['load_average_before']} -> {doc['load_average_after']}"
    )
    summary = {}
    for name, rs in rows.items():
        ttft = Quantiles.of([t for r in rs for t in r["ttft_s"]])
        med = statistics.median(r["tokens_per_s"] for r in rs)
        cpu = statistics.median(r["worker_cpu_per_s"] for r in rs)
        summary[name] = {"median_tokens_per_s": med, "worker_cpu_per_s": cpu, "ttft": ttft.as_ms()}
        p50, p95 = (round(q * 1000) if q is not None else "-" for q in (ttft.p50, ttft.p95))
        result.add(
            layout=name,
            errors=sum(r["errors"] for r in rs),
            **{
                "tokens/s per round": ", ".join(f"{r['tokens_per_s']:.0f}" for r in rs),
                "median tokens/s": round(med),
                "TTFT p50 ms": p50,
                "TTFT p95 ms": p95,
                "workers' CPU-s per s": round(cpu, 2),
            },
        )
    doc["rounds"] = {
        n: [{k: v for k, v in r.items() if k != "ttft_s"} for r in rs] for n, rs in rows.items()
    }
    doc["summary"] = summary
    result.details = doc
    result.emit(args.out / "engine-binding.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
