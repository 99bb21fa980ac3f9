"""The load test's PNG figures (matplotlib, headless).

One per replayed rate (TTFT CDF by tier, TTFT over time by tier, achieved vs offered rate), one
for the rate sweep (p95 TTFT by tier and tier shares against the offered rate), one for the
adapter overhead (tokens/s per batch mix) and one for a comparison of result files. The last
three read the JSON document (report.py), so they can be redrawn from files.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from lorafleet_loadtest.probe.results import TIER_ORDER, RequestResult

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


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path, title: str) -> Path:
    fig.suptitle(textwrap.fill(title, 170), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    _pyplot().close(fig)
    return path


def write_plots(results: list[RequestResult], path: Path, title: str, bin_s: float = 5.0) -> Path:
    plt = _pyplot()

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
    return _save(fig, path, title)


def plot_sweep(runs: list[dict[str, Any]], path: Path, title: str) -> Path:
    """p95 TTFT by tier and each tier's share of requests, against the offered rate."""
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    rates = [r["offered_rps"] for r in runs]
    ax1.plot(rates, [r["ttft"]["p95_ms"] for r in runs], "k-o", label="all")
    for tier in TIER_ORDER:
        pts = [
            (r["offered_rps"], r["tiers"][tier]["ttft"]["p95_ms"])
            for r in runs
            if tier in r["tiers"]
        ]
        if pts:
            ax1.plot(*zip(*pts, strict=True), "-o", color=TIER_COLOURS[tier], label=tier)
        shares = [100 * r["tiers"].get(tier, {}).get("share", 0.0) for r in runs]
        if any(shares):
            ax2.plot(rates, shares, "-o", color=TIER_COLOURS[tier], label=tier)
    ax1.set_yscale("log")
    ax1.set_xlabel("offered requests/s")
    ax1.set_ylabel("p95 TTFT (ms, log scale)")
    ax1.set_title("p95 TTFT by tier")
    ax2.set_xlabel("offered requests/s")
    ax2.set_ylabel("share of requests (%)")
    ax2.set_title("Where the replica found the adapter")
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path, title)


def plot_overhead(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Tokens/s per batch mix, labelled with the loss against the base model."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = [r["name"] for r in rows]
    values = [r["tokens_per_s"] for r in rows]
    bars = ax.bar(
        names,
        values,
        color=["tab:gray" if r["distinct_adapters"] == 0 else "tab:blue" for r in rows],
    )
    for bar, r in zip(bars, rows, strict=True):
        o = r["overhead_vs_base"]
        label = f"{r['tokens_per_s']:.0f}" + ("" if o is None else f"\n-{100 * o:.0f}%")
        ax.annotate(
            label,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylabel("output tokens/s")
    ax.set_title("Throughput by distinct adapters per batch")
    ax.grid(True, axis="y", alpha=0.3)
    ax.margins(y=0.15)
    return _save(fig, path, title)


def plot_compare(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """GPU hit rate and p95 TTFT per result file, one group per offered rate."""
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = sorted({r["label"] for r in rows})
    rates = sorted({round(r["offered_rps"], 2) for r in rows})
    width = 0.8 / max(1, len(labels))
    for i, label in enumerate(labels):
        mine = {round(r["offered_rps"], 2): r for r in rows if r["label"] == label}
        xs = [j + i * width for j, rate in enumerate(rates) if rate in mine]
        hits = [100 * mine[rate]["gpu_share"] for rate in rates if rate in mine]
        p95 = [mine[rate]["ttft_p95_ms"] or 0.0 for rate in rates if rate in mine]
        ax1.bar(xs, hits, width, label=label)
        ax2.bar(xs, p95, width, label=label)
    for ax, ylabel in ((ax1, "GPU hit rate (%)"), (ax2, "p95 TTFT (ms)")):
        ax.set_xticks([j + width * (len(labels) - 1) / 2 for j in range(len(rates))])
        ax.set_xticklabels([f"{r:g} req/s" for r in rates])
        ax.set_ylabel(ylabel)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8)
    ax1.set_title("GPU tier share (routing hit rate)")
    ax2.set_title("p95 TTFT")
    return _save(fig, path, title)
