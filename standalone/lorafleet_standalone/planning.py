"""What the folder declares -> what standalone mode does (pure: no I/O, explicit `now`).

This is a thin adapter around the operator's own `plan_fleet`: the manifests become the
snapshot the operator would observe on a cluster (one ReplicaPool, its local replicas as ready
pods, the adapters and aliases, the replicas' reported state), so standalone mode validates,
places, pre-warms and deploys exactly as the operator does. What it adds is turning every
refusal into a `Problem` that names the file, the object and what to change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from lorafleet_core.api import names, reasons
from lorafleet_core.api.models import (
    AdapterAlias,
    AdapterAliasStatus,
    AdapterPhase,
    ConditionStatus,
    LoRAAdapterStatus,
    ReplicaPool,
    ReplicaPoolSpec,
    first_error,
)
from lorafleet_core.planning.adapters import Validation, parse_adapter
from lorafleet_core.planning.fleet import (
    AdapterEntry,
    FleetParams,
    FleetSnapshot,
    PodView,
    plan_fleet,
)
from lorafleet_core.planning.merged_lifecycle import PoolChange
from lorafleet_core.storage.manifests import ManifestSet
from lorafleet_core.wire.records import AdapterRecord, owned_ids
from lorafleet_core.wire.replica_state import ReplicaState


@dataclass(frozen=True, order=True)
class Problem:
    """A manifest lorafleet will not act on, and why."""

    file: str
    kind: str
    name: str
    message: str

    def __str__(self) -> str:
        what = f"{self.kind}/{self.name}" if self.name else self.kind or "manifest"
        where = f"{self.file}: " if self.file else ""
        return f"{where}{what}: {self.message}"


@dataclass
class Plan:
    pool_name: str | None = None
    pool: ReplicaPoolSpec | None = None
    records: dict[str, AdapterRecord] = field(default_factory=dict)  # servable adapters
    adapter_statuses: dict[str, LoRAAdapterStatus] = field(default_factory=dict)
    owners: dict[str, list[str]] = field(default_factory=dict)  # adapter id -> replica ids
    annotations: dict[str, str] = field(default_factory=dict)  # replica -> owned-adapters value
    alias_statuses: dict[str, AdapterAliasStatus] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)  # public model -> adapter served
    # public model -> its weighted split in force (`v1=95,v2=5`), for the aliases that have one
    traffic: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    # autoMerge, as the operator decides it (standalone.auto_merge applies it): merged pools to
    # create, and changes to those `up` created (drain, delete; scale is written only).
    pools_to_create: list[dict[str, Any]] = field(default_factory=list)
    pool_changes: list[PoolChange] = field(default_factory=list)
    merge_events: dict[str, tuple[str, str]] = field(default_factory=dict)
    # LoRAAdapter name -> the spec this plan used (what the next plan holds it to).
    adapter_specs: dict[str, Any] = field(default_factory=dict)


def standalone_uid(adapter: str) -> str:
    """The uid standing in for a LoRAAdapter's in standalone mode: a merged pool `up`
    creates names its adapter as controller, as on a cluster, so the same rules
    (planning.merged_lifecycle.auto_created) tell it from a pool a person wrote. (Applied to a
    cluster, such a manifest's owner is not found and it is garbage collected: the operator
    there makes its own.)"""
    return f"standalone-{adapter}"


def merged_pools_of(manifests: ManifestSet) -> list[ReplicaPool]:
    """The folder's valid merged ReplicaPools (the planner sees them as a cluster's)."""
    out = []
    for obj in manifests.of_kind(names.KIND_POOL):
        if not (obj.body.get("spec") or {}).get("merged"):
            continue
        try:
            out.append(ReplicaPool.model_validate({**obj.body, "status": None}))
        except ValidationError:
            continue  # reported by standalone.merged like any merged pool it cannot run
    return out


def _choose_pool(manifests: ManifestSet, pool_name: str | None, out: Plan) -> ReplicaPool | None:
    # Merged pools (spec.merged) run beside the shared pool as their own replicas
    # (standalone.merged); the shared pool is the one adapters are placed on.
    chosen = [
        p
        for p in manifests.of_kind(names.KIND_POOL)
        if pool_name in (None, p.name) and not (p.body.get("spec") or {}).get("merged")
    ]
    if not chosen:
        want = f"ReplicaPool {pool_name!r}" if pool_name else "ReplicaPool"
        out.problems.append(Problem("", names.KIND_POOL, pool_name or "", f"no {want} found"))
        return None
    for extra in chosen[1:]:
        message = f"standalone mode serves one pool; using {chosen[0].name}"
        out.problems.append(Problem(extra.path.name, names.KIND_POOL, extra.name, message))
    try:
        pool = ReplicaPool.model_validate({**chosen[0].body, "status": None})
    except ValidationError as exc:
        out.problems.append(
            Problem(chosen[0].path.name, names.KIND_POOL, chosen[0].name, first_error(exc))
        )
        return None
    out.pool_name, out.pool = pool.metadata.name, pool.spec
    return pool


def _carried(old: LoRAAdapterStatus | None) -> LoRAAdapterStatus | None:
    """What a pass keeps from the last one: the traffic figures and the merged-pool
    recommendation (with when it last changed). Not the phase or validation: a manifest file
    may be fixed in place, unlike a cluster's immutable LoRAAdapter spec."""
    if old is None:
        return None
    kept = [c for c in old.conditions if c.type == reasons.MERGED_POOL_RECOMMENDED]
    if old.stats is None and not kept:
        return None
    return LoRAAdapterStatus(stats=old.stats, conditions=kept)


