"""The coalescing sync loop: one per namespace, the single writer of derived state.

kopf event handlers only update the in-memory index here and mark it dirty. The loop waits
for a quiet moment (`debounce`, at most `max_delay` while events keep coming), runs the pure
`plan_fleet` over the whole namespace, and writes only what differs from what it observed:
pods' owned-adapters annotations first (pre-warm is what latency depends on), then adapters'
status, the merged pools autoMerge creates, scales, drains and deletes (sync_merged), and
aliases' status. Creating 5,000 adapters at once therefore patches each pod once per
pass (a handful of passes), not 5,000 times, and an unchanged world writes nothing.

One writer per field also means no two handlers race on a status' conditions list, which a
merge patch replaces as a whole.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

from lorafleet_core import reasons
from lorafleet_core.kube_client import is_not_found
from lorafleet_core.models import (
    AdapterAlias,
    AdapterAliasStatus,
    LoRAAdapterStatus,
    ReplicaPool,
    first_error,
)
from lorafleet_core.names import ANNOTATION_OWNED_ADAPTERS
from lorafleet_core.planning.adapters import Validation, parse_adapter
from lorafleet_core.planning.aliases import plan_invalid_alias
from lorafleet_core.planning.fleet import (
    AdapterEntry,
    FleetParams,
    FleetPlan,
    FleetSnapshot,
    PodView,
    plan_fleet,
)
from lorafleet_core.planning.pool import INTERNAL_PORT_NAME
from lorafleet_core.pods import pod_ip, replica_pool, serving, terminating
from lorafleet_core.replica_state import ReplicaState
from lorafleet_operator.sync_merged import write_merged

log = logging.getLogger(__name__)

# Scrapes in a row a ready replica may miss before its last state is forgotten (set_states).
MISSED_SCRAPES_KEPT = 2


class Writer(Protocol):
    """Where plans go: the Kubernetes API in the operator, a counter in the benchmark."""

    async def pod_annotation(self, namespace: str, pod: str, value: str) -> None: ...

    async def adapter_status(self, namespace: str, name: str, status: dict[str, Any]) -> None: ...

    async def alias_status(self, namespace: str, name: str, status: dict[str, Any]) -> None: ...

    async def event(
        self,
        namespace: str,
        kind: str,
        name: str,
        uid: str | None,
        reason: str,
        message: str,
        type_: str = "Normal",
    ) -> None: ...

    async def create_pool(self, namespace: str, body: dict[str, Any]) -> None: ...

    async def patch_pool(self, namespace: str, name: str, patch: dict[str, Any]) -> None: ...

    async def delete_pool(self, namespace: str, name: str) -> None: ...


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


def status_patch(status: Any) -> dict[str, Any]:
    """A status as a merge patch: unset top-level fields become null so they are removed."""
    body: dict[str, Any] = status.wire()
    for name, info in type(status).model_fields.items():
        key = info.alias or name
        body.setdefault(key, None)
    return body


def internal_port(body: Mapping[str, Any], default: int) -> int:
    for c in (body.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if p.get("name") == INTERNAL_PORT_NAME and p.get("containerPort"):
                return int(p["containerPort"])
    return default


class FleetSync:
    def __init__(
        self,
        namespace: str,
        writer: Writer,
        params: FleetParams | None = None,
        debounce: float = 0.5,
        max_delay: float = 3.0,
        pod_interval: float = 0.0,
        concurrency: int = 16,
        default_port: int = 8101,
        clock: Callable[[], datetime] | None = None,
        on_pass: Callable[[float, bool], None] | None = None,
    ) -> None:
        self.namespace = namespace
        self.on_pass = on_pass  # (seconds, ok) after each pass: the operator's metrics
        self.writer = writer
        self.params = params or FleetParams()
        self.debounce = debounce
        self.pod_interval = pod_interval
        self._pod_written_at: dict[str, float] = {}
        self._force_pods = False
        self._wake: asyncio.TimerHandle | None = None
        self.max_delay = max_delay
        self.default_port = default_port
        self.clock = clock or (lambda: datetime.now(UTC))
        self.adapters: dict[str, AdapterEntry] = {}
        self.uids: dict[tuple[str, str], str] = {}
        self.aliases: dict[str, AdapterAlias] = {}
        self.invalid_aliases: dict[str, InvalidAlias] = {}
        self.pools: dict[str, ReplicaPool] = {}
        self.pods: dict[str, PodView] = {}
        self.pod_values: dict[str, str | None] = {}
        self.endpoints: dict[str, Endpoint] = {}
        self.states: dict[str, ReplicaState] = {}
        self._missed: dict[str, int] = {}  # replica -> scrapes missed in a row (set_states)
        self.last_plan: FleetPlan | None = None
        self.created_pools: set[str] = set()  # merged pools this loop created (autoMerge)
        self._sem = asyncio.Semaphore(concurrency)
        self._dirty = asyncio.Event()
        self._last_change = 0.0
        self._started = 0
        self._done = 0
        self._progress = asyncio.Condition()

    # ---------------------------------------------------------------- index (from watch events)

    def _touch(self) -> None:
        self._last_change = time.monotonic()
        self._dirty.set()

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
            self._touch()

    def remove_adapter(self, name: str) -> None:
        if self.adapters.pop(name, None) is not None:
            self._touch()

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
                self._touch()
            return
        self.invalid_aliases.pop(alias.metadata.name, None)
        alias.status = _parse_status(AdapterAliasStatus, body.get("status"))
        name = alias.metadata.name
        if self.aliases.get(name) != alias:
            self.aliases[name] = alias
            self._touch()

    def remove_alias(self, name: str) -> None:
        self.invalid_aliases.pop(name, None)
        if self.aliases.pop(name, None) is not None:
            self._touch()

    def upsert_pool(self, pool: ReplicaPool) -> None:
        pool = pool.model_copy(update={"status": None})
        if self.pools.get(pool.metadata.name) != pool:
            self.pools[pool.metadata.name] = pool
            self._touch()

    def remove_pool(self, name: str) -> None:
        if self.pools.pop(name, None) is not None:
            self._touch()

    def upsert_pod(self, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        pool = replica_pool(body)
        if pool is None:
            return
        name = str(meta.get("name"))
        view = PodView(name=name, pool=pool, ready=serving(body), deleting=terminating(body))
        self.pod_values[name] = (meta.get("annotations") or {}).get(ANNOTATION_OWNED_ADAPTERS)
        self.endpoints[name] = Endpoint(
            name,
            pool,
            pod_ip(body),
            internal_port(body, self.default_port),
        )
        if self.pods.get(name) != view:
            self.pods[name] = view
            self._touch()

    def remove_pod(self, name: str) -> None:
        self.pod_values.pop(name, None)
        self.endpoints.pop(name, None)
        self.states.pop(name, None)
        self._missed.pop(name, None)
        if self.pods.pop(name, None) is not None:
            self._touch()

    def set_states(self, pool: str, states: Mapping[str, ReplicaState]) -> None:
        """Replica states scraped by the autoscaler (traffic sizes owner counts).

        A ready replica that did not answer this scrape keeps its last state for up to
        MISSED_SCRAPES_KEPT scrapes in a row: one late answer (a busy node, a timeout) is not
        "no traffic", which would shrink its adapters' owner counts and pre-warm, only to grow
        them back on the next scrape. One that stays silent, or is no longer ready, is dropped.
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
        self._touch()

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

    # ---------------------------------------------------------------- the loop

    async def run(self) -> None:
        while True:
            await self._dirty.wait()
            first = time.monotonic()
            while True:  # wait for a quiet moment, but not longer than max_delay
                now = time.monotonic()
                quiet_left = self._last_change + self.debounce - now
                budget_left = first + self.max_delay - now
                if quiet_left <= 0 or budget_left <= 0:
                    break
                await asyncio.sleep(min(quiet_left, budget_left))
            self._dirty.clear()
            self._started += 1
            t0, ok = time.perf_counter(), False
            try:
                await self.sync_once()
                ok = True
            except Exception:
                log.exception("sync pass failed in %s; retrying", self.namespace)
                self._dirty.set()
                await asyncio.sleep(self.max_delay)
            finally:
                if self.on_pass is not None:
                    self.on_pass(time.perf_counter() - t0, ok)
                async with self._progress:
                    self._done = self._started
                    self._progress.notify_all()

    async def flush(self) -> None:
        """Return once a pass that began after this call has finished (its writes done)."""
        want = self._started + 1
        self._force_pods = True
        self._touch()
        async with self._progress:
            await self._progress.wait_for(lambda: self._done >= want)

    def snapshot(self) -> FleetSnapshot:
        """A copy of everything observed, as the planner takes it."""
        return FleetSnapshot(
            pools=list(self.pools.values()),
            adapters=list(self.adapters.values()),
            aliases=list(self.aliases.values()),
            pods=list(self.pods.values()),
            states=dict(self.states),
        )

    async def sync_once(self) -> FleetPlan:
        snap = self.snapshot()
        # In a thread: planning 5,000 adapters takes ~1 s on a slow core, and kopf's watch
        # streams must keep flowing meanwhile. The snapshot is a copy, so nothing races.
        plan = await asyncio.to_thread(plan_fleet, snap, self.clock(), self.params)
        self.last_plan = plan
        ns = self.namespace

        await self._run_all(self._pod_jobs(plan))

        adapter_jobs = []
        for name, status in plan.adapter_status.items():
            entry = self.adapters.get(name)
            if entry is not None and entry.status != status:
                adapter_jobs.append(self._write_adapter(entry, status))
        await self._run_all(adapter_jobs)
        await write_merged(self, plan)

        alias_jobs = []
        for name, astatus in plan.alias_status.items():
            alias = self.aliases.get(name)
            if alias is not None and alias.status != astatus:
                alias_jobs.append(self._write_alias(alias, astatus, plan.alias_deploys.get(name)))
        for name, bad in sorted(self.invalid_aliases.items()):
            invalid = plan_invalid_alias(bad.status, bad.message, self.clock(), bad.generation)
            if invalid != bad.status:
                alias_jobs.append(self._write_invalid_alias(name, invalid))
            was = bad.status.conditions if bad.status else []
            if all(c.reason != reasons.INVALID_SPEC for c in was):  # newly invalid
                plan.warnings.append(("AdapterAlias", name, reasons.INVALID_SPEC, bad.message))
        await self._run_all(alias_jobs)
        await self._run_all([self._warn(*w) for w in plan.warnings])
        for adapter, aliases in plan.blocked_deletions.items():
            log.info("deletion of %s/%s waits for aliases %s", ns, adapter, aliases)
        return plan

    def _pod_jobs(self, plan: FleetPlan) -> list[Awaitable[None]]:
        """Pod patches due now. A pod is rewritten at most once per `pod_interval`, so a
        long bulk create costs a pod duration/interval patches whatever the adapter count;
        pre-warm is an optimisation (the gateway loads on demand), so it can wait. A flush
        (an adapter's deletion) writes at once."""
        force, self._force_pods = self._force_pods, False
        now = time.monotonic()
        jobs: list[Awaitable[None]] = []
        next_due: float | None = None
        for pod, value in sorted(plan.pod_annotations.items()):
            if pod not in self.pods or self.pod_values.get(pod) == value:
                continue
            due = self._pod_written_at.get(pod, -math.inf) + self.pod_interval
            if force or due <= now:
                self._pod_written_at[pod] = now
                jobs.append(self._write_pod(pod, value))
            else:
                next_due = due if next_due is None else min(next_due, due)
        if next_due is not None and self._wake is None:
            self._wake = asyncio.get_running_loop().call_later(next_due - now, self._wake_up)
        return jobs

    def _wake_up(self) -> None:
        self._wake = None
        self._touch()

    async def _run_all(self, jobs: Sequence[Awaitable[None]]) -> None:
        results = await asyncio.gather(*jobs, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                if is_not_found(r):
                    continue  # the object is gone; its DELETED event updates the index
                log.warning("write failed in %s: %s; will retry", self.namespace, r)
                self._dirty.set()

    async def _write_pod(self, pod: str, value: str) -> None:
        async with self._sem:
            await self.writer.pod_annotation(self.namespace, pod, value)
        self.pod_values[pod] = value  # our write is the newest observation

    async def _write_adapter(self, entry: AdapterEntry, status: LoRAAdapterStatus) -> None:
        async with self._sem:
            await self.writer.adapter_status(self.namespace, entry.name, status_patch(status))
        current = self.adapters.get(entry.name)
        if current is not None:
            self.adapters[entry.name] = dataclasses.replace(current, status=status)

    async def _warn(self, kind: str, name: str, reason: str, message: str) -> None:
        uid = self.uids.get((kind, name))
        await self.writer.event(self.namespace, kind, name, uid, reason, message, "Warning")

    async def _write_invalid_alias(self, name: str, status: AdapterAliasStatus) -> None:
        async with self._sem:
            await self.writer.alias_status(self.namespace, name, status_patch(status))
        current = self.invalid_aliases.get(name)
        if current is not None:
            self.invalid_aliases[name] = dataclasses.replace(current, status=status)

    async def _write_alias(
        self, alias: AdapterAlias, status: AdapterAliasStatus, deployed: str | None
    ) -> None:
        name = alias.metadata.name
        async with self._sem:
            await self.writer.alias_status(self.namespace, name, status_patch(status))
        current = self.aliases.get(name)
        if current is not None:
            self.aliases[name] = current.model_copy(update={"status": status})
        if deployed:
            previous = status.previous_adapter or "nothing"
            await self.writer.event(
                self.namespace,
                "AdapterAlias",
                name,
                self.uids.get(("AdapterAlias", name)),
                reasons.DEPLOYED,
                f"{alias.spec.model} now serves {deployed} (was {previous})",
            )
