"""The catalog: what the gateway knows about aliases, adapters, tenants and replicas.

One interface, two sources (catalog_files: a folder of manifests; catalog_kube: Kubernetes
watches). A source builds an immutable `CatalogSnapshot` and swaps it into a `CatalogHolder`
in one assignment, so a request that resolved its alias against one snapshot keeps that version
to the end even when the alias changes mid-flight, and the next request sees the new one.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from lorafleet_core.api.apikeys import KeyIndex, TenantKeys
from lorafleet_core.planning.traffic_split import Draw, choose_version
from lorafleet_core.storage.replica_endpoints import ReplicaEndpoint
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_gateway.pool_router import AdapterPools

__all__ = ["ReplicaEndpoint"]  # re-exported: the gateway's modules import it from here


@dataclass(frozen=True, slots=True)
class AliasTarget:
    """A servable alias: the public model name, its tenant and the immutable adapter id, plus
    the weighted versions in force ((adapter id, percent); the adapter id takes the rest)."""

    model: str
    tenant: str
    adapter_id: str
    split: tuple[tuple[str, int], ...] = ()

    def version_for(self, user: str | None, draw: Draw | None = None) -> str:
        """The adapter id serving one request by `user` (None: anonymous, drawn at random)."""
        return choose_version(self.model, self.adapter_id, self.split, user, draw)

    def adapter_ids(self) -> tuple[str, ...]:
        """Every version the alias may answer with, the primary first."""
        return (self.adapter_id, *(a for a, _ in self.split))

    def traffic(self) -> str:
        """The primary and the split as one comparable string (`v1=95,v2=5`)."""
        if not self.split:
            return self.adapter_id
        rest = 100 - sum(w for _, w in self.split)
        return ",".join([f"{self.adapter_id}={rest}", *(f"{a}={w}" for a, w in self.split)])


@dataclass(frozen=True)
class CatalogSnapshot:
    """Everything a request needs, frozen at one point in time."""

    aliases: Mapping[str, AliasTarget] = field(default_factory=dict)
    adapters: Mapping[str, AdapterRecord] = field(default_factory=dict)
    owner_counts: Mapping[str, int] = field(default_factory=dict)
    tenants: Mapping[str, TenantKeys] = field(default_factory=dict)
    keys: KeyIndex = field(default_factory=KeyIndex)
    replicas: tuple[ReplicaEndpoint, ...] = ()
    owners_per_adapter: int = 2
    max_model_len: int | None = None  # the pool's context length (vLLM --max-model-len)
    version: int = 0
    tenant_models: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # Several pools (lorafleet_gateway.catalog_pools): where each adapter may go, each
    # replica's pool, each shared pool's ownersPerAdapter.
    adapter_pools: Mapping[str, AdapterPools] = field(default_factory=dict)
    pool_of: Mapping[str, str | None] = field(default_factory=dict)
    pool_owners: Mapping[str, int] = field(default_factory=dict)

    def resolve(self, tenant: str, model: str) -> AliasTarget | None:
        """The alias `model` if `tenant` owns it; else None, exactly as for a missing one."""
        target = self.aliases.get(model)
        if target is None or target.tenant != tenant:
            return None
        return target

    def max_tokens_cap(self, limit: int) -> int:
        """The largest max_tokens served: the gateway's limit, never above the pool's context."""
        return limit if self.max_model_len is None else min(limit, self.max_model_len)

    def models_of(self, tenant: str) -> list[str]:
        if self.tenant_models:
            return list(self.tenant_models.get(tenant, ()))
        return sorted(m for m, t in self.aliases.items() if t.tenant == tenant)

    def owner_count(self, adapter_id: str) -> int:
        """The operator's owner count, else the ownersPerAdapter of the adapter's pool."""
        counted = self.owner_counts.get(adapter_id)
        if counted:
            return counted
        shared = self.pools_for(adapter_id).shared
        return self.pool_owners.get(shared or "", self.owners_per_adapter)

    def pools_for(self, adapter_id: str) -> AdapterPools:
        return self.adapter_pools.get(adapter_id) or _ANY_POOL

    def served_pairs(self) -> Iterator[tuple[str, str]]:
        """(tenant, adapter id) of every version an alias may answer with: the label pairs
        usage can be metered under."""
        for target in self.aliases.values():
            for adapter_id in target.adapter_ids():
                yield target.tenant, adapter_id


_ANY_POOL = AdapterPools()


class CatalogHolder:
    """Holds the current snapshot; readers take `.current` once per request."""

    def __init__(self, snapshot: CatalogSnapshot | None = None) -> None:
        self._snapshot = snapshot or CatalogSnapshot()
        self.loaded = snapshot is not None
        # Called with every new snapshot (and the current one when added): cheap, no I/O.
        self._listeners: list[Callable[[CatalogSnapshot], None]] = []

    def subscribe(self, listener: Callable[[CatalogSnapshot], None]) -> None:
        self._listeners.append(listener)
        if self.loaded:
            listener(self._snapshot)

    @property
    def current(self) -> CatalogSnapshot:
        return self._snapshot

    def swap(self, snapshot: CatalogSnapshot) -> None:
        # A single reference assignment: atomic for every reader on the event loop.
        self._snapshot = snapshot
        self.loaded = True
        for listener in self._listeners:
            listener(snapshot)


class CatalogSource(abc.ABC):
    """A producer of snapshots: `run()` keeps `holder` current until cancelled."""

    def __init__(self, holder: CatalogHolder) -> None:
        self.holder = holder

    @abc.abstractmethod
    async def load_once(self) -> None:
        """Build and swap in a first snapshot (raises when the source is unusable)."""

    @abc.abstractmethod
    async def run(self) -> None:
        """Follow changes until cancelled."""
