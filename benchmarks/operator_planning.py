"""Operator planning at fleet scale: time, memory and Kubernetes API writes.

    .venv/bin/python -m benchmarks.operator_planning [--adapters 5000] [--replicas 26]
        [--aliases-per-adapter 2] [--rate 1000] [--quick]

1. Planning: one `plan_fleet` pass (validation, owners by rendezvous, pre-warm annotations,
   adapter/alias status) over N adapters (each with K aliases: prod, canary, ...) on R ready
   replicas, cold and warm (owners are
   memoised per replica set), with tracemalloc's peak; and a replica joining (churn).
2. Writes for a bulk create: the operator's real coalescing loop (`FleetSync`, default
   settings) fed adapters at `--rate` per second as a watch stream would deliver them, with
   a writer that counts what it would send to the API server. kopf adds one finalizer patch
   per adapter on first sight; that is added to the total.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import time
import tracemalloc
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.results import Result
from lorafleet_core.api.models import ALL_TARGET_MODULES, AdapterAlias, LoRAAdapter, ReplicaPool
from lorafleet_core.api.names import LABEL_COMPONENT, LABEL_POOL
from lorafleet_core.planning.fleet import (
    AdapterEntry,
    FleetSnapshot,
    PodView,
    plan_fleet,
)
from lorafleet_core.planning.prewarm import _owners_cached
from lorafleet_operator.settings import OperatorSettings
from lorafleet_operator.sync import FleetSync

BASE = "sha256:" + "b" * 64


def adapter_body(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "LoRAAdapter",
        "metadata": {"name": f"tenant-{i:04d}-support-v1", "namespace": "prod"},
        "spec": {
            "tenant": f"tenant-{i:04d}",
            "version": "v1",
            "baseModelHash": BASE,
            "rank": 16,
            "alpha": 32,
            "targetModules": list(ALL_TARGET_MODULES),
            "weightsUri": f"s3://lorafleet-adapters/tenant-{i:04d}/support/v1/",
            "checksum": "sha256:" + f"{i:064x}",
            "sizeBytes": 80_000_000,
        },
    }


def aliases_of(i: int, k: int) -> list[AdapterAlias]:
    """Adapter i's k public names (tenant-i/support:prod, :canary, :tag-2, ...)."""
    tags = ["prod", "canary", *(f"tag-{j}" for j in range(2, k))][:k]
    return [
        AdapterAlias.model_validate(
            {
                "metadata": {"name": f"tenant-{i:04d}-support-{tag}", "namespace": "prod"},
                "spec": {
                    "model": f"tenant-{i:04d}/support:{tag}",
                    "tenant": f"tenant-{i:04d}",
                    "adapter": f"tenant-{i:04d}-support-v1",
                },
            }
        )
        for tag in tags
    ]


def the_pool() -> ReplicaPool:
    return ReplicaPool.model_validate(
        {
            "metadata": {"name": "gpu", "namespace": "prod"},
            "spec": {
                "baseModel": {"name": "llama-7b", "hash": BASE, "uri": "s3://m/llama"},
                "adapterSources": ["s3://lorafleet-adapters/"],
            },
        }
    )


def bench_planning(n: int, r: int, k: int, result: Result) -> None:
    entries = [
        AdapterEntry(name=b["metadata"]["name"], adapter=LoRAAdapter.model_validate(b))
        for b in map(adapter_body, range(n))
    ]
    pods = [PodView(f"gpu-{i}", "gpu", True) for i in range(r)]
    aliases = [a for i in range(n) for a in aliases_of(i, k)]
    snap = FleetSnapshot(pools=[the_pool()], adapters=entries, aliases=aliases, pods=pods)
    now = datetime.now(UTC)

    t0 = time.perf_counter()
    plan = plan_fleet(snap, now)
    cold = time.perf_counter() - t0
    _owners_cached.cache_clear()
    tracemalloc.start()
    plan_fleet(snap, now)  # again from cold, only to measure memory (tracemalloc is slow)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    t0 = time.perf_counter()
    plan_fleet(snap, now)
    warm = time.perf_counter() - t0
    churned = dataclasses.replace(snap, pods=[*pods, PodView(f"gpu-{r}", "gpu", True)])
    t0 = time.perf_counter()
    after = plan_fleet(churned, now)
    churn = time.perf_counter() - t0
    moved = sum(
        1
        for name, st in plan.adapter_status.items()
        if st.owners != after.adapter_status[name].owners
    )
    sizes = [len(v.encode()) for v in plan.pod_annotations.values()]
    changed_pods = sum(
        1 for p, v in after.pod_annotations.items() if plan.pod_annotations.get(p) != v
    )
    what = f"{n} adapters ({len(aliases)} aliases) x {r} replicas"
    result.add(
        measure=f"one plan_fleet pass, {what}",
        value=f"{cold * 1000:.0f} ms cold, {warm * 1000:.0f} ms warm; "
        f"{peak / 2**20:.1f} MiB peak traced memory",
    )
    result.add(
        measure=f"replica {r + 1} joins",
        value=f"{churn * 1000:.0f} ms; {moved} adapters move ({moved / n:.1%}; ideal "
        f"2/{r + 1} = {2 / (r + 1):.1%}), {changed_pods} pods rewritten",
    )
    result.add(
        measure="owned-adapters annotation bytes",
        value=f"max {max(sizes)}, mean {statistics.mean(sizes):.0f} (limit "
        f"{the_pool().spec.cache.owned_annotation_max_bytes}); not pre-warmed: "
        f"{sum(len(v) for v in plan.dropped.values())}",
    )


