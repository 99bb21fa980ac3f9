"""The load test's figure: TTFT CDF by tier, TTFT over time by tier, achieved vs offered rate."""

from __future__ import annotations

import textwrap
from pathlib import Path

from lorafleet_cli.probe.results import TIER_ORDER, RequestResult

TIER_COLOURS = {
    "gpu": "tab:green",
    "ram": "tab:blue",
    "disk": "tab:orange",
    "remote": "tab:red",
    "?": "tab:gray",
}


def per_second(times: list[float], span_s: float, bin_s: float = 1.0) -> list[float]:
    """Counts per `bin_s` bucket over [0, span_s), as a rate (per second).

    A last bucket less than half covered by the span is folded into the one before (times past
    the end count in the last bucket), so a run's ragged end does not plot as a drop to zero.
    """
    n = max(1, round(span_s / bin_s))
    counts = [0] * n
    for t in times:
        counts[min(n - 1, max(0, int(t // bin_s)))] += 1
    return [c / bin_s for c in counts]


def write_plots(results: list[RequestResult], path: Path, title: str, bin_s: float = 5.0) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if r.ok and r.ttft_s is not None]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.8))
    tiers = [t for t in TIER_ORDER if any((r.tier or "?") == t for r in ok)]
    for tier in tiers:
        vals = sorted(1000 * (r.ttft_s or 0.0) for r in ok if (r.tier or "?") == tier)
        ys = [(i + 1) / len(vals) for i in range(len(vals))]
        ax1.step(vals, ys, where="post", color=TIER_COLOURS[tier], label=f"{tier} (n={len(vals)})")
        pts = [(r.started_at, 1000 * (r.ttft_s or 0.0)) for r in ok if (r.tier or "?") == tier]
        ax2.scatter(*zip(*pts, strict=True), s=9, color=TIER_COLOURS[tier], label=tier, alpha=0.7)
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _pos: f"{v:g}")  # 50, 100, 200 rather than 10^2
    # Minor ticks: label only the 2s and 5s, so a decade does not get eight labels.
    sparse = FuncFormatter(lambda v, _pos: f"{v:g}" if f"{v:g}"[0] in "25" else "")
    ax1.set_xscale("log")
    ax1.xaxis.set_major_formatter(plain)
    ax1.xaxis.set_minor_formatter(sparse)
    ax1.set_xlabel("TTFT (ms, log scale)")
    ax1.set_ylabel("fraction of requests")
    ax1.set_title("TTFT CDF by tier")
    ax1.grid(True, alpha=0.3)
    ax2.set_yscale("log")
    ax2.yaxis.set_major_formatter(plain)
    ax2.yaxis.set_minor_formatter(sparse)
    ax2.set_xlabel("seconds since start (request sent)")
    ax2.set_ylabel("TTFT (ms, log scale)")
    ax2.set_title("TTFT over time, by tier")
    ax2.grid(True, alpha=0.3)
    for ax in (ax1, ax2):
        if tiers:
            ax.legend(fontsize=8)
    span = max([r.scheduled_at for r in results] + [r.started_at + (r.total_s or 0) for r in ok])
    span = max(span, bin_s)
    offered = per_second([r.scheduled_at for r in results], span, bin_s)
    done = per_second([r.started_at + (r.total_s or 0.0) for r in ok], span, bin_s)
    xs = [i * bin_s for i in range(len(offered))]
    ax3.step(xs, offered, where="post", label="offered (trace arrivals)", color="tab:gray")
    ax3.step(xs, done, where="post", label="achieved (answers completed)", color="tab:green")
    failed = [r for r in results if not r.ok]
    if failed:
        errs = per_second([r.started_at for r in failed], span, bin_s)
        ax3.step(xs, errs, where="post", label="errors", color="tab:red")
    ax3.set_xlabel(f"seconds since start ({bin_s:g} s bins)")
    ax3.set_ylabel("requests/s")
    ax3.set_title("Rate: achieved vs offered")
    ax3.legend(fontsize=8)
    ax3.grid(True, alpha=0.3)
    fig.suptitle(textwrap.fill(title, 170), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
