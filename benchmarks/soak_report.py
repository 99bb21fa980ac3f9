"""The soak's verdict and its outputs (JSON, PNG, text) from what the run measured.

`verdict` is pure: statuses of the normal traffic (zero 5xx expected), TTFT p50/p95 before,
during and after the slow-client phase, the slow clients' outcomes, and the RSS summaries.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.soak_rss import RssSample, RssSummary
from benchmarks.soak_slow import SlowResult
from lorafleet_core.stats import percentile
from lorafleet_loadtest.probe.results import RequestResult


def is_5xx(status: str) -> bool:
    return status.isdigit() and int(status) >= 500


def _ttft_ms(results: list[RequestResult]) -> dict[str, Any]:
    ttfts = [r.ttft_s for r in results if r.ok and r.ttft_s is not None]
    p50, p95 = percentile(ttfts, 0.5), percentile(ttfts, 0.95)
    return {
        "n": len(ttfts),
        "p50_ms": None if p50 is None else round(p50 * 1000, 1),
        "p95_ms": None if p95 is None else round(p95 * 1000, 1),
    }


def phase_of(t: float, slow_window: tuple[float, float] | None) -> str:
    if slow_window is None:
        return "no slow clients"
    start, stop = slow_window
    return "before" if t < start else "during" if t < stop else "after"


def verdict(
    results: list[RequestResult],
    slow: list[SlowResult],
    rss: list[RssSummary],
    *,
    elapsed_s: float,
    slow_window: tuple[float, float] | None,
) -> dict[str, Any]:
    statuses = Counter(r.status for r in results)
    phases: dict[str, list[RequestResult]] = {}
    for r in results:
        phases.setdefault(phase_of(r.started_at, slow_window), []).append(r)
    slow_by_mode: dict[str, Counter[str]] = {}
    for s in slow:
        key = s.status + (" complete" if s.mode == "reader" and s.complete else "")
        slow_by_mode.setdefault(s.mode, Counter())[key] += 1
    ok = [r for r in results if r.ok]
    tokens = sum((r.prompt_tokens or 0) + (r.completion_tokens or 0) for r in ok)
    return {
        "requests": len(results),
        "ok": len(ok),
        "elapsed_s": round(elapsed_s, 1),
        "achieved_rps": round(len(ok) / elapsed_s, 3) if elapsed_s else 0.0,
        "tokens_per_s": round(tokens / elapsed_s, 1) if elapsed_s else 0.0,
        "prompt_tokens_per_s": round(sum(r.prompt_tokens or 0 for r in ok) / elapsed_s, 1)
        if elapsed_s
        else 0.0,
        "statuses": dict(sorted(statuses.items())),
        "status_5xx": sum(n for s, n in statuses.items() if is_5xx(s)),
        "marker_mismatches": sum(1 for r in results if r.marker_ok is False),
        "ttft": {"all": _ttft_ms(results)} | {k: _ttft_ms(v) for k, v in phases.items()},
        "slow_window_s": list(slow_window) if slow_window else None,
        "slow_clients": {m: dict(sorted(c.items())) for m, c in sorted(slow_by_mode.items())},
        "slow_5xx": sum(1 for s in slow if is_5xx(s.status)),
        "slow_cut_s": _cut_seconds(slow),
        "rss": [s.as_dict() for s in rss],
        "rss_growing": [s.label for s in rss if s.growing],
    }


def _cut_seconds(slow: list[SlowResult]) -> dict[str, float | None]:
    """Median seconds from connect to the 408, per trickling kind."""
    out: dict[str, float | None] = {}
    for mode in ("headers", "body"):
        cut = [s.seconds for s in slow if s.mode == mode and s.status == "408"]
        p = percentile(cut, 0.5)
        out[mode] = None if p is None else round(p, 2)
    return out


def passed(v: dict[str, Any]) -> bool:
    return (
        v["requests"] > 0
        and v["status_5xx"] == 0
        and v["slow_5xx"] == 0
        and v["marker_mismatches"] == 0
        and not v["rss_growing"]
    )


def format_verdict(v: dict[str, Any]) -> str:
    lines = [
        f"normal requests {v['requests']}  ok {v['ok']}  elapsed {v['elapsed_s']} s  "
        f"achieved {v['achieved_rps']} req/s, {v['tokens_per_s']} tokens/s "
        f"({v['prompt_tokens_per_s']} prompt)",
        "statuses: " + ", ".join(f"{k}: {n}" for k, n in v["statuses"].items())
        + f"   5xx: {v['status_5xx']}   marker mismatches: {v['marker_mismatches']}",
        "",
        f"{'TTFT ms':<18}{'n':>6}{'p50':>9}{'p95':>9}",
    ]  # fmt: skip
    for phase, t in v["ttft"].items():
        lines.append(f"{phase:<18}{t['n']:>6}{t['p50_ms'] or '-':>9}{t['p95_ms'] or '-':>9}")
    if v["slow_clients"]:
        lines += ["", f"slow clients in {v['slow_window_s']} s (outcomes per kind):"]
        for mode, counts in v["slow_clients"].items():
            lines.append(f"  {mode:<8} " + ", ".join(f"{k}: {n}" for k, n in counts.items()))
        cut = v["slow_cut_s"]
        lines.append(f"  cut after (median s): headers {cut['headers']}, body {cut['body']}"
                     f"   slow 5xx: {v['slow_5xx']}")  # fmt: skip
    lines += [
        "",
        f"{'RSS MiB':<28}{'first':>8}{'last':>8}{'max':>8}{'MiB/min':>9}{'late':>7}{'rise':>8}"
        "  pids",
    ]
    for s in v["rss"]:
        flag = "  GROWING" if s["growing"] else ""
        restarts = f"{len(s['pids'])} (restarted)" if len(s["pids"]) > 1 else "1"
        lines.append(
            f"{s['label'][:27]:<28}{s['first_mib']:>8.1f}{s['last_mib']:>8.1f}"
            f"{s['max_mib']:>8.1f}{s['slope_mib_per_min']:>9.2f}{s['late_slope_mib_per_min']:>7.2f}"
            f"{s['rise_mib']:>8.1f}  "
            f"{restarts}{flag}"
        )
    lines.append("")
    lines.append("PASS" if passed(v) else "FAIL")
    return "\n".join(lines)


def write_plot(
    path: Path,
    title: str,
    samples: list[RssSample],
    results: list[RequestResult],
    slow_window: tuple[float, float] | None,
) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_big, ax_small, ax_ttft) = plt.subplots(3, 1, figsize=(12, 11), sharex=True)
    labels = list(dict.fromkeys(s.label for s in samples))
    big = {lb for lb in labels if max(s.rss_mib for s in samples if s.label == lb) > 1024}
    for label in labels:
        pts = [(s.t, s.rss_mib) for s in samples if s.label == label]
        ax = ax_big if label in big else ax_small
        ax.plot(*zip(*pts, strict=True), label=label, linewidth=1.2)
    ax_big.set_ylabel("RSS (MiB)")
    ax_big.set_title("RSS over time: vLLM (API server, engine core)")
    ax_small.set_ylabel("RSS (MiB)")
    ax_small.set_title("RSS over time: gateway, agent, control, up")
    ok = [r for r in results if r.ok and r.ttft_s is not None]
    if ok:
        ax_ttft.scatter(
            [r.started_at for r in ok], [1000 * (r.ttft_s or 0.0) for r in ok], s=5, alpha=0.5,
            label="normal requests",
        )  # fmt: skip
    failed = [r for r in results if not r.ok]
    if failed:
        ax_ttft.scatter(
            [r.started_at for r in failed], [1.0] * len(failed), s=12, marker="x", color="red",
            label="failed (plotted at 1 ms)",
        )  # fmt: skip
    ax_ttft.set_yscale("log")
    ax_ttft.set_ylabel("TTFT (ms, log)")
    ax_ttft.set_xlabel("seconds since start")
    ax_ttft.set_title("TTFT of normal requests over time")
    for ax in (ax_big, ax_small, ax_ttft):
        if slow_window is not None:
            ax.axvspan(*slow_window, color="tab:orange", alpha=0.12, label="slow clients")
        ax.grid(True, alpha=0.3)
        handles, _ = ax.get_legend_handles_labels()
        if handles:
            ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(textwrap.fill(title, 150), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
