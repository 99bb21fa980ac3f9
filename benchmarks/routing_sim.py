"""Simulate adapter-affinity routing on the real trace: GPU hit rate, spills, modelled TTFT.

Drives the gateway's real router (`lorafleet_gateway.router.plan_route`) and the real placement
over a model of the fleet: each replica has LRU GPU slots, an LRU host-RAM cache and an LRU disk
cache, and a request holds `prompt + output` tokens in flight for its modelled duration. Two
policies run side by side on the same requests:

  resident-first  the router as shipped (prefer the owner holding the adapter in a GPU slot);
  least-loaded    the same router with residency hidden (always the least-loaded owner).

Modelled TTFT = load time of the tier the adapter was found in (DESIGN.md: gpu 0, ram 8 ms,
disk 40 ms, remote 0.4 s) + prefill at `--prefill-tps`. Queueing inside vLLM is not modelled;
overload shows up as spills instead. Residency is seen through 1 s-old state, as the gateway
polls it.

    .venv/bin/python -m benchmarks.routing_sim                 # whole hour at x7 (~40 req/s)
    .venv/bin/python -m benchmarks.routing_sim --limit 5000    # quicker
"""

from __future__ import annotations

import argparse
import heapq
import math
import statistics
import sys
import textwrap
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from benchmarks.workload import Request, WorkloadSpec, adapter_name, load_workload
from lorafleet_gateway.router import ReplicaView, Thresholds, plan_route

TIER_LOAD_S = {"gpu": 0.0, "ram": 0.008, "disk": 0.040, "remote": 0.4}


class LRU:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, key: str) -> bool:
        return key in self.items

    def touch(self, key: str) -> int:
        """Insert or refresh `key`; returns how many entries were evicted."""
        self.items[key] = None
        self.items.move_to_end(key)
        evicted = 0
        while len(self.items) > self.capacity:
            self.items.popitem(last=False)
            evicted += 1
        return evicted


@dataclass
class SimReplica:
    gpu: LRU
    ram: LRU
    disk: LRU
    tokens_in_flight: int = 0
    running: int = 0
    evictions: int = 0

    def serve(self, adapter: str) -> str:
        tier = (
            "gpu"
            if adapter in self.gpu
            else "ram"
            if adapter in self.ram
            else "disk"
            if adapter in self.disk
            else "remote"
        )
        self.evictions += self.gpu.touch(adapter)
        self.ram.touch(adapter)
        self.disk.touch(adapter)
        return tier


@dataclass
class PolicyResult:
    name: str
    tiers: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIER_LOAD_S, 0))
    outcomes: dict[str, int] = field(default_factory=dict)
    ttft: list[float] = field(default_factory=list)
    gpu_hit_by_minute: list[tuple[int, int]] = field(default_factory=list)  # (hits, total)
    evictions: int = 0

    @property
    def total(self) -> int:
        return sum(self.tiers.values())

    def gpu_hit_rate(self) -> float:
        return self.tiers["gpu"] / max(1, self.total)


def owner_count(share: float, rps: float, n_replicas: int, base_k: int, capacity_rps: float) -> int:
    """Owners an adapter gets: the pool default, more when its traffic exceeds half a replica.

    Mirrors the operator's rule (ownerCount grows with the adapter's tokens/s vs per-replica
    capacity); here the share is known from the Zipf mix instead of measured.
    """
    return min(n_replicas, max(base_k, math.ceil(share * rps / (0.5 * capacity_rps))))


