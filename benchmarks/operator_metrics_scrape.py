"""Cost of one scrape of the operator's /metrics at fleet scale.

    .venv/bin/python -m benchmarks.operator_metrics_scrape [--adapters 5000] [--aliases 5000]

The counters and gauges are read from the FleetSync index at scrape time (adapters by phase,
aliases with a refused deploy), so a scrape walks every adapter and alias once. This prints
the median time of `generate_latest` over the operator's registry, and the exposition size.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client import generate_latest

from benchmarks.results import Result
from lorafleet_core.api.models import AdapterPhase, LoRAAdapterStatus
from lorafleet_core.planning.aliases import AdapterView, plan_alias
from lorafleet_core.planning.fleet import AdapterEntry
from lorafleet_operator.metrics import OperatorMetrics
from lorafleet_operator.sync import FleetSync
from tests.operator.factories import adapter, alias


class NoWriter:
    async def pod_annotation(self, *a: object) -> None: ...
    async def adapter_status(self, *a: object) -> None: ...
    async def alias_status(self, *a: object) -> None: ...
    async def event(self, *a: object) -> None: ...
    async def create_pool(self, *a: object) -> None: ...
    async def patch_pool(self, *a: object) -> None: ...
    async def delete_pool(self, *a: object) -> None: ...


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--adapters", type=int, default=5000)
    ap.add_argument("--aliases", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None, help="result JSON (or a folder)")
    args = ap.parse_args()
    fleet = FleetSync("prod", NoWriter())
    phases = list(AdapterPhase)
    now = datetime.now(UTC)
    for i in range(args.adapters):
        name = f"t{i}-a-v1"
        fleet.index.adapters[name] = AdapterEntry(
            name=name,
            adapter=adapter(name),
            invalid=None,
            status=LoRAAdapterStatus(phase=phases[i % len(phases)]),
            deleting=False,
            generation=1,
        )
    views = {"acme-a-v1": AdapterView("acme", AdapterPhase.READY)}
    for i in range(args.aliases):
        a = alias(f"al-{i}", f"acme/m{i}:prod", "acme-a-v1" if i % 10 else "missing")
        a.status = plan_alias(a, views, [], now).status
        fleet.index.aliases[a.metadata.name] = a
    metrics = OperatorMetrics(lambda: {"prod": fleet})
    times = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        text = generate_latest(metrics.registry)
        times.append(time.perf_counter() - t0)
    result = Result("operator_metrics_scrape", ["adapters", "aliases", "median ms", "bytes"])
    result.add(
        adapters=args.adapters,
        aliases=args.aliases,
        **{"median ms": round(1000 * statistics.median(times), 1), "bytes": len(text)},
    )
    result.notes.append(f"one scrape of the operator's registry, median of {args.rounds}")
    result.emit(args.out)


if __name__ == "__main__":
    main()
