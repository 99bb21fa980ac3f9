"""Where a request goes: pure choice of replicas from a load snapshot.

Owners are the k rendezvous winners among healthy replicas (lorafleet_core.planning.placement, the
same
function the operator uses to pre-warm them). A replica is overloaded when its queue is over
`max_queue_depth`, or when its tokens in flight are over both `max_tokens_in_flight` and
`balance` times the mean over healthy replicas (bounded-load hashing: a fixed token threshold
is either too low for long prompts, so every replica looks overloaded and routing degrades to
least-loaded-of-all, or too high, so residency piles a hot adapter on one owner). Among the
owners that are not overloaded:

1. residency first: an owner whose state lists the adapter in a GPU slot (least loaded of
   those). Choosing purely by load would split a tail adapter's few requests across both
   owners, so both must hold it in a slot and each evicts something else; sticking to the
   resident owner keeps one copy hot;
2. otherwise the owner with the fewest tokens in flight;
3. when every owner is overloaded, spill to a replica that is not: with `spill="rendezvous"`
   one that holds the adapter in a GPU slot, else the first in the adapter's rendezvous order,
   so an adapter's spills keep landing on the same replica and find it cached there (the
   least-loaded replica, `spill="least_loaded"`, is a different one each time and usually
   has to fetch the adapter); when all replicas are overloaded, the least-loaded of all.

The simulator (`lorafleet sim --scenario routing-ab`, docs/design/0006) measured each rule
before it shipped. The returned candidate list is also the retry order: the rest of the owners
(least loaded first), then the other replicas (rendezvous order, or least loaded first with
spill="least_loaded"), overloaded replicas last by load. Ties break in rendezvous order so
every gateway makes the same choice from the same state.

`policy` (the gateway's `routing_policy` setting) picks the rule set; the simulator's routing
A/B runs the same three through this function:
- `affinity` (default): all of the above;
- `least_loaded`: the same without residency (rules 2 and 3 only; a spill goes to the first
  non-overloaded replica in spill order, never to a GPU holder);
- `random`: uniform over the healthy replicas, ignoring owners and load (a baseline for A/B
  tests; the rest of the replicas, in snapshot order, are the retry order).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from lorafleet_core.planning.placement import ranked
from lorafleet_core.wire.replica_state import MergedServing


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """A healthy replica's load as the router sees it (polled state + local in-flight)."""

    tokens_in_flight: int = 0
    queue_depth: int = 0
    gpu_adapters: frozenset[str] = field(default_factory=frozenset)
    # In host RAM or on local disk, not in a GPU slot (read only with residency="any").
    held_adapters: frozenset[str] = field(default_factory=frozenset)
    merged: MergedServing | None = None  # a merged replica: the adapter its weights carry
    # Seconds since this gateway began routing to it (healthy and not warming); inf = unknown.
    serving_s: float = math.inf


def blended_tokens(polled: int, local_now: int, local_at_poll: int) -> int:
    """Tokens in flight on a replica between polls, as one gateway estimates them.

    The polled figure plus what this gateway started (minus what finished) since that poll,
    and never less than this gateway's own requests there now: a burst must not pile onto the
    replica that looked idlest a second ago.
    """
    return max(local_now, polled + local_now - local_at_poll)


POLICIES = ("affinity", "least_loaded", "random")
# A merged replica's bounds (Thresholds; the gateway settings and the simulator read these).
MERGED_MAX_QUEUE_DEPTH = 4
MERGED_MAX_TOKENS_IN_FLIGHT = 40_000
SETTLE_RULES = ("cap", "spill", "cap+spill")
SPILLS = ("rendezvous", "least_loaded")
RESIDENCIES = ("gpu", "spill", "any")

