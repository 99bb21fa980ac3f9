"""The operator's owned-adapters annotations and the agent's pre-warm pass, in the simulator.

Shipped code driven here: `lorafleet_core.planning.prewarm.plan_owned_annotations` (owners by
rendezvous hashing, each pod's annotation in id order, bounded by
`cache.ownedAnnotationMaxBytes` so a pod owning more keeps its hottest adapters, then those it
owns first, with hysteresis over what its annotation lists: `kept_rank`) and `prewarm_pass`
(the agent's split of a pass: the first RAM slots' worth registered with vLLM, the rest
pulled to disk only). The replica runs the pass one adapter at a time (`AgentPass`, driving
the replica's loads), as the agent's `PrewarmWatcher` does.

The operator writes an annotation only when its value changes, and the agent starts a pass
only when the value it reads changes (a fresh agent, after a failure, always does): this
module keeps the last value per pod so the simulator starts passes exactly then.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from lorafleet_core.planning.cache_policy import CachePolicy
from lorafleet_core.planning.prewarm import (
    PrewarmPass,
    evicting_pull_wait,
    plan_owned_annotations,
)
from lorafleet_core.wire.records import AdapterRecord, owned_ids
from lorafleet_core.wire.tiers import Tier

if TYPE_CHECKING:
    from lorafleet_sim.replica import Replica

# A record as the operator builds it from a LoRAAdapter (rank 16 on the seven projections):
# the annotation's size bound counts its bytes (~416 per row with the default names), so the
# simulated rows are as long as real ones.
_MODULES = ("down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj")
_BASE_HASH = "sha256:" + "0" * 64


def sim_record(name: str, size_bytes: int) -> AdapterRecord:
    """The registry record of a simulated adapter (not validated: trace and mix names need
    not be DNS names, and the planner only reads ids and encodes rows)."""
    return AdapterRecord.model_construct(
        id=name,
        tenant=name,
        base_model_hash=_BASE_HASH,
        rank=16,
        alpha=32.0,
        target_modules=_MODULES,
        weights_uri=f"s3://lorafleet-adapters/{name}/v1/",
        checksum="sha256:" + hashlib.sha256(name.encode()).hexdigest(),
        size_bytes=size_bytes,
    )


class OwnedAnnotations:
    """The annotation the operator last wrote on each pod; which pods a re-plan changes."""

    def __init__(self, names: Iterable[str], size_bytes: int, max_bytes: int) -> None:
        self.records = [sim_record(n, size_bytes) for n in names]
        self.max_bytes = max_bytes
        self.written: dict[str, str] = {}
        self.listed: dict[str, frozenset[str]] = {}  # the ids of each written value
        # Whether the last plan left adapters out of some annotation: only then does the
        # operator's traffic figure change an annotation (which adapters are kept); otherwise
        # a re-plan with the same owners writes the same values, and is skipped.
        self.dropped_any = False

    def plan(
        self, members: Sequence[str], k_by: Mapping[str, int] | int, traffic: Mapping[str, float]
    ) -> dict[str, tuple[list[str], frozenset[str]]]:
        """Re-plan over the live replicas: for each replica whose annotation changed, its
        owned ids (annotation order), which its agent now pre-warms, and the ids its agent
        read before (empty for a fresh agent)."""
        plan = plan_owned_annotations(
            self.records, members, k_by, self.max_bytes, traffic, self.listed
        )
        self.dropped_any = bool(plan.dropped)
        changed: dict[str, tuple[list[str], frozenset[str]]] = {}
        for rid, value in plan.annotations.items():
            if self.written.get(rid) != value:
                self.written[rid] = value
                ids = owned_ids(value)
                changed[rid] = (ids, self.listed.get(rid, frozenset()))
                self.listed[rid] = frozenset(ids)
        return changed

    def forget(self, rid: str) -> None:
        """The pod's agent restarts: its first read of the annotation is a change."""
        self.written.pop(rid, None)
        self.listed.pop(rid, None)


