"""ReplicaPool: how many replicas to run now, and the pool's status (pure; explicit clocks).

`plan_scale` is the autoscaler's decision for one tick: replicas from the scraped load, held
when no replica answered, fixed when autoscaling is off, stabilised as the HPA does
(planning.autoscale). `plan_pool_status` is the whole status the operator writes for a pool:
one function, so the operator has one writer of ReplicaPool status (its per-pool loop in
lorafleet_operator.handlers.autoscaler) and an invalid spec, the replica counts and the
scaling decision can never overwrite each other.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from lorafleet_core.api import reasons
from lorafleet_core.api.models import ReplicaPool, ReplicaPoolStatus
from lorafleet_core.api.names import ANNOTATION_DRAINING_SINCE
from lorafleet_core.planning.agent_access import AccessCheck, access_condition
from lorafleet_core.planning.autoscale import Load, ScaleState, recommend, stabilize
from lorafleet_core.planning.conditions import condition, merge_conditions, without
from lorafleet_core.planning.merge_job import MergePlan
from lorafleet_core.planning.merged_lifecycle import draining
from lorafleet_core.planning.pool import clamp_replicas, selector_string
from lorafleet_core.wire.replica_state import ReplicaState


@dataclass(frozen=True)
class ScalePlan:
    desired: int
    recommended: int  # before stabilisation
    reason: str  # a reasons.* or planning.autoscale reason
    load: Load
    state: ScaleState


def plan_scale(
    pool: ReplicaPool,
    current: int,
    states: Mapping[str, ReplicaState],
    state: ScaleState,
    now_monotonic: float | None = None,
) -> ScalePlan:
    """The replica count for the StatefulSet now (`current` is its spec.replicas)."""
    scaling = pool.spec.autoscaling
    load = Load.of(states.values())
    if not scaling.enabled:
        desired = clamp_replicas(pool, None)
        return ScalePlan(desired, desired, reasons.AUTOSCALING_DISABLED, load, state)
    if not states:
        # No metrics (no ready replica answered): hold rather than guess.
        return ScalePlan(clamp_replicas(pool, current), current, reasons.NO_METRICS, load, state)
    raw = recommend(load, scaling, pool.spec.replicas)
    decision = stabilize(
        state,
        current,
        raw,
        time.monotonic() if now_monotonic is None else now_monotonic,
        scaling.scale_up_stabilization_seconds,
        scaling.scale_down_stabilization_seconds,
    )
    return ScalePlan(decision.desired, raw, decision.reason, load, decision.state)


@dataclass(frozen=True)
class PoolObservation:
    """What the status is computed from besides the pool: its pods and the last decision."""

    pods: int = 0
    ready: int = 0
    current: int | None = None  # the StatefulSet's spec.replicas; None before it exists
    scale: ScalePlan | None = None
    merge: MergePlan | None = None  # merged pools: this tick's planning.merge_job.plan_merge
    # tokenReview mode: what the pods' ServiceAccount may do (planning.agent_access); None:
    # nothing to check (secret mode), and no AgentPermissions condition.
    access: AccessCheck | None = None


def plan_pool_status(
    name: str,
    old: ReplicaPoolStatus,
    pool: ReplicaPool | None,
    seen: PoolObservation,
    now: datetime,
    *,
    invalid: str | None = None,
    generation: int | None = None,
) -> ReplicaPoolStatus:
    """The pool's next status. `pool` is None (with `invalid` saying why) for a bad spec."""
    if pool is None:
        bad = condition(
            reasons.READY, False, reasons.INVALID_SPEC, invalid or "invalid spec", now, generation
        )
        return old.model_copy(
            update={
                "conditions": merge_conditions(old.conditions, [bad]),
                "selector": selector_string(name),
                "observed_generation": generation,
            }
        )
    gen = pool.metadata.generation
    ready_reason = reasons.REPLICAS_READY if seen.ready else reasons.NO_READY_REPLICAS
    ready_message = f"{seen.ready}/{seen.pods} replicas ready"
    merge = seen.merge.status if seen.merge is not None else old.merge
    if seen.merge is not None and seen.merge.reason is not None:
        # A merged pool is not Ready before its merged weights are: the replicas need them.
        ready = condition(
            reasons.READY, False, seen.merge.reason, seen.merge.status.message, now, gen
        )
    elif pool.spec.merged is not None and draining(pool):
        # Gateways already route nothing here (catalog_pools); the replicas finish what
        # they hold until the operator deletes the pool (planning.merged_lifecycle).
        since = pool.metadata.annotations.get(ANNOTATION_DRAINING_SINCE, "")
        msg = (
            f"draining since {since}: {pool.spec.merged.adapter}'s traffic stayed below the "
            f"merge threshold, its shared pool serves it; {seen.ready}/{seen.pods} replicas "
            "finish their requests until the pool is deleted"
        )
        ready = condition(reasons.READY, False, reasons.DRAINING, msg, now, gen)
    else:
        if merge is not None and merge.adapter_id:
            ready_message += f", serving adapter {merge.adapter_id} merged ({merge.checksum})"
        ready = condition(reasons.READY, seen.ready > 0, ready_reason, ready_message, now, gen)
    conds = [ready]
    desired = old.desired_replicas
    if seen.scale is not None and seen.current is not None:
        s = seen.scale
        desired = s.desired
        conds.append(
            condition(
                reasons.SCALING,
                s.desired != seen.pods,
                s.reason,
                f"desired {s.desired}, recommended {s.recommended}, current {seen.current}",
                now,
                gen,
            )
        )
    kept = old.conditions
    if seen.access is None:
        kept = without(kept, reasons.AGENT_PERMISSIONS)
    else:
        conds.append(access_condition(seen.access, now, gen))
    return old.model_copy(
        update={
            "replicas": seen.pods,
            "ready_replicas": seen.ready,
            "desired_replicas": desired,
            "selector": selector_string(name),
            "conditions": merge_conditions(kept, conds),
            "observed_generation": gen,
            "merge": merge if pool.spec.merged is not None else None,
        }
    )
