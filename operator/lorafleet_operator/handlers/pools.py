"""ReplicaPool: own a StatefulSet, a headless Service and a PodDisruptionBudget."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kopf
from pydantic import ValidationError

from lorafleet_core.models import ReplicaPool, ReplicaPoolStatus
from lorafleet_core.names import GROUP, PLURAL_POOL, VERSION
from lorafleet_core.planning.conditions import condition, set_condition
from lorafleet_core.planning.pool import clamp_replicas, plan_pool_objects, selector_string
from lorafleet_operator.errors import InvalidSpecError, describe, mapped
from lorafleet_operator.kube import HOLDER, collection_path, lorafleet_path
from lorafleet_operator.runtime import runtime
from lorafleet_operator.sync import status_patch


def parse_pool(body: kopf.Body | dict[str, Any]) -> ReplicaPool:
    return ReplicaPool.model_validate({k: v for k, v in dict(body).items() if k != "status"})


@kopf.on.event(GROUP, VERSION, PLURAL_POOL)
async def pool_event(
    *, type: str, body: kopf.Body, name: str, namespace: str | None, **_: Any
) -> None:
    assert namespace is not None  # lorafleet resources and pods are namespaced
    fleet = runtime().fleet(namespace)
    if type == "DELETED" or body.get("metadata", {}).get("deletionTimestamp"):
        fleet.remove_pool(name)
        return
    try:
        fleet.upsert_pool(parse_pool(body))
    except ValidationError:
        fleet.remove_pool(name)  # reported by pool_reconcile as InvalidSpec


@kopf.on.resume(GROUP, VERSION, PLURAL_POOL)
@kopf.on.create(GROUP, VERSION, PLURAL_POOL)
@kopf.on.update(GROUP, VERSION, PLURAL_POOL, field="spec")
@mapped
async def pool_reconcile(
    *, body: kopf.Body, name: str, namespace: str | None, logger: kopf.Logger, **_: Any
) -> None:
    assert namespace is not None
    client = await HOLDER.client()
    status_path = lorafleet_path(PLURAL_POOL, namespace, name, status=True)
    try:
        pool = parse_pool(body)
    except ValidationError as exc:
        old = ReplicaPoolStatus.model_validate(body.get("status") or {})
        bad = condition("Ready", False, "InvalidSpec", describe(exc), datetime.now(UTC))
        status = old.model_copy(update={"conditions": set_condition(old.conditions, bad)})
        await client.merge_patch(
            status_path, {"status": status_patch(status)}, "ReplicaPool/status"
        )
        raise InvalidSpecError(str(exc)) from exc
    runtime().fleet(namespace).upsert_pool(pool)

    sts_collection = collection_path("apps/v1", "statefulsets", namespace)
    existing = await client.get(f"{sts_collection}/{name}")
    current = (existing or {}).get("spec", {}).get("replicas")
    if existing is None or not pool.spec.autoscaling.enabled:
        replicas = clamp_replicas(pool, None)
    else:
        # The autoscaler owns the count; a spec change only re-clamps it to new bounds.
        replicas = clamp_replicas(pool, current)
    objects = plan_pool_objects(pool, namespace, replicas)
    done = {
        "statefulset": await client.apply(sts_collection, objects.statefulset),
        "service": await client.apply(
            collection_path("v1", "services", namespace), objects.service
        ),
        "pdb": await client.apply(
            collection_path("policy/v1", "poddisruptionbudgets", namespace), objects.pdb
        ),
    }
    logger.info("ReplicaPool %s: %s (replicas %s)", name, done, replicas)
    await client.merge_patch(
        status_path,
        {
            "status": {
                "selector": selector_string(name),
                "observedGeneration": pool.metadata.generation,
            }
        },
        "ReplicaPool/status",
    )
