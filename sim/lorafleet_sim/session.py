"""One `lorafleet sim` session: run what was asked for, write its report, return the text.

Three kinds: a named scenario (`run_scenario`: the runs' table and detail, with JSON and a
PNG beside the markdown), the capacity search (`search_capacity`: fewest replicas meeting the
SLO at each prefill rate) and the hot-tenant comparison (`compare_merged`: more owners vs a
merged pool). Each report ends with the wall time it took and `command`, the command line
that reproduces it. Progress lines go to `on_line`; the caller decides where they are shown.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

from lorafleet_sim import capacity, merged, merged_overflow, params, report
from lorafleet_sim.burst import burst
from lorafleet_sim.engine import Engine
from lorafleet_sim.scenarios import SCENARIOS, Inputs, Run, engine_for

# Every scenario `run_scenario` takes, besides the hot-tenant comparison.
SCENARIO_NAMES = (*SCENARIOS, merged_overflow.SCENARIO)


def simulate(run_: Run, seed: int, progress: bool) -> report.Summary:
    """One run with a progress bar (when `progress`), summarised."""
    from tqdm import tqdm

    with tqdm(
        total=len(run_.workload), desc=run_.name, unit="req", disable=not progress, mininterval=0.5
    ) as bar:
        eng = engine_for(run_, seed, Engine, progress=bar.update).run()
    return report.summarize(run_.name, eng, run_.measure_from, hot=run_.hot)


def run_scenario(
    inputs: Inputs, scenario: str, *, progress: bool, out: Path, command: str
) -> tuple[str, Path]:
    """The scenario's markdown report, and the stem of the .md, .json and .png it wrote."""
    started = time.perf_counter()
    runs = SCENARIOS.get(scenario, merged_overflow.runs)(inputs)
    summaries = [simulate(r, inputs.seed, progress) for r in runs]
    elapsed = time.perf_counter() - started
    title = f"lorafleet sim --scenario {scenario}: {runs[0].workload.label}"
    md = [f"## {title}", "", report.table(summaries), ""]
    if scenario == merged_overflow.SCENARIO:
        md += [merged_overflow.table(summaries), ""]
    md += [report.detail(s) for s in summaries]
    bursts = burst(runs[0].workload, runs[0].measure_from)
    md.append(bursts.line(runs[0].replica.prefill_tps))
    md.append("")
    md.append(f"model parameters: {json.dumps(params.describe(runs[0].replica, runs[0].fleet))}")
    md.append(f"\nsimulated in {elapsed:.1f} s wall; command: {command}")
    text = "\n".join(md)
    stem = out / f"sim-{scenario}"
    meta = {
        "scenario": scenario,
        "workload": runs[0].workload.label,
        "seed": inputs.seed,
        "params": params.describe(runs[0].replica, runs[0].fleet),
        "wall_s": elapsed,
        "burst": asdict(bursts),
    }
    report.write_json(stem.with_suffix(".json"), meta, summaries)
    stem.with_suffix(".md").write_text(text + "\n")
    report.plot(stem.with_suffix(".png"), summaries, title)
    return text, stem


def search_capacity(
    inputs: Inputs,
    prefill_rates: Sequence[float],
    *,
    low: int,
    high: int,
    out: Path,
    command: str,
    on_line: Callable[[str], None] | None = None,
) -> str:
    """The capacity search's markdown report at each prefill rate (written to
    `out/sim-capacity.md`); `on_line` hears of every fleet size tried."""
    started = time.perf_counter()
    workload = inputs.workload()
    bursts = burst(workload, inputs.warmup_s)
    rows: list[str] = []
    summaries: list[report.Summary] = []
    for prefill in sorted(set(prefill_rates)):
        rp = replace(inputs.replica, prefill_tps=prefill)

        def show(n: int, s: report.Summary, prefill: float = prefill) -> None:
            if on_line is not None:
                on_line(
                    f"  prefill {prefill:g}: {n} replicas -> worst p95 "
                    f"{s['worst_adapter_p95_ms']:.0f} ms, gpu {s['gpu_hit_pct']:.1f}%"
                )

        best, tried = capacity.search(
            workload,
            rp,
            inputs.fleet,
            router=inputs.router,
            seed=inputs.seed,
            low=low,
            high=high,
            measure_from=inputs.warmup_s,
            on_run=show,
        )
        pure = capacity.pure_work_replicas(workload, rp)
        unstable = [n for n, s in sorted(tried.items()) if not s["stable"]]
        rows.append(
            f"| {prefill:g} | {best if best is not None else f'> {high}'} | {pure:.1f} | "
            f"{bursts.replicas(bursts.p95_tps, prefill)} / "
            f"{bursts.replicas(bursts.p99_tps, prefill)} | "
            + (", ".join(map(str, unstable)) or "none")
            + " | "
            + ", ".join(
                f"{n}: {s['worst_adapter_p95_ms']:.0f} ms / {s['gpu_hit_pct']:.1f}%"
                if s["stable"]
                else f"{n}: unstable"
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
            "meets = stable (completions keep up with arrivals) with worst-adapter p95 TTFT "
            "< 1 s and GPU hits >= 95% (design: 26 replicas; pure work below); an unstable "
            "run is no result and never meets. Burst: replicas whose prefill takes the 95th / "
            "99th percentile second's prompt tokens within that second",
            "",
            "| prefill tokens/s | fewest replicas meeting | pure work (replicas) "
            "| burst p95 / p99 (replicas) | unstable at | tried: worst p95 / GPU hits |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            bursts.line(sorted(set(prefill_rates))[0]),
            "",
            report.table(summaries),
            "",
            f"searched in {elapsed:.1f} s wall; command: {command}",
        ]
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "sim-capacity.md").write_text(text + "\n")
    return text


def compare_merged(
    inputs: Inputs,
    rates: Sequence[float],
    *,
    low: int,
    high: int,
    merged_high: int | None,
    seeds: int,
    jobs: int,
    out: Path,
    command: str,
    on_line: Callable[[str], None] | None = None,
) -> str:
    """The hot-tenant comparison's markdown report at each of the tenant's `rates` (written
    to `out/sim-hot-tenant-merged.md`); `on_line` hears of every fleet size tried."""
    started = time.perf_counter()
    rows = merged.compare(
        inputs,
        sorted(set(rates)),
        low=low,
        high=high,
        merged_high=merged_high,
        seeds=seeds,
        jobs=jobs,
        on_run=on_line or (lambda _line: None),
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
            f"of {seeds} seeds from {inputs.seed}: hot adapter p95 TTFT < 1 s and long-tail "
            "worst p95 (the worst replica's p95 over the other adapters' requests) < 1 s; "
            f"merged replicas decode at {rp.decode_s_merged * 1000:g} ms/step vs "
            f"{rp.decode_s * 1000:g} ms, one adapter, no loads; GPUs = replica-hours / hour",
            "",
            merged.table(rows, capacity_tps),
            "",
            verdict,
            "",
            f"searched in {time.perf_counter() - started:.1f} s wall; command: {command}",
        ]
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / f"sim-{merged.SCENARIO}.md").write_text(text + "\n")
    return text