class CountingWriter:
    def __init__(self) -> None:
        self.writes: Counter[str] = Counter()
        self.per_pod: Counter[str] = Counter()

    async def pod_annotation(self, namespace: str, pod: str, value: str) -> None:
        self.writes["pod annotation patch"] += 1
        self.per_pod[pod] += 1

    async def adapter_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.writes["adapter status patch"] += 1

    async def alias_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.writes["alias status patch"] += 1

    async def event(self, *args: Any) -> None:
        self.writes["event"] += 1

    async def create_pool(self, *args: Any) -> None:
        self.writes["pool create"] += 1

    async def patch_pool(self, *args: Any) -> None:
        self.writes["pool patch"] += 1

    async def delete_pool(self, *args: Any) -> None:
        self.writes["pool delete"] += 1


async def bench_writes(
    n: int, r: int, rate: float, settings: OperatorSettings, result: Result
) -> None:
    writer = CountingWriter()
    fleet = FleetSync(
        "prod",
        writer,
        debounce=settings.sync_debounce_seconds,
        max_delay=settings.sync_max_delay_seconds,
        pod_interval=settings.pod_patch_interval_seconds,
        concurrency=settings.write_concurrency,
    )
    task = asyncio.create_task(fleet.run())
    fleet.index.upsert_pool(the_pool())
    for i in range(r):
        fleet.index.upsert_pod(
            {
                "metadata": {
                    "name": f"gpu-{i}",
                    "labels": {LABEL_POOL: "gpu", LABEL_COMPONENT: "replica"},
                },
                "status": {
                    "phase": "Running",
                    "podIP": f"10.0.0.{i + 1}",
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        )
    await fleet.flush()
    writer.writes.clear()
    writer.per_pod.clear()
    t0 = time.perf_counter()
    chunk = max(1, int(rate / 20))
    for start in range(0, n, chunk):
        for i in range(start, min(n, start + chunk)):
            fleet.index.upsert_adapter(adapter_body(i))
        await asyncio.sleep(chunk / rate)
    arrived = time.perf_counter() - t0
    # Settle: wait until a pass writes nothing (the deferred pod patches are done).
    while True:
        before = sum(writer.writes.values())
        await asyncio.sleep(settings.pod_patch_interval_seconds + settings.sync_max_delay_seconds)
        await fleet.flush()
        if sum(writer.writes.values()) == before:
            break
    task.cancel()
    total = sum(writer.writes.values()) + n  # + kopf's finalizer patch per adapter
    bulk = f"bulk create of {n} adapters over {arrived:.1f} s ({rate:.0f}/s)"
    for what, count in sorted(writer.writes.items()):
        result.add(measure=f"{bulk}: {what}", value=count)
    result.add(measure=f"{bulk}: finalizer patch (kopf)", value=n)
    result.add(measure=f"{bulk}: API writes in all", value=f"{total} ({total / n:.2f} per adapter)")
    result.add(
        measure=f"{bulk}: pod patches per pod",
        value=f"max {max(writer.per_pod.values())}, mean "
        f"{statistics.mean(writer.per_pod.values()):.1f} (one per adapter and owner: {2 * n})",
    )
    result.notes.append(
        f"settings: debounce {settings.sync_debounce_seconds} s, max delay "
        f"{settings.sync_max_delay_seconds} s, pod patch interval "
        f"{settings.pod_patch_interval_seconds} s"
    )
    t0 = time.perf_counter()
    plan_fleet(fleet.index.snapshot(), datetime.now(UTC), fleet.params)
    final = time.perf_counter() - t0
    result.add(measure="one planning pass over the final state", value=f"{final:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--adapters", type=int, default=5000)
    parser.add_argument("--replicas", type=int, default=26)
    parser.add_argument("--aliases-per-adapter", type=int, default=2, help="prod, canary, ...")
    parser.add_argument("--rate", type=float, default=1000.0, help="adapter creations per second")
    parser.add_argument("--quick", action="store_true", help="short intervals (a faster run)")
    parser.add_argument("--out", type=Path, default=None, help="result JSON (or a folder)")
    args = parser.parse_args()
    result = Result("operator_planning", ["measure", "value"])
    bench_planning(args.adapters, args.replicas, args.aliases_per_adapter, result)
    settings = OperatorSettings()
    if args.quick:
        settings = settings.model_copy(
            update={"pod_patch_interval_seconds": 2.0, "sync_max_delay_seconds": 1.0}
        )
    asyncio.run(bench_writes(args.adapters, args.replicas, args.rate, settings, result))
    result.emit(args.out)


if __name__ == "__main__":
    main()
