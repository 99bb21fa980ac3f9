"""The coalescing sync loop: one per namespace, the single writer of derived state.

kopf event handlers only update the in-memory index (fleet_index) and mark it dirty. The loop waits
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
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import BaseModel

from lorafleet_core.api import reasons
from lorafleet_core.api.models import AdapterAlias, AdapterAliasStatus, LoRAAdapterStatus
from lorafleet_core.kube.client import is_not_found
from lorafleet_core.planning.aliases import plan_invalid_alias
from lorafleet_core.planning.fleet import AdapterEntry, FleetParams, FleetPlan, plan_fleet
from lorafleet_operator.fleet_index import FleetIndex
from lorafleet_operator.sync_merged import write_merged

log = logging.getLogger(__name__)


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


def status_patch(status: Any) -> dict[str, Any]:
    """A status as a merge patch: unset fields become null so they are removed, at the top
    level and in each nested object (status.merge of a merge started again names no merged
    weights; a merge patch would keep the last ones' checksum and uri)."""
    body: dict[str, Any] = status.wire()
    _null_unset(status, body)
    return body


def _null_unset(model: BaseModel, body: dict[str, Any]) -> None:
    for name, info in type(model).model_fields.items():
        key = info.alias or name
        value = getattr(model, name)
        if isinstance(value, BaseModel) and isinstance(body.get(key), dict):
            _null_unset(value, body[key])
        body.setdefault(key, None)


class FleetSync:
    """The loop that plans over a namespace's index (fleet_index, `self.index`: what the
    handlers update) and writes the difference."""

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
        wait_for_lists: bool = False,
    ) -> None:
        self.namespace = namespace
        self.index = FleetIndex(namespace, default_port)
        if not wait_for_lists:  # the caller fills the index before it runs the loop
            self.index.listed.set()
        self.on_pass = on_pass  # (seconds, ok) after each pass: the operator's metrics
        self.writer = writer
        self.params = params or FleetParams()
        self.debounce = debounce
        self.pod_interval = pod_interval
        self._pod_written_at: dict[str, float] = {}
        self._force_pods = False
        self._wake: asyncio.TimerHandle | None = None
        self._deadline_wake: asyncio.TimerHandle | None = None
        self.max_delay = max_delay
        self.clock = clock or (lambda: datetime.now(UTC))
        self.last_plan: FleetPlan | None = None
        self.created_pools: set[str] = set()  # merged pools this loop created (autoMerge)
        self.write_slots = asyncio.Semaphore(concurrency)  # writes in flight at once
        self._started = 0
        self._done = 0
        self._progress = asyncio.Condition()

    async def run(self) -> None:
        await self.index.listed.wait()
        while True:
            await self.index.dirty.wait()
            first = time.monotonic()
            while True:  # wait for a quiet moment, but not longer than max_delay
                now = time.monotonic()
                quiet_left = self.index.last_change + self.debounce - now
                budget_left = first + self.max_delay - now
                if quiet_left <= 0 or budget_left <= 0:
                    break
                await asyncio.sleep(min(quiet_left, budget_left))
            self.index.dirty.clear()
            self._started += 1
            t0, ok = time.perf_counter(), False
            try:
                await self.sync_once()
                ok = True
            except Exception:
                log.exception("sync pass failed in %s; retrying", self.namespace)
                self.index.dirty.set()
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
        self.index.touch()
        async with self._progress:
            await self._progress.wait_for(lambda: self._done >= want)

    async def sync_once(self) -> FleetPlan:
        snap = self.index.snapshot()
        # In a thread: planning 5,000 adapters takes ~1 s on a slow core, and kopf's watch
        # streams must keep flowing meanwhile. The snapshot is a copy, so nothing races.
        now = self.clock()
        plan = await asyncio.to_thread(plan_fleet, snap, now, self.params)
        self.last_plan = plan
        self._wake_at_deadline(plan, now)
        ns = self.namespace

        await self.run_all(self._pod_jobs(plan))

        adapter_jobs = []
        for name, status in plan.adapter_status.items():
            entry = self.index.adapters.get(name)
            if entry is not None and entry.status != status:
                adapter_jobs.append(self._write_adapter(entry, status))
        await self.run_all(adapter_jobs)
        await write_merged(self, plan)

        alias_jobs = []
        for name, astatus in plan.alias_status.items():
            alias = self.index.aliases.get(name)
            if alias is not None and alias.status != astatus:
                alias_jobs.append(self._write_alias(alias, astatus, plan.alias_deploys.get(name)))
        for name, bad in sorted(self.index.invalid_aliases.items()):
            invalid = plan_invalid_alias(bad.status, bad.message, self.clock(), bad.generation)
            if invalid != bad.status:
                alias_jobs.append(self._write_invalid_alias(name, invalid))
            was = bad.status.conditions if bad.status else []
            if all(c.reason != reasons.INVALID_SPEC for c in was):  # newly invalid
                plan.warnings.append(("AdapterAlias", name, reasons.INVALID_SPEC, bad.message))
        await self.run_all(alias_jobs)
        await self.run_all([self._warn(*w) for w in plan.warnings])
        for adapter, aliases in plan.blocked_deletions.items():
            log.info("deletion of %s/%s waits for aliases %s", ns, adapter, aliases)
        for adapter, pools in plan.blocked_by_pools.items():
            log.info("deletion of %s/%s waits for merged pools %s", ns, adapter, pools)
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
            if pod not in self.index.pods or self.index.pod_values.get(pod) == value:
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

    def _wake_at_deadline(self, plan: FleetPlan, now: datetime) -> None:
        """Plan again when a waiting deploy's progress deadline falls: with every replica
        unreachable nothing else would, and the deploy would never be reported stalled."""
        if self._deadline_wake is not None:
            self._deadline_wake.cancel()
            self._deadline_wake = None
        if plan.wake_at is not None:
            # A little past it, so the pass that wakes sees the deadline behind it.
            delay = max((plan.wake_at - now).total_seconds(), 0.0) + 0.05
            self._deadline_wake = asyncio.get_running_loop().call_later(delay, self.index.touch)

    def _wake_up(self) -> None:
        self._wake = None
        self.index.touch()

    async def run_all(self, jobs: Sequence[Awaitable[None]]) -> None:
        results = await asyncio.gather(*jobs, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                if is_not_found(r):
                    continue  # the object is gone; its DELETED event updates the index
                log.warning("write failed in %s: %s; will retry", self.namespace, r)
                self.index.dirty.set()

    async def _write_pod(self, pod: str, value: str) -> None:
        async with self.write_slots:
            await self.writer.pod_annotation(self.namespace, pod, value)
        self.index.set_pod_value(pod, value)  # our write is the newest observation

    async def _write_adapter(self, entry: AdapterEntry, status: LoRAAdapterStatus) -> None:
        async with self.write_slots:
            await self.writer.adapter_status(self.namespace, entry.name, status_patch(status))
        current = self.index.adapters.get(entry.name)
        if current is not None:
            self.index.adapters[entry.name] = dataclasses.replace(current, status=status)

    async def _warn(self, kind: str, name: str, reason: str, message: str) -> None:
        uid = self.index.uids.get((kind, name))
        await self.writer.event(self.namespace, kind, name, uid, reason, message, "Warning")

    async def _write_invalid_alias(self, name: str, status: AdapterAliasStatus) -> None:
        async with self.write_slots:
            await self.writer.alias_status(self.namespace, name, status_patch(status))
        current = self.index.invalid_aliases.get(name)
        if current is not None:
            self.index.invalid_aliases[name] = dataclasses.replace(current, status=status)

    async def _write_alias(
        self, alias: AdapterAlias, status: AdapterAliasStatus, deployed: str | None
    ) -> None:
        name = alias.metadata.name
        async with self.write_slots:
            await self.writer.alias_status(self.namespace, name, status_patch(status))
        current = self.index.aliases.get(name)
        if current is not None:
            self.index.aliases[name] = current.model_copy(update={"status": status})
        if deployed:
            previous = status.previous_adapter or "nothing"
            await self.writer.event(
                self.namespace,
                "AdapterAlias",
                name,
                self.index.uids.get(("AdapterAlias", name)),
                reasons.DEPLOYED,
                f"{alias.spec.model} now serves {deployed} (was {previous})",
            )
