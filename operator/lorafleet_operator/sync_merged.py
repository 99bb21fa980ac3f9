"""The sync loop's writes for merged pools: recommendation Events, create, scale, drain, delete.

The decisions are plan_fleet's (planning.merge_advice, planning.merged_lifecycle); this module
applies them through the loop's Writer, one pool's changes in order, and keeps the loop's
index in step with its own writes (the watch event follows later), so the next pass does not
ask again and no Event is posted twice.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lorafleet_core.api import reasons
from lorafleet_core.api.models import ReplicaPool
from lorafleet_core.api.names import KIND_ADAPTER, KIND_POOL
from lorafleet_core.kube.client import is_conflict, is_not_found
from lorafleet_core.planning.fleet import FleetPlan
from lorafleet_core.planning.merged_lifecycle import PoolChange, merge_patch

if TYPE_CHECKING:
    from lorafleet_operator.sync import FleetSync

log = logging.getLogger(__name__)


async def write_merged(fleet: FleetSync, plan: FleetPlan) -> None:
    events = [merge_event(fleet, name, why) for name, why in sorted(plan.merge_events.items())]
    await fleet.run_all(events)
    await fleet.run_all([create_pool(fleet, body) for body in plan.pools_to_create])
    by_pool: dict[str, list[PoolChange]] = {}
    for change in plan.pool_changes:
        by_pool.setdefault(change.pool, []).append(change)
    await fleet.run_all([_apply(fleet, changes) for changes in by_pool.values()])


async def merge_event(fleet: FleetSync, adapter: str, why: tuple[str, str]) -> None:
    reason, message = why
    uid = fleet.index.uids.get((KIND_ADAPTER, adapter))
    await fleet.writer.event(
        fleet.namespace,
        KIND_ADAPTER,
        adapter,
        uid,
        reasons.MERGED_POOL_RECOMMENDED,
        f"{reason}: {message}",
    )


async def create_pool(fleet: FleetSync, body: dict[str, Any]) -> None:
    """Create a merged pool once; its watch event then indexes it like any pool (until
    then the planner would ask again, so what this loop created is remembered)."""
    name = str(body["metadata"]["name"])
    if name in fleet.created_pools or name in fleet.index.pools:
        return
    body = {**body, "metadata": {**body["metadata"], "namespace": fleet.namespace}}
    async with fleet.write_slots:
        try:
            await fleet.writer.create_pool(fleet.namespace, body)
        except Exception as exc:
            if not is_conflict(exc):
                raise
    fleet.created_pools.add(name)
    log.info("created merged ReplicaPool %s/%s", fleet.namespace, name)


async def _apply(fleet: FleetSync, changes: list[PoolChange]) -> None:
    for change in changes:
        pool = fleet.index.pools.get(change.pool)
        if pool is None:
            return  # gone meanwhile (its DELETED event removed it)
        async with fleet.write_slots:
            try:
                if change.delete:
                    await fleet.writer.delete_pool(fleet.namespace, change.pool)
                else:
                    assert change.patch is not None
                    await fleet.writer.patch_pool(fleet.namespace, change.pool, change.patch)
            except Exception as exc:
                if not is_not_found(exc):
                    raise
        if change.delete:
            fleet.index.remove_pool(change.pool)
            fleet.created_pools.discard(change.pool)  # traffic back later: create it anew
        else:
            assert change.patch is not None
            fleet.index.pools[change.pool] = patched(pool, change.patch)
        log.info("merged ReplicaPool %s/%s: %s", fleet.namespace, change.pool, change.message)
        await _events(fleet, pool, change)


async def _events(fleet: FleetSync, pool: ReplicaPool, change: PoolChange) -> None:
    """The same Event on the pool and on its adapter (`kubectl describe` of either shows it)."""
    uid = (pool.metadata.model_extra or {}).get("uid")
    await fleet.writer.event(
        fleet.namespace,
        KIND_POOL,
        change.pool,
        str(uid) if uid else None,
        change.reason,
        change.message,
    )
    await fleet.writer.event(
        fleet.namespace,
        KIND_ADAPTER,
        change.adapter,
        fleet.index.uids.get((KIND_ADAPTER, change.adapter)),
        change.reason,
        change.message,
    )


def patched(pool: ReplicaPool, patch: dict[str, Any]) -> ReplicaPool:
    """`pool` with a JSON merge patch (RFC 7386) applied, as the API server will store it."""
    body = pool.model_dump(by_alias=True, mode="json", exclude_none=True)
    return ReplicaPool.model_validate(merge_patch(body, patch))