def _condition(status: Any, type_: str) -> Any:
    return next((c for c in status.conditions if c.type == type_), None)


def _adapter_problem(status: LoRAAdapterStatus) -> str | None:
    if status.phase == AdapterPhase.READY:
        return None
    validated = _condition(status, reasons.VALIDATED)
    if validated is not None and validated.status == ConditionStatus.FALSE:
        verb = "rejected" if status.phase == AdapterPhase.REJECTED else "not served yet"
        return f"{verb} ({validated.reason}): {validated.message}"
    ready = _condition(status, reasons.READY)
    detail = f"{ready.reason}: {ready.message}" if ready is not None else "not ready"
    return f"{status.phase or 'Pending'} ({detail})"


def plan(
    manifests: ManifestSet,
    replica_ids: Sequence[str],
    now: datetime,
    *,
    pool_name: str | None = None,
    alias_statuses: Mapping[str, AdapterAliasStatus] | None = None,
    states: Mapping[str, ReplicaState] | None = None,
    adapter_statuses: Mapping[str, LoRAAdapterStatus] | None = None,
    params: FleetParams | None = None,
    held_specs: Mapping[str, Any] | None = None,
    listed: Mapping[str, str] | None = None,
) -> Plan:
    """Validate, place, pre-warm and deploy what the folder declares (operator planners).

    `adapter_statuses` are the last plan's (the reconciler keeps them, as a cluster keeps
    status): traffic figures and the merged-pool recommendation carry over between passes.

    `held_specs` (the last plan's `adapter_specs`) makes a LoRAAdapter immutable as on a
    cluster, where the API server refuses a spec edit (CEL `self == oldSelf`): a file edited
    in place (a new checksum under the same name and version) is reported and the spec first
    seen keeps being served, so no replica is handed a second, different record for an id it
    holds. Removing the file and adding it again is a new object, as on a cluster.

    `listed` (the last plan's `annotations`): what each replica's list holds now, the memory
    of the kept set's hysteresis (planning.prewarm) when a replica owns more than it holds.
    """
    kept_specs = held_specs or {}
    out = Plan()
    for err in manifests.errors:
        out.problems.append(Problem(err.path.name, "", "", err.message))
    pool = _choose_pool(manifests, pool_name, out)

    entries: list[AdapterEntry] = []
    adapter_files: dict[str, str] = {}
    for obj in manifests.of_kind(names.KIND_ADAPTER):
        if obj.name in adapter_files:
            message = f"defined twice (first in {adapter_files[obj.name]}); the first one is used"
            out.problems.append(Problem(obj.path.name, names.KIND_ADAPTER, obj.name, message))
            continue
        adapter_files[obj.name] = obj.path.name
        body = obj.body
        if obj.name in kept_specs and body.get("spec") != kept_specs[obj.name]:
            message = (
                "spec changed in place; a LoRAAdapter is immutable (a cluster refuses this "
                "edit), so the spec first seen keeps being served: publish the change as a new "
                "LoRAAdapter (a new name and version) and point the alias at it"
            )
            out.problems.append(Problem(obj.path.name, names.KIND_ADAPTER, obj.name, message))
            body = {**body, "spec": kept_specs[obj.name]}
        out.adapter_specs[obj.name] = body.get("spec")
        parsed = parse_adapter(body)
        held = _carried((adapter_statuses or {}).get(obj.name))
        if isinstance(parsed, Validation):
            entries.append(AdapterEntry(name=obj.name, adapter=None, invalid=parsed, status=held))
        else:
            uid = standalone_uid(obj.name)
            entries.append(AdapterEntry(name=obj.name, adapter=parsed, status=held, uid=uid))

    stored = alias_statuses or {}
    aliases: list[AdapterAlias] = []
    alias_files: dict[str, str] = {}
    for obj in manifests.of_kind(names.KIND_ALIAS):
        try:
            alias = AdapterAlias.model_validate({**obj.body, "status": None})
        except ValidationError as exc:
            out.problems.append(
                Problem(obj.path.name, names.KIND_ALIAS, obj.name, first_error(exc))
            )
            continue
        alias.status = stored.get(alias.metadata.name)
        alias_files[alias.metadata.name] = obj.path.name
        aliases.append(alias)

    pods = [PodView(name=r, pool=out.pool_name, ready=True) for r in replica_ids if out.pool_name]
    fleet = plan_fleet(
        FleetSnapshot(
            pools=[pool, *merged_pools_of(manifests)] if pool else [],
            adapters=entries,
            aliases=aliases,
            pods=pods,
            states=dict(states or {}),
            listed={r: frozenset(owned_ids(v)) for r, v in (listed or {}).items()},
        ),
        now,
        params,
    )
    out.pools_to_create = fleet.pools_to_create
    out.pool_changes = fleet.pool_changes
    out.merge_events = fleet.merge_events

    out.annotations = {r: fleet.pod_annotations.get(r, "[]") for r in replica_ids}
    for replica, left_out in sorted(fleet.dropped.items()):
        message = f"owned-adapters annotation full; not pre-warmed: {', '.join(left_out)}"
        out.problems.append(Problem("", "Replica", replica, message))

    specs = {e.name: e.adapter for e in entries if e.adapter is not None}
    for name, status in sorted(fleet.adapter_status.items()):
        out.adapter_statuses[name] = status
        problem = _adapter_problem(status)
        if problem is not None:
            out.problems.append(Problem(adapter_files[name], names.KIND_ADAPTER, name, problem))
            continue
        out.owners[name] = list(status.owners)
        out.records[name] = AdapterRecord.from_spec(name, specs[name].spec)

    for alias in aliases:
        name = alias.metadata.name
        a_status = fleet.alias_status[name]
        out.alias_statuses[name] = a_status
        deployed = _condition(a_status, reasons.DEPLOYED)  # False also when the model is claimed
        ready = _condition(a_status, reasons.READY)  # False also when the model is claimed
        serving = ready is not None and ready.status == ConditionStatus.TRUE
        if deployed is not None and deployed.status == ConditionStatus.FALSE:
            message = f"{deployed.reason}: {deployed.message}"
            out.problems.append(Problem(alias_files[name], names.KIND_ALIAS, name, message))
        elif a_status.adapter and ready is not None and not serving:
            # Deployed, but what it serves is gone or no longer Ready.
            message = f"not served ({ready.reason}): {ready.message}"
            out.problems.append(Problem(alias_files[name], names.KIND_ALIAS, name, message))
        split = _condition(a_status, reasons.SPLIT)
        if split is not None and split.status == ConditionStatus.FALSE:
            # The primary serves; a version of spec.split is kept out (or still waits).
            message = f"{split.reason}: {split.message}"
            out.problems.append(Problem(alias_files[name], names.KIND_ALIAS, name, message))
        if a_status.adapter and serving:
            out.models[alias.spec.model] = a_status.adapter
            if a_status.traffic:
                out.traffic[alias.spec.model] = a_status.traffic
    return out


def status_document(p: Plan, updated_at: float) -> dict[str, Any]:
    """What `lorafleet status` and tests read from the reconciler's status file."""
    return {
        "pool": p.pool_name,
        "adapters": {
            a: {"phase": st.phase, "owners": st.owners, "ownerCount": st.owner_count}
            for a, st in sorted(p.adapter_statuses.items())
        },
        "models": dict(sorted(p.models.items())),
        "traffic": dict(sorted(p.traffic.items())),
        "aliases": {a: st.wire() for a, st in sorted(p.alias_statuses.items())},
        "problems": [
            {"file": x.file, "kind": x.kind, "name": x.name, "message": x.message, "text": str(x)}
            for x in sorted(p.problems)
        ],
        "updatedAt": updated_at,
    }
