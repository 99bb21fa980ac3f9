"""The load test's outputs (pure text): the JSON document, its markdown tables, the comparison.

Everything a table shows is read from the JSON document, so `--compare A.json B.json` can
rebuild tables from result files written by earlier runs (another gateway, another policy).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lorafleet_loadtest.overhead import DESIGN_OVERHEAD
from lorafleet_loadtest.probe.results import TIER_ORDER

FORMAT = "lorafleet-loadtest/v1"


def document(meta: dict[str, Any], runs: list[dict[str, Any]], overhead: Any) -> dict[str, Any]:
    return {"format": FORMAT, "meta": meta, "runs": runs, "overhead": overhead}


def read_document(path: Path) -> dict[str, Any]:
    """A result file written by `lorafleet loadtest`; ValueError when it is not one."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{path} is not a lorafleet loadtest result ({FORMAT})")
    return doc


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.0f}"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


def sweep_table(runs: list[dict[str, Any]]) -> list[str]:
    """Per offered rate: every request, then each tier; TTFT and TPOT quantiles in ms."""
    header = [
        "offered req/s",
        "achieved req/s",
        "tier",
        "n",
        "share",
        "TTFT p50",
        "TTFT p95",
        "TTFT p99",
        "TPOT p50",
        "TPOT p95",
        "TPOT p99",
    ]
    rows: list[list[str]] = []
    for run in runs:
        rate = [f"{run['offered_rps']:.2f}", f"{run['achieved_rps']:.2f}"]
        entries = [("all", 1.0, run["ttft"], run["tpot"])]
        entries += [
            (t, v["share"], v["ttft"], v["tpot"]) for t in TIER_ORDER if (v := run["tiers"].get(t))
        ]
        for tier, share, ttft, tpot in entries:
            rows.append(
                [
                    *rate,
                    tier,
                    str(ttft["n"]),
                    _pct(share),
                    _ms(ttft["p50_ms"]),
                    _ms(ttft["p95_ms"]),
                    _ms(ttft["p99_ms"]),
                    _ms(tpot["p50_ms"]),
                    _ms(tpot["p95_ms"]),
                    _ms(tpot["p99_ms"]),
                ]
            )
            rate = ["", ""]
    return _table(header, rows)


def errors_table(runs: list[dict[str, Any]]) -> list[str]:
    header = [
        "offered req/s",
        "requests",
        "ok",
        "errors",
        "429",
        "by status",
        "tokens/s",
        "client wait p95 ms",
        "marker mismatches",
    ]
    rows = [
        [
            f"{r['offered_rps']:.2f}",
            str(r["requests"]),
            str(r["ok"]),
            str(r["requests"] - r["ok"]),
            str(r["rate_limited"]),
            ", ".join(f"{k}: {v}" for k, v in r["errors"].items()) or "none",
            f"{r['tokens_per_s']:.0f}",
            _ms(r["client_wait_p95_ms"]),
            str(r["mismatches"]),
        ]
        for r in runs
    ]
    return _table(header, rows)


def alias_table(runs: list[dict[str, Any]], limit: int = 20) -> list[str]:
    """p95 TTFT per alias (hottest first, by requests at the first rate), one column per rate."""
    counts: dict[str, int] = {}
    for run in runs:
        for alias, q in run["aliases"].items():
            counts[alias] = counts.get(alias, 0) + q["n"]
    order = sorted(counts, key=lambda a: (-counts[a], a))
    header = ["alias", *(f"n / p95 ms at {r['offered_rps']:.2f} req/s" for r in runs)]
    rows = []
    for alias in order[:limit]:
        cells = []
        for run in runs:
            q = run["aliases"].get(alias)
            cells.append("-" if q is None else f"{q['n']} / {_ms(q['p95_ms'])}")
        rows.append([alias, *cells])
    lines = _table(header, rows)
    if len(order) > limit:
        lines.append(f"\n({len(order) - limit} colder aliases left out; all are in the JSON.)")
    return lines


def overhead_table(overhead: dict[str, Any]) -> list[str]:
    header = ["batch", "requests", "tokens/s", "vs base", "GPU share", "TTFT p50 ms", "TPOT p50 ms"]
    rows = [
        [
            r["name"],
            str(r["ok"]),
            f"{r['tokens_per_s']:.0f}",
            "-" if r["overhead_vs_base"] is None else f"-{100 * r['overhead_vs_base']:.1f}%",
            _pct(r["gpu_share"]),
            _ms(r["ttft"]["p50_ms"]),
            _ms(r["tpot"]["p50_ms"]),
        ]
        for r in overhead["rows"]
    ]
    return _table(header, rows)


def markdown(doc: dict[str, Any]) -> str:
    meta = doc["meta"]
    lines = [f"# lorafleet loadtest{': ' + meta['label'] if meta.get('label') else ''}", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items() if k not in ("label",) and v is not None]
    if doc["runs"]:
        lines += ["", "## Rate sweep by tier (TTFT and time per output token, ms)", ""]
        lines += sweep_table(doc["runs"])
        lines += ["", "## Requests, errors and 429s", ""]
        lines += errors_table(doc["runs"])
        lines += ["", "## p95 TTFT per alias", ""]
        lines += alias_table(doc["runs"])
    if doc.get("overhead"):
        o = doc["overhead"]
        lines += ["", "## Adapter overhead: distinct adapters per batch vs the base model", ""]
        lines += [o["describe"], ""]
        lines += overhead_table(o)
        lines += ["", f"(The design assumes {100 * DESIGN_OVERHEAD:.0f}% on a GPU.)"]
    return "\n".join(lines) + "\n"


def compare_rows(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (result file, rate): what routing changes, side by side."""
    rows = []
    for doc in docs:
        label = doc["meta"].get("label") or doc["meta"].get("gateway", "?")
        for run in doc["runs"]:
            worst = max(
                ((a, q["p95_ms"]) for a, q in run["aliases"].items() if q["p95_ms"] is not None),
                key=lambda item: item[1],
                default=None,
            )
            rows.append(
                {
                    "label": label,
                    "offered_rps": run["offered_rps"],
                    "requests": run["requests"],
                    "errors": run["requests"] - run["ok"],
                    "gpu_share": run["gpu_share"],
                    "tier_share": {t: v["share"] for t, v in run["tiers"].items()},
                    "ttft_p95_ms": run["ttft"]["p95_ms"],
                    "ttft_p50_ms": run["ttft"]["p50_ms"],
                    "worst_alias": worst,
                }
            )
    return rows


def compare_markdown(rows: list[dict[str, Any]]) -> str:
    header = [
        "run",
        "offered req/s",
        "requests",
        "errors",
        "GPU hit rate",
        "ram / disk / remote",
        "TTFT p50 ms",
        "TTFT p95 ms",
        "worst alias p95 ms",
    ]
    body = [
        [
            r["label"],
            f"{r['offered_rps']:.2f}",
            str(r["requests"]),
            str(r["errors"]),
            _pct(r["gpu_share"]),
            " / ".join(_pct(r["tier_share"].get(t, 0.0)) for t in ("ram", "disk", "remote")),
            _ms(r["ttft_p50_ms"]),
            _ms(r["ttft_p95_ms"]),
            "-"
            if r["worst_alias"] is None
            else f"{_ms(r['worst_alias'][1])} ({r['worst_alias'][0]})",
        ]
        for r in sorted(rows, key=lambda r: (r["offered_rps"], r["label"]))
    ]
    return "\n".join(_table(header, body)) + "\n"
