"""Pre-warm plan: the `lorafleet.dev/owned-adapters` annotation value for every replica pod.

Each adapter's owners come from rendezvous hashing (`lorafleet_core.planning.placement.owners`); a
pod's
annotation lists the records of the adapters it owns, encoded by `lorafleet_core.wire.records`
(sorted by id, compact JSON) so the same set always gives the same bytes and unchanged pods
are never patched. The agent pre-warms in the listed order (`prewarm_pass`): the first RAM
slots' worth registered with vLLM, then the rest pulled to its disk cache only.

`prewarm_order` (hottest first) is an experiment the simulator runs
(`--set prewarm_by_traffic=true`); measured, not shipped (docs/design/0020): the annotation
stays in id order.

Size bound: a value never exceeds `max_bytes` (the pool's `cache.ownedAnnotationMaxBytes`;
Kubernetes caps all of a pod's annotations at 256 KiB together). Past it, a pod keeps (the
kept set) the adapters with the most traffic first, then those it owns as first choice
(primary owner), then by id, and stops at the first one that no longer fits. Adapters left
out are listed in `PrewarmPlan.dropped`; they are not pre-warmed on that pod but still load on
first request, because the gateway posts the record to the agent's load endpoint.

The kept set has hysteresis (`kept_rank`): an adapter the pod's current annotation lists
stays until a challenger is clearly hotter (more than twice its tokens/s), and every figure
below `KEPT_COLD_TPS` counts as that floor. Every change of the kept set makes the agent pull
(and its disk cache evict) adapters, and the figure it follows is a one-minute window in
which most of a big pod's owned adapters show one request or none; ranking on it as it is
listed ~60 new rows per interval pass in the simulated ramp, ~3 with the hysteresis
(docs/design/0022). With the
current annotation as the only memory the plan stays a pure function of the observed world,
and an operator that has no traffic figures yet (just restarted) keeps what is listed.

What owner changes still move (joins and leaves reassign ~1/N of every pod's adapters) the
agents pull at a bounded pace where their disk cache is full (`evicting_pull_wait`): the plan
says what a pod should hold, the pace how fast a full cache turns over to it.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from math import floor, log2
from typing import Generic, TypeVar

from lorafleet_core.planning.placement import owners as rendezvous_owners
from lorafleet_core.wire.records import AdapterRecord, encode_owned_row, join_owned_rows

T = TypeVar("T")


@dataclass(frozen=True)
class PrewarmPass(Generic[T]):
    """One pre-warm pass of an agent over its owned list, in the order it runs: `register`
    first (into vLLM's host RAM cache), then `to_disk` (fetched into the disk tier only)."""

    register: Sequence[T]
    to_disk: Sequence[T]


def prewarm_pass(
    owned: Sequence[T], ram_slots: int, listed_before: Container[T] = ()
) -> PrewarmPass[T]:
    """The agent's pass over its owned list (the annotation's order, not re-sorted).

    Only as many as vLLM's RAM cache holds are registered: registering more would evict each
    other. The rest are pulled to disk, so a first request loads them from disk, not from the
    object store. The agent (`lorafleet_agent.prewarm`) runs it one adapter at a time, and the
    simulator (`lorafleet_sim`) drives the same split.

    `listed_before` (a later pass: the entries the previous annotation listed): only what the
    operator newly assigned is registered; what it listed before and traffic has since moved
    out of RAM stays out (the cache's LRU knows better than the list; registering it again
    evicted what requests were using). Everything else is pulled to disk, where it costs no
    RAM slot (present copies are skipped).
    """
    cut = max(0, ram_slots)
    if not listed_before:
        return PrewarmPass(register=owned[:cut], to_disk=owned[cut:])
    register = [x for x in owned[:cut] if x not in listed_before]
    chosen = set(register)
    return PrewarmPass(register=register, to_disk=[x for x in owned if x not in chosen])


# At most this many pre-warm pulls per minute on one pod that evict from its full disk cache
# (`evicting_pull_wait`). Each owner change (a join, a leave, a kept-set refill) makes the
# pods it touches pull their newcomers, and on a full disk every pull evicts one adapter; a
# burst of joins made one pod evict ~60/min for ten minutes in the simulated ramp, twice the
# thrashing alert's 30/min (docs/design/0025).
# Paced, the same pulls end within minutes, below the rate that means thrashing, and a request
# for an adapter not pulled yet loads it on demand as before.
PREWARM_EVICTING_PULLS_PER_MIN = 10.0


def evicting_pull_wait(now: float, last_evicting_pull: float | None) -> float:
    """Seconds a pre-warm pull that would evict from the pod's full disk cache waits before
    it starts, given when the pass started the last such pull (None: none yet).

    Pulls into free room never wait (a fresh pod fills its cache at the link's speed), nor do
    a request's own loads: only the pass's evicting pulls keep 60 / PREWARM_EVICTING_PULLS_PER_MIN
    seconds apart. The agent's pass (`lorafleet_agent.prewarm`) and the simulator's
    (`lorafleet_sim.prewarm.AgentPass`) both ask this before each such pull.
    """
    if last_evicting_pull is None:
        return 0.0
    gap = 60.0 / PREWARM_EVICTING_PULLS_PER_MIN
    return max(0.0, last_evicting_pull + gap - now)


@dataclass(frozen=True)
class PrewarmPlan:
    annotations: dict[str, str]  # replica id -> annotation value
    owners: dict[str, list[str]]  # adapter id -> owner replica ids, best first
    dropped: dict[str, list[str]] = field(default_factory=dict)  # replica -> ids left out


# Tokens/s below which an adapter ranks as cold in the kept set: ~one response of the trace's
# mean 211 generated tokens every 30 s. Below it the agent's one-minute window holds a request
# or two (or none), which is arrival noise, not a ranking (docs/design/0022
# measures 0.001-32: a higher floor trades fewer pulls for more remote loads).
KEPT_COLD_TPS = 8.0
# How much hotter (log2: a factor of two) a challenger must be to displace a listed adapter.
KEPT_MARGIN_BANDS = 1.0


def kept_rank(tps: float, listed: bool) -> tuple[float, bool]:
    """Sort key (ascending = kept first) of one owned adapter in the kept set: its tokens/s
    on a log2 scale, floored at KEPT_COLD_TPS, plus KEPT_MARGIN_BANDS when the pod's current
    annotation lists it; a tie goes to the listed one.

    So a listed adapter `a` gives way to a challenger `c` only when max(c, floor) is more than
    twice max(a, floor): noise of up to a factor of sqrt(2) on every figure never changes the
    set, a real shift of more than that changes it on the next pass
    (tests/operator/test_planning_prewarm.py checks both).
    """
    if not tps >= 0:  # NaN or negative from a replica's report: cold, never a crash
        tps = 0.0
    score = log2(max(tps, KEPT_COLD_TPS)) + (KEPT_MARGIN_BANDS if listed else 0.0)
    return (-score, not listed)


def _traffic_band(tps: float) -> int:
    # Live tokens/s moves a little on every poll; ordering on the exact figure would rewrite
    # (and patch) every pod annotation each pass. A factor-of-two band keeps hot ahead of cold.
    return floor(log2(tps)) if tps > 0 else -1_000_000


def prewarm_order(adapter_ids: Iterable[str], traffic: Mapping[str, float]) -> list[str]:
    """Pre-warm order of a replica's owned adapters: hottest first (tokens/s, by power-of-two
    band), ties by id; adapters with no traffic figure last, by id.

    One home for the order, so an operator that ships it and the simulator that measured it
    (`FleetParams.prewarm_by_traffic`) use the same one.
    """

    def key(aid: str) -> tuple[bool, int, str]:
        tps = traffic.get(aid)
        return (tps is None, -_traffic_band(tps or 0.0), aid)

    return sorted(adapter_ids, key=key)


@lru_cache(maxsize=131_072)
def _owners_cached(adapter_id: str, replicas: tuple[str, ...], k: int) -> tuple[str, ...]:
    # Owners only change when the replica set or k changes; planning runs on every event
    # burst, so memoising makes a re-plan of 5,000 adapters cheap.
    return tuple(rendezvous_owners(adapter_id, replicas, k))


def plan_owned_annotations(
    records: Sequence[AdapterRecord],
    replicas: Sequence[str],
    k_by_adapter: Mapping[str, int] | int,
    max_bytes: int,
    traffic: Mapping[str, float] | None = None,
    listed: Mapping[str, Container[str]] | None = None,
) -> PrewarmPlan:
    """Owners of every adapter and the annotation value of every replica (even empty ones).

    `listed`: replica -> the ids its current annotation lists (`owned_ids`), the kept set's
    memory (`kept_rank`); a replica missing from it (a new pod) ranks by traffic alone.
    """
    replica_key = tuple(sorted(set(replicas)))
    traffic = traffic or {}
    listed = listed or {}
    nothing: frozenset[str] = frozenset()
    owned: dict[str, list[tuple[tuple[float, bool], int, str]]] = {r: [] for r in replica_key}
    owners: dict[str, list[str]] = {}
    rows: dict[str, str] = {}
    for rec in records:
        k = k_by_adapter if isinstance(k_by_adapter, int) else k_by_adapter.get(rec.id, 2)
        chosen = _owners_cached(rec.id, replica_key, k)
        owners[rec.id] = list(chosen)
        rows[rec.id] = encode_owned_row(rec)
        tps = traffic.get(rec.id, 0.0)
        for position, replica in enumerate(chosen):
            was = rec.id in listed.get(replica, nothing)
            owned[replica].append((kept_rank(tps, was), position, rec.id))

    annotations: dict[str, str] = {}
    dropped: dict[str, list[str]] = {}
    for replica, entries in owned.items():
        entries.sort()
        kept: list[str] = []
        size = 2  # the brackets
        for i, (_, _, aid) in enumerate(entries):
            extra = len(rows[aid]) + (1 if kept else 0)
            if size + extra > max_bytes:
                dropped[replica] = sorted(e[2] for e in entries[i:])
                break
            kept.append(aid)
            size += extra
        kept.sort()
        annotations[replica] = join_owned_rows(rows[a] for a in kept)
    return PrewarmPlan(annotations=annotations, owners=owners, dropped=dropped)
