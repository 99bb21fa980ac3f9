"""LoRAAdapter: keep the index current; on deletion, wait for aliases, merged pools and pre-warm,
then have the replicas forget it.

Status (phase, conditions, owners) is written by the namespace's FleetSync, not here.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from lorafleet_core.api import reasons
from lorafleet_core.api.names import GROUP, KIND_POOL, PLURAL_ADAPTER, VERSION
from lorafleet_core.planning.fleet import merged_pools_serving
from lorafleet_operator.errors import NotReadyError, mapped
from lorafleet_operator.forget import (
    GiveUpClock,
    forget_everywhere,
    forget_incomplete_message,
    replicas_to_tell,
)
from lorafleet_operator.runtime import runtime

log = logging.getLogger(__name__)

DELETE_RETRY_SECONDS = 5.0
# A replica busy with the adapter's requests or unreachable holds the deletion this long at
# most; then the deletion completes without it (that replica refuses a recreated adapter under
# the name, RecordConflict, until it restarts: the behaviour before forget existed).
FORGET_GIVE_UP_SECONDS = 120.0
FORGET_WAITS = GiveUpClock(FORGET_GIVE_UP_SECONDS)


@kopf.index(GROUP, VERSION, PLURAL_ADAPTER)
async def adapter_index(*, body: kopf.Body, namespace: str | None, **_: Any) -> None:
    """Every non-deletion event, during kopf's initial list too (why: the handlers package)."""
    assert namespace is not None  # lorafleet resources and pods are namespaced
    runtime().fleet(namespace, indexing=True).index.upsert_adapter(body)


@kopf.on.event(GROUP, VERSION, PLURAL_ADAPTER)
async def adapter_event(*, type: str, name: str, namespace: str | None, **_: Any) -> None:
    assert namespace is not None
    fleet = runtime().fleet(namespace)
    if type == "DELETED":
        fleet.index.remove_adapter(name)


@kopf.on.delete(GROUP, VERSION, PLURAL_ADAPTER)
@mapped
async def adapter_deleted(*, body: kopf.Body, name: str, namespace: str | None, **_: Any) -> None:
    """Refuse (hold the finalizer) while an alias serves or targets the adapter, or a merged
    ReplicaPool serves it.

    Deleting an adapter an alias points to would break that tenant's model name, so the
    deletion waits, the adapter keeps serving and its status says `DeletionBlocked` with the
    aliases to repoint. A merged pool (spec.merged.adapter) serves its weights merged into the
    base and re-merges from its record when it restarts: the deletion waits for it too
    (`DeletionBlocked`, reason `InUseByMergedPool`, naming the pools); one the operator created
    is drained and deleted (planning.merged_lifecycle), one a person created waits for them.
    Otherwise: drop it from placement, wait until the owners' annotations no longer list it,
    then tell every ready replica of the shared pools of its base model to forget it (its record,
    registration and disk copy), so a LoRAAdapter recreated under the name with other weights is
    a new adapter to them, not a conflicting record. A replica busy with its requests or
    unreachable holds the deletion (retried every DELETE_RETRY_SECONDS) for
    FORGET_GIVE_UP_SECONDS at most; then the deletion completes with a `ForgetIncomplete`
    Warning Event on the adapter and on those replicas' pools, naming them.
    """
    assert namespace is not None
    fleet = runtime().fleet(namespace)
    fleet.index.upsert_adapter(body)
    referencing = fleet.index.aliases_referencing(name)
    if referencing:
        raise NotReadyError(
            f"LoRAAdapter {name} is referenced by AdapterAlias {', '.join(referencing)}; "
            "point them to another adapter first",
            delay=DELETE_RETRY_SECONDS,
        )
    pools = merged_pools_serving(fleet.index.pools.values(), name)
    if pools:
        raise NotReadyError(
            f"LoRAAdapter {name} is served merged by ReplicaPool {', '.join(pools)}; it is "
            "deleted once no pool lists it in spec.merged.adapter",
            delay=DELETE_RETRY_SECONDS,
        )
    await fleet.flush()
    token = runtime().settings.replica_token_reader()()
    key = (namespace, name)
    told = replicas_to_tell(fleet.index, name)
    left = await forget_everywhere(told, name, token)
    if left and not FORGET_WAITS.expired(key):
        raise NotReadyError(
            f"LoRAAdapter {name}: replicas have not forgotten it yet: "
            + ", ".join(f"{r} ({why})" for r, why in sorted(left.items())),
            delay=DELETE_RETRY_SECONDS,
        )
    FORGET_WAITS.done(key)
    if left:
        message = forget_incomplete_message(name, left, FORGET_WAITS.limit_s)
        log.warning("LoRAAdapter %s/%s: %s", namespace, name, message)
        # On the adapter (the object being deleted: `kubectl describe` of it, or an events
        # query by its name, still shows it for the events' lifetime) and on each pool of the
        # replicas concerned, which outlive it.
        kopf.event(body, type="Warning", reason=reasons.FORGET_INCOMPLETE, message=message)
        for pool in sorted({e.pool for e in told if e.replica_id in left}):
            found = fleet.index.pools.get(pool)
            uid = (found.metadata.model_extra or {}).get("uid") if found else None
            await fleet.writer.event(
                namespace, KIND_POOL, pool, uid, reasons.FORGET_INCOMPLETE, message, "Warning"
            )
