"""The simulated control plane: the operator's owner planning, pre-warm and autoscaler.

Shipped decision code called here: `plan_owned_annotations` + `prewarm_pass` (each pod's
owned set and its agent's pre-warm pass, `lorafleet_sim.prewarm`), `plan_owner_count`
(owner counts from measured tokens/s, every `operator_interval_s`), `autoscale.recommend` +
`stabilize` (when autoscaling is on). `Engine` (lorafleet_sim.engine) mixes it in and
schedules its loops; the state it reads and writes is the engine's, declared below.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lorafleet_core.api.models import AutoscalingSpec, ReplicaBounds
from lorafleet_core.planning.adapters import plan_owner_count
from lorafleet_core.planning.autoscale import Load, ScaleState, recommend, stabilize
from lorafleet_core.planning.placement import owners as rendezvous_owners
from lorafleet_core.planning.prewarm import PrewarmPass, prewarm_order, prewarm_pass
from lorafleet_core.wire.replica_state import ReplicaState
from lorafleet_sim.params import FleetParams, ReplicaParams
from lorafleet_sim.prewarm import OwnedAnnotations, apply_pass_instantly

if TYPE_CHECKING:
    from lorafleet_sim.replica import Replica


class ControlPlane:
    """The operator's loops over the engine's fleet (a mixin of `Engine`)."""

    # The engine's state these loops use (set in Engine.__init__).
    fp: FleetParams
    rp: ReplicaParams
    names: tuple[str, ...]
    replicas: list[Replica]
    _by_id: dict[str, Replica]
    _members: tuple[str, ...]
    annotations: OwnedAnnotations
    k: dict[str, int]
    tps: dict[str, float]
    capacity_tps: float
    duration: float
    scale_state: ScaleState
    desired: int
    scale_events: list[tuple[float, int, str]]

    if TYPE_CHECKING:  # ... and the engine's scheduling and replica lifecycle

        def schedule(self, at: float, fn: Callable[[float, Any], None], arg: Any) -> None: ...
        def _new_replica(self, now: float, ready_at: float | None) -> Replica: ...
        def _start_delay(self) -> float: ...
        def _drain(self, replica: Replica, now: float) -> None: ...

    def live_ids(self) -> tuple[str, ...]:
        """The shared pool's serving replicas (a merged pool's never own adapters)."""
        return tuple(r.id for r in self.replicas if r.alive and not r.draining and r.merged is None)

    def _membership_changed(self, now: float, initial: bool = False) -> None:
        """The operator re-plans owners over the live replicas; agents whose owned-adapters
        annotation changed run a pre-warm pass over it."""
        self._members = self.live_ids()
        if self._members:
            self._replan(initial)

    def _replan(self, initial: bool = False) -> None:
        base = self.fp.owners_per_adapter
        k_by: dict[str, int] | int = (
            {**dict.fromkeys(self.names, base), **self.k} if self.k or base != 2 else base
        )
        changed = self.annotations.plan(self._members, k_by, self.tps)
        for rid, (names, before) in changed.items():
            replica = self._by_id[rid]
            # The agent takes the annotation's order (by id); `prewarm_by_traffic`
            # (experiment): an operator writing it hottest first by the last tokens/s.
            if self.fp.prewarm_by_traffic:
                names = prewarm_order(names, self.tps)
            listed = before if self.fp.prewarm_changes_only else frozenset()
            plan = prewarm_pass(names, self.rp.ram_slots, listed)
            if not initial:
                replica.start_pass(plan)
            elif self.fp.prewarm:
                self._instant_prewarm(replica, plan)

    def _instant_prewarm(self, replica: Replica, plan: PrewarmPass[str]) -> None:
        apply_pass_instantly(replica.cache, plan, self.rp.adapter_bytes)

    # ------------------------------------------------------------------ operator

    def _operator(self, now: float, _: Any) -> None:
        interval = self.fp.operator_interval_s
        measured: Counter[str] = Counter()
        for r in self.replicas:
            measured.update(r.tokens_served)
            r.tokens_served.clear()
        members = self._members
        base = self.fp.owners_per_adapter
        self.tps = {name: tokens / interval for name, tokens in measured.items()}
        replan = self.annotations.dropped_any  # the kept adapters follow traffic
        for name in set(measured) | set(self.k):
            current = self.k.get(name, base)
            k = plan_owner_count(
                measured[name] / interval,
                current,
                base,
                self.capacity_tps,
                len(members),
            )
            if k == current:
                continue
            if k == base:
                del self.k[name]
            else:
                self.k[name] = k
            replan = True
        if replan and members:
            self._replan()
        if self.fp.prewarm_next_hot and members:
            self._prewarm_next_replica(measured, members)
        if now < self.duration:
            self.schedule(now + interval, self._operator, None)

    def _prewarm_next_replica(self, measured: Counter[str], members: tuple[str, ...]) -> None:
        """Experiment: the hottest adapters also pre-warmed on their next rendezvous replica,
        where their spills land (docs/design/0006)."""
        base = self.fp.owners_per_adapter
        for name, _ in measured.most_common(self.fp.prewarm_next_hot):
            k = self.k.get(name, base)
            order = rendezvous_owners(name, members, k + 1)
            if len(order) > k and not self._by_id[order[k]].cache.slots.is_registered(name):
                self._by_id[order[k]].prewarm([name])

    def _autoscale(self, now: float, _: Any) -> None:
        fp = self.fp
        states = [
            ReplicaState(
                replica_id=r.id, tokens_in_flight=r.tokens_in_flight, queue_depth=r.queue_depth
            )
            for r in self.replicas
            if r.alive and not r.draining and r.merged is None  # the shared pool's autoscaler
        ]
        spec = AutoscalingSpec(
            target_tokens_in_flight=fp.target_tokens_in_flight,
            target_queue_depth=fp.target_queue_depth,
        )
        raw = recommend(
            Load.of(states), spec, ReplicaBounds(min=fp.min_replicas, max=fp.max_replicas)
        )
        decision = stabilize(
            self.scale_state, self.desired, raw, now, fp.scale_up_window_s, fp.scale_down_window_s
        )
        self.scale_state = decision.state
        while self.desired < decision.desired:
            self.desired += 1
            self._new_replica(now, ready_at=now + self._start_delay())
        if decision.desired < self.desired:
            active = [
                r
                for r in self.replicas
                if not r.draining and r.stopped_at is None and r.merged is None
            ]
            active = active[: self.desired]
            for replica in reversed(active[decision.desired :]):
                self._drain(replica, now)
            self.desired = decision.desired
        if decision.reason in ("ScaleUp", "ScaleDown"):
            self.scale_events.append((now, self.desired, decision.reason))
        if now < self.duration:
            self.schedule(now + fp.autoscale_interval_s, self._autoscale, None)
