"""What the sync loop has observed of one namespace: the index kopf's watch events update.

Handlers call the upsert/remove methods with the objects they are told about; each real
change marks the index dirty, which is what wakes the loop (sync.FleetSync owns the index, plans
over it and writes). Nothing here does I/O: `snapshot()` copies the index into the plain
FleetSnapshot the pure planner takes, so planning can run in a thread while events keep
arriving.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from lorafleet_core.api.models import (
    AdapterAlias,
    AdapterAliasStatus,
    LoRAAdapterStatus,
    ReplicaPool,
    first_error,
)
from lorafleet_core.api.names import ANNOTATION_OWNED_ADAPTERS
from lorafleet_core.planning.adapters import Validation, parse_adapter
from lorafleet_core.planning.fleet import AdapterEntry, FleetSnapshot, PodView
from lorafleet_core.planning.pods import pod_ip, replica_pool, serving, terminating
from lorafleet_core.planning.pool import INTERNAL_PORT_NAME
from lorafleet_core.wire.records import owned_ids
from lorafleet_core.wire.replica_state import ReplicaState

# Scrapes in a row a ready replica may miss before its last state is forgotten (set_states).
MISSED_SCRAPES_KEPT = 2


@dataclass(frozen=True)
class InvalidAlias:
    """An AdapterAlias whose spec does not parse: why, and the status it carries."""

    message: str
    status: AdapterAliasStatus | None
    generation: int | None


@dataclass(frozen=True)
class Endpoint:
    replica_id: str
    pool: str
    ip: str | None
    port: int


def _parse_status(model: type[Any], raw: Any) -> Any:
    if not raw:
        return None
    try:
        return model.model_validate(raw)
    except ValidationError:
        return None  # someone wrote garbage: treat as no status, the next plan overwrites it


def internal_port(body: Mapping[str, Any], default: int) -> int:
    for c in (body.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == INTERNAL_PORT_NAME and p.get("containerPort"):
                return int(p["containerPort"])
    return default


class FleetIndex:
    """The namespace's adapters, aliases, pools, replica pods and scraped replica states, as
    last observed (the loop also records its own writes here: the watch event comes later)."""

    def __init__(self, namespace: str, default_port: int = 8101) -> None:
        self.namespace = namespace
        self.default_port = default_port
        self.adapters: dict[str, AdapterEntry] = {}
        self.uids: dict[tuple[str, str], str] = {}
        self.aliases: dict[str, AdapterAlias] = {}
        self.invalid_aliases: dict[str, InvalidAlias] = {}
        self.pools: dict[str, ReplicaPool] = {}
        self.pods: dict[str, PodView] = {}
        self.pod_values: dict[str, str | None] = {}
        self._pod_listed: dict[str, frozenset[str]] = {}  # ids of pod_values (set_pod_value)
        self.endpoints: dict[str, Endpoint] = {}
        self.states: dict[str, ReplicaState] = {}
        self._missed: dict[str, int] = {}  # replica -> scrapes missed in a row (set_states)
        self.measured_pools: set[str] = set()  # pools some replica has answered a scrape of
        self.dirty = asyncio.Event()
        # Set once everything there is has been observed (kopf's initial lists): the loop
        # plans nothing before (sync.FleetSync.run).
        self.listed = asyncio.Event()
        self.last_change = 0.0

    def touch(self) -> None:
        self.last_change = time.monotonic()
        self.dirty.set()

    def upsert_adapter(self, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        name = str(meta.get("name"))
        parsed = parse_adapter(body)
        entry = AdapterEntry(
            name=name,
            adapter=None if isinstance(parsed, Validation) else parsed,
            invalid=parsed if isinstance(parsed, Validation) else None,
            status=_parse_status(LoRAAdapterStatus, body.get("status")),
            deleting=bool(meta.get("deletionTimestamp")),
            generation=meta.get("generation"),
            uid=str(meta["uid"]) if meta.get("uid") else None,
        )
        self.uids[("LoRAAdapter", name)] = str(meta.get("uid") or "")
        if self.adapters.get(name) != entry:
            self.adapters[name] = entry
            self.touch()

    def remove_adapter(self, name: str) -> None:
        if self.adapters.pop(name, None) is not None:
            self.touch()

    def upsert_alias(self, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        self.uids[("AdapterAlias", str(meta.get("name")))] = str(meta.get("uid") or "")
        try:
            alias = AdapterAlias.model_validate(dict(body) | {"status": None})
        except ValidationError as exc:
            # Never served (the gateway parses the spec the same way); the status says why.
            name = str(meta.get("name"))
            bad = InvalidAlias(
                first_error(exc),
                _parse_status(AdapterAliasStatus, body.get("status")),
                meta.get("generation"),
            )
            self.aliases.pop(name, None)
            if self.invalid_aliases.get(name) != bad:
                self.invalid_aliases[name] = bad
                self.touch()
            return
        self.invalid_aliases.pop(alias.metadata.name, None)
        alias.status = _parse_status(AdapterAliasStatus, body.get("status"))
        name = alias.metadata.name
        if self.aliases.get(name) != alias:
            self.aliases[name] = alias
            self.touch()

    def remove_alias(self, name: str) -> None:
        self.invalid_aliases.pop(name, None)
        if self.aliases.pop(name, None) is not None:
            self.touch()

    def upsert_pool(self, pool: ReplicaPool) -> None:
        pool = pool.model_copy(update={"status": None})
        if self.pools.get(pool.metadata.name) != pool:
            self.pools[pool.metadata.name] = pool
            self.touch()

    def remove_pool(self, name: str) -> None:
        if self.pools.pop(name, None) is not None:
            self.touch()

    def upsert_pod(self, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        pool = replica_pool(body)
        if pool is None:
            return
        name = str(meta.get("name"))
        view = PodView(name=name, pool=pool, ready=serving(body), deleting=terminating(body))
        self.set_pod_value(name, (meta.get("annotations") or {}).get(ANNOTATION_OWNED_ADAPTERS))
        self.endpoints[name] = Endpoint(
            name,
            pool,
            pod_ip(body),
            internal_port(body, self.default_port),
        )
        if self.pods.get(name) != view:
            self.pods[name] = view
            self.touch()

    def set_pod_value(self, name: str, value: str | None) -> None:
        """The pod's owned-adapters annotation as last observed or written, and the ids it
        lists (parsed once per new value: the kept set's memory in every plan)."""
        if self.pod_values.get(name) != value or name not in self._pod_listed:
            self._pod_listed[name] = frozenset(owned_ids(value))
        self.pod_values[name] = value

    def remove_pod(self, name: str) -> None:
        self.pod_values.pop(name, None)
        self._pod_listed.pop(name, None)
        self.endpoints.pop(name, None)
        self.states.pop(name, None)
        self._missed.pop(name, None)
        if self.pods.pop(name, None) is not None:
            self.touch()

    def set_states(self, pool: str, states: Mapping[str, ReplicaState]) -> None:
        """Replica states scraped by the autoscaler (traffic sizes owner counts).

        A ready replica that did not answer this scrape keeps its last state for up to
        MISSED_SCRAPES_KEPT scrapes in a row: one late answer (a busy node, a timeout) is not
        "no traffic", which would shrink its adapters' owner counts and pre-warm, only to grow
        them back on the next scrape. One that stays silent, or is no longer ready, is dropped.

        Until some replica of the pool has answered once, the pool is not in `measured_pools`
        and the planner treats its traffic as unknown (a restarted operator keeps the owner
        counts and kept sets it finds instead of planning them for zero traffic).
        """
        ready = {e.replica_id for e in self.pool_endpoints(pool)}
        for rid in [r for r, e in self.endpoints.items() if e.pool == pool]:
            if rid in states:
                self._missed.pop(rid, None)
                continue
            missed = self._missed.get(rid, 0) + 1
            if rid in ready and rid in self.states and missed <= MISSED_SCRAPES_KEPT:
                self._missed[rid] = missed
            else:
                self._missed.pop(rid, None)
                self.states.pop(rid, None)
        self.states.update(states)
        if states:
            self.measured_pools.add(pool)
        self.touch()

    def aliases_referencing(self, adapter: str) -> list[str]:
        """Aliases whose spec or served status names `adapter` (they block its deletion)."""
        return sorted(
            name
            for name, a in self.aliases.items()
            if a.spec.adapter == adapter or (a.status is not None and a.status.adapter == adapter)
        )

    def pool_endpoints(self, pool: str) -> list[Endpoint]:
        ready = {
            p.name for p in self.pods.values() if p.pool == pool and p.ready and not p.deleting
        }
        return [e for name, e in sorted(self.endpoints.items()) if name in ready]

    def snapshot(self) -> FleetSnapshot:
        """A copy of everything observed, as the planner takes it."""
        return FleetSnapshot(
            pools=list(self.pools.values()),
            adapters=list(self.adapters.values()),
            aliases=list(self.aliases.values()),
            pods=list(self.pods.values()),
            states=dict(self.states),
            listed=dict(self._pod_listed),
            measured_pools=frozenset(self.measured_pools),
        )
