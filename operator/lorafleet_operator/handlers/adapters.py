"""LoRAAdapter: keep the index current; on deletion, wait for aliases, merged pools and pre-warm.

Status (phase, conditions, owners) is written by the namespace's FleetSync, not here.
"""

from __future__ import annotations

from typing import Any

import kopf

from lorafleet_core.api.names import GROUP, PLURAL_ADAPTER, VERSION
from lorafleet_core.planning.fleet import merged_pools_serving
from lorafleet_operator.errors import NotReadyError, mapped
from lorafleet_operator.runtime import runtime

DELETE_RETRY_SECONDS = 5.0


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
    Otherwise: drop it from placement and return only once the owners' annotations no longer
    list it.
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