# Draws of the `random` policy when the caller passes no generator (the gateway): which replica
# a baseline request lands on needs no secrecy, only uniformity.
_RANDOM = random.Random()  # noqa: S311


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The router's knobs: overload thresholds, bounded-load factor, spill order, policy."""

    max_tokens_in_flight: int = 16384
    max_queue_depth: int = 32
    balance: float = 1.25  # bounded load vs the fleet mean; 0 = the absolute thresholds only
    spill: str = "rendezvous"  # or "least_loaded"
    policy: str = "affinity"  # or "least_loaded", "random"
    # affinity: which tiers count as "holds the adapter". "spill": an owner with it in RAM or on
    # disk before one without, and spills to a replica holding it in any tier; "any" also
    # before a cold owner (docs/design/0006: neither shipped).
    residency: str = "gpu"
    # A replica serving for less than `settle_s` (0 = off) is just-joined: with "cap" its
    # near-empty load is left out of the fleet mean the bounded-load cap is taken from, with
    # "spill" it is the last spill target before overloaded replicas.
    settle_s: float = 0.0
    settle_rules: str = "cap+spill"
    # A merged pool's replica (lorafleet_gateway.pool_router) is full, and the adapter's
    # request spills to its shared pool, past either bound (0 = that bound off): requests
    # admitted and not yet streaming, or tokens in flight (~30 of the trace's requests: a
    # 32-sequence batch about full). Chosen in `lorafleet sim --scenario merged-overflow`.
    merged_max_queue_depth: int = MERGED_MAX_QUEUE_DEPTH
    merged_max_tokens_in_flight: int = MERGED_MAX_TOKENS_IN_FLIGHT

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"routing policy must be one of {'|'.join(POLICIES)}: {self.policy!r}")
        if self.spill not in SPILLS:
            raise ValueError(f"routing spill must be one of {'|'.join(SPILLS)}: {self.spill!r}")
        if self.residency not in RESIDENCIES:
            raise ValueError(
                f"residency must be one of {'|'.join(RESIDENCIES)}: {self.residency!r}"
            )
        if self.settle_rules not in SETTLE_RULES:
            raise ValueError(
                f"settle rules must be one of {'|'.join(SETTLE_RULES)}: {self.settle_rules!r}"
            )
        if not self.settle_s >= 0:
            raise ValueError(f"settle time must be 0 or more: {self.settle_s!r}")
        if not self.balance >= 0:  # also refuses NaN
            raise ValueError(f"routing balance must be 0 or more: {self.balance!r}")
        if self.merged_max_queue_depth < 0 or self.merged_max_tokens_in_flight < 0:
            raise ValueError("merged pool bounds must be 0 or more")

    def merged_full(self, view: ReplicaView) -> bool:
        """A merged replica past its pool's bounds (pool_router spills the request)."""
        q, t = self.merged_max_queue_depth, self.merged_max_tokens_in_flight
        return (q > 0 and view.queue_depth > q) or (t > 0 and view.tokens_in_flight > t)

    def overloaded(self, view: ReplicaView, token_cap: int | None = None) -> bool:
        """Over the queue threshold, or over `token_cap` (default: the absolute threshold)."""
        cap = self.max_tokens_in_flight if token_cap is None else token_cap
        return view.tokens_in_flight > cap or view.queue_depth > self.max_queue_depth

    def token_cap(self, replicas: Mapping[str, ReplicaView]) -> int:
        """Tokens in flight above which a replica counts as overloaded in this snapshot."""
        return self.cap_for([v.tokens_in_flight for v in replicas.values()])

    def cap_for(self, loads: list[int]) -> int:
        """The token cap for replicas carrying `loads` tokens in flight."""
        if self.balance <= 0 or not loads:
            return self.max_tokens_in_flight
        return max(self.max_tokens_in_flight, int(self.balance * sum(loads) / len(loads)))


@dataclass(frozen=True, slots=True)
class RoutePlan:
    candidates: tuple[str, ...]  # first = the choice; the rest = retry order
    outcome: str  # owner_resident | owner | holder | spill | saturated | random | none
    owners: tuple[str, ...] = ()


