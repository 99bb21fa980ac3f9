"""The whole namespace at once: adapters' status and owners, aliases' status, pods' pre-warm.

`plan_fleet` is what the operator's coalescing sync loop (and standalone mode) calls after
any change: it is a pure function of the observed objects, so re-running it on an unchanged
world yields byte-identical output and the caller writes nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lorafleet_core.api import reasons
from lorafleet_core.api.models import (
    AdapterAlias,
    AdapterAliasStatus,
    AdapterPhase,
    Condition,
    ConditionStatus,
    LoRAAdapter,
    LoRAAdapterStatus,
    ReplicaPool,
)
from lorafleet_core.api.names import KIND_ADAPTER, KIND_ALIAS
from lorafleet_core.planning import adapter_stats
from lorafleet_core.planning.adapters import (
    REPLICA_TOKENS_PER_SECOND,
    AdapterInputs,
    Validation,
    plan_adapter_status,
    plan_owner_count,
    validate_adapter,
)
from lorafleet_core.planning.aliases import (
    AdapterView,
    AliasClaim,
    AliasClaims,
    created_at,
    plan_alias,
)
from lorafleet_core.planning.conditions import condition, find, merge_conditions
from lorafleet_core.planning.merge_advice import (
    MERGE_THRESHOLD_SHARE,
    MergeAdvice,
    plan_merge_advice,
)
from lorafleet_core.planning.merged_lifecycle import PoolChange, plan_merged_lifecycle
from lorafleet_core.planning.prewarm import plan_owned_annotations
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_core.wire.replica_state import ReplicaState


@dataclass(frozen=True)
class AdapterEntry:
    """One observed LoRAAdapter: the parsed object, or why its spec does not parse."""

    name: str
    adapter: LoRAAdapter | None
    invalid: Validation | None = None
    status: LoRAAdapterStatus | None = None
    deleting: bool = False
    generation: int | None = None
    uid: str | None = None  # metadata.uid (owner reference of a merged pool created for it)


@dataclass(frozen=True)
class PodView:
    """The parts of a replica pod the planner reads."""

    name: str
    pool: str
    ready: bool
    deleting: bool = False


@dataclass(frozen=True)
class FleetParams:
    # Generated tokens/s one replica serves (the design's 640; planning.adapters explains it).
    replica_capacity_tps: float = REPLICA_TOKENS_PER_SECOND
    hot_share: float = 0.5  # most of a replica's capacity one adapter may take per owner
    # Sustained tokens/s of one adapter, as a share of replica_capacity_tps, above which a
    # merged pool wins (planning.merge_advice; measured with `lorafleet sim --scenario
    # hot-tenant-merged`, docs/design/0015).
    merge_threshold_share: float = MERGE_THRESHOLD_SHARE


@dataclass(frozen=True)
class FleetSnapshot:
    pools: Sequence[ReplicaPool]
    adapters: Sequence[AdapterEntry]
    aliases: Sequence[AdapterAlias]
    pods: Sequence[PodView]
    states: Mapping[str, ReplicaState] = field(default_factory=dict)
    # pod -> the adapter ids its owned-adapters annotation lists now (records.owned_ids): the
    # memory of the kept set's hysteresis (planning.prewarm.kept_rank).
    listed: Mapping[str, Container[str]] = field(default_factory=dict)
    # Pools with traffic figures: some replica of theirs has answered a scrape since this
    # operator started. None: every pool (a missing figure is no traffic). Before then an
    # adapter's traffic is unknown, not zero, and its owner count stays.
    measured_pools: Container[str] | None = None


@dataclass
class FleetPlan:
    pod_annotations: dict[str, str] = field(default_factory=dict)  # pod -> owned-adapters
    adapter_status: dict[str, LoRAAdapterStatus] = field(default_factory=dict)
    alias_status: dict[str, AdapterAliasStatus] = field(default_factory=dict)
    alias_deploys: dict[str, str] = field(default_factory=dict)  # alias -> newly served
    blocked_deletions: dict[str, list[str]] = field(default_factory=dict)  # adapter -> aliases
    # adapter -> merged ReplicaPools that list it (spec.merged.adapter): they block its deletion
    blocked_by_pools: dict[str, list[str]] = field(default_factory=dict)
    dropped: dict[str, list[str]] = field(default_factory=dict)  # pod -> not pre-warmed
    # MergedPoolRecommended newly True (or a new reason): adapter -> (reason, message), the
    # Event to emit on the LoRAAdapter; and merged ReplicaPools to create (autoMerge).
    merge_events: dict[str, tuple[str, str]] = field(default_factory=dict)
    pools_to_create: list[dict[str, Any]] = field(default_factory=list)
    # Merged pools the operator created: scale, drain, delete (planning.merged_lifecycle).
    pool_changes: list[PoolChange] = field(default_factory=list)
    # Warning Events for `kubectl describe` and `kubectl get events`, one per transition into a
    # failure (never per pass, so a restart repeats none): (kind, name, reason, message).
    warnings: list[tuple[str, str, str, str]] = field(default_factory=list)
    # The earliest progress deadline of a waiting deploy: plan again then, even if nothing
    # else changes (an unreachable replica changes nothing), so the deploy is reported stalled.
    wake_at: datetime | None = None


def ready_replicas(pods: Sequence[PodView], pool: str) -> list[str]:
    return sorted(p.name for p in pods if p.pool == pool and p.ready and not p.deleting)


def merged_pools_serving(pools: Iterable[ReplicaPool], adapter: str) -> list[str]:
    """The merged ReplicaPools whose weights are `adapter` merged into the base (they hold its
    deletion: the finalizer stays until none lists it; the kopf delete handler asks too)."""
    return sorted(
        p.metadata.name
        for p in pools
        if p.spec.merged is not None and p.spec.merged.adapter == adapter
    )


def verified_adapters(states: Mapping[str, ReplicaState]) -> set[str]:
    """Adapters some replica holds in a tier: their files passed the agent's checks there
    (checksum, base model, shapes), so the replicas take them. A merged replica lists its
    adapter in gpu_adapters."""
    out: set[str] = set()
    for state in states.values():
        out.update(state.gpu_adapters, state.ram_adapters, state.disk_adapters)
    return out


def plan_fleet(snap: FleetSnapshot, now: datetime, params: FleetParams | None = None) -> FleetPlan:
    params = params or FleetParams()
    plan = FleetPlan()
    pools = {p.metadata.name: p for p in snap.pools}
    replicas_of = {name: ready_replicas(snap.pods, name) for name in pools}

    tps: dict[str, float] = defaultdict(float)
    failed_on: dict[str, dict[str, str]] = defaultdict(dict)
    for rid, state in snap.states.items():
        for aid, value in state.tokens_per_second.items():
            tps[aid] += value
        for aid, why in state.failed_adapters.items():
            failed_on[aid][rid] = why

    referenced: dict[str, list[str]] = defaultdict(list)
    for alias in snap.aliases:
        targets = {alias.spec.adapter, (alias.status.adapter if alias.status else None)}
        # A version of a weighted split serves too (or is about to): its deletion waits as well.
        targets.update(s.adapter for s in alias.spec.split or ())
        targets.update(s.adapter for s in (alias.status.split if alias.status else None) or ())
        for t in targets:
            if t:
                referenced[t].append(alias.metadata.name)

    # 1. validate; collect what each pool must place.
    validations: dict[str, Validation] = {}
    by_pool: dict[str, list[AdapterEntry]] = defaultdict(list)
    deleting: set[str] = set()
    for entry in snap.adapters:
        serving = merged_pools_serving(snap.pools, entry.name) if entry.deleting else []
        blocked = entry.deleting and (bool(referenced.get(entry.name)) or bool(serving))
        if entry.deleting and not blocked:
            continue  # leaving: drop from placement; the finalizer waits for this plan
        if blocked:
            # Still placed and served meanwhile, like any adapter (its deletion may never
            # happen: the alias can stay, the pool a person made can stay).
            deleting.add(entry.name)
            if referenced.get(entry.name):
                plan.blocked_deletions[entry.name] = sorted(referenced[entry.name])
            if serving:
                plan.blocked_by_pools[entry.name] = serving
        if entry.adapter is None:
            assert entry.invalid is not None
            validations[entry.name] = entry.invalid
            continue
        v = validate_adapter(entry.adapter.spec, snap.pools)
        validations[entry.name] = v
        if v.ok and v.pool is not None:
            by_pool[v.pool].append(entry)

    # 2. owners and pre-warm annotations, pool by pool.
    owners: dict[str, list[str]] = {}
    counts: dict[str, int] = {}
    for pool_name, entries in sorted(by_pool.items()):
        pool = pools[pool_name]
        replicas = replicas_of[pool_name]
        k_by: dict[str, int] = {}
        records: list[AdapterRecord] = []
        # Not measured yet (a restarted operator's passes before its first scrape): owner
        # counts stay as they are, and so does the kept set (kept_rank holds what is listed
        # when no figure says otherwise), so the restart rewrites nothing.
        measured_pool = snap.measured_pools is None or pool_name in snap.measured_pools
        for e in entries:
            assert e.adapter is not None
            current = e.status.owner_count if e.status else None
            k_by[e.name] = plan_owner_count(
                tps.get(e.name, 0.0) if measured_pool else None,
                current,
                pool.spec.owners_per_adapter,
                params.replica_capacity_tps,
                len(replicas),
                params.hot_share,
            )
            records.append(AdapterRecord.from_spec(e.name, e.adapter.spec))
        pre = plan_owned_annotations(
            records, replicas, k_by, pool.spec.cache.owned_annotation_max_bytes, tps, snap.listed
        )
        plan.pod_annotations.update(pre.annotations)
        plan.dropped.update(pre.dropped)
        owners.update(pre.owners)
        counts.update(k_by)
    # Ready pods of pools with nothing placed still get an (empty) annotation, so a pod that
    # lost all its adapters drops them.
    for pool_name, replicas in replicas_of.items():
        if pool_name not in by_pool:
            for r in replicas:
                plan.pod_annotations[r] = "[]"

    # 3. adapter status, with traffic figures written at a bounded rate (adapter_stats).
    measured = adapter_stats.aggregate(snap.states)
    recommendations: dict[str, Condition] = {}  # as planned this pass (for merged pools)
    sustained: dict[str, float] = {}
    for entry in snap.adapters:
        if entry.name not in validations:
            continue
        v = validations[entry.name]
        old = entry.status or LoRAAdapterStatus()
        stats = adapter_stats.plan_stats(
            old.stats, measured.get(entry.name, adapter_stats.IDLE) if snap.states else None, now
        )
        advice = None
        if v.ok and v.pool is not None and entry.adapter is not None:
            advice = plan_merge_advice(
                entry.adapter.model_copy(update={"status": entry.status}),
                stats.tokens_per_second if stats else 0.0,
                pools[v.pool],
                snap.pools,
                params.merge_threshold_share * params.replica_capacity_tps,
                params.replica_capacity_tps,
                now,
                entry.uid,
            )
            _note_advice(plan, entry, advice)
        inputs = AdapterInputs(
            validation=v,
            merge_advice=advice.condition if advice else None,
            owners=owners.get(entry.name, []),
            owner_count=counts.get(entry.name),
            ready_replicas=len(replicas_of.get(v.pool or "", [])),
            failed_on=failed_on.get(entry.name, {}),
            blocked_by_aliases=plan.blocked_deletions.get(entry.name, []),
            blocked_by_merged_pools=plan.blocked_by_pools.get(entry.name, []),
            stats=stats,
            placements=adapter_stats.plan_placements(
                entry.name,
                old.placements,
                owners.get(entry.name, []),
                snap.states,
                now,
                refresh=stats is not old.stats or owners.get(entry.name, []) != old.owners,
            ),
        )
        plan.adapter_status[entry.name] = _adapter_status(entry, inputs, now)
        failure = _adapter_failure(entry.status, plan.adapter_status[entry.name])
        if failure is not None:
            plan.warnings.append((KIND_ADAPTER, entry.name, *failure))
        held = find(plan.adapter_status[entry.name].conditions, reasons.MERGED_POOL_RECOMMENDED)
        if held is not None:
            recommendations[entry.name] = held
            sustained[entry.name] = stats.tokens_per_second if stats else 0.0
    plan.pool_changes = plan_merged_lifecycle(
        snap.pools,
        recommendations,
        sustained,
        params.replica_capacity_tps,
        now,
        deleting=frozenset(deleting),
    )

    # 4. aliases, against the adapters' *planned* phases and what the replicas verified.
    verified = verified_adapters(snap.states)
    views = {
        e.name: AdapterView(
            tenant=_tenant(e),
            phase=plan.adapter_status[e.name].phase if e.name in plan.adapter_status else None,
            deleting=e.deleting,
            verified=e.name in verified,
        )
        for e in snap.adapters
        if e.adapter is not None
    }
    claims = AliasClaims(
        [AliasClaim(a.metadata.name, a.spec.model, created_at(a.metadata)) for a in snap.aliases]
    )
    for alias in snap.aliases:
        ap = plan_alias(alias, views, claims, now)
        plan.alias_status[alias.metadata.name] = ap.status
        target = views.get(alias.spec.adapter)
        pending = target is not None and target.phase in (None, AdapterPhase.PENDING)
        for cause in _alias_warnings(alias.status, ap.status, pending, ap.split_refused):
            plan.warnings.append((KIND_ALIAS, alias.metadata.name, *cause))
        if ap.deployed:
            plan.alias_deploys[alias.metadata.name] = ap.deployed
        if ap.deadline is not None and (plan.wake_at is None or ap.deadline < plan.wake_at):
            plan.wake_at = ap.deadline
    return plan


def _turned_false(
    old: Sequence[Condition], new: LoRAAdapterStatus | AdapterAliasStatus, type_: str
) -> tuple[str, str] | None:
    """(reason, message) when condition `type_` is newly False or False for a new reason."""
    now = find(new.conditions, type_)
    if now is None or now.status != ConditionStatus.FALSE:
        return None
    before = find(old, type_)
    if before is not None and (before.status, before.reason) == (now.status, now.reason):
        return None
    return now.reason, now.message


def _alias_warnings(
    old: AdapterAliasStatus | None,
    new: AdapterAliasStatus,
    target_pending: bool,
    split_refused: bool = False,
) -> list[tuple[str, str]]:
    """A refused deploy (not one that waits for a Pending target: that is the normal order of
    `kubectl apply -f DIR`; nor one waiting for the replicas to verify a Ready target, until
    it waits past its progress deadline), what it serves turning unservable, and a version of
    spec.split refused (by the same rule); one Event per cause."""
    conds = old.conditions if old else []
    out = []
    deployed = _turned_false(conds, new, reasons.DEPLOYED)
    waiting = deployed is not None and (
        deployed[0] == reasons.AWAITING_REPLICAS
        or (target_pending and deployed[0] == reasons.ADAPTER_NOT_READY)
    )
    if deployed is not None and not waiting:
        out.append(deployed)
    ready = _turned_false(conds, new, reasons.READY)
    if ready is not None and new.adapter and (deployed is None or deployed[0] != ready[0]):
        out.append(ready)
    split = _turned_false(conds, new, reasons.SPLIT)
    if split is not None and split_refused:
        out.append(split)
    return out


def _adapter_failure(
    old: LoRAAdapterStatus | None, new: LoRAAdapterStatus
) -> tuple[str, str] | None:
    """An adapter newly Rejected (the Validated reason says why) or Failed (Ready's), or held
    back by its pool's missing adapterSources (Pending, but nothing will change until someone
    edits the pool: after an upgrade to the secure default, every adapter of such a pool)."""
    validated = find(new.conditions, reasons.VALIDATED)
    held_back = validated is not None and validated.reason == reasons.NO_ADAPTER_SOURCES
    if new.phase == AdapterPhase.PENDING and held_back:
        return _turned_false(old.conditions if old else [], new, reasons.VALIDATED)
    if new.phase not in (AdapterPhase.REJECTED, AdapterPhase.FAILED):
        return None
    type_ = reasons.VALIDATED if new.phase == AdapterPhase.REJECTED else reasons.READY
    return _turned_false(old.conditions if old else [], new, type_)


def _note_advice(plan: FleetPlan, entry: AdapterEntry, advice: MergeAdvice | None) -> None:
    """An Event when the recommendation turns True or changes reason; the pool to create."""
    if advice is None or not advice.recommended:
        return
    old = find(entry.status.conditions, reasons.MERGED_POOL_RECOMMENDED) if entry.status else None
    new = advice.condition
    if old is None or (old.status, old.reason) != (new.status, new.reason):
        plan.merge_events[entry.name] = (new.reason, new.message)
    # An adapter being deleted (held by an alias) gets no merged pool: one would only hold
    # its deletion longer and be drained at once.
    if advice.create is not None and not entry.deleting:
        plan.pools_to_create.append(advice.create)


def _tenant(entry: AdapterEntry) -> str:
    assert entry.adapter is not None
    return entry.adapter.spec.tenant


def _adapter_status(entry: AdapterEntry, inputs: AdapterInputs, now: datetime) -> LoRAAdapterStatus:
    if entry.adapter is not None:
        adapter = entry.adapter.model_copy(update={"status": entry.status})
        return plan_adapter_status(adapter, inputs, now)
    # Unparseable spec: no model to hang the status on; Rejected with the parse error.
    v = inputs.validation
    old = entry.status or LoRAAdapterStatus()
    gen = entry.generation
    return LoRAAdapterStatus(
        phase=AdapterPhase.REJECTED,
        conditions=merge_conditions(
            old.conditions,
            [
                condition(
                    reasons.PLACED,
                    False,
                    reasons.REJECTED,
                    "adapter was rejected; see Validated",
                    now,
                    gen,
                ),
                condition(reasons.READY, False, v.reason, v.message, now, gen),
                condition(reasons.VALIDATED, False, v.reason, v.message, now, gen),
            ],
        ),
        observed_generation=gen,
    )
