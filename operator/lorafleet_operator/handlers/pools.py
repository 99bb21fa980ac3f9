"""ReplicaPool: own a StatefulSet, a headless Service and a PodDisruptionBudget.

This handler only applies the owned objects; the pool's status (including InvalidSpec) has one
writer, the per-pool loop in handlers.autoscaler.
"""

from __future__ import annotations

from typing import Any

import kopf
from pydantic import ValidationError

from lorafleet_core.api.models import ReplicaPool, ReplicaPoolStatus
from lorafleet_core.api.names import GROUP, PLURAL_POOL, VERSION
from lorafleet_core.logs import replica_log_format
from lorafleet_core.planning.pool import clamp_replicas, plan_pool_objects
from lorafleet_operator.errors import InvalidSpecError, describe, mapped
from lorafleet_operator.handlers.internal_secret import ensure_gateway_secret
from lorafleet_operator.handlers.merged import apply_merged_pool, ensure_internal_secret
from lorafleet_operator.kube import HOLDER
from lorafleet_operator.runtime import runtime


def parse_pool(body: kopf.Body | dict[str, Any]) -> ReplicaPool:
    return ReplicaPool.model_validate({k: v for k, v in dict(body).items() if k != "status"})


@kopf.index(GROUP, VERSION, PLURAL_POOL)
async def pool_index(*, body: kopf.Body, name: str, namespace: str | None, **_: Any) -> None:
    """Every non-deletion event, during kopf's initial list too (why: the handlers package)."""
    assert namespace is not None  # lorafleet resources and pods are namespaced
    fleet = runtime().fleet(namespace, indexing=True)
    if body.get("metadata", {}).get("deletionTimestamp"):
        fleet.index.remove_pool(name)
        return
    try:
        fleet.index.upsert_pool(parse_pool(body))
    except ValidationError:
        fleet.index.remove_pool(name)  # reported by pool_reconcile as InvalidSpec


@kopf.on.event(GROUP, VERSION, PLURAL_POOL)
async def pool_event(*, type: str, name: str, namespace: str | None, **_: Any) -> None:
    assert namespace is not None
    fleet = runtime().fleet(namespace)
    if type == "DELETED":
        fleet.index.remove_pool(name)


@kopf.on.resume(GROUP, VERSION, PLURAL_POOL)
@kopf.on.create(GROUP, VERSION, PLURAL_POOL)
@kopf.on.update(GROUP, VERSION, PLURAL_POOL, field="spec")
@mapped
async def pool_reconcile(
    *, body: kopf.Body, name: str, namespace: str | None, logger: kopf.Logger, **_: Any
) -> None:
    assert namespace is not None
    kube = await HOLDER.client()
    try:
        pool = parse_pool(body)
    except ValidationError as exc:
        raise InvalidSpecError(describe(exc)) from exc  # the status loop reports it
    runtime().fleet(namespace).index.upsert_pool(pool)
    # Before the replicas that read it exist (they wait for it otherwise).
    await ensure_gateway_secret(pool, body, namespace)
    await ensure_internal_secret(pool, body, namespace)
    if pool.spec.merged is not None:
        # The replicas need the merged weights: applied once the merge is Ready (here on a
        # spec change, else by the per-pool loop when the merge Job finishes).
        old = ReplicaPoolStatus.model_validate(body.get("status") or {}).merge
        sts = await kube.read_owned("StatefulSet", namespace, name)
        count = None if sts is None else sts.get("spec", {}).get("replicas")
        done = await apply_merged_pool(pool, namespace, old, count)
        logger.info("merged ReplicaPool %s: %s", name, done or "waiting for the merge")
        return

    existing = await kube.read_owned("StatefulSet", namespace, name)
    current = (existing or {}).get("spec", {}).get("replicas")
    if existing is None or not pool.spec.autoscaling.enabled:
        replicas = clamp_replicas(pool, None)
    else:
        # The autoscaler owns the count; a spec change only re-clamps it to new bounds.
        replicas = clamp_replicas(pool, current)
    objects = plan_pool_objects(
        pool, namespace, replicas, runtime().settings.inside_auth(), log_format=replica_log_format()
    )
    done = {
        "statefulset": await kube.apply_owned(namespace, objects.statefulset),
        "service": await kube.apply_owned(namespace, objects.service),
        "pdb": await kube.apply_owned(namespace, objects.pdb),
    }
    logger.info("ReplicaPool %s: %s (replicas %s)", name, done, replicas)
