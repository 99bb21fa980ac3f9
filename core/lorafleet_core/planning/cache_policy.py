"""One replica's adapter cache policy: tiers, LRU order, reference counts (pure, no I/O).

The agent (lorafleet_agent.manager) and the fleet simulator (lorafleet_sim) drive these
same objects, so a change to the policy changes both; nothing else may keep its own LRU.

Tiers, fastest first (lorafleet_core.wire.tiers): gpu (a vLLM LoRA slot), ram (registered with
vLLM, in its host cache), disk (the agent's cache folder under a byte budget), remote.

`SlotTracker` replays what vLLM does with its slots, because vLLM does not report them:

- `POST /v1/load_lora_adapter` loads the adapter into the worker's CPU cache (capacity
  `--max-cpu-loras`, LRU): this is tier "ram".
- When a batch uses an adapter, vLLM activates it into a GPU slot (capacity `--max-loras`,
  LRU over the adapters of recent batches, evicting the least recently activated one) and
  touches it in the CPU cache: tier "gpu".
- Evicting from the CPU cache also frees the adapter's GPU slot.

The agent sees every registration and every request it forwards, in order, so replaying them
through two LRUs of the same capacities gives vLLM's state, up to the ordering of requests
inside one batch. The agent keeps the number of registered adapters <= cpu slots itself
(`CachePolicy.ram_victim`), so vLLM never evicts from its CPU cache behind the agent's back.

`CachePolicy` adds the decisions: never evict an adapter with running requests (refcount > 0)
or one being loaded; evict the least recently used idle one; when every registered adapter is
in use, `ram_victim` answers None and the caller waits for a release.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator

from lorafleet_core.wire.tiers import Tier


class SlotTracker:
    """vLLM's GPU slots and host-RAM cache as two LRUs (least recently used first)."""

    def __init__(self, gpu_slots: int, cpu_slots: int) -> None:
        self.gpu_slots = gpu_slots
        self.cpu_slots = cpu_slots
        self._cpu: OrderedDict[str, None] = OrderedDict()  # registered with vLLM, LRU first
        self._gpu: OrderedDict[str, None] = OrderedDict()  # estimated GPU slots, LRU first
        self._gpu_frozen: frozenset[str] | None = frozenset()  # None once membership changed

    def register(self, adapter_id: str) -> list[str]:
        """vLLM loaded the adapter into its CPU cache; returns ids vLLM itself would evict."""
        self._cpu[adapter_id] = None
        self._cpu.move_to_end(adapter_id)
        evicted = []
        while len(self._cpu) > self.cpu_slots:
            old, _ = self._cpu.popitem(last=False)
            if self._gpu.pop(old, 0) is None:
                self._gpu_frozen = None
            evicted.append(old)
        return evicted

    def unregister(self, adapter_id: str) -> None:
        self._cpu.pop(adapter_id, None)
        if self._gpu.pop(adapter_id, 0) is None:
            self._gpu_frozen = None

    def use(self, adapter_id: str) -> str | None:
        """A request for the adapter was forwarded: vLLM activates it into a GPU slot.

        Returns the adapter whose GPU slot it took, if any (it stays registered, tier ram).
        """
        if adapter_id not in self._cpu:
            raise KeyError(f"{adapter_id} is not registered")
        self._cpu.move_to_end(adapter_id)
        gpu = self._gpu
        if adapter_id in gpu:
            gpu.move_to_end(adapter_id)
            return None
        gpu[adapter_id] = None
        self._gpu_frozen = None
        if len(gpu) > self.gpu_slots:
            return gpu.popitem(last=False)[0]
        return None

    def tier(self, adapter_id: str) -> Tier | None:
        """gpu or ram when registered, else None (the caller knows about disk and remote)."""
        if adapter_id in self._gpu:
            return Tier.GPU
        if adapter_id in self._cpu:
            return Tier.RAM
        return None

    def registered(self) -> list[str]:
        """Registered adapters, least recently used first."""
        return list(self._cpu)

    def iter_registered(self) -> Iterator[str]:
        """Registered adapters, least recently used first, without copying."""
        return iter(self._cpu)

    def registered_count(self) -> int:
        return len(self._cpu)

    def gpu(self) -> list[str]:
        return list(self._gpu)

    def gpu_set(self) -> frozenset[str]:
        """The GPU set as a frozenset, rebuilt only after its membership changed."""
        if self._gpu_frozen is None:
            self._gpu_frozen = frozenset(self._gpu)
        return self._gpu_frozen

    def ram_only(self) -> list[str]:
        return [a for a in self._cpu if a not in self._gpu]

    def is_registered(self, adapter_id: str) -> bool:
        return adapter_id in self._cpu


