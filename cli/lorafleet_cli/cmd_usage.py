"""`lorafleet usage`: requests and tokens per tenant and adapter, for billing exports.

Reads the gateways' usage counters (lorafleet_gateway.usage):

- `--prometheus URL`: from Prometheus, summed over every gateway pod, over `--since`
  (`sum by (tenant, adapter) (increase(...[24h]))`: counter resets from restarts handled);
- `--gateway-metrics URL`, or by default the running `lorafleet up` in the state folder: the
  one gateway's own /metrics, i.e. everything since that gateway started (`--since` cannot
  narrow a raw counter; the output says `window: since gateway start`).

`-o csv` (one row per tenant and adapter, a header line), `json` (the window and the rows) or
`table`.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from lorafleet_cli.exit_codes import OK, CommandFailed, UsageError
from lorafleet_cli.targets import DEFAULT_STATE_DIR
from lorafleet_core.wire import metric_names
from lorafleet_standalone.state_files import UP_STATUS_FILE, StateFileError, read_state_json

METRICS = {
    "requests": metric_names.GATEWAY_USAGE_REQUESTS,
    "prompt_tokens": metric_names.GATEWAY_USAGE_PROMPT_TOKENS,
    "completion_tokens": metric_names.GATEWAY_USAGE_COMPLETION_TOKENS,
}
COLUMNS = ("tenant", "adapter", "requests", "prompt_tokens", "completion_tokens", "total_tokens")
_DURATION = re.compile(r"^(\d+)([smhdw])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

Rows = dict[tuple[str, str], dict[str, float]]


def parse_since(text: str) -> int:
    """Seconds of a Prometheus-style duration (`90m`, `24h`, `7d`)."""
    m = _DURATION.match(text)
    if not m or int(m[1]) == 0:
        raise UsageError(f"--since {text!r}: expected a duration such as 30m, 24h or 7d")
    return int(m[1]) * _SECONDS[m[2]]


def _selector(tenant: str | None) -> str:
    return "" if tenant is None else "{tenant=" + json.dumps(tenant) + "}"


def from_prometheus(url: str, since: str, tenant: str | None, at: float) -> Rows:
    rows: Rows = {}
    with httpx.Client(timeout=30.0) as client:
        for column, metric in METRICS.items():
            query = (
                f"sum by (tenant, adapter) (increase({metric}_total{_selector(tenant)}[{since}]))"
            )
            try:
                resp = client.get(
                    url.rstrip("/") + "/api/v1/query", params={"query": query, "time": at}
                )
                body = resp.json()
            except (httpx.HTTPError, ValueError) as exc:
                raise CommandFailed(f"Prometheus at {url} did not answer: {exc}") from exc
            if resp.status_code != 200 or body.get("status") != "success":
                raise CommandFailed(f"Prometheus refused the query: {body.get('error', resp.text)}")
            try:
                for result in body["data"]["result"]:
                    labels = result["metric"]
                    key = (labels.get("tenant", ""), labels.get("adapter", ""))
                    rows.setdefault(key, {})[column] = float(result["value"][1])
            except (KeyError, TypeError, IndexError, ValueError) as exc:
                raise CommandFailed(f"Prometheus answered an unexpected shape: {exc!r}") from exc
    return rows


def from_gateway(url: str, tenant: str | None) -> Rows:
    try:
        text = httpx.get(url, timeout=10.0).raise_for_status().text
    except httpx.HTTPError as exc:
        raise CommandFailed(f"the gateway's metrics at {url} could not be read: {exc}") from exc
    by_family = {family: column for column, family in METRICS.items()}
    rows: Rows = {}
    try:
        for family in text_string_to_metric_families(text):
            column = by_family.get(family.name)
            if column is None:
                continue
            for sample in family.samples:
                if not sample.name.endswith("_total"):
                    continue
                key = (sample.labels.get("tenant", ""), sample.labels.get("adapter", ""))
                if tenant is None or key[0] == tenant:
                    rows.setdefault(key, {})[column] = sample.value
    except ValueError as exc:  # not the Prometheus text format: the wrong URL
        raise CommandFailed(f"{url} does not serve Prometheus metrics: {exc}") from exc
    return rows


def standalone_metrics_url(state_dir: Path) -> str | None:
    up_file = state_dir / UP_STATUS_FILE
    if not up_file.is_file():
        return None
    try:
        gateway = read_state_json(up_file).get("gateway")
    except StateFileError as exc:
        raise CommandFailed(str(exc)) from exc
    internal = gateway.get("internalUrl") if isinstance(gateway, dict) else None
    return f"{internal}/metrics" if isinstance(internal, str) and internal else None


def table_rows(rows: Rows) -> list[dict[str, Any]]:
    """Rows sorted by tenant and adapter, whole numbers, with a total. Pairs that served
    nothing are left out: the gateway exports every servable pair at 0 (usage.py)."""
    out = []
    for (tenant, adapter), figures in sorted(rows.items()):
        if not any(figures.values()):
            continue
        row: dict[str, Any] = {"tenant": tenant, "adapter": adapter}
        for column in METRICS:
            value = figures.get(column, 0.0)
            if not math.isfinite(value):  # a billing export never rounds a NaN to a number
                raise CommandFailed(f"{column} of {tenant}/{adapter} is {value}: not a count")
            row[column] = round(value)
        row["total_tokens"] = row["prompt_tokens"] + row["completion_tokens"]
        out.append(row)
    return out


def _cmd_usage(args: argparse.Namespace) -> int:
    since_s = parse_since(args.since)
    now = time.time()
    if args.prometheus:
        rows = from_prometheus(args.prometheus, args.since, args.tenant, now)
        window: dict[str, Any] = {"start": now - since_s, "end": now, "source": args.prometheus}
    else:
        url = args.gateway_metrics or standalone_metrics_url(args.state_dir)
        if url is None:
            raise CommandFailed(
                "no usage source: pass --prometheus URL, --gateway-metrics URL, or run it "
                "beside a running `lorafleet up`"
            )
        rows = from_gateway(url, args.tenant)
        window = {"start": "gateway start", "end": now, "source": url}
    data = table_rows(rows)
    if args.output == "json":
        json.dump({"window": window, "usage": data}, sys.stdout, indent=2)
        print()
    elif args.output == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(data)
    else:
        widths = [max([len(c), *(len(str(r[c])) for r in data)]) for c in COLUMNS]
        for line in [dict(zip(COLUMNS, (c.upper() for c in COLUMNS), strict=True)), *data]:
            print("  ".join(str(line[c]).ljust(w) for c, w in zip(COLUMNS, widths, strict=True)))
    return OK


def register(sub: Any) -> None:
    p = sub.add_parser(
        "usage",
        help="requests and tokens per tenant and adapter (billing export)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--since", default="24h", help="window with --prometheus (default 24h)")
    p.add_argument("--tenant", default=None, help="only this tenant")
    p.add_argument("-o", "--output", choices=("table", "csv", "json"), default="table")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prometheus", default=None, help="Prometheus base URL")
    src.add_argument("--gateway-metrics", default=None, help="a gateway's internal /metrics URL")
    p.add_argument(
        "--state-dir",
        type=Path,
        default=Path(os.environ.get("LORAFLEET_STATE_DIR", DEFAULT_STATE_DIR)),
        help="standalone state folder (default: .lorafleet)",
    )
    p.set_defaults(func=_cmd_usage)