def simulate(
    requests: list[Request],
    *,
    policy: str,
    n_replicas: int,
    gpu_slots: int,
    ram_slots: int,
    disk_slots: int,
    k_by_adapter: dict[str, int],
    base_k: int,
    prewarm: list[str],
    prewarm_gpu: bool,
    thresholds: Thresholds,
    decode_s_per_token: float,
    prefill_tps: float,
    poll_s: float,
    progress: bool,
) -> PolicyResult:
    replica_ids = [f"replica-{i}" for i in range(n_replicas)]
    fleet = {r: SimReplica(LRU(gpu_slots), LRU(ram_slots), LRU(disk_slots)) for r in replica_ids}
    # Pre-warm as the operator does: each replica pulls the adapters it owns to disk and host
    # RAM (and GPU slots with --prewarm-gpu). `prewarm` is coldest first, so the hottest end up
    # most recently used and survive when a tier is smaller than the owned set.
    for adapter in prewarm:
        for r in plan_route(
            adapter, _idle(replica_ids), k_by_adapter.get(adapter, base_k), thresholds
        ).owners:
            fleet[r].disk.touch(adapter)
            fleet[r].ram.touch(adapter)
            if prewarm_gpu:
                fleet[r].gpu.touch(adapter)
    result = PolicyResult(policy)
    finishing: list[tuple[float, str, int]] = []  # (end time, replica, tokens)
    resident: dict[str, frozenset[str]] = {r: frozenset() for r in replica_ids}
    next_poll = 0.0
    minute_hits = minute_total = 0
    minute = 0
    for req in tqdm(requests, desc=policy, unit="req", disable=not progress, mininterval=1.0):
        while finishing and finishing[0][0] <= req.at:
            _, rid, tokens = heapq.heappop(finishing)
            fleet[rid].tokens_in_flight -= tokens
            fleet[rid].running -= 1
        if req.at >= next_poll:  # the gateway sees residency as of its last poll
            resident = {r: frozenset(fleet[r].gpu.items) for r in replica_ids}
            next_poll = req.at + poll_s
        while req.at >= (minute + 1) * 60:
            result.gpu_hit_by_minute.append((minute_hits, minute_total))
            minute_hits = minute_total = 0
            minute += 1
        views = {
            r: ReplicaView(
                tokens_in_flight=fleet[r].tokens_in_flight,
                queue_depth=0,
                gpu_adapters=resident[r] if policy == "resident-first" else frozenset(),
            )
            for r in replica_ids
        }
        plan = plan_route(req.adapter, views, k_by_adapter.get(req.adapter, base_k), thresholds)
        chosen = plan.candidates[0]
        result.outcomes[plan.outcome] = result.outcomes.get(plan.outcome, 0) + 1
        replica = fleet[chosen]
        tier = replica.serve(req.adapter)
        result.tiers[tier] += 1
        minute_total += 1
        minute_hits += tier == "gpu"
        prefill = req.prompt_tokens / prefill_tps
        result.ttft.append(TIER_LOAD_S[tier] + prefill)
        tokens = req.prompt_tokens + req.output_tokens
        replica.tokens_in_flight += tokens
        replica.running += 1
        end = req.at + TIER_LOAD_S[tier] + prefill + req.output_tokens * decode_s_per_token
        heapq.heappush(finishing, (end, chosen, tokens))
    result.gpu_hit_by_minute.append((minute_hits, minute_total))
    result.evictions = sum(r.evictions for r in fleet.values())
    return result


def _idle(replica_ids: list[str]) -> dict[str, ReplicaView]:
    return {r: ReplicaView() for r in replica_ids}


def percentile(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=1000)[int(p * 1000) - 1] if len(values) > 1 else 0.0


