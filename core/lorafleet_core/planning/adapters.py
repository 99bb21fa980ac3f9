"""LoRAAdapter planning: validation against pools, owner count from traffic, the status.

Validation outcomes (condition `Validated`, reason):

- `Valid`: a ReplicaPool with the adapter's base-model hash accepts its rank and modules.
- `NoMatchingPool` (phase Pending, retried): no ReplicaPool exists in the namespace yet, so
  nothing can be said; re-validated whenever a pool appears.
- `NoAdapterSources` (phase Pending, retried): the pool lists no `adapterSources`, so it takes
  no adapter (secure default); clears once the pool lists the prefix the adapter lies under.
- `BaseModelMismatch`, `RankTooHigh`, `TargetModulesNotAllowed`, `UnsupportedUriScheme`,
  `InvalidChecksum`, `InvalidSpec` (phase Rejected): no pool of the fleet as it stands can
  serve the spec; the message says what to change in a new version. The verdict is
  re-evaluated on every pass, so the pool-dependent ones (base model, rank, modules) clear
  when a matching pool appears.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from lorafleet_core.api.models import (
    MAX_OWNERS,
    AdapterPhase,
    AdapterStats,
    Condition,
    LoRAAdapter,
    LoRAAdapterSpec,
    LoRAAdapterStatus,
    Placement,
    ReplicaPool,
)
from lorafleet_core.api.reasons import (
    BASE_MODEL_MISMATCH,
    DELETION_BLOCKED,
    IN_USE_BY_MERGED_POOL,
    INVALID_CHECKSUM,
    INVALID_SPEC,
    NO_MATCHING_POOL,
    NO_READY_REPLICAS,
    NOT_VALIDATED,
    OWNERS_ASSIGNED,
    PLACED,
    RANK_TOO_HIGH,
    READY,
    REFERENCED_BY_ALIAS,
    REJECTED,
    REPLICA_REJECTED,
    SERVABLE,
    TARGET_MODULES_NOT_ALLOWED,
    UNSUPPORTED_URI_SCHEME,
    VALID,
    VALIDATED,
)
from lorafleet_core.planning.adapter_sources import source_problem
from lorafleet_core.planning.conditions import condition, merge_conditions
from lorafleet_core.planning.validation import Validation as Validation  # re-exported

_FIELD_REASONS = {"weightsUri": UNSUPPORTED_URI_SCHEME, "checksum": INVALID_CHECKSUM}


def parse_adapter(raw: Mapping[str, Any]) -> LoRAAdapter | Validation:
    """The adapter model, or a final Validation naming the first bad field.

    The API server normally enforces the CRD schema first; this catches what slips past it
    (no schema in emulators, or manifests in standalone mode).
    """
    try:
        return LoRAAdapter.model_validate({k: v for k, v in raw.items() if k != "status"})
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = [str(p) for p in first["loc"]]
        reason = next((_FIELD_REASONS[p] for p in loc if p in _FIELD_REASONS), INVALID_SPEC)
        where = ".".join(loc)
        return Validation(False, reason, f"{where}: {first['msg']}", final=True)


def parse_pools(raws: Iterable[Mapping[str, Any]]) -> list[ReplicaPool]:
    """The valid ReplicaPools among raw objects (status ignored): an invalid pool serves
    nothing, and the reconciler (standalone) or the pool's own status reports it."""
    out = []
    for raw in raws:
        try:
            out.append(ReplicaPool.model_validate({**raw, "status": None}))
        except ValidationError:
            continue
    return out


def shared_pools(pools: Sequence[ReplicaPool]) -> list[ReplicaPool]:
    """The pools that serve many adapters (multi-LoRA): every pool not in merged mode."""
    return [p for p in pools if p.spec.merged is None]


def rank_class_order(pools: Sequence[ReplicaPool]) -> list[ReplicaPool]:
    """Pools smallest rank class first (then by name, so the order never depends on the
    order objects were observed)."""
    return sorted(pools, key=lambda p: (p.spec.engine.max_rank, p.metadata.name))


def validate_adapter(spec: LoRAAdapterSpec, pools: Sequence[ReplicaPool]) -> Validation:
    """Check the adapter against the shared pools whose base-model hash matches.

    Several shared pools of one base model are rank classes: the adapter goes to the
    smallest `maxRank` that accepts it (a rank-8 adapter to the rank-16 pool, not the
    rank-64 one, whose slots cost four times the memory). Merged pools serve one adapter
    each and never take placements; their adapter is placed here like any other, which is
    where its traffic falls back to.
    """
    pools = shared_pools(pools)
    if not pools:
        return Validation(
            False, NO_MATCHING_POOL, "no shared ReplicaPool in this namespace yet; waiting for one"
        )
    ordered = rank_class_order(pools)
    matching = [p for p in ordered if p.spec.base_model.hash == spec.base_model_hash]
    if not matching:
        served = ", ".join(sorted({p.spec.base_model.hash for p in ordered}))
        return Validation(
            False,
            BASE_MODEL_MISMATCH,
            f"baseModelHash {spec.base_model_hash} matches no ReplicaPool (pools serve: "
            f"{served}); retrain on a served base model and publish a new LoRAAdapter",
            final=True,
        )
    first_problem: Validation | None = None
    for pool in matching:
        problem = _check_pool(spec, pool)
        if problem is None:
            return Validation(
                True,
                VALID,
                f"accepted by ReplicaPool {pool.metadata.name}: rank {spec.rank} <= "
                f"{pool.spec.engine.max_rank}, modules allowed",
                pool=pool.metadata.name,
            )
        # The largest rank class's refusal says the most (e.g. the highest maxRank there is).
        if first_problem is None or problem.reason == RANK_TOO_HIGH:
            first_problem = problem
    assert first_problem is not None
    return first_problem


