"""Named runs: each scenario is a list of runs (name, workload, parameters, router, events).

steady       the design's peak: 40 req/s for an hour, 5,000 adapters Zipf 1.0, 26 replicas
routing-ab   the same requests routed four ways: the gateway's routing_policy random,
             least_loaded and affinity (the shipped router) before the simulator's routing study
             and as shipped now
thrash       slots far below the active set: evictions/min over the alert's threshold
ramp         traffic ramps 25% -> 100% -> 50% with the autoscaler on (new replicas pay base
             start + warm-up + cold caches)
failure      a replica dies mid-run and comes back cold
hot-tenant   one tenant at 2,000 tokens/s: the operator grows its owners
add-remove   a replica joins at 1/3 of the run and another leaves at 2/3
rollout      the busiest alias rolls out a new version by weight: 5% -> 50% -> 100%
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from lorafleet_sim import workload as wl
from lorafleet_sim.engine import Engine, FleetEvent
from lorafleet_sim.params import FleetParams, ReplicaParams


@dataclass(frozen=True)
class Inputs:
    """What the command line sets for every scenario."""

    rate: float = 40.0
    duration_s: float = 3600.0
    # Simulated before the measured period and left out of the figures: GPU slots start empty
    # (pre-warm fills disk and RAM only), and a fleet at peak has been running for hours.
    warmup_s: float = 600.0
    adapters: int = 5000
    zipf_s: float = 1.0
    seed: int = 0
    trace: Path | None = None
    poisson: bool = False
    mix_file: Path | None = None
    router: str = "affinity"
    replica: ReplicaParams = field(default_factory=ReplicaParams)
    fleet: FleetParams = field(default_factory=FleetParams)

    def mix(self) -> wl.Mix:
        if self.mix_file is not None:
            return wl.read_mix(
                self.mix_file, self.rate, wl.mean_output_tokens(self.trace or wl.default_trace())
            )
        return wl.Mix.zipf(self.adapters, self.zipf_s)

    def workload(
        self, mix: wl.Mix | None = None, rate_at: list[tuple[float, float]] | None = None
    ) -> wl.Workload:
        return wl.build(
            mix=mix or self.mix(),
            rate=self.rate,
            duration_s=self.warmup_s + self.duration_s,
            seed=self.seed,
            trace=self.trace,
            poisson=self.poisson,
            rate_at=rate_at,
        )


@dataclass
class Run:
    name: str
    workload: wl.Workload
    replica: ReplicaParams
    fleet: FleetParams
    router: str
    events: list[FleetEvent] = field(default_factory=list)
    measure_from: float = 0.0
    hot: str | None = None  # the adapter report.summarize calls hot (None: the busiest)


E = TypeVar("E", bound=Engine)


def engine_for(
    run: Run,
    seed: int,
    engine: type[E],
    progress: Callable[[int], None] | None = None,
) -> E:
    """An engine (`Engine`, or a subclass that looks inside it) for one run, not yet run:
    the run's workload, parameters, router and events, simulated to its last arrival."""
    return engine(
        run.workload,
        run.replica,
        run.fleet,
        router=run.router,
        seed=seed,
        events=run.events,
        duration_s=run.workload.at[-1] if len(run.workload) else 0.0,
        progress=progress,
    )


def steady(i: Inputs) -> list[Run]:
    return [Run(f"steady ({i.router})", i.workload(), i.replica, i.fleet, i.router, [], i.warmup_s)]


def routing_ab(i: Inputs) -> list[Run]:
    """Same requests, same seed; "shipped, before" is the router before the bounded-load and
    rendezvous-spill rules (docs/design/0006 has the before/after table)."""
    w = i.workload()
    before = replace(i.fleet, balance=0.0, spill="least_loaded")
    return [
        Run("random", w, i.replica, i.fleet, "random", [], i.warmup_s),
        Run("least-loaded owner", w, i.replica, i.fleet, "least_loaded", [], i.warmup_s),
        Run("shipped, before", w, i.replica, before, "affinity", [], i.warmup_s),
        Run("shipped", w, i.replica, i.fleet, "affinity", [], i.warmup_s),
    ]


def thrash(i: Inputs) -> list[Run]:
    # ~385 owned adapters per replica but room for 40 in RAM and 16 in GPU slots.
    rp = replace(i.replica, gpu_slots=16, ram_slots=40)
    name = "thrash (16 GPU / 40 RAM slots)"
    return [Run(name, i.workload(), rp, i.fleet, i.router, [], i.warmup_s)]


def ramp(i: Inputs) -> list[Run]:
    # Starts small and cold: the autoscaler grows the fleet as the rate steps up, then shrinks.
    w, d = i.warmup_s, i.duration_s
    steps = [(0.0, 0.25), (w + d * 0.2, 0.5), (w + d * 0.4, 1.0), (w + d * 0.7, 0.5)]
    # The pool's default autoscaling targets (FleetParams, from the ReplicaPool model).
    fp = replace(i.fleet, autoscale=True, replicas=max(1, i.fleet.replicas // 4), min_replicas=2)
    return [Run("ramp + autoscaler", i.workload(rate_at=steps), i.replica, fp, i.router, [], w)]


def failure(i: Inputs) -> list[Run]:
    ev = [FleetEvent(i.warmup_s + i.duration_s / 2, "fail", 0)]
    name = "replica-0 fails at 1/2"
    return [Run(name, i.workload(), i.replica, i.fleet, i.router, ev, i.warmup_s)]


def hot_tenant(i: Inputs) -> list[Run]:
    mean = wl.mean_output_tokens(i.trace or wl.default_trace())
    mix = i.mix().with_hot("hot-tenant", 2000.0, i.rate, mean)
    name = "hot tenant at 2,000 tokens/s"  # generated tokens: ~24% of requests
    return [Run(name, i.workload(mix=mix), i.replica, i.fleet, i.router, [], i.warmup_s)]


def add_remove(i: Inputs) -> list[Run]:
    w, d = i.warmup_s, i.duration_s
    ev = [FleetEvent(w + d / 3, "add"), FleetEvent(w + 2 * d / 3, "remove", 1)]
    name = "add at 1/3, remove replica-1 at 2/3"
    return [Run(name, i.workload(), i.replica, i.fleet, i.router, ev, w)]


def rollout(i: Inputs) -> list[Run]:
    """The busiest adapter's alias rolls out a new version (its own adapter, starting cold):
    5% from the measured period's start, 50% at 1/3, all of it at 2/3."""
    base = i.workload()
    primary = base.names[Counter(base.adapter).most_common(1)[0][0]]
    version = f"{primary}-next"
    w, d = i.warmup_s, i.duration_s
    steps = [(w, 5), (w + d / 3, 50), (w + 2 * d / 3, 100)]
    run = wl.rollout(base, primary, version, steps, i.seed)
    name = f"rollout of {primary}: 5% -> 50% -> 100%"
    return [Run(name, run, i.replica, i.fleet, i.router, [], w, hot=version)]


SCENARIOS: dict[str, Callable[[Inputs], list[Run]]] = {
    "steady": steady,
    "routing-ab": routing_ab,
    "thrash": thrash,
    "ramp": ramp,
    "failure": failure,
    "hot-tenant": hot_tenant,
    "add-remove": add_remove,
    "rollout": rollout,
}
