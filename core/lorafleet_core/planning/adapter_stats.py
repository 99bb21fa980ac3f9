"""Per-adapter traffic and placements across replicas, and when to write them to the status.

Replicas report counts per adapter (lorafleet_core.wire.replica_state.AdapterActivity); summed over
replicas they give the fleet's requests per minute, tokens/s and GPU hit rate (GPU hits over
requests). Owner counts already follow the summed tokens/s (planning.fleet); this module only
decides the status figures.

Writing them on every sync pass would cost one API write per active adapter per pass. So a new
figure replaces the written one only when both hold:

- at least `MIN_INTERVAL` (one minute) has passed since the written one (`updatedAt`), and
- the change is meaningful: active <-> idle, tokens/s or requests/min by more than 25%
  (and by more than a small absolute amount, so a trickle does not count), or the GPU hit
  rate by 0.1 or more.

Steady traffic therefore writes nothing after the first figure; a burst or a cooling adapter
is visible within about a minute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from lorafleet_core.api.models import AdapterStats, Placement
from lorafleet_core.api.models.adapter import MAX_PLACEMENTS
from lorafleet_core.wire.replica_state import ReplicaState
from lorafleet_core.wire.tiers import TIER_NAMES

MIN_INTERVAL = timedelta(minutes=1)
RELATIVE_CHANGE = 0.25
MIN_TPS_CHANGE = 1.0
MIN_REQUESTS_CHANGE = 5
HIT_RATE_CHANGE = 0.1


@dataclass(frozen=True)
class Measured:
    """One adapter's traffic summed over the replicas that reported it."""

    requests: int = 0
    gpu_hits: int = 0
    tokens_per_second: float = 0.0
    replicas: int = 0

    @property
    def idle(self) -> bool:
        return self.requests == 0 and self.tokens_per_second == 0

    @property
    def gpu_hit_rate(self) -> float | None:
        return self.gpu_hits / self.requests if self.requests else None


IDLE = Measured()


def aggregate(states: Mapping[str, ReplicaState]) -> dict[str, Measured]:
    """Adapter id -> its traffic summed over every replica's last state."""
    out: dict[str, Measured] = {}
    for state in states.values():
        for aid, a in state.adapters.items():
            m = out.get(aid, IDLE)
            out[aid] = Measured(
                m.requests + a.requests,
                m.gpu_hits + min(a.gpu_hits, a.requests),
                m.tokens_per_second + a.tokens_per_second,
                m.replicas + 1,
            )
    return out


def _changed(old: float, new: float, floor: float) -> bool:
    delta = abs(new - old)
    return delta > floor and delta > RELATIVE_CHANGE * max(old, 1e-9)


def meaningful(old: AdapterStats, new: Measured) -> bool:
    was_idle = old.requests_per_minute == 0 and old.tokens_per_second == 0
    if was_idle != new.idle:
        return True
    if _changed(old.tokens_per_second, new.tokens_per_second, MIN_TPS_CHANGE):
        return True
    if _changed(old.requests_per_minute, new.requests, MIN_REQUESTS_CHANGE):
        return True
    if old.gpu_hit_rate is None or new.gpu_hit_rate is None:
        return (old.gpu_hit_rate is None) != (new.gpu_hit_rate is None)
    return abs(old.gpu_hit_rate - new.gpu_hit_rate) >= HIT_RATE_CHANGE


def plan_stats(
    old: AdapterStats | None, new: Measured | None, now: datetime
) -> AdapterStats | None:
    """The stats to hold in the status: `old` unless enough time passed and it changed enough.

    `new` None means nothing was measured this pass (no replica state at all): keep `old`.
    """
    if new is None:
        return old
    if old is None:
        return None if new.idle else _stats(new, now)
    if now - old.updated_at < MIN_INTERVAL or not meaningful(old, new):
        return old
    return _stats(new, now)


def _stats(m: Measured, now: datetime) -> AdapterStats:
    rate = m.gpu_hit_rate
    return AdapterStats(
        requests_per_minute=m.requests,
        tokens_per_second=round(m.tokens_per_second, 2),
        gpu_hit_rate=round(rate, 3) if rate is not None else None,
        replicas=m.replicas,
        updated_at=now,
    )


def plan_placements(
    adapter_id: str,
    old: Sequence[Placement],
    owners: Sequence[str],
    states: Mapping[str, ReplicaState],
    now: datetime,
    *,
    refresh: bool,
) -> list[Placement]:
    """Where the adapter is, for the status: every owner, and every other replica holding it.

    Only recomputed when `refresh` (the stats were just rewritten, or the owners changed), so
    a tier moving back and forth costs no writes in between; `old` is kept otherwise. An owner
    whose state is unknown is listed as `remote`. Bounded to MAX_PLACEMENTS entries: owners
    first, then by tier (gpu, ram, disk) and replica id.
    """
    if not refresh:
        return list(old)
    last_used = {p.replica: p.last_used for p in old}
    out = []
    for rid in sorted(set(owners) | set(states)):
        state = states.get(rid)
        tier = _tier_on(adapter_id, state)
        if tier is None and rid not in owners:
            continue
        active = state is not None and adapter_id in state.adapters
        out.append(
            Placement(
                replica=rid,
                role="owner" if rid in owners else "spill",
                tier=tier or "remote",
                last_used=now if active else last_used.get(rid),
            )
        )
    out.sort(key=lambda p: (p.role != "owner", TIER_NAMES.index(p.tier), p.replica))
    return out[:MAX_PLACEMENTS]


def _tier_on(adapter_id: str, state: ReplicaState | None) -> Literal["gpu", "ram", "disk"] | None:
    if state is None:
        return None
    if adapter_id in state.gpu_adapters:
        return "gpu"
    if adapter_id in state.ram_adapters:
        return "ram"
    if adapter_id in state.disk_adapters:
        return "disk"
    return None
