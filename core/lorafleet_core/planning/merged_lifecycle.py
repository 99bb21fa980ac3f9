"""The life of a merged pool the operator created (autoMerge): scale, drain, delete (pure).

planning.merge_advice decides when an adapter gets a merged pool. Once the operator created one,
this module follows the adapter's sustained tokens/s (`status.stats.tokensPerSecond`: a
minute's traffic summed over every replica, the merged ones included, rewritten only when it
moves by 25%):

- Scale: `spec.replicas.min` follows `merged_replicas_needed` (replicas at 2/3 of
  capacity), up at once, down only once the traffic would fit in fewer replicas at 80% of
  that each (the recommendation's hysteresis), never above `replicas.max`. The pool's own
  autoscaler still scales by load between min and max.
- Drain: when `MergedPoolRecommended` has been False (below 80% of the threshold) for the
  shared pool's `autoMerge.coolDownSeconds`, the pool gets the annotation
  `lorafleet.dev/draining-since`. Gateways stop routing to a draining pool at once (the
  catalog drops it), so the adapter's traffic is back on its shared pool, where its owners
  still pre-warm it; the pool's Ready condition turns False (`Draining`).
- Delete: `autoMerge.drainSeconds` after the drain began, with requests in flight long done
  (and the replicas' preStop drain as a second guard), the pool is deleted; its StatefulSet,
  Service, PDB and Secret go with it by ownerReferences.
- Traffic back above the threshold while draining: the drain is cancelled.
- The adapter being deleted (`kubectl delete lora`): its pool drains at once, whatever the
  traffic, and is deleted after drainSeconds; the adapter's finalizer waits for that
  (planning.fleet: `InUseByMergedPool`), so its weights stay registered while served.

Only pools the operator created are ever touched: labelled managed-by the operator and
merged-from a shared pool, and controlled (ownerReference) by the adapter they serve. A merged
pool a person created has none of that and is never scaled or deleted here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lorafleet_core.api import reasons
from lorafleet_core.api.models import Condition, ConditionStatus, ReplicaPool
from lorafleet_core.api.models.pool import AutoMergeSpec
from lorafleet_core.api.names import (
    ANNOTATION_DRAINING_SINCE,
    KIND_ADAPTER,
    KIND_POOL,
    LABEL_MANAGED_BY,
    LABEL_MERGED_ADAPTER,
    LABEL_MERGED_FROM,
    MANAGED_BY_OPERATOR,
    label_value,
)
from lorafleet_core.planning.merge_advice import HYSTERESIS, merged_replicas_needed
from lorafleet_core.planning.pool import controller_refs
from lorafleet_core.planning.replica_config import (
    AGENT_TOKEN_SECRET_KEY,
    DATA_TOKEN_SECRET_KEY,
    VLLM_API_KEY_SECRET_KEY,
    internal_secret_name,
)


@dataclass(frozen=True)
class PoolChange:
    """One write to a merged pool, with the Event (on the pool and its adapter) that says why."""

    pool: str
    adapter: str
    reason: str
    message: str
    patch: dict[str, Any] | None = None  # JSON merge patch of the ReplicaPool
    delete: bool = False


def auto_created(pool: ReplicaPool) -> bool:
    """Whether the operator created this merged pool (and so may scale and delete it)."""
    if pool.spec.merged is None:
        return False
    adapter = pool.spec.merged.adapter
    labels = pool.metadata.labels
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY_OPERATOR or not labels.get(LABEL_MERGED_FROM):
        return False
    if labels.get(LABEL_MERGED_ADAPTER) != label_value(adapter):
        return False
    refs = (pool.metadata.model_extra or {}).get("ownerReferences") or []
    return any(
        isinstance(r, Mapping)
        and r.get("kind") == KIND_ADAPTER
        and r.get("name") == adapter
        and r.get("controller") is True
        for r in refs
    )


def draining(pool: ReplicaPool) -> bool:
    """Whether the pool is draining: gateways route nothing to it (catalog_pools)."""
    return ANNOTATION_DRAINING_SINCE in pool.metadata.annotations


def draining_since(pool: ReplicaPool) -> datetime | None:
    """When the pool began draining (its annotation); None when not, or not a valid time
    with a zone (the planner then restarts the drain from now)."""
    raw = pool.metadata.annotations.get(ANNOTATION_DRAINING_SINCE)
    if raw is None:
        return None
    try:
        since = datetime.fromisoformat(raw)
    except ValueError:
        return None
    return since if since.tzinfo is not None else None


def settings_for(pool: ReplicaPool, pools: Mapping[str, ReplicaPool]) -> AutoMergeSpec:
    """The shared pool's autoMerge settings (the merged pool's own copy once that is gone)."""
    shared = pools.get(pool.metadata.labels.get(LABEL_MERGED_FROM, ""))
    return (shared or pool).spec.auto_merge


def replicas_for(tps: float, current: int, capacity_tps: float, most: int) -> int:
    """`replicas.min` for `tps` sustained: up to `merged_replicas_needed` at once, down only
    to what serves it at HYSTERESIS of that target, so a figure near a boundary does not flap."""
    up = merged_replicas_needed(tps, capacity_tps)
    down = merged_replicas_needed(tps, capacity_tps, HYSTERESIS)
    want = up if up > current else min(current, down)
    return max(1, min(want, most))


def plan_merged_lifecycle(
    pools: Sequence[ReplicaPool],
    recommendations: Mapping[str, Condition],
    tps: Mapping[str, float],
    capacity_tps: float,
    now: datetime,
    deleting: frozenset[str] = frozenset(),
) -> list[PoolChange]:
    """The changes due now to the merged pools the operator created.

    `recommendations` are the adapters' MergedPoolRecommended conditions as planned this pass
    (lastTransitionTime: when the status last changed), `tps` their sustained tokens/s.
    An adapter with no condition (not placed, or gone: its pool is garbage collected) leaves
    its pool alone. An adapter in `deleting` (its deletion waits for its pool) has its pool
    drained now and deleted after drainSeconds.
    """
    by_name = {p.metadata.name: p for p in pools}
    out: list[PoolChange] = []
    for pool in sorted(pools, key=lambda p: p.metadata.name):
        if not auto_created(pool):
            continue
        assert pool.spec.merged is not None
        name, adapter = pool.metadata.name, pool.spec.merged.adapter
        if adapter in deleting:
            out.extend(_drain_for_deletion(pool, adapter, settings_for(pool, by_name), now))
            continue
        cond = recommendations.get(adapter)
        if cond is None:
            continue
        auto = settings_for(pool, by_name)
        level = tps.get(adapter, 0.0)
        if cond.status == ConditionStatus.TRUE:
            if draining(pool):
                out.append(
                    PoolChange(
                        name,
                        adapter,
                        reasons.MERGED_POOL_DRAIN_CANCELLED,
                        f"{adapter} is above the merge threshold again; {name} serves it",
                        {"metadata": {"annotations": {ANNOTATION_DRAINING_SINCE: None}}},
                    )
                )
            out.extend(_scale(pool, adapter, level, capacity_tps))
            continue
        since = draining_since(pool)
        if since is None:
            low_for = (now - cond.last_transition_time).total_seconds()
            if low_for < auto.cool_down_seconds and not draining(pool):
                out.extend(_scale(pool, adapter, level, capacity_tps))
                continue
            out.append(
                PoolChange(
                    name,
                    adapter,
                    reasons.MERGED_POOL_DRAINING,
                    f"{adapter} below the merge threshold for {low_for:.0f} s (coolDownSeconds "
                    f"{auto.cool_down_seconds}): gateways route it to its shared pool again; "
                    f"{name} is deleted after drainSeconds {auto.drain_seconds}",
                    {"metadata": {"annotations": {ANNOTATION_DRAINING_SINCE: now.isoformat()}}},
                )
            )
        elif (now - since).total_seconds() >= auto.drain_seconds:
            out.append(
                PoolChange(
                    name,
                    adapter,
                    reasons.MERGED_POOL_DELETED,
                    f"{name} drained for drainSeconds {auto.drain_seconds}; deleted "
                    f"({adapter} is served by its shared pool)",
                    delete=True,
                )
            )
    return out


def _drain_for_deletion(
    pool: ReplicaPool, adapter: str, auto: AutoMergeSpec, now: datetime
) -> list[PoolChange]:
    name = pool.metadata.name
    since = draining_since(pool)
    if since is None:
        return [
            PoolChange(
                name,
                adapter,
                reasons.MERGED_POOL_DRAINING,
                f"{adapter} is being deleted: gateways route it to its shared pool again; "
                f"{name} is deleted after drainSeconds {auto.drain_seconds}, then {adapter}",
                {"metadata": {"annotations": {ANNOTATION_DRAINING_SINCE: now.isoformat()}}},
            )
        ]
    if (now - since).total_seconds() >= auto.drain_seconds:
        return [
            PoolChange(
                name,
                adapter,
                reasons.MERGED_POOL_DELETED,
                f"{name} drained for drainSeconds {auto.drain_seconds}; deleted ({adapter} "
                "is being deleted)",
                delete=True,
            )
        ]
    return []


def _scale(pool: ReplicaPool, adapter: str, tps: float, capacity_tps: float) -> list[PoolChange]:
    bounds = pool.spec.replicas
    want = replicas_for(tps, bounds.min, capacity_tps, bounds.max)
    if want == bounds.min:
        return []
    message = (
        f"replicas.min {bounds.min} -> {want} for {adapter}'s sustained {tps:g} tokens/s "
        f"({capacity_tps:g} per replica)"
    )
    patch = {"spec": {"replicas": {"min": want}}}
    return [PoolChange(pool.metadata.name, adapter, reasons.MERGED_POOL_SCALED, message, patch)]


def merge_patch(target: Any, patch: Any) -> Any:
    """`target` with a JSON merge patch (RFC 7386) applied, as the API server stores it (a
    PoolChange's patch; standalone mode applies it to the manifest)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


@dataclass(frozen=True)
class SecretPlan:
    """The `<pool>-internal` Secret to create for a merged pool the operator created, or why
    it cannot be (`missing`)."""

    body: dict[str, Any] | None = None
    missing: str | None = None


def plan_internal_secret(
    pool: ReplicaPool,
    uid: str,
    mode: str,
    agent_token: str | None,
    vllm_api_key: str,
    data_token: str | None = None,
) -> SecretPlan:
    """The merged pool's own inside Secret, owned by the pool (garbage collected with it).

    vLLM's API key is new (only this pool's pods read it). The agents' token is the one every
    caller already holds (the gateway and the operator send one token to all replicas, the
    shared pool's `agent-token`), so in `secret` mode it is copied from the operator's own
    credential; in `tokenReview` mode the agents verify callers' ServiceAccount tokens and the
    Secret holds no agents' token. The data-port token (`data-token`) is the gateway's one
    token for every replica's data port, in every mode: copied from the operator's copy
    (`REPLICA_DATA_TOKEN`), which it holds for this alone. `vllm_api_key` comes from the
    caller (randomness is I/O).
    """
    name = internal_secret_name(pool.metadata.name)
    if not data_token:
        return SecretPlan(
            missing=f"Secret {name} is needed but the operator holds no agents' data token to "
            "copy (REPLICA_DATA_TOKEN); create it with the shared pool's data-token, "
            "agent-token and a new vllm-api-key"
        )
    data = {VLLM_API_KEY_SECRET_KEY: vllm_api_key, DATA_TOKEN_SECRET_KEY: data_token}
    if mode != "tokenReview":
        if not agent_token:
            return SecretPlan(
                missing=f"Secret {name} is needed (internalAuth secret mode) but the operator "
                "holds no agents' token to copy (REPLICA_TOKEN); create it with the shared "
                "pool's agent-token and a new vllm-api-key"
            )
        data[AGENT_TOKEN_SECRET_KEY] = agent_token
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY_OPERATOR,
                LABEL_MERGED_ADAPTER: pool.metadata.labels.get(LABEL_MERGED_ADAPTER, ""),
            },
            "ownerReferences": controller_refs(
                pool.api_version, KIND_POOL, pool.metadata.name, uid
            ),
        },
        "type": "Opaque",
        "stringData": data,
    }
    return SecretPlan(body=body)
