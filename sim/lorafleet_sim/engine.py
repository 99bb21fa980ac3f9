"""The event loop: arrivals, the gateway's routing, replica steps, the operator's planners.

Shipped decision code called here: `plan_route` (per request, per gateway pod); the operator's
planners and the autoscaler run in `ControlPlane` (lorafleet_sim.control_plane), mixed in.
Everything is deterministic for a seed: one random generator, events ordered by (time, seq).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lorafleet_core.planning.autoscale import ScaleState
from lorafleet_core.wire.replica_state import MergedServing
from lorafleet_gateway.pool_router import (
    MERGED,
    AdapterPools,
    MergedTarget,
    plan_pool_route,
)
from lorafleet_gateway.router import POLICIES, Thresholds, plan_route
from lorafleet_sim.control_plane import ControlPlane
from lorafleet_sim.gateway import GatewayView
from lorafleet_sim.params import FleetParams, ReplicaParams
from lorafleet_sim.prewarm import OwnedAnnotations
from lorafleet_sim.replica import Replica
from lorafleet_sim.workload import Workload

# The routers the simulator compares are the gateway's own policies (`routing_policy`), run
# through the same `plan_route`; the earlier names of the first two are still accepted.
ROUTERS = POLICIES
_ROUTER_ALIASES = {"shipped": "affinity", "least-loaded-owner": "least_loaded"}
OUTCOMES = ("owner_resident", "owner", "holder", "spill", "saturated", "random", "failed", MERGED)
SHARED_POOL, MERGED_POOL = "shared", "merged"
_SHARED_ONLY = AdapterPools(SHARED_POOL)
_OUTCOME_CODE = {name: i for i, name in enumerate(OUTCOMES)}


@dataclass(frozen=True)
class FleetEvent:
    """A scripted change: `fail` / `remove` replica `index`, or `add` one, at time `at`."""

    at: float
    kind: str
    index: int = -1
    down_s: float | None = None  # `fail`: back after this long (default: start + warm-up)


class Engine(ControlPlane):
    def __init__(
        self,
        workload: Workload,
        rp: ReplicaParams,
        fp: FleetParams,
        *,
        router: str = "affinity",
        seed: int = 0,
        events: Sequence[FleetEvent] = (),
        duration_s: float | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> None:
        router = _ROUTER_ALIASES.get(router, router)
        if router not in ROUTERS:
            raise ValueError(f"router must be one of {ROUTERS}")
        n = len(workload)
        self.rp, self.fp, self.router = rp, fp, router
        self.names = workload.names
        self.adapter_of, self.prompt, self.output = (
            workload.adapter,
            workload.prompt,
            workload.output,
        )
        self.arrival = workload.at
        self.duration = duration_s if duration_s is not None else (workload.at[-1] if n else 0.0)
        self.tier = [-1] * n
        self.first_token = [math.nan] * n  # the client's first token
        self.engine_in = [math.nan] * n  # handed to vLLM (after the path in and the load)
        self.engine_first = [math.nan] * n  # vLLM's (first_token - path outside the engine)
        # Where the first token's time goes (report.ttft_excess): the agent has the request
        # (after the path in), vLLM's next step boundary after `engine_in` (the step then in
        # progress ends), and the boundary where the request got a sequence.
        self.agent_in = [math.nan] * n
        self.boundary = [math.nan] * n
        self.admitted = [math.nan] * n
        self.finish_time = [math.nan] * n
        self.outcome = [0] * n
        self.replica_of = [-1] * n
        self._gateway_of = [0] * n
        self.rng = random.Random(seed ^ 0x5EED)
        self.thresholds = Thresholds(
            fp.max_tokens_in_flight,
            fp.max_queue_depth,
            fp.balance,
            fp.spill,
            policy=router,
            residency=fp.residency,
            settle_s=fp.settle_s,
            settle_rules=fp.settle_rules,
            merged_max_queue_depth=fp.merged_max_queue_depth,
            merged_max_tokens_in_flight=fp.merged_max_tokens_in_flight,
        )
        self.heap: list[tuple[float, int, Callable[[float, Any], None], Any]] = []
        self._seq = 0
        self.now = 0.0
        self.progress = progress
        self.k: dict[str, int] = {}  # adapters with more owners than the default
        self.tps: dict[str, float] = {}  # the operator's last measured tokens/s per adapter
        self.capacity_tps = fp.replica_capacity_tps or rp.max_seqs / rp.decode_s
        self.replicas: list[Replica] = []
        # The merged pool (fp.merged_replicas > 0): its replicas, their pool and the weights
        # their state reports, and where the merged adapter may go (pool_router's inputs).
        merged_ids = [f"merged-{i}" for i in range(fp.merged_replicas)]
        weights = MergedServing(adapter_id=fp.merged_adapter)
        self._merged_weights = dict.fromkeys(merged_ids, weights)
        self._pool_of: dict[str, str | None] = dict.fromkeys(merged_ids, MERGED_POOL)
        self._merged_route = AdapterPools(SHARED_POOL, (MergedTarget(MERGED_POOL),))
        self.gateways = [GatewayView(self._merged_weights) for _ in range(max(1, fp.gateways))]
        # The pool has been running at its starting count: without this the first decision
        # (no requests in flight yet) would scale straight down to the minimum.
        self.scale_state = ScaleState(((0.0, fp.replicas),))
        self.desired = fp.replicas
        self.timeline: list[dict[str, Any]] = []
        self.scale_events: list[tuple[float, int, str]] = []
        self._members: tuple[str, ...] = ()
        self.annotations = OwnedAnnotations(
            self.names, rp.adapter_bytes, fp.owned_annotation_max_bytes
        )
        for _ in range(fp.replicas):
            self._new_replica(0.0, ready_at=None)
        merged_rp = replace(rp, decode_s=rp.decode_s_merged)
        for rid in merged_ids:
            index = len(self.replicas)
            replica = Replica(rid, index, merged_rp, self)
            replica.merged = fp.merged_adapter
            self.replicas.append(replica)
            replica.start_serving(0.0)
        self._by_id = {r.id: r for r in self.replicas}
        self._membership_changed(0.0, initial=True)
        for ev in events:
            self.schedule(ev.at, self._fleet_event, ev)
        self.schedule(0.0, self._poll, None)
        self.schedule(fp.operator_interval_s, self._operator, None)
        self.schedule(0.0, self._tick, None)
        if fp.autoscale:
            self.schedule(fp.autoscale_interval_s, self._autoscale, None)

    # ------------------------------------------------------------------ events

    def schedule(self, at: float, fn: Callable[[float, Any], None], arg: Any) -> None:
        self._seq += 1
        heapq.heappush(self.heap, (at, self._seq, fn, arg))

    def run(self) -> Engine:
        heap, arrival = self.heap, self.arrival
        n = len(arrival)
        pop = heapq.heappop
        route = self._route
        i = 0
        step = 2000
        while True:
            next_arrival = arrival[i] if i < n else math.inf
            if heap and heap[0][0] <= next_arrival:
                at, _, fn, arg = pop(heap)
                self.now = at
                fn(at, arg)
            elif i < n:
                self.now = next_arrival
                route(i, next_arrival)
                i += 1
                if self.progress is not None and i % step == 0:
                    self.progress(step)
            else:
                break
        if self.progress is not None:
            self.progress(n % step)
        self.end_time = self.now
        for r in self.replicas:
            if r.stopped_at is None:
                r.stopped_at = self.now
        return self

    # ------------------------------------------------------------------ gateway

    def _route(self, req: int, now: float) -> None:
        gw_index = req % len(self.gateways)
        gw = self.gateways[gw_index]
        views = gw.views
        name = self.names[self.adapter_of[req]]
        k = self.k.get(name, self.fp.owners_per_adapter)
        if self._merged_weights:
            pools = self._merged_route if name == self.fp.merged_adapter else _SHARED_ONLY
            routed = plan_pool_route(
                name, pools, views, self._pool_of, k, self.thresholds, self.rng
            )
            candidates, outcome = routed.candidates, routed.outcome
        else:
            plan = plan_route(name, views, k, self.thresholds, self.rng)
            candidates, outcome = plan.candidates, plan.outcome
        by_id = self._by_id
        for rid in candidates:
            replica = by_id[rid]
            if replica.alive and not replica.draining:
                break
            gw.mark_failed(rid)  # connection refused: retry the next candidate
        else:
            self.outcome[req] = _OUTCOME_CODE["failed"]
            return
        self.outcome[req] = _OUTCOME_CODE[outcome]
        self.replica_of[req] = replica.index
        self._gateway_of[req] = gw_index
        gw.begin(rid, self.prompt[req] + self.output[req])
        replica.arrive(req, now)

    def on_finish(self, replica: Replica, req: int, tokens: int) -> None:
        self.gateways[self._gateway_of[req]].end(replica.id, tokens)
        if replica.draining and not replica.inflight:
            self._stop(replica, self.now)

    def _poll(self, now: float, _: Any) -> None:
        states = []
        residency = self.router == "affinity"  # the only policy that reads GPU residency
        held_too = residency and self.thresholds.residency != "gpu"
        empty: frozenset[str] = frozenset()
        warm_ids = set()
        for r in self.replicas:
            if r.alive and not r.draining:
                gpu = r.cache.slots.gpu_set() if residency else empty
                # what the agent's state lists as ram_adapters + disk_adapters
                held = (
                    frozenset(r.cache.slots.ram_only()).union(r.cache.disk.order())
                    if held_too
                    else empty
                )
                states.append((r.id, r.tokens_in_flight, r.queue_depth, gpu, held))
                # A merged replica runs no pre-warm pass and never reports `warming` (the
                # agent starts no watcher for it).
                if r.merged is not None or r.warm.passed or now >= r.warm_gate_until:
                    warm_ids.add(r.id)
        # As the gateway's tracker does: a replica still in its first pre-warm pass (state
        # `warming`) is left out while another one can serve.
        if warm_ids:
            states = [st for st in states if st[0] in warm_ids]
        for gw in self.gateways:
            gw.poll(now, states)
        if now < self.duration:
            self.schedule(now + self.fp.poll_s, self._poll, None)

    # ------------------------------------------------------------------ replicas

    def _new_replica(self, now: float, ready_at: float | None) -> Replica:
        index = len(self.replicas)
        replica = Replica(f"replica-{index}", index, self.rp, self)
        replica.started_at = now
        self.replicas.append(replica)
        self._pool_of[replica.id] = SHARED_POOL
        self._by_id = {r.id: r for r in self.replicas}
        if ready_at is None:
            replica.start_serving(now)
        else:
            self.schedule(ready_at, self._ready, (replica, replica.epoch))
        return replica

    def _ready(self, now: float, arg: tuple[Replica, int]) -> None:
        replica, epoch = arg
        if epoch != replica.epoch or replica.draining:
            return
        replica.start_serving(now)
        replica.warm_gate_until = now + self.fp.prewarm_gate_s
        self._membership_changed(now)

    def _start_delay(self) -> float:
        return self.rp.base_start_s + self.rp.warmup_s

    def _fleet_event(self, now: float, ev: FleetEvent) -> None:
        if ev.kind == "add":
            self.desired += 1
            self._new_replica(now, ready_at=now + self._start_delay())
            self.scale_events.append((now, self.desired, "add"))
        elif ev.kind == "remove":
            replica = self.replicas[ev.index]
            self.desired -= 1
            self._drain(replica, now)
            self.scale_events.append((now, self.desired, "remove"))
        elif ev.kind == "fail":
            replica = self.replicas[ev.index]
            for req in replica.fail(now):
                self.outcome[req] = _OUTCOME_CODE["failed"]
                self.gateways[self._gateway_of[req]].end(
                    replica.id, self.prompt[req] + self.output[req]
                )
            self._membership_changed(now)
            self.annotations.forget(replica.id)
            # The StatefulSet recreates the pod under the same id, cold.
            down = self._start_delay() if ev.down_s is None else ev.down_s
            self.schedule(now + down, self._ready, (replica, replica.epoch))
            self.scale_events.append((now, self.desired, f"fail {replica.id}"))
        else:
            raise ValueError(f"unknown fleet event {ev.kind!r}")

    def _drain(self, replica: Replica, now: float) -> None:
        replica.draining = True
        self._membership_changed(now)
        if not replica.inflight:
            self._stop(replica, now)

    def _stop(self, replica: Replica, now: float) -> None:
        replica.stop()
        replica.stopped_at = now

    def _tick(self, now: float, _: Any) -> None:
        """A sample every 10 s for the plots (replicas, evictions, GPU slot swaps)."""
        self.timeline.append(
            {
                "t": now,
                "serving": sum(1 for r in self.replicas if r.alive and not r.draining),
                "provisioned": sum(1 for r in self.replicas if r.stopped_at is None),
                "evictions": sum(r.evictions for r in self.replicas),
                "gpu_swaps": sum(r.gpu_swaps for r in self.replicas),
                "per_replica": [r.evictions for r in self.replicas],
                "busy_seq_s": sum(r.busy_seq_s for r in self.replicas),
            }
        )
        if now < self.duration:
            self.schedule(now + 10.0, self._tick, None)
