"""Which pool serves a request: a merged pool for the adapter when it can, else its rank class.

A gateway serves several ReplicaPools of one base model (catalog_build decides which): shared
pools, one per rank class, where many adapters share the replicas' LoRA slots, and merged
pools, each serving one adapter merged into its base weights (faster per token, one adapter
per copy). The choice for one request, pure and deterministic:

1. A Ready merged pool for this adapter (the catalog lists only pools whose `status.merge`
   is Ready for `spec.merged.adapter`): every healthy replica of it whose own `/state` says it
   serves this adapter's merged weights (`merged.adapter_id`, and the checksum the pool's
   status names) is a candidate, least loaded first, unless it is past the bounded load
   within the pool (tokens in flight over both `max_tokens_in_flight` and `balance` times the
   merged replicas' mean) or full (`Thresholds.merged_full`: more than
   `merged_max_queue_depth` requests not yet streaming, or more than
   `merged_max_tokens_in_flight` tokens in flight). The replica's own word is required: a
   pod labelled into the pool but serving other weights never gets the request.
2. Otherwise (no such replica, or every one full: an undersized pool in a surge before it
   scales, or a replica down), the shared pool the adapter was placed in (its rank class,
   `lorafleet_core.planning.adapters.validate_adapter`, the operator's own choice) routes it
   with `router.plan_route`, exactly as a single pool does: its owners of the adapter, which
   still exists there as a LoRA (owners pre-warm it). Nothing is refused because a merged
   pool is missing, starting, failed or full. `fallback` says why ("overloaded": the request
   spilled out of its merged pool; the gateway counts it in
   `lorafleet_gateway_merged_fallback_total{pool, reason}`).
3. When the shared pool is past its own bounds too (`plan_route` says "saturated"), the
   merged replicas take the request after all, least loaded first: they are the adapter's
   own and faster, and spilling then only moves the queue.

The bounds were chosen in the simulator (`lorafleet sim --scenario merged-overflow`,
docs/design/0019): with only the old rule (spill at a queue
over 32, the shared pool's threshold) the hot tenant's p95 TTFT on a pool at 1.25x its
capacity was 3.4 s, at 1.67x 16 s; with the bounds, 0.85 s and 1.2 s, and a pool at its
size spills 0.4% of its requests. A queue bound alone reacts too late (2.4-3.0 s at 1.25x
for bounds of 2-8: the queue is polled once a second); tokens in flight include this
gateway's own requests since the poll.

When the merged pool serves, the shared pool's candidates follow as the retry order, so a
merged replica failing before the first byte falls back too. A replica serving merged weights
is never a shared candidate (it has no LoRA slots).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from lorafleet_gateway.router import ReplicaView, RoutePlan, Thresholds, plan_route

MERGED = "merged"  # the routing outcome (and metric label) of a request a merged pool serves


@dataclass(frozen=True, slots=True)
class MergedTarget:
    """A Ready merged pool for an adapter and the checksum of the weights it must serve."""

    pool: str
    checksum: str | None = None


@dataclass(frozen=True, slots=True)
class AdapterPools:
    """Where one adapter may be served: its shared pool (rank class) and Ready merged pools.

    `shared` None means no ReplicaPool is known (hand-written standalone manifests): every
    replica that does not serve merged weights is a shared candidate, as before pools.
    """

    shared: str | None = None
    merged: tuple[MergedTarget, ...] = ()


@dataclass(frozen=True, slots=True)
class PoolRoute:
    candidates: tuple[str, ...]  # first = the choice; the rest = retry order
    outcome: str  # "merged", or the shared pool's RoutePlan outcome
    pool: str | None  # the pool of the first candidate
    merged: frozenset[str] = field(default_factory=frozenset)  # candidates on merged weights
    # Why a Ready merged pool did not serve: "unhealthy" (no healthy replica serving the
    # adapter's merged weights) or "overloaded"; None when there is no merged pool or it served.
    fallback: str | None = None
    owners: tuple[str, ...] = ()
    left_pool: str | None = None  # with `fallback`: the merged pool the request did not get


def plan_pool_route(
    adapter_id: str,
    pools: AdapterPools,
    replicas: Mapping[str, ReplicaView],
    pool_of: Mapping[str, str | None],
    k: int,
    thresholds: Thresholds,
    rng: random.Random | None = None,
) -> PoolRoute:
    """The replicas to try for `adapter_id` across pools, best first.

    `replicas` are the healthy replicas' views (any pool), `pool_of` each replica's pool;
    `rng` goes to `plan_route` (its `random` policy).
    """
    merged_pools = {t.pool: t.checksum for t in pools.merged}
    serving: list[tuple[int, int, str]] = []
    shared: dict[str, ReplicaView] = {}
    for rid, view in replicas.items():
        pool = pool_of.get(rid)
        weights = view.merged
        if weights is not None:
            if (
                pool in merged_pools
                and weights.adapter_id == adapter_id
                and merged_pools[pool] in (None, weights.checksum)
            ):
                serving.append((view.tokens_in_flight, view.queue_depth, rid))
        elif pools.shared is None or pool == pools.shared:
            shared[rid] = view
    fallback: RoutePlan = plan_route(adapter_id, shared, k, thresholds, rng)
    cap = thresholds.cap_for([t for t, _, _ in serving])  # bounded load within the pool
    full = thresholds.merged_full
    ok = sorted(s for s in serving if s[0] <= cap and not full(replicas[s[2]]))
    if not ok and serving and fallback.outcome in ("saturated", "none"):
        # The shared pool is past its own bounds too: the adapter's own, faster replicas.
        ok = sorted(serving)
    if ok:
        first = tuple(rid for *_, rid in ok)
        return PoolRoute(
            (*first, *fallback.candidates),
            MERGED,
            pool_of.get(first[0]),
            frozenset(first),
            None,
            fallback.owners,
        )
    why = left = None
    if merged_pools:
        why = "overloaded" if serving else "unhealthy"
        left = pool_of.get(serving[0][2]) if serving else pools.merged[0].pool
    pool = pool_of.get(fallback.candidates[0]) if fallback.candidates else pools.shared
    return PoolRoute(
        fallback.candidates, fallback.outcome, pool, frozenset(), why, fallback.owners, left
    )
