"""Build a CatalogSnapshot from raw Kubernetes-shaped objects (pure; both sources use it).

Specs are validated with the shared pydantic models; statuses are read leniently (only the
fields the gateway needs), so a status field added by a newer operator never hides an object.
An object that fails validation is skipped and reported, never fatal for the others.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from lorafleet_core.api.apikeys import KeyIndex, TenantKeys
from lorafleet_core.api.models import AdapterAliasSpec, LoRAAdapterSpec
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_gateway.catalog import AliasTarget, CatalogSnapshot, ReplicaEndpoint
from lorafleet_gateway.catalog_pools import served_pools
from lorafleet_gateway.pool_router import AdapterPools

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _status(obj: Obj) -> Mapping[str, Any] | None:
    return _nonempty(obj.get("status"))


def _nonempty(status: Any) -> Mapping[str, Any] | None:
    return status if isinstance(status, Mapping) and status else None


def _condition(status: Mapping[str, Any], type_: str) -> str | None:
    for cond in status.get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == type_:
            return str(cond.get("status"))
    return None


def adapter_ready(obj: Obj, *, allow_missing_status: bool) -> bool:
    """Servable: phase Ready (or, for hand-written manifests without status, allowed)."""
    status = _status(obj)
    if status is None or status.get("phase") is None:
        return allow_missing_status
    return bool(status.get("phase") == "Ready")


def alias_split(
    obj: Obj,
    spec: AdapterAliasSpec,
    *,
    allow_missing_status: bool,
    stored_status: Mapping[str, Any] | None = None,
) -> list[tuple[str, int]]:
    """The weighted versions an alias sends requests to besides the one `alias_target` names.

    As for the adapter, the operator's view wins: status.split holds only the versions that
    passed the deploy gate. Without a status (standalone manifests nobody reconciles)
    spec.split is served. A status split that does not read as one (an older or hand-edited
    status) is no split: every request goes to the primary.
    """
    status = _nonempty(stored_status) or _status(obj)
    if status is None:
        return [(s.adapter, s.weight) for s in spec.split or ()] if allow_missing_status else []
    raw = status.get("split")
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        return []
    out: list[tuple[str, int]] = []
    for item in raw:
        if not isinstance(item, Mapping):
            return []
        adapter, weight = item.get("adapter"), item.get("weight")
        if not isinstance(adapter, str) or type(weight) is not int or not 1 <= weight <= 99:
            return []
        out.append((adapter, weight))
    if sum(w for _, w in out) > 99 or len({a for a, _ in out}) != len(out):
        return []
    return out


def alias_target(
    obj: Obj,
    spec: AdapterAliasSpec,
    *,
    allow_missing_status: bool,
    stored_status: Mapping[str, Any] | None = None,
) -> str | None:
    """The adapter an alias serves now, or None when the alias is not Ready.

    With a status the operator's view wins (status.adapter once Ready: a deploy takes effect
    when the operator says so, and a refused target leaves the last good adapter serving);
    without one (standalone manifests nobody reconciles) spec.adapter is served.
    `stored_status`, when given, is that status kept outside the object (standalone mode's
    reconciler writes it beside the manifests) and replaces the object's own.
    """
    status = _nonempty(stored_status) or _status(obj)
    if status is None:
        return spec.adapter if allow_missing_status else None
    ready = _condition(status, "Ready")
    if ready == "False" or (ready is None and not allow_missing_status):
        return None
    return str(status.get("adapter") or spec.adapter)


def build_snapshot(
    *,
    adapters: Iterable[Obj],
    aliases: Iterable[Obj],
    secrets: Iterable[Obj],
    pools: Iterable[Obj],
    replicas: Sequence[ReplicaEndpoint],
    allow_missing_status: bool,
    version: int,
    pool: str | None = None,
    only_pools: Sequence[str] = (),
    alias_statuses: Mapping[str, Mapping[str, Any]] | None = None,
) -> CatalogSnapshot:
    """The snapshot for these objects. `pool` is the gateway's own pool and `only_pools` the
    explicit list of pools to serve (lorafleet_gateway.catalog_pools); `alias_statuses`
    (alias name -> status in wire form) overrides the aliases' own status (standalone mode
    keeps it in a file, see catalog_files).
    """
    stored = alias_statuses or {}
    served = served_pools(pools, pool, only_pools)
    records: dict[str, AdapterRecord] = {}
    owner_counts: dict[str, int] = {}
    adapter_pools: dict[str, AdapterPools] = {}
    for obj in adapters:
        name = _name(obj)
        try:
            adapter_spec = LoRAAdapterSpec.model_validate(obj.get("spec"))
            record = AdapterRecord.from_spec(name, adapter_spec)
        except (ValidationError, ValueError) as exc:
            log.warning("skipping LoRAAdapter %r: %s", name, exc)
            continue
        if not adapter_ready(obj, allow_missing_status=allow_missing_status):
            continue
        refused = None if allow_missing_status else served.refuse_location(adapter_spec)
        if refused is not None:
            # Ready against the operator's verdict: the files would come from a location no
            # pool takes (another tenant's folder, the replica's own files).
            log.warning("not serving LoRAAdapter %r marked Ready: %s", name, refused)
            continue
        records[name] = record
        if served.pools:
            adapter_pools[name] = served.for_adapter(name, adapter_spec)
        status = _status(obj) or {}
        count = status.get("ownerCount")
        if isinstance(count, int) and count > 0:
            owner_counts[name] = count

    targets: dict[str, AliasTarget] = {}
    for obj in aliases:
        name = _name(obj)
        try:
            spec = AdapterAliasSpec.model_validate(obj.get("spec"))
        except (ValidationError, ValueError) as exc:
            log.warning("skipping AdapterAlias %r: %s", name, exc)
            continue
        adapter_id = alias_target(
            obj, spec, allow_missing_status=allow_missing_status, stored_status=stored.get(name)
        )
        target = records.get(adapter_id) if adapter_id else None
        # The adapter must be servable and belong to the alias's tenant: an alias can never
        # route a tenant to another tenant's adapter, whatever its spec says.
        if target is None or target.tenant != spec.tenant:
            continue
        if spec.model in targets and targets[spec.model].tenant != spec.tenant:
            log.warning("model %r claimed by two tenants; serving neither", spec.model)
            targets.pop(spec.model)
            continue
        # A version of the split that is not servable here (not Ready, another tenant's) takes
        # no share: its requests go to the primary, which is.
        split = tuple(
            (version, weight)
            for version, weight in alias_split(
                obj, spec, allow_missing_status=allow_missing_status, stored_status=stored.get(name)
            )
            if version != target.id
            and (other := records.get(version)) is not None
            and other.tenant == spec.tenant
        )
        targets[spec.model] = AliasTarget(spec.model, spec.tenant, target.id, split)

    tenants: dict[str, TenantKeys] = {}
    for obj in secrets:
        try:
            tk = TenantKeys.from_secret(obj)
        except (ValidationError, ValueError, KeyError) as exc:
            log.warning("skipping key Secret %r: %s", _name(obj), exc)
            continue
        prev = tenants.get(tk.tenant)
        if prev is not None:  # several Secrets for one tenant: union of their hashes
            tk = tk.model_copy(update={"key_hashes": prev.key_hashes + tk.key_hashes})
        tenants[tk.tenant] = tk

    owners_per_adapter = 2
    max_model_len = None
    home = served.home_pool()
    if home is not None:
        owners_per_adapter = home.spec.owners_per_adapter
        max_model_len = home.spec.engine.max_model_len
    # Replicas of the served pools only (with no pool known yet, of the home pool); one that
    # names no pool belongs to the home pool.
    names = served.names or {served.home}
    kept: list[ReplicaEndpoint] = []
    pool_of: dict[str, str | None] = {}
    for ep in replicas:
        ep_pool = ep.pool or served.home
        if ep_pool is not None and ep_pool not in names:
            continue
        kept.append(ep)
        pool_of[ep.id] = ep_pool

    by_tenant: dict[str, list[str]] = {}
    for model, entry in targets.items():
        by_tenant.setdefault(entry.tenant, []).append(model)
    return CatalogSnapshot(
        tenant_models={t: tuple(sorted(models)) for t, models in by_tenant.items()},
        aliases=targets,
        adapters=records,
        owner_counts=owner_counts,
        tenants=tenants,
        keys=KeyIndex(tenants.values()),
        replicas=tuple(sorted(kept, key=lambda r: r.id)),
        owners_per_adapter=owners_per_adapter,
        max_model_len=max_model_len,
        version=version,
        adapter_pools=adapter_pools,
        pool_of=pool_of,
        pool_owners={p.metadata.name: p.spec.owners_per_adapter for p in served.pools},
    )
