"""When an adapter should have a merged pool, and the merged ReplicaPool to create (pure).

An adapter whose own sustained traffic fills a replica is cheaper on replicas that serve it
merged into the base weights (no LoRA delta per token: 40 ms instead of 50 ms per decode step
in the design's numbers, one adapter per copy, no loads) than on more owners in the shared
pool, which pay the LoRA overhead on every token. `lorafleet sim --scenario
hot-tenant-merged` finds where the merged pool wins (docs/design/0015); the threshold here
is that point, as a share of one replica's capacity (`FleetParams.merge_threshold_share`).

"Sustained" is the status figure `stats.tokensPerSecond` (planning.adapter_stats: a minute's
traffic summed over replicas, rewritten only when it moves by 25%), not one scrape. The
condition `MergedPoolRecommended` turns True above the threshold and False only below 80% of
it, so it does not flap; an adapter that never crossed it carries no such condition at all
(5,000 quiet adapters cost no writes).

With the shared pool's `spec.autoMerge.enabled` the plan also names the merged ReplicaPool to
create: the shared pool's spec with `merged.adapter` set, owned by the LoRAAdapter (garbage
collected with it), labelled with the shared pool and the adapter; at most
`autoMerge.maxPools` per shared pool. What happens to it next (scaled with the traffic,
drained and deleted once the traffic stays low) is planning.merged_lifecycle's.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lorafleet_core.api import reasons
from lorafleet_core.api.models import (
    MAX_POOL_NAME,
    POOL_NAME,
    Condition,
    ConditionStatus,
    LoRAAdapter,
    MergedSpec,
    ReplicaPool,
)
from lorafleet_core.api.names import (
    API_VERSION,
    KIND_ADAPTER,
    KIND_POOL,
    LABEL_MANAGED_BY,
    LABEL_MERGED_ADAPTER,
    LABEL_MERGED_FROM,
    MANAGED_BY_OPERATOR,
    label_value,
)
from lorafleet_core.planning.conditions import condition, find
from lorafleet_core.planning.pool import controller_refs

# Where the merged pool wins, as a share of one replica's capacity. Measured with `lorafleet sim
# --scenario hot-tenant-merged --hot-rates R --duration 900 --warmup 300 --low 20 --high H
# --seeds 3 --jobs 2` (docs/design/0015 has R/H
# per rate and the table; the merged fleet is the fewest shared + merged over every merged
# count): the merged pool needed 1 GPU more than more owners at 0.25 x (160 tokens/s) and fewer
# from 0.5 x up to 3.1 x (2 fewer at 0.5 x, 1 at 1 x and 2 x, 2 at 3.1 x). Those margins are
# within the search's +-1 replica and the 0.5 x win rests on one rendezvous collision, so the
# default is 1.0: a tenant whose own traffic fills a replica (the design's rule), inside the
# range where merging never cost a GPU.
MERGE_THRESHOLD_SHARE = 1.0
# A merged pool is sized so its replicas run at 2/3 of capacity: the sizes that met the SLO
# in the same runs were ceil(1.5 x tokens/s / capacity) (1 at 160 and 320 tokens/s, 2 at 640,
# 3 at 1,280, 5 at 2,000), and one replica fewer left the hot tenant waiting 3-15 s (a merged
# pool's overflow reaches the shared pool only when every merged replica's batch is full).
MERGED_TARGET_UTILISATION = 2 / 3


def merged_replicas_needed(tps: float, capacity_tps: float, utilisation: float = 1.0) -> int:
    """Merged replicas that serve `tps` at MERGED_TARGET_UTILISATION x `utilisation` of
    `capacity_tps` each (at least one)."""
    per_replica = max(capacity_tps, 1e-9) * MERGED_TARGET_UTILISATION * utilisation
    return max(1, math.ceil(tps / per_replica - 1e-9))


HYSTERESIS = 0.8  # the recommendation is withdrawn only below this share of the threshold


@dataclass(frozen=True)
class MergeAdvice:
    """The MergedPoolRecommended condition of one adapter, and a pool to create, if any."""

    condition: Condition
    create: dict[str, Any] | None = None  # a ReplicaPool body

    @property
    def recommended(self) -> bool:
        return self.condition.status == ConditionStatus.TRUE


def merged_pool_name(adapter: str) -> str:
    """`<adapter>-merged`, shortened with a stable hash of the adapter's name when too long;
    also sanitised (and hashed) when the adapter's name holds dots or starts with a digit,
    which a LoRAAdapter's name may and a pool's may not (models.POOL_NAME)."""

    def valid(name: str) -> bool:
        return len(name) <= MAX_POOL_NAME and re.fullmatch(POOL_NAME.strip("^$"), name) is not None

    if valid(name := f"{adapter}-merged"):
        return name
    digest = hashlib.blake2b(adapter.encode(), digest_size=4).hexdigest()
    keep = MAX_POOL_NAME - len(f"-{digest}-merged")
    if valid(name := f"{adapter[:keep].rstrip('-.')}-{digest}-merged"):
        return name
    stem = re.sub(r"[^a-z0-9-]+", "-", adapter)
    stem = (stem if stem[:1].isalpha() else f"m-{stem}")[:keep].strip("-")
    return f"{stem}-{digest}-merged"


def plan_merge_advice(
    adapter: LoRAAdapter,
    tps: float,
    shared: ReplicaPool,
    pools: Sequence[ReplicaPool],
    threshold_tps: float,
    replica_capacity_tps: float,
    now: datetime,
    uid: str | None = None,
) -> MergeAdvice | None:
    """The advice for `adapter` (placed in `shared`, sustaining `tps` generated tokens/s, the
    status figure), or None: no condition to hold.

    `threshold_tps` is the sustained tokens/s above which a merged pool wins;
    `replica_capacity_tps` sizes the pool to create; `uid` is the adapter's (owner reference).
    """
    name = adapter.metadata.name
    gen = adapter.metadata.generation
    old_status = adapter.status
    old = find(old_status.conditions, reasons.MERGED_POOL_RECOMMENDED) if old_status else None
    was = old is not None and old.status == ConditionStatus.TRUE
    above = tps > (threshold_tps * HYSTERESIS if was else threshold_tps)
    if not above:
        if old is None:
            return None
        msg = (
            f"sustained {tps:g} tokens/s is within the shared pool's capacity (merged pool "
            f"recommended above {threshold_tps:g})"
        )
        auto = sorted(
            p.metadata.name
            for p in pools
            if p.spec.merged is not None
            and p.spec.merged.adapter == name
            and p.metadata.labels.get(LABEL_MERGED_FROM)
        )
        if auto:
            cfg = shared.spec.auto_merge
            msg += (
                f"; the autoMerge pool {', '.join(auto)} drains after coolDownSeconds "
                f"{cfg.cool_down_seconds} below it and is deleted drainSeconds "
                f"{cfg.drain_seconds} later"
            )
        return MergeAdvice(
            condition(
                reasons.MERGED_POOL_RECOMMENDED, False, reasons.WITHIN_CAPACITY, msg, now, gen
            )
        )

    traffic = (
        f"sustained {tps:g} tokens/s exceeds {threshold_tps:g} (the point where a merged "
        f"pool beats more owners in ReplicaPool {shared.metadata.name})"
    )
    existing = [p for p in pools if p.spec.merged is not None and p.spec.merged.adapter == name]
    if existing:
        names = ", ".join(sorted(p.metadata.name for p in existing))
        reason, msg, create = reasons.MERGED_POOL_EXISTS, f"{traffic}; served by {names}", None
    elif not shared.spec.auto_merge.enabled:
        reason = reasons.SUSTAINED_TRAFFIC
        msg = (
            f"{traffic}; create a ReplicaPool with spec.merged.adapter: {name}, or set "
            f"spec.autoMerge.enabled on ReplicaPool {shared.metadata.name}"
        )
        create = None
    elif _created_by(shared, pools) >= shared.spec.auto_merge.max_pools:
        reason = reasons.AUTO_MERGE_LIMIT
        msg = (
            f"{traffic}; ReplicaPool {shared.metadata.name} already has "
            f"autoMerge.maxPools={shared.spec.auto_merge.max_pools} merged pools"
        )
        create = None
    else:
        create = merged_pool_body(adapter, shared, tps, replica_capacity_tps, uid)
        reason = reasons.MERGED_POOL_CREATED
        msg = f"{traffic}; creating ReplicaPool {create['metadata']['name']} (autoMerge)"
    cond = condition(reasons.MERGED_POOL_RECOMMENDED, True, reason, msg, now, gen)
    return MergeAdvice(cond, create)


def _created_by(shared: ReplicaPool, pools: Sequence[ReplicaPool]) -> int:
    return sum(1 for p in pools if p.metadata.labels.get(LABEL_MERGED_FROM) == shared.metadata.name)


def merged_pool_body(
    adapter: LoRAAdapter,
    shared: ReplicaPool,
    tps: float,
    replica_capacity_tps: float,
    uid: str | None,
) -> dict[str, Any]:
    """The merged ReplicaPool for `adapter`: the shared pool's spec, one adapter merged.

    Sized for the traffic measured (`merged_replicas_needed`), at most the shared pool's max.
    """
    spec = shared.spec.model_copy(deep=True)
    spec.merged = MergedSpec(adapter=adapter.metadata.name)
    spec.auto_merge = spec.auto_merge.model_copy(update={"enabled": False})
    need = merged_replicas_needed(tps, replica_capacity_tps)
    bounds = spec.replicas
    spec.replicas = bounds.model_copy(
        update={"min": min(need, bounds.max), "desired": None, "max": max(bounds.max, 1)}
    )
    body_spec = spec.model_dump(by_alias=True, exclude_none=True, mode="json")
    meta: dict[str, Any] = {
        "name": merged_pool_name(adapter.metadata.name),
        "labels": {
            LABEL_MERGED_FROM: shared.metadata.name,
            LABEL_MERGED_ADAPTER: label_value(adapter.metadata.name),
            LABEL_MANAGED_BY: MANAGED_BY_OPERATOR,
        },
    }
    if refs := controller_refs(API_VERSION, KIND_ADAPTER, adapter.metadata.name, uid):
        meta["ownerReferences"] = refs
    return {"apiVersion": API_VERSION, "kind": KIND_POOL, "metadata": meta, "spec": body_spec}