def _check_pool(spec: LoRAAdapterSpec, pool: ReplicaPool) -> Validation | None:
    problems = pool_problems(spec, pool)
    return problems[0] if problems else None


def pool_problems(spec: LoRAAdapterSpec, pool: ReplicaPool) -> list[Validation]:
    """Every reason `pool` refuses the adapter (base model, rank, modules, URI scheme).

    The status reports the first; the control API answers a registration with all of them.
    """
    name = pool.metadata.name
    engine = pool.spec.engine
    out = []
    if spec.base_model_hash != pool.spec.base_model.hash:
        out.append(
            Validation(
                False,
                BASE_MODEL_MISMATCH,
                f"baseModelHash {spec.base_model_hash} is not ReplicaPool {name}'s "
                f"{pool.spec.base_model.hash}",
                final=True,
            )
        )
    if spec.rank > engine.max_rank:
        out.append(
            Validation(
                False,
                RANK_TOO_HIGH,
                f"rank {spec.rank} exceeds ReplicaPool {name} maxRank {engine.max_rank}; "
                f"publish a version with rank <= {engine.max_rank}",
                final=True,
            )
        )
    allowed = set(engine.allowed_target_modules)
    bad = sorted(set(spec.target_modules) - allowed)
    if bad:
        out.append(
            Validation(
                False,
                TARGET_MODULES_NOT_ALLOWED,
                f"targetModules {bad} are not allowed by ReplicaPool {name} (allowed: "
                f"{sorted(allowed)})",
                final=True,
            )
        )
    if not spec.weights_uri.startswith(("s3://", "file://")):
        out.append(
            Validation(
                False, UNSUPPORTED_URI_SCHEME, "weightsUri must be s3:// or file://", final=True
            )
        )
    location = source_problem(spec, pool)
    if location is not None:
        out.append(location)
    return out


# Generated tokens/s one replica serves with a full batch, from the design: 32 concurrent
# sequences (vLLM --max-num-seqs) at 50 ms per output token with unmerged LoRA deltas on a 7B
# = 640. The agent reports an adapter's *generated* tokens/s, so owner counts divide by this
# figure, not by prefill throughput. The operator setting `replica_tokens_per_second` (chart
# `operator.replicaTokensPerSecond`) replaces it with a measurement of the pool's GPU; the
# simulator's default is the same constant.
DESIGN_MAX_SEQS = 32
DESIGN_DECODE_S = 0.050
REPLICA_TOKENS_PER_SECOND = DESIGN_MAX_SEQS / DESIGN_DECODE_S


def plan_owner_count(
    tokens_per_second: float | None,
    current: int | None,
    owners_per_adapter: int,
    replica_capacity_tps: float,
    replicas: int,
    hot_share: float = 0.5,
) -> int:
    """How many replicas should own an adapter, from its traffic.

    One owner should carry at most `hot_share` of a replica's token capacity for a single
    adapter (the rest of the replica serves the long tail). The count grows at once when
    traffic needs it and shrinks only when traffic falls 20% below the smaller count's limit,
    so owners do not flap around a threshold. Never below ownersPerAdapter; above it, never
    more than the replica count. None (no figure yet: a restarted operator before its first
    scrape) keeps the current count: shrinking would move owners only to grow them back.
    """
    if tokens_per_second is None:
        held = current if current is not None else owners_per_adapter
        return max(owners_per_adapter, min(held, MAX_OWNERS, replicas)) if replicas > 0 else held
    per_owner = max(replica_capacity_tps * hot_share, 1e-9)
    # Replicas report the rates; a NaN, an infinity or a sum of two huge ones must not fail
    # the whole namespace's plan (math.ceil raises on them), and owners stay within the
    # status' bound.
    if not tokens_per_second >= 0:  # NaN too
        tokens_per_second = 0.0
    tokens_per_second = min(tokens_per_second, per_owner * MAX_OWNERS)
    need = max(owners_per_adapter, math.ceil(tokens_per_second / per_owner))
    # Shrink only if the smaller count would still be comfortable (20% headroom).
    if current is not None and need < current:
        comfortable = tokens_per_second <= (current - 1) * per_owner * 0.8
        need = need if comfortable else current
    # More owners than replicas means nothing; fewer than ownersPerAdapter is never planned.
    need = min(need, MAX_OWNERS)
    return max(owners_per_adapter, min(need, replicas)) if replicas > 0 else need