def plot(results: list[PolicyResult], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for res in results:
        rates = [100 * h / t for h, t in res.gpu_hit_by_minute if t]
        ax1.plot(range(len(rates)), rates, label=f"{res.name} ({100 * res.gpu_hit_rate():.1f}%)")
    ax1.set_xlabel("minute of simulated time")
    ax1.set_ylabel("GPU slot hits (%)")
    ax1.set_title("GPU hit rate over time")
    ax1.legend()
    width = 0.38
    tiers = list(TIER_LOAD_S)
    for i, res in enumerate(results):
        shares = [100 * res.tiers[t] / max(1, res.total) for t in tiers]
        ax2.bar([x + (i - 0.5) * width for x in range(len(tiers))], shares, width, label=res.name)
    ax2.set_xticks(range(len(tiers)), tiers)
    ax2.set_yscale("log")
    ax2.set_ylabel("requests (%), log scale")
    ax2.set_title("Where the adapter was found")
    ax2.legend()
    fig.suptitle(textwrap.fill(title, 150), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--trace", type=Path, default=WorkloadSpec.trace)
    ap.add_argument("--speedup", type=float, default=7.0)
    ap.add_argument("--adapters", type=int, default=5000)
    ap.add_argument("--zipf", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=None, help="first N requests only")
    ap.add_argument("--replicas", type=int, default=26)
    ap.add_argument("--gpu-slots", type=int, default=250)
    ap.add_argument("--ram-slots", type=int, default=1000)
    ap.add_argument("--disk-slots", type=int, default=600, help="~50 GB of 80 MB adapters")
    ap.add_argument("--owners", type=int, default=2, help="ownersPerAdapter")
    ap.add_argument("--fixed-owners", action="store_true", help="never grow owners for hot ones")
    ap.add_argument("--max-tokens-in-flight", type=int, default=16384)
    ap.add_argument("--decode-ms", type=float, default=25.0, help="per output token")
    ap.add_argument("--prefill-tps", type=float, default=10000.0)
    ap.add_argument("--capacity-rps", type=float, default=2.0, help="per replica, for owners")
    ap.add_argument("--no-prewarm", action="store_true", help="start with every cache empty")
    ap.add_argument("--prewarm-gpu", action="store_true", help="pre-warm into GPU slots too")
    ap.add_argument("--plot", type=Path, default=Path("bench-results/routing_sim.png"))
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)

    spec = WorkloadSpec(args.trace, args.speedup, args.adapters, args.zipf, args.seed, args.limit)
    requests = load_workload(spec)
    duration = requests[-1].at - requests[0].at
    rps = len(requests) / max(duration, 1e-9)
    harmonic = sum(1.0 / (r**args.zipf) for r in range(1, args.adapters + 1))
    k_by_adapter: dict[str, int] = {}
    if not args.fixed_owners:
        for rank in range(1, args.adapters + 1):
            k = owner_count(
                1.0 / (rank**args.zipf) / harmonic,
                rps,
                args.replicas,
                args.owners,
                args.capacity_rps,
            )
            if k == args.owners:
                break  # shares only fall from here
            k_by_adapter[adapter_name(rank)] = k
    thresholds = Thresholds(max_tokens_in_flight=args.max_tokens_in_flight, max_queue_depth=10**9)
    results = [
        simulate(
            requests,
            policy=policy,
            n_replicas=args.replicas,
            gpu_slots=args.gpu_slots,
            ram_slots=args.ram_slots,
            disk_slots=args.disk_slots,
            k_by_adapter=k_by_adapter,
            base_k=args.owners,
            prewarm=[]
            if args.no_prewarm
            else [adapter_name(rank) for rank in range(args.adapters, 0, -1)],
            prewarm_gpu=args.prewarm_gpu,
            thresholds=thresholds,
            decode_s_per_token=args.decode_ms / 1000,
            prefill_tps=args.prefill_tps,
            poll_s=1.0,
            progress=not args.no_progress,
        )
        for policy in ("resident-first", "least-loaded")
    ]
    title = (
        f"{spec.describe()} | {len(requests)} requests, {rps:.1f} req/s | replicas={args.replicas}"
        f" gpu_slots={args.gpu_slots} owners={args.owners}"
        f"{' no-prewarm' if args.no_prewarm else ' prewarm=disk+ram'}"
        f"{'+gpu' if args.prewarm_gpu and not args.no_prewarm else ''}"
        f"{'' if args.fixed_owners else f' (+{len(k_by_adapter)} hot adapters with more)'}"
    )
    print(title)
    print(
        f"{'policy':<16}{'gpu%':>7}{'ram%':>7}{'disk%':>7}{'remote%':>9}{'spill%':>8}"
        f"{'evictions':>11}{'TTFT p50':>10}{'p95':>8}{'p99':>8}"
    )
    for res in results:
        pct = {t: 100 * n / res.total for t, n in res.tiers.items()}
        spill = 100 * (res.outcomes.get("spill", 0) + res.outcomes.get("saturated", 0)) / res.total
        print(
            f"{res.name:<16}{pct['gpu']:>7.2f}{pct['ram']:>7.2f}{pct['disk']:>7.2f}"
            f"{pct['remote']:>9.2f}{spill:>8.2f}{res.evictions:>11}"
            f"{percentile(res.ttft, 0.5) * 1000:>8.0f}ms{percentile(res.ttft, 0.95) * 1000:>6.0f}ms"
            f"{percentile(res.ttft, 0.99) * 1000:>6.0f}ms"
        )
    plot(results, args.plot, title)
    print(f"plot: {args.plot}")
    print("command: .venv/bin/python -m benchmarks.routing_sim " + " ".join(argv or sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