class AgentPass:
    """The agent's pre-warm on one simulated replica (`PrewarmWatcher.once` + `_pass`).

    One pass at a time, one adapter at a time: `register` entries loaded into RAM (from disk,
    or fetched first), then `to_disk` entries fetched only; present ones are skipped. An
    adapter a request is loading holds the agent's per-adapter lock, so the pass waits for that
    load. An annotation read while a pass runs waits for it; a later one replaces it (the
    watcher reads the latest value when the pass ends). A fetch that would evict from the full
    disk cache waits its turn (`evicting_pull_wait`), as the agent's does.
    """

    def __init__(self, replica: Replica) -> None:
        self.replica = replica
        self.queue: deque[tuple[str, bool]] = deque()  # (adapter, to disk only)
        self.next_pass: PrewarmPass[str] | None = None
        self.current: str | None = None  # the adapter the pass is loading or waiting for
        self.disk_only: set[str] = set()  # the pass's fetches that stop at the disk tier
        self.passed = False  # a first pass ended: the agent's `warming` state until then
        self.last_evicting_pull: float | None = None  # `evicting_pull_wait`'s memory
        self._waiting = False  # the pass waits for its next evicting pull's turn

    def start(self, plan: PrewarmPass[str], now: float) -> None:
        if self.current is None and not self.queue and not self._waiting:
            self._queue(plan)
            self.advance(now)
        else:
            self.next_pass = plan

    def add(self, names: Sequence[str], now: float) -> None:
        self.queue.extend((name, False) for name in names)
        if self.current is None and not self._waiting:
            self.advance(now)

    def _resume(self, now: float, epoch: int) -> None:
        # An evicting pull's turn came; a pod that failed meanwhile has a new agent.
        if epoch == self.replica.epoch and self.replica.warm is self and self._waiting:
            self._waiting = False
            self.advance(now)

    def _queue(self, plan: PrewarmPass[str]) -> None:
        self.queue.extend((name, False) for name in plan.register)
        self.queue.extend((name, True) for name in plan.to_disk)

    def advance(self, now: float) -> None:
        """The next load of the pass (the replica calls back when the current one ends)."""
        if self._waiting:
            return  # `_resume` goes on
        replica = self.replica
        cache, queue = replica.cache, self.queue
        while True:
            while queue:
                name, to_disk = queue.popleft()
                if name in replica.pending:
                    self.current = name  # continued when that load ends
                    return
                tier = cache.tier(name)
                if tier is Tier.REMOTE and cache.disk_victims(replica.p.adapter_bytes):
                    wait = evicting_pull_wait(now, self.last_evicting_pull)
                    if wait > 0:
                        queue.appendleft((name, to_disk))
                        self.current, self._waiting = None, True
                        replica.eng.schedule(now + wait, self._resume, replica.epoch)
                        return
                    self.last_evicting_pull = now
                if tier is Tier.REMOTE or (not to_disk and tier is Tier.DISK):
                    self.current = name
                    if to_disk:
                        self.disk_only.add(name)
                    replica.start_load(name, tier, now, [])
                    return
            if self.next_pass is None:
                break
            self._queue(self.next_pass)
            self.next_pass = None
        self.current = None
        self.passed = True


def apply_pass_instantly(cache: CachePolicy, plan: PrewarmPass[str], size: int) -> None:
    """The end state of a finished pass, for a fleet already running when the run starts:
    the same cache decisions the agent's pass makes (disk room by the policy's LRU victims,
    registered adapters pinned), without the time it takes."""
    for name in plan.register:
        if _put_on_disk(cache, name, size):
            if cache.needs_ram_room():
                victim = cache.ram_victim(name)
                if victim is None:
                    continue
                cache.slots.unregister(victim)
            cache.slots.register(name)
    for name in plan.to_disk:
        _put_on_disk(cache, name, size)


def _put_on_disk(cache: CachePolicy, name: str, size: int) -> bool:
    if name in cache.disk:
        return True
    victims = cache.disk_victims(size)
    if victims is None:
        return False  # the agent's CacheFull: logged, the pass goes on
    for victim in victims:
        cache.disk.remove(victim)
    cache.disk.put(name, size)
    return True