@dataclass(frozen=True)
class AdapterInputs:
    """What the status of one adapter is computed from (besides the adapter itself)."""

    validation: Validation
    owners: list[str] = field(default_factory=list)
    owner_count: int | None = None
    ready_replicas: int = 0
    failed_on: Mapping[str, str] = field(default_factory=dict)  # replica -> reason
    blocked_by_aliases: list[str] = field(default_factory=list)
    blocked_by_merged_pools: list[str] = field(default_factory=list)  # deleting, still served
    stats: AdapterStats | None = None  # planned by planning.adapter_stats (rate-bounded)
    placements: list[Placement] = field(default_factory=list)  # idem
    merge_advice: Condition | None = None  # MergedPoolRecommended (planning.merge_advice)


def plan_adapter_status(
    adapter: LoRAAdapter, inputs: AdapterInputs, now: datetime
) -> LoRAAdapterStatus:
    """The adapter's status: phase, Validated/Placed/Ready conditions, owners.

    Every pass recomputes the verdict, Rejected included. The spec is immutable, but the
    pools it is judged against are not: adapters applied before their pool (`kubectl apply
    -f DIR` takes loraadapter-* before replicapool-*), a pool deleted and recreated, a new
    rank class. A Rejected that stuck would refuse those adapters for good; an unchanged
    world still yields the same status (lastTransitionTime kept), so nothing flaps.
    """
    old = adapter.status or LoRAAdapterStatus()
    gen = adapter.metadata.generation
    v = inputs.validation
    conds = [condition(VALIDATED, v.ok, v.reason, v.message, now, gen)]
    owners: list[str] = []
    owner_count: int | None = None
    # Ready carries the validation's own reason (RankTooHigh, NoAdapterSources, ...): it is
    # the Reason column of `kubectl get lora -o wide`, where Rejected or NotValidated said no
    # more than the Phase column beside it.
    if v.final:
        phase = AdapterPhase.REJECTED
        conds += [
            condition(PLACED, False, REJECTED, "adapter was rejected; see Validated", now, gen),
            condition(READY, False, v.reason, v.message, now, gen),
        ]
    elif not v.ok:
        phase = AdapterPhase.PENDING
        conds += [
            condition(PLACED, False, NOT_VALIDATED, v.message, now, gen),
            condition(READY, False, v.reason, v.message, now, gen),
        ]
    elif not inputs.owners:
        phase = AdapterPhase.PENDING
        msg = f"ReplicaPool {v.pool} has no ready replicas yet"
        conds += [
            condition(PLACED, False, NO_READY_REPLICAS, msg, now, gen),
            condition(READY, False, NO_READY_REPLICAS, msg, now, gen),
        ]
    else:
        owners = list(inputs.owners)
        owner_count = inputs.owner_count
        placed_msg = (
            f"owned by {len(owners)} of {inputs.ready_replicas} ready replicas of "
            f"ReplicaPool {v.pool}: {', '.join(owners)}"
        )
        conds.append(condition(PLACED, True, OWNERS_ASSIGNED, placed_msg, now, gen))
        failed = {r: why for r, why in inputs.failed_on.items() if r in owners}
        if failed and len(failed) == len(owners):
            phase = AdapterPhase.FAILED
            detail = "; ".join(f"{r}: {why}" for r, why in sorted(failed.items()))
            conds.append(condition(READY, False, REPLICA_REJECTED, detail, now, gen))
        else:
            phase = AdapterPhase.READY
            conds.append(
                condition(
                    READY, True, SERVABLE, "owners pre-warm it; any replica can load it", now, gen
                )
            )
    if inputs.merge_advice is not None:
        conds.append(inputs.merge_advice)
    blocked = _deletion_blocked(inputs.blocked_by_aliases, inputs.blocked_by_merged_pools)
    if blocked is not None:
        conds.append(condition(DELETION_BLOCKED, True, *blocked, now, gen))
    return LoRAAdapterStatus(
        phase=phase,
        conditions=merge_conditions(old.conditions, conds),
        owners=owners,
        owner_count=owner_count,
        observed_generation=gen,
        stats=inputs.stats,
        placements=list(inputs.placements) if owners else [],
    )


def _deletion_blocked(aliases: list[str], pools: list[str]) -> tuple[str, str] | None:
    """(reason, message) of DeletionBlocked: aliases first (a tenant's model name would break),
    then merged pools (their replicas serve these weights merged into the base)."""
    pool_text = (
        f"ReplicaPool {', '.join(sorted(pools))} serves it merged into its base weights; "
        "deletion waits until no ReplicaPool lists it in spec.merged.adapter (a pool the "
        "operator created for it is drained and deleted; delete one you created)"
        if pools
        else ""
    )
    if aliases:
        names = ", ".join(sorted(aliases))
        message = f"deletion waits until no AdapterAlias points here; repoint: {names}"
        return REFERENCED_BY_ALIAS, message + (f"; also {pool_text}" if pools else "")
    if pools:
        return IN_USE_BY_MERGED_POOL, pool_text
    return None
