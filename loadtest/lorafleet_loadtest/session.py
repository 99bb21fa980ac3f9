"""One `lorafleet loadtest` invocation: the runs it makes and the files it writes (I/O).

A sweep replays the trace once per offered rate (fresh plan, same seed); the overhead mode
runs one closed-loop throughput row per batch mix; a comparison only reads result files.
Outputs go to one folder: `loadtest.json` (everything, the source of the tables),
`loadtest.md`, and PNGs (`replay-<rate>.png` per rate, `sweep.png`, `overhead.png`,
`compare.png`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorafleet_core.version import version
from lorafleet_loadtest import overhead as oh
from lorafleet_loadtest import plots, report
from lorafleet_loadtest.driver import Target, base_model, replay, saturate, warm_up
from lorafleet_loadtest.plan import LengthLimits, ReplaySpec, plan_replay
from lorafleet_loadtest.stats import RunStats, stats_to_json, summarize


@dataclass(frozen=True)
class SweepOptions:
    rates: list[float]
    duration_s: float
    max_requests: int
    zipf_s: float
    seed: int
    trace: Path
    limits: LengthLimits
    concurrency: int
    timeout_s: float
    tokens_per_word: float
    progress: bool


@dataclass(frozen=True)
class OverheadOptions:
    counts: list[int]
    concurrency: int
    duration_s: float
    max_tokens: int
    prompt_tokens: int
    tokens_per_word: float
    timeout_s: float
    engine_url: str | None
    engine_key: str
    progress: bool
    engine_direct: bool = False
    rounds: int = 1


def load_average() -> str:
    try:
        return " ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def now_utc() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rate_tag(rate: float) -> str:
    return f"{rate:g}".replace(".", "_")


def run_meta(
    label: str, command: str, gateway: str, aliases: list[str], markers: dict[str, str]
) -> dict[str, Any]:
    """What a result document records of the session before it runs: what was run against
    what, and how loaded the machine was (figures from a busy machine are not comparable).
    `command` must not hold the API key (it only ever comes from a file or the environment)."""
    return {
        "label": label,
        "command": command,
        "gateway": gateway,
        "started": now_utc(),
        "lorafleet": version(),
        "load_average_before": load_average(),
        "aliases": f"{len(aliases)}, hottest first: {', '.join(aliases[:6])}"
        + (", ..." if len(aliases) > 6 else ""),
        "markers_known": f"{sum(a in markers for a in aliases)}/{len(aliases)}",
    }


def sweep_meta(opts: SweepOptions) -> dict[str, Any]:
    """What a rate sweep's result document records of its replay settings."""
    limits = opts.limits
    return {
        "trace": str(opts.trace),
        "zipf_s": opts.zipf_s,
        "seed": opts.seed,
        "lengths": f"{limits.mode} to prompt <= {limits.max_prompt_tokens}, "
        f"output <= {limits.max_output_tokens} tokens",
        "concurrency": opts.concurrency,
    }


def run_sweep(
    target: Target, aliases: list[str], opts: SweepOptions, out: Path, plot: bool
) -> list[tuple[RunStats, dict[str, Any]]]:
    """Replay the trace at each rate; per rate the figures and (with `plot`) its PNG."""
    done: list[tuple[RunStats, dict[str, Any]]] = []
    for rate in opts.rates:
        spec = ReplaySpec(
            opts.trace, rate, opts.duration_s, opts.max_requests, opts.zipf_s, opts.seed
        )
        plan = plan_replay(spec, aliases, opts.limits)
        title = spec.describe(len(aliases))
        print(f"{title}: {len(plan)} requests")
        results, elapsed = asyncio.run(
            replay(
                target,
                plan,
                concurrency=opts.concurrency,
                timeout_s=opts.timeout_s,
                tokens_per_word=opts.tokens_per_word,
                desc=f"{rate:g} req/s",
                progress=opts.progress,
            )
        )
        # The plan offers exactly `rate` over its window (plan.trace_window), however long
        # --max-requests let it be.
        span = len(plan) / rate
        stats = summarize(results, elapsed_s=elapsed, planned_span_s=span, label=f"{rate:g}")
        doc = {"rate": rate, "describe": title, **stats_to_json(stats)}
        print(
            f"  offered {stats.offered_rps:.2f} achieved {stats.achieved_rps:.2f} req/s, "
            f"{stats.error_count} errors ({stats.rate_limited} x 429), GPU share "
            f"{100 * stats.gpu_share:.1f}%, p95 TTFT "
            f"{'-' if stats.ttft.p95 is None else f'{1000 * stats.ttft.p95:.0f} ms'}, "
            f"{stats.mismatches} marker mismatches"
        )
        if plot:
            plots.write_plots(results, out / f"replay-{rate_tag(rate)}.png", title)
        done.append((stats, doc))
    return done


