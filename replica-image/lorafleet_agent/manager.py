"""The adapter manager: records, tiers, loads, reference counts and evictions on one replica.

Which records it holds, and which it refuses, is `HeldRecords` (lorafleet_agent.held_records).

Invariants (the tests check each):
- only adapters whose registry record the agent holds are ever fetched or registered;
- vLLM sees an adapter only after it passed verification (lorafleet_agent.verifier);
- an adapter with running requests (refcount > 0) is never unregistered nor evicted from disk;
- the number of adapters registered with vLLM stays <= cpu slots: the agent evicts its own least
  recently used idle adapter first, so vLLM never drops one silently and the tier estimate holds;
- concurrent first requests for one adapter load it once (per-adapter asyncio lock);
- a disk copy is re-verified against its record every time before vLLM registers it: a copy
  altered after download is discarded and fetched again, never served;
- what the agent believes vLLM holds is checked against vLLM's own list (`resync`): after vLLM
  restarts, lost registrations are forgotten and re-registered, never answered 404;
- on a merged pool's replica (`merged` set) vLLM serves one adapter merged into its weights
  under the adapter's id, LoRA disabled: the agent verifies the merged folder's checksum before
  it is ready, admits only that adapter (always tier gpu) and refuses every other record.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx

from lorafleet_agent.disk_cache import DiskCache
from lorafleet_agent.held_records import HeldRecords
from lorafleet_agent.merged_model import MergedModel
from lorafleet_agent.metrics import AgentMetrics, RateWindow
from lorafleet_agent.object_store import FetchError, ObjectStore
from lorafleet_agent.verifier import PoolPolicy, VerificationError, check_files
from lorafleet_agent.vllm_client import VllmClient, is_unknown_model
from lorafleet_core.planning.cache_policy import CachePolicy, SlotTracker
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_core.wire.tiers import Tier, slowest

log = logging.getLogger(__name__)


class CacheFull(RuntimeError):
    """The disk cache cannot take the adapter: the budget cannot fit it even after evicting
    every idle one, or the disk refused the write (full, read-only, over quota)."""


# A write the cache's volume refused: this replica cannot take the adapter, another may.
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})


@dataclass
class Lease:
    adapter_id: str
    tier: Tier  # where the adapter was when the request arrived


class AdapterManager(HeldRecords):
    def __init__(
        self,
        *,
        policy: PoolPolicy,
        slots: SlotTracker,
        disk: DiskCache,
        store: ObjectStore,
        vllm: VllmClient,
        metrics: AgentMetrics,
        merged: MergedModel | None = None,
    ) -> None:
        self.policy = policy
        self.merged = merged
        self.slots = slots
        self.disk = disk
        self.store = store
        self.vllm = vllm
        self.metrics = metrics
        self.records: dict[str, AdapterRecord] = {}
        self.failed: dict[str, str] = {}
        # The eviction decisions are the shared core's (the fleet simulator drives the same).
        self.cache = CachePolicy(slots, disk.lru)
        self.refs = self.cache.refs
        self.loads = RateWindow()
        self.evictions = RateWindow()
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        # Guards the registered set: registration, eviction and unload decisions happen under it.
        self._slots_cond = asyncio.Condition()
        self._loading = self.cache.loading
        # Adapters being brought to vLLM right now -> the tier they come from. Read by a call
        # as it arrives (its own wait), never handed from one request to a later one.
        self._in_transit: dict[str, Tier] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.ready = False  # set once vLLM answers and the agent has taken over its adapters
        # Told of every refused conflicting record (on a cluster: a Kubernetes Event).
        self.on_conflict: Callable[[AdapterRecord, AdapterRecord], None] | None = None

    async def start(self, unload_unknown: bool, wait_s: float) -> None:
        """Wait for vLLM (it starts beside the agent and takes a while), then take over."""
        if self.merged is not None:
            await asyncio.to_thread(self.merged.verify)  # never serve weights not named
        deadline = time.monotonic() + wait_s
        while not await self.vllm.healthy():
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM at {self.vllm.base_url} not healthy after {wait_s}s")
            await asyncio.sleep(1.0)
        if unload_unknown:
            # vLLM may hold adapters a previous agent life registered; trust none of them.
            for name in await self.vllm.lora_names():
                await self.vllm.unload_lora(name)
        self.ready = True

    # ---------------------------------------------------------------- tiers

    def tier_of(self, adapter_id: str) -> Tier:
        if self.is_merged(adapter_id):
            return Tier.GPU  # in the weights themselves
        tier = self.slots.tier(adapter_id)
        if tier is not None:
            return tier
        return Tier.DISK if self.disk.has(adapter_id) else Tier.REMOTE

    def disk_only(self) -> list[str]:
        return [a for a in self.disk.lru.order() if not self.slots.is_registered(a)]

    def resident(self) -> dict[Tier, list[str]]:
        """Adapter ids by the fastest tier each is held in (/state and the residency metrics).

        A merged pool's adapter is in the weights: always gpu, so routing needs no load.
        """
        gpu = self.slots.gpu()
        return {
            Tier.GPU: [self.merged.adapter_id, *gpu] if self.merged is not None else gpu,
            Tier.RAM: self.slots.ram_only(),
            Tier.DISK: self.disk_only(),
        }

    # ---------------------------------------------------------------- requests

    async def acquire(self, adapter_id: str, *, loaded_from: Tier | None = None) -> Lease:
        """Make the adapter servable and count a reference until `release`.

        `loaded_from`: the tier an on-demand load made for this very request found the adapter
        in (the gateway passes it on the retried request); the request's tier is the slower of
        that and where it finds the adapter now. It travels with the request, never in a table
        keyed by adapter, so concurrent requests each report their own tier.
        """
        self.cache.acquire(adapter_id)  # before any await: from here on it cannot be evicted
        if self.is_merged(adapter_id):
            self.metrics.requests.labels(Tier.GPU.value).inc()
            return Lease(adapter_id, Tier.GPU)
        try:
            tier = slowest(await self.ensure_registered(adapter_id), loaded_from)
        except BaseException:
            await self.release(adapter_id)
            raise
        self.cache.use(adapter_id)
        self.metrics.requests.labels(tier.value).inc()
        return Lease(adapter_id, tier)

    async def release(self, adapter_id: str) -> None:
        if self.cache.release(adapter_id):
            async with self._slots_cond:
                self._slots_cond.notify_all()

    # ---------------------------------------------------------------- loading

    async def ensure_registered(self, adapter_id: str) -> Tier:
        """Bring the adapter to vLLM's RAM cache; returns where this call found it.

        A call that arrives while another is loading the adapter waits for that load and
        reports the tier it is being brought from: its wait cost that much.
        """
        if self.is_merged(adapter_id):
            return Tier.GPU
        in_transit = self._in_transit.get(adapter_id)  # read on arrival, before waiting
        return slowest(await self._register_once(adapter_id), in_transit)

    async def _register_once(self, adapter_id: str) -> Tier:
        record = self.records[adapter_id]
        async with self._locks[adapter_id]:
            if adapter_id in self.failed:
                raise VerificationError("Refused", self.failed[adapter_id])
            tier = self.tier_of(adapter_id)
            if tier in (Tier.GPU, Tier.RAM):
                return tier
            started = time.monotonic()
            with self._loading_from(adapter_id, tier):
                if tier is Tier.DISK and not await self._disk_copy_intact(record):
                    tier = self._in_transit[adapter_id] = Tier.REMOTE
                if tier is Tier.REMOTE:
                    await self._download(record)
                await self._register(adapter_id)
            elapsed = time.monotonic() - started
            self.metrics.loads.labels(tier.value).inc()
            self.metrics.load_seconds.labels(tier.value).observe(elapsed)
            self.loads.add()
            log.info("adapter %s loaded from %s in %.3fs", adapter_id, tier.value, elapsed)
            return tier

    async def ensure_on_disk(self, adapter_id: str) -> Tier:
        """Fetch and verify into the disk tier only (pre-warm beyond vLLM's RAM slots)."""
        record = self.records[adapter_id]
        async with self._locks[adapter_id]:
            if adapter_id in self.failed:
                raise VerificationError("Refused", self.failed[adapter_id])
            tier = self.tier_of(adapter_id)
            if tier is Tier.REMOTE:
                with self._loading_from(adapter_id, tier):
                    await self._download(record)
            return tier

    @contextlib.contextmanager
    def _loading_from(self, adapter_id: str, tier: Tier) -> Iterator[None]:
        """While the block runs the adapter is loading (never evicted) and in transit from
        `tier` (what a call arriving meanwhile reports), however the block ends."""
        self._loading.add(adapter_id)
        self._in_transit[adapter_id] = tier
        try:
            yield
        finally:
            self._loading.discard(adapter_id)
            del self._in_transit[adapter_id]

    async def _disk_copy_intact(self, record: AdapterRecord) -> bool:
        """Re-verify a disk copy before vLLM reads it; a bad copy is discarded (refetched).

        The cache folder is writable by the pod; a copy verified at download may have been
        altered since, so every registration from disk checks it again (~1 ms per MB).
        """
        try:
            await asyncio.to_thread(check_files, self.disk.path(record.id), record, self.policy)
        except VerificationError as exc:
            self.disk.evict(record.id)
            self.metrics.disk_copies_discarded.labels(exc.reason).inc()
            log.error("discarded the disk copy of %s (%s); fetching it again", record.id, exc)
            return False
        return True

    async def _download(self, record: AdapterRecord) -> None:
        with self._disk_writes(record.id):
            staging = self.disk.staging()
        try:
            with self._disk_writes(record.id):
                size = await asyncio.to_thread(
                    self.store.fetch, record.weights_uri, staging, record.tenant
                )
            try:
                await asyncio.to_thread(check_files, staging, record, self.policy)
            except VerificationError as exc:
                self._fail(record.id, exc)
                raise
            self._make_disk_room(size)
            with self._disk_writes(record.id):
                self.disk.commit(staging, record.id)
        finally:
            self.disk.discard(staging)  # no-op after a commit renamed it away; a partial
            # download goes with it, so nothing half-written is ever under the adapter's id

    @contextlib.contextmanager
    def _disk_writes(self, adapter_id: str) -> Iterator[None]:
        """A write the volume refuses (full, read-only) is CacheFull: 503 `cache_full`, which
        the gateway retries on another replica, not a 500 it would pass on as the request's
        fault. The adapter is not marked refused: its files are fine."""
        try:
            yield
        except OSError as exc:
            if exc.errno not in _DISK_ERRNOS:
                raise
            self.metrics.disk_write_failures.inc()
            log.error("the adapter cache %s cannot be written (%s) for adapter %s",
                      self.disk.root, exc.strerror, adapter_id)  # fmt: skip
            raise CacheFull(
                f"the adapter cache on this replica cannot be written ({exc.strerror})"
            ) from exc

    def _make_disk_room(self, size: int) -> None:
        victims = self.cache.disk_victims(size)
        if victims is None:
            raise CacheFull(f"disk cache budget {self.disk.lru.budget} B cannot fit {size} B")
        for victim in victims:
            self.disk.evict(victim)
            self.metrics.evictions.labels(Tier.DISK.value).inc()
            self.evictions.add()

    async def _register(self, adapter_id: str) -> None:
        async with self._slots_cond:
            while self.cache.needs_ram_room():
                victim = self.cache.ram_victim(adapter_id)
                if victim is None:
                    # Every registered adapter has running requests: wait for one to finish.
                    await self._slots_cond.wait()
                    continue
                await self._unregister_locked(victim, evicted=True)
            await self.vllm.load_lora(adapter_id, self.disk.path(adapter_id))
            self.slots.register(adapter_id)

    async def _unregister_locked(self, adapter_id: str, *, evicted: bool) -> None:
        tier = self.slots.tier(adapter_id) or Tier.RAM
        # Forget it first (synchronously): a request arriving meanwhile reloads it from disk.
        self.slots.unregister(adapter_id)
        await self.vllm.unload_lora(adapter_id)
        if evicted:
            self.metrics.evictions.labels(tier.value).inc()
            self.evictions.add()
            log.info("evicted idle adapter %s from %s", adapter_id, tier.value)

    async def unload(self, adapter_id: str) -> bool:
        """Unregister from vLLM (the disk copy stays); False when requests are running."""
        async with self._slots_cond:
            if self.refs[adapter_id] > 0:
                return False
            if self.slots.is_registered(adapter_id):
                await self._unregister_locked(adapter_id, evicted=False)
            return True

    async def forget(self, adapter_id: str) -> bool:
        """The adapter is gone from the registry: unregister it, delete its disk copy, drop its
        record and any refusal (a record conflict included), so a later record under the id is
        a new adapter, not a second record. False when requests are running (nothing changes).

        Ids are immutable while an adapter exists; this is the one way a held record goes
        without an agent restart (a LoRAAdapter deleted, then recreated with other weights).
        """
        # The adapter's lock first, as a load takes it: a load under way finishes before.
        async with self._locks[adapter_id], self._slots_cond:
            if self.refs[adapter_id] > 0:
                return False
            on_disk = self.disk.has(adapter_id)
            if self.slots.is_registered(adapter_id):
                await self._unregister_locked(adapter_id, evicted=False)
            self.disk.evict(adapter_id)
            held = self.records.pop(adapter_id, None)
            refused = self.failed.pop(adapter_id, None)
        # The lock stays in `_locks`: a load waiting on it must find the same one.
        if held is not None or refused is not None or on_disk:
            self.metrics.forgets.inc()
            log.info(
                "forgot adapter %s (deleted from the registry): record %s, refusal %s",
                adapter_id,
                held.checksum if held is not None else "none",
                refused or "none",
            )
        return True

    # ---------------------------------------------------------------- vLLM restarts

    async def resync(self) -> list[str]:
        """Forget registrations vLLM no longer holds (it restarted); returns them.

        Fast (one /v1/models call), so readiness returns at once: requests register what they
        need from disk on demand, and a background task registers the rest again, most recently
        used first. Raises httpx.HTTPError when vLLM does not answer.
        """
        async with self._slots_cond:
            held = set(await self.vllm.lora_names())
            lost = [a for a in self.slots.registered() if a not in held]
            for adapter_id in lost:
                self.slots.unregister(adapter_id)
        if lost:
            self.metrics.engine_resyncs.inc()
            log.warning(
                "vLLM no longer holds %d adapter(s) this agent registered (it restarted?): "
                "registering them again: %s",
                len(lost),
                ", ".join(lost[:10]),
            )
            task = asyncio.create_task(self._register_again(lost[::-1]))
            self._background.add(task)  # held until done: a bare task may be collected
            task.add_done_callback(self._background.discard)
        return lost

    async def _register_again(self, adapter_ids: list[str]) -> None:
        for adapter_id in adapter_ids:
            if adapter_id not in self.records or self.slots.is_registered(adapter_id):
                continue
            self.cache.acquire(adapter_id)  # pinned like a request while it is registered
            try:
                await self.ensure_registered(adapter_id)
            except Exception as exc:  # one bad adapter must not stop the others
                log.warning("registering %s again after a vLLM restart failed: %s", adapter_id, exc)
            finally:
                await self.release(adapter_id)

    async def open_completion(
        self, adapter_id: str, path: str, body: dict[str, object]
    ) -> httpx.Response:
        """Send a completion for a held adapter; on vLLM's "model does not exist" (vLLM lost
        its registrations, e.g. it restarted), resynchronise, re-register and retry once."""
        resp = await self.vllm.send_completion(path, body)
        if resp.status_code != 404 or self.merged is not None:
            return resp  # a merged model has no registration to lose
        try:
            content = await resp.aread()
        finally:
            await resp.aclose()
        if not is_unknown_model(resp.status_code, content):
            return resp  # already read: the caller's aread() returns the same bytes
        self.metrics.unknown_model_retries.inc()
        log.warning("vLLM does not know adapter %s: resynchronising and retrying", adapter_id)
        await self.resync()
        await self.ensure_registered(adapter_id)
        self.cache.use(adapter_id)
        return await self.vllm.send_completion(path, body)

    async def warm_gpu(self, adapter_id: str) -> Tier:
        """Pull an adapter into a GPU slot with a one-token request; returns where it was."""
        if self.is_merged(adapter_id):
            return Tier.GPU
        self.cache.acquire(adapter_id)  # pinned while warming, like a request
        try:
            tier = await self.ensure_registered(adapter_id)
            self.slots.use(adapter_id)
            r = await self.vllm.http.post(
                "/v1/completions",
                json={"model": adapter_id, "prompt": "warm", "max_tokens": 1},
            )
            r.raise_for_status()
        finally:
            await self.release(adapter_id)
        return tier


__all__ = ["AdapterManager", "CacheFull", "FetchError", "Lease", "MergedModel"]
