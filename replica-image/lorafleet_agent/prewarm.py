"""Pre-warm: pull the adapters this pod owns to disk and vLLM's RAM cache.

The operator writes the owned records into the pod annotation `lorafleet.dev/owned-adapters`;
the downward API projects the pod's annotations into a file (one `key="value"` per line) that
Kubernetes rewrites when the annotation changes. The agent polls the file: inotify does not
see the atomic symlink swap the kubelet does on every platform, and a poll every few seconds
costs nothing.

Until the first pass over the owned set ends the replica reports `warming` (ReplicaState),
so the gateway sends its requests to replicas that already hold their adapters; an annotation
that has not arrived yet (the operator writes it once the pod is ready) counts as a pass not
yet made. `ready_timeout_s` bounds the wait: a broken object store makes every fetch of the
pass time out, and the replica must still serve what it can.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

from lorafleet_agent.manager import AdapterManager
from lorafleet_core.api.names import ANNOTATION_OWNED_ADAPTERS
from lorafleet_core.planning.prewarm import evicting_pull_wait, prewarm_pass
from lorafleet_core.wire.records import AdapterRecord, decode_owned, parse_downward_annotations
from lorafleet_core.wire.tiers import Tier

log = logging.getLogger(__name__)


def read_owned(path: Path) -> list[AdapterRecord] | None:
    """The owned records in a downward-API annotations file; None when the file or the
    annotation is absent (not assigned yet) or malformed."""
    try:
        text = path.read_text()
        value = parse_downward_annotations(text).get(ANNOTATION_OWNED_ADAPTERS)
        return None if value is None else decode_owned(value)
    except FileNotFoundError:
        return None
    except ValueError as exc:  # pydantic's ValidationError and json errors are ValueErrors
        log.warning("ignoring malformed %s: %s", path, exc)
        return None


class PrewarmWatcher:
    def __init__(
        self,
        manager: AdapterManager,
        path: Path,
        poll_s: float,
        ready_timeout_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.manager = manager
        self.path = path
        self.poll_s = poll_s
        self.ready_timeout_s = ready_timeout_s
        self.clock = clock
        self._last: list[AdapterRecord] | None = None
        self._started: float | None = None  # when run() began (the engine is up)
        self._passed = False
        self._gave_up = False
        self._last_evicting_pull: float | None = None  # evicting_pull_wait's memory

    @property
    def warming(self) -> bool:
        """True until the first pass ends, at most `ready_timeout_s` after run() began."""
        if self._passed or self._gave_up:
            return False
        if self._started is None:
            return self.ready_timeout_s > 0
        if self.clock() - self._started >= self.ready_timeout_s:
            self._gave_up = True
            log.warning(
                "pre-warm pass not finished after %.0f s; serving anyway", self.ready_timeout_s
            )
            return False
        return True

    async def run(self) -> None:
        self._started = self.clock()
        while True:
            await self.once()
            await asyncio.sleep(self.poll_s)

    async def once(self) -> None:
        records = await asyncio.to_thread(read_owned, self.path)
        if records is None or records == self._last:
            return
        previous, self._last = self._last, records
        began = self.clock()
        await self.warm(records, previous)
        if not self._passed:
            self._passed = True
            log.info(
                "pre-warm pass of %d owned adapters done in %.1f s",
                len(records),
                self.clock() - began,
            )

    async def warm(
        self, records: list[AdapterRecord], previous: list[AdapterRecord] | None
    ) -> None:
        """One pass over the owned `records` (`previous`: what the last pass was given)."""
        # One home for the split (lorafleet_core.planning.prewarm.prewarm_pass, which the
        # simulator drives too); one fetch at a time, so the pass takes a single share of the
        # object store link beside the requests' own loads. A later pass registers only what
        # the annotation newly lists: registering the whole list again evicted from RAM what
        # traffic was using (simulated ramp: evictions 10 -> 40/min per replica).
        listed_before = frozenset(previous) if previous is not None else frozenset()
        plan = prewarm_pass(records, self.manager.slots.cpu_slots, listed_before)
        for record in plan.register:
            try:
                self.manager.add_record(record)
                await self._pace(record)
                await self.manager.ensure_registered(record.id)
            except Exception as exc:  # one bad adapter must not stop the others
                log.warning("pre-warm of %s failed: %s", record.id, exc)
        for record in plan.to_disk:
            try:
                self.manager.add_record(record)
                await self._pace(record)
                await self.manager.ensure_on_disk(record.id)
            except Exception as exc:
                log.warning("pre-warm of %s failed: %s", record.id, exc)

    async def _pace(self, record: AdapterRecord) -> None:
        """Wait for this pull's turn when it would evict from the full disk cache (the pass's
        evicting pulls keep apart, `evicting_pull_wait`); pulls into free room go at once."""
        if not self._pull_would_evict(record):
            return
        wait = evicting_pull_wait(self.clock(), self._last_evicting_pull)
        if wait > 0:
            await asyncio.sleep(wait)  # rate limiting, not synchronisation
        self._last_evicting_pull = self.clock()

    def _pull_would_evict(self, record: AdapterRecord) -> bool:
        manager = self.manager
        if manager.tier_of(record.id) is not Tier.REMOTE:
            return False
        lru = manager.disk.lru
        # A record without sizeBytes: as big as the cached ones on average.
        size = record.size_bytes or (lru.used // len(lru) if len(lru) else 0)
        return bool(manager.cache.disk_victims(size))