class LruBytes:
    """Entries with sizes in least-recently-used order; says what to evict to fit a budget."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._sizes: OrderedDict[str, int] = OrderedDict()
        self._used = 0

    def __contains__(self, key: object) -> bool:
        return key in self._sizes

    def __len__(self) -> int:
        return len(self._sizes)

    def order(self) -> list[str]:
        """Least recently used first."""
        return list(self._sizes)

    @property
    def used(self) -> int:
        return self._used

    def touch(self, key: str) -> None:
        if key in self._sizes:
            self._sizes.move_to_end(key)

    def put(self, key: str, size: int) -> None:
        self._used += size - self._sizes.get(key, 0)
        self._sizes[key] = size
        self._sizes.move_to_end(key)

    def remove(self, key: str) -> None:
        self._used -= self._sizes.pop(key, 0)

    def victims(self, incoming: int, pinned: Iterable[str] = ()) -> list[str] | None:
        """Keys to evict (LRU first, skipping pinned) so `incoming` more bytes fit.

        None when even evicting every unpinned entry would not make room.
        """
        keep = pinned if isinstance(pinned, (set, frozenset)) else set(pinned)
        free = self.budget - self._used
        out: list[str] = []
        for key, size in self._sizes.items():
            if free >= incoming:
                break
            if key in keep:
                continue
            out.append(key)
            free += size
        return out if free >= incoming else None


class CachePolicy:
    """The eviction and admission decisions of one replica over its three caches."""

    def __init__(self, slots: SlotTracker, disk: LruBytes) -> None:
        self.slots = slots
        self.disk = disk
        self.refs: Counter[str] = Counter()  # running requests (and warm-ups) per adapter
        self.loading: set[str] = set()  # being fetched or registered right now

    def tier(self, adapter_id: str) -> Tier:
        """Where the adapter is now, by the bookkeeping alone."""
        tier = self.slots.tier(adapter_id)
        if tier is not None:
            return tier
        return Tier.DISK if adapter_id in self.disk else Tier.REMOTE

    def acquire(self, adapter_id: str) -> None:
        """Count a reference: from here on the adapter cannot be evicted."""
        self.refs[adapter_id] += 1

    def release(self, adapter_id: str) -> bool:
        """Drop a reference; True when the adapter became idle (wake waiters for room)."""
        left = self.refs[adapter_id] - 1
        if left <= 0:
            del self.refs[adapter_id]
            return True
        self.refs[adapter_id] = left
        return False

    def use(self, adapter_id: str) -> str | None:
        """A request is forwarded: GPU slot and disk recency; returns a slot it displaced."""
        self.disk.touch(adapter_id)
        return self.slots.use(adapter_id)

    def needs_ram_room(self) -> bool:
        """Registering one more adapter would exceed vLLM's host cache."""
        return self.slots.registered_count() >= self.slots.cpu_slots

    def ram_victim(self, incoming: str) -> str | None:
        """The least recently used idle registered adapter to unregister for `incoming`.

        None when every registered adapter has running requests: the caller waits until a
        release makes one idle (never evict an adapter in use).
        """
        refs = self.refs
        for adapter_id in self.slots.iter_registered():
            if adapter_id != incoming and refs[adapter_id] <= 0:
                return adapter_id
        return None

    def disk_victims(self, size: int) -> list[str] | None:
        """Disk entries to delete so `size` bytes fit; None when even that cannot make room.

        Pinned: adapters with requests, registered with vLLM (it reads their files), loading.
        """
        if self.disk.budget - self.disk.used >= size:
            return []  # fits already: skip building the pinned set
        pinned = set(self.refs)
        pinned.update(self.slots.iter_registered())
        pinned.update(self.loading)
        return self.disk.victims(size, pinned)


__all__ = ["CachePolicy", "LruBytes", "SlotTracker"]