def plan_route(
    adapter_id: str,
    replicas: Mapping[str, ReplicaView],
    k: int,
    thresholds: Thresholds,
    rng: random.Random | None = None,
) -> RoutePlan:
    """The replicas to try for `adapter_id`, best first, and why the first was chosen.

    `rng` draws the `random` policy's choice (the simulator passes its seeded generator).
    """
    if not replicas:
        return RoutePlan((), "none")
    if thresholds.policy == "random":
        live = list(replicas)
        first = live[(rng or _RANDOM).randrange(len(live))]
        return RoutePlan((first, *(r for r in live if r != first)), "random")
    order = _ranked(adapter_id, tuple(replicas))
    n = len(order)
    n_owners = min(max(1, k), n)
    owners = order[:n_owners]
    # Whole-list comprehensions instead of one Python loop with appends: at 260 replicas this
    # is ~3x cheaper per request (lorafleet sim at 10x the design's scale spends most of its
    # time here). Sorts are stable, so ties keep rendezvous order.
    views = [replicas[r] for r in order]
    loads = [v.tokens_in_flight for v in views]
    settle = thresholds.settle_s
    young = [v.serving_s < settle for v in views] if settle > 0 else []
    # Only when some replicas have settled: a whole fleet seen for the first time (a gateway
    # that just started) is routed as before.
    joined = True in young and False in young
    if joined and thresholds.settle_rules != "spill":
        cap = thresholds.cap_for([t for t, y in zip(loads, young, strict=True) if not y])
    else:
        cap = thresholds.cap_for(loads)
    max_queue = thresholds.max_queue_depth
    ok = [t <= cap and v.queue_depth <= max_queue for t, v in zip(loads, views, strict=True)]
    ok_owners = sorted(((loads[i], order[i]) for i in range(n_owners) if ok[i]), key=_load)
    ok_owner_ids = [r for _, r in ok_owners]
    if thresholds.spill == "rendezvous":
        ok_others = [order[i] for i in range(n_owners, n) if ok[i]]
    else:
        ranked_others = ((loads[i], order[i]) for i in range(n_owners, n) if ok[i])
        ok_others = [r for _, r in sorted(ranked_others, key=_load)]
    if joined and thresholds.settle_rules != "cap":
        # A just-joined replica holds only what it owns: a spill there is a fetch from the
        # object store, so it takes spills only when every settled replica is over the cap.
        young_ids = {order[i] for i in range(n_owners, n) if young[i]}
        ok_others = [r for r in ok_others if r not in young_ids] + [
            r for r in ok_others if r in young_ids
        ]
    over = [r for _, r in sorted(((loads[i], order[i]) for i in range(n) if not ok[i]), key=_load)]

    affinity = thresholds.policy == "affinity"
    resident = [r for r in ok_owner_ids if affinity and adapter_id in replicas[r].gpu_adapters]
    tiers = thresholds.residency if affinity else "gpu"
    if resident:
        first, outcome = resident[0], "owner_resident"
    elif tiers != "gpu" and (held := _holder(adapter_id, ok_owner_ids, ok_others, replicas, tiers)):
        first, outcome = held
    elif ok_owner_ids:
        first, outcome = ok_owner_ids[0], "owner"
    elif ok_others:
        first, outcome = ok_others[0], "spill"
        if affinity and thresholds.spill == "rendezvous":
            # A replica that already holds the adapter in a GPU slot (an earlier spill) first.
            first = next((r for r in ok_others if adapter_id in replicas[r].gpu_adapters), first)
            if tiers != "gpu" and adapter_id not in replicas[first].gpu_adapters:
                # then one holding it in RAM or on disk
                held_by = (r for r in ok_others if adapter_id in replicas[r].held_adapters)
                first = next(held_by, first)
    else:
        first, outcome = over[0], "saturated"
    rest = ok_owner_ids + ok_others + over
    rest.remove(first)
    return RoutePlan((first, *rest), outcome, owners)


def _holder(
    adapter_id: str,
    ok_owners: list[str],
    ok_others: list[str],
    replicas: Mapping[str, ReplicaView],
    tiers: str,
) -> tuple[str, str] | None:
    """No owner holds it in a GPU slot: an owner with it in RAM or on disk; with tiers="any",
    else a non-owner with it in a GPU slot, then in RAM or on disk (an earlier owner after
    placements moved, an earlier spill), rather than an owner that must fetch it."""
    for r in ok_owners:
        if adapter_id in replicas[r].held_adapters:
            return r, "owner"
    if tiers != "any":
        return None
    for r in ok_others:
        if adapter_id in replicas[r].gpu_adapters:
            return r, "holder"
    for r in ok_others:
        if adapter_id in replicas[r].held_adapters:
            return r, "holder"
    return None


def _load(entry: tuple[int, str]) -> int:
    return entry[0]


@lru_cache(maxsize=16384)
def _ranked(adapter_id: str, replica_ids: tuple[str, ...]) -> tuple[str, ...]:
    # Hashing every (adapter, replica) pair is most of the router's cost; the replica set
    # changes rarely, so the order is cached per adapter and replica set.
    return tuple(ranked(adapter_id, replica_ids))
