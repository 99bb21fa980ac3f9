"""Which ReplicaPools a gateway serves, and where each adapter may go among them (pure).

A gateway serves the pools of one base model: by default every ReplicaPool in its namespace
(or manifests folder) with the base-model hash of its own pool (the `pool` setting; in a
folder with one pool, that one), so shared pools of several rank classes and the merged pools
of hot adapters all serve behind one endpoint. The `pools` setting lists them instead
(`pools=[x]` serves pool x alone, the behaviour before pools).

Per adapter the catalog records its shared pool, chosen by the operator's own rule
(`lorafleet_core.planning.adapters.validate_adapter`: the smallest rank class that accepts
it), and the merged pools whose merge is Ready for it (`status.merge.phase` Ready for
`spec.merged.adapter` and for the adapter's content: `status.merge.adapterChecksum` equal to
the LoRAAdapter's `spec.checksum`, and not draining). A merge of an earlier adapter of the same
name (deleted and recreated with other weights) is no target: the shared pool serves the new
weights until the pool has merged them. Statuses are read leniently, as everywhere in the
catalog.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from lorafleet_core.api.models import LoRAAdapterSpec, MergePhase, ReplicaPool
from lorafleet_core.planning.adapter_sources import source_problem
from lorafleet_core.planning.adapters import shared_pools, validate_adapter
from lorafleet_core.planning.merged_lifecycle import draining
from lorafleet_gateway.pool_router import AdapterPools, MergedTarget

log = logging.getLogger(__name__)

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class ServedPools:
    """The pools a gateway serves; `home` is its own pool (replicas that name none join it)."""

    pools: tuple[ReplicaPool, ...] = ()
    home: str | None = None
    merged: Mapping[str, tuple[MergedTarget, ...]] = field(default_factory=dict)
    # Each Ready merged pool's status.merge.adapterChecksum: the content its weights were made of.
    merged_from: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(p.metadata.name for p in self.pools)

    def home_pool(self) -> ReplicaPool | None:
        return next((p for p in self.pools if p.metadata.name == self.home), None)

    def refuse_location(self, spec: LoRAAdapterSpec) -> str | None:
        """Why no pool of the adapter's base model takes weights from where they live
        (adapterSources), or None. The operator never marks such an adapter Ready, so a Ready
        status on it was written by someone else (a user granted `*/status`): not served."""
        pools = [
            p for p in shared_pools(self.pools) if p.spec.base_model.hash == spec.base_model_hash
        ]
        problems = [source_problem(spec, p) for p in pools]
        if not pools or any(v is None for v in problems):
            return None
        return "; ".join(v.reason for v in problems if v is not None)

    def for_adapter(self, adapter_id: str, spec: LoRAAdapterSpec) -> AdapterPools:
        verdict = validate_adapter(spec, self.pools)
        # Not accepted by any shared pool (only hand-written manifests get here: on a cluster
        # the operator never marks such an adapter Ready): the home pool, as before pools.
        shared = verdict.pool if verdict.ok else self.home
        merged = tuple(
            t
            for t in self.merged.get(adapter_id, ())
            if self.merged_from.get(t.pool) == spec.checksum
        )
        return AdapterPools(shared, merged)


def parse_pools(objs: Iterable[Obj]) -> dict[str, tuple[ReplicaPool, Obj]]:
    """Valid pools by name, each with its raw status (invalid ones are skipped and logged)."""
    out: dict[str, tuple[ReplicaPool, Obj]] = {}
    for obj in objs:
        name = str((obj.get("metadata") or {}).get("name", ""))
        try:
            pool = ReplicaPool.model_validate({k: v for k, v in obj.items() if k != "status"})
        except (ValidationError, ValueError) as exc:
            log.warning("skipping ReplicaPool %r: %s", name, exc)
            continue
        status = obj.get("status")
        out[name] = (pool, status if isinstance(status, Mapping) else {})
    return out


def served_pools(objs: Iterable[Obj], home: str | None, only: Sequence[str] = ()) -> ServedPools:
    """The pools this gateway serves (see the module docstring)."""
    parsed = parse_pools(objs)
    if only:
        chosen = [parsed[n] for n in only if n in parsed]
    else:
        anchor = parsed.get(home) if home else None
        if anchor is None:
            shared = shared_pools([p for p, _ in parsed.values()])
            if len(shared) == 1:
                anchor = parsed[shared[0].metadata.name]
            elif shared:
                first = min(shared, key=lambda p: p.metadata.name)
                log.warning("pool %r not found; serving the pools of %s's base model", home, first)
                anchor = parsed[first.metadata.name]
        wanted = anchor[0].spec.base_model.hash if anchor else None
        chosen = [(p, s) for p, s in parsed.values() if p.spec.base_model.hash == wanted]
    chosen.sort(key=lambda entry: entry[0].metadata.name)
    names = [p.metadata.name for p, _ in chosen]
    if home not in names:
        shared_names = [p.metadata.name for p, _ in chosen if p.spec.merged is None]
        home = shared_names[0] if len(shared_names) == 1 else home
    merged: dict[str, list[MergedTarget]] = {}
    merged_from: dict[str, str | None] = {}
    for pool, status in chosen:
        target = ready_merge(pool, status)
        if target is not None:
            assert pool.spec.merged is not None
            merged.setdefault(pool.spec.merged.adapter, []).append(target)
            content = status["merge"].get("adapterChecksum")
            merged_from[pool.metadata.name] = str(content) if content else None
    return ServedPools(
        tuple(p for p, _ in chosen),
        home,
        {a: tuple(t) for a, t in merged.items()},
        merged_from,
    )


def ready_merge(pool: ReplicaPool, status: Obj) -> MergedTarget | None:
    """The pool as a merged target when its merge is Ready for the adapter its spec names.

    A status naming another adapter (the spec changed and the new merge has not run yet) is
    not Ready for this one. A draining pool (the operator is about to delete it: its adapter's
    traffic stayed low) is no target: new requests go to the shared pool while the pool's
    replicas finish the ones they hold.
    """
    if pool.spec.merged is None or draining(pool):
        return None
    merge = status.get("merge")
    if not isinstance(merge, Mapping) or merge.get("phase") != MergePhase.READY.value:
        return None
    adapter = merge.get("adapterId")
    if adapter not in (None, pool.spec.merged.adapter):
        return None
    checksum = merge.get("checksum")
    return MergedTarget(pool.metadata.name, str(checksum) if checksum else None)