def run_overhead(
    gateway_url: str, api_key: str, aliases: list[str], opts: OverheadOptions
) -> dict[str, Any]:
    """Base model (on `engine_url`) and k distinct aliases per batch for each k in counts."""

    def warm(url: str, key: str, models: list[str], name: str) -> list[str]:
        """One request per model first (loads happen before the clock, not in the row);
        returns the adapter ids that answered (the gateway's `x-adapter-id`)."""
        done = asyncio.run(
            warm_up(
                url,
                key,
                models,
                prompt_tokens=opts.prompt_tokens,
                tokens_per_word=opts.tokens_per_word,
                timeout_s=opts.timeout_s,
            )
        )
        if failed := [r for r in done if not r.ok]:
            raise RuntimeError(
                f"{name}: warm-up failed for {failed[0].alias}: "
                f"{failed[0].status} {failed[0].error}"
            )
        return [r.adapter_id or r.alias for r in done]

    def measure(name: str, url: str, key: str, models: list[str]) -> tuple[Any, float]:
        results, elapsed = asyncio.run(
            saturate(
                url,
                key,
                models,
                concurrency=opts.concurrency,
                duration_s=opts.duration_s,
                max_tokens=opts.max_tokens,
                prompt_tokens=opts.prompt_tokens,
                tokens_per_word=opts.tokens_per_word,
                timeout_s=opts.timeout_s,
                desc=name,
                progress=opts.progress,
            )
        )
        tokens = sum(r.completion_tokens or 0 for r in results if r.ok)
        print(f"  {name}: {tokens / elapsed:.0f} tokens/s ({len(results)} requests)")
        return results, elapsed

    # (name, distinct adapters, url, key, models); each warmed once before the first round.
    plan: list[tuple[str, int, str, str, list[str]]] = []
    if opts.engine_url:
        model = asyncio.run(base_model(opts.engine_url, opts.engine_key))
        warm(opts.engine_url, opts.engine_key, [model], "base")
        plan.append(("base", 0, opts.engine_url, opts.engine_key, [model]))
    for k in opts.counts:
        name = f"{k} adapter{'s' if k != 1 else ''}"
        ids = warm(gateway_url, api_key, aliases[:k], name)
        if opts.engine_direct and opts.engine_url:
            # The engine serves each adapter under its immutable id, which the gateway names
            # in `x-adapter-id`: the same work without the gateway and agent in the path.
            warm(opts.engine_url, opts.engine_key, ids, name)
            plan.append((name, k, opts.engine_url, opts.engine_key, ids))
        else:
            plan.append((name, k, gateway_url, api_key, aliases[:k]))
    measured: dict[str, list[tuple[Any, float]]] = {name: [] for name, *_ in plan}
    for i in range(opts.rounds):
        print(f"round {i + 1}/{opts.rounds}")
        for name, _, url, key, models in plan:
            measured[name].append(measure(name, url, key, models))
    rows = [oh.throughput_row(name, k, measured[name]) for name, k, *_ in plan]
    path = "direct on the engine" if opts.engine_direct else "through the gateway"
    describe = (
        f"closed loop, {opts.concurrency} requests in flight, {opts.prompt_tokens}-token "
        f"prompts, exactly {opts.max_tokens} output tokens each (ignore_eos), "
        f"{opts.duration_s:g} s per row, {opts.rounds} interleaved rounds (median); "
        f"adapters {path}"
        + (f", base model direct on {opts.engine_url}" if opts.engine_url else ", no base row")
    )
    return {"describe": describe, "path": path, "rows": oh.rows_to_json(rows)}


def write_outputs(doc: dict[str, Any], out: Path, plot: bool) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "loadtest.json", out / "loadtest.md"]
    written[0].write_text(json.dumps(doc, indent=1) + "\n")
    written[1].write_text(report.markdown(doc))
    label = doc["meta"].get("label") or ""
    if plot and len(doc["runs"]) > 0:
        written.append(plots.plot_sweep(doc["runs"], out / "sweep.png", f"rate sweep {label}"))
    if plot and doc.get("overhead"):
        o = doc["overhead"]
        written.append(plots.plot_overhead(o["rows"], out / "overhead.png", o["describe"]))
    return written


def write_comparison(docs: list[dict[str, Any]], out: Path, plot: bool) -> tuple[str, list[Path]]:
    rows = report.compare_rows(docs)
    text = report.compare_markdown(rows)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "compare.md", out / "compare.json"]
    written[0].write_text("# lorafleet loadtest comparison\n\n" + text)
    written[1].write_text(json.dumps({"format": report.FORMAT, "compare": rows}, indent=1) + "\n")
    if plot:
        written.append(plots.plot_compare(rows, out / "compare.png", "routing comparison"))
    return text, written
