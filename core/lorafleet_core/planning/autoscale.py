"""Autoscaling recommender for a ReplicaPool: pure, with an injectable clock.

Raw recommendation: enough replicas that neither tokens in flight nor queued requests per
replica exceed their targets, clamped to [min, max]. Stabilisation as Kubernetes' HPA does
it: scale up only to the *lowest* recommendation seen within the scale-up window (a short
spike does not add replicas), scale down only to the *highest* seen within the scale-down
window (a short lull does not remove them). So the count never flaps faster than a window.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from lorafleet_core.api.models import AutoscalingSpec, ReplicaBounds
from lorafleet_core.wire.replica_state import ReplicaState


@dataclass(frozen=True)
class Load:
    """Load summed over the replicas that answered a scrape."""

    tokens_in_flight: int = 0
    queue_depth: int = 0
    replicas_reporting: int = 0

    @classmethod
    def of(cls, states: Iterable[ReplicaState]) -> Load:
        tokens = queue = n = 0
        for s in states:
            tokens += s.tokens_in_flight
            queue += s.queue_depth
            n += 1
        return cls(tokens, queue, n)


def recommend(load: Load, spec: AutoscalingSpec, bounds: ReplicaBounds) -> int:
    """Replicas needed for `load` at the pool's targets, within [min, max]."""
    by_tokens = math.ceil(load.tokens_in_flight / spec.target_tokens_in_flight)
    by_queue = math.ceil(load.queue_depth / spec.target_queue_depth)
    return max(bounds.min, min(bounds.max, max(by_tokens, by_queue)))


@dataclass(frozen=True)
class ScaleState:
    """Recent raw recommendations as (time, replicas), oldest first."""

    history: tuple[tuple[float, int], ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class ScaleDecision:
    desired: int
    raw: int
    state: ScaleState
    reason: str  # "ScaleUp", "ScaleDown", "Stable", "Stabilizing"


def stabilize(
    state: ScaleState,
    current: int,
    raw: int,
    now: float,
    up_window: float,
    down_window: float,
) -> ScaleDecision:
    """The replica count to set now, given the raw recommendation and recent history."""
    horizon = max(up_window, down_window)
    history = (*((t, r) for t, r in state.history if now - t <= horizon), (now, raw))
    ups = [r for t, r in history if now - t <= up_window]
    downs = [r for t, r in history if now - t <= down_window]
    up_to, down_to = min(ups), max(downs)
    new_state = ScaleState(history)
    if up_to > current:
        return ScaleDecision(up_to, raw, new_state, "ScaleUp")
    if down_to < current:
        return ScaleDecision(down_to, raw, new_state, "ScaleDown")
    reason = "Stable" if raw == current else "Stabilizing"
    return ScaleDecision(current, raw, new_state, reason)
