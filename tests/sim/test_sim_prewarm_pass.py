"""A joining replica pre-warms as the agent does: its annotation's first RAM slots' worth
registered, the rest pulled to disk, one fetch at a time; later requests load from disk."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import pytest

from lorafleet_core.planning.placement import owners
from lorafleet_core.planning.prewarm import (
    PREWARM_EVICTING_PULLS_PER_MIN,
    PrewarmPass,
    prewarm_pass,
)
from lorafleet_core.wire.records import decode_owned
from lorafleet_core.wire.tiers import Tier
from lorafleet_sim.engine import Engine, FleetEvent
from lorafleet_sim.params import FleetParams, ReplicaParams
from lorafleet_sim.replica import Replica
from lorafleet_sim.workload import Workload

NAMES = tuple(f"adapter-{i:03d}" for i in range(1, 121))
RP = replace(ReplicaParams(), ram_slots=5)
# One owner per adapter, so a request for the newcomer's adapter can only go to it.
FP = FleetParams(replicas=3, owners_per_adapter=1, gateways=1)
ADD_AT = 5.0
JOINED = ADD_AT + RP.base_start_s + RP.warmup_s
MEMBERS = ("replica-0", "replica-1", "replica-2", "replica-3")
OWNED = sorted(n for n in NAMES if owners(n, MEMBERS, 1) == ["replica-3"])  # the annotation's


def workload(*rows: tuple[float, str]) -> Workload:
    """One small request (10 prompt tokens, 2 output) per (arrival, adapter) row."""
    w = Workload(names=NAMES, label="hand-made")
    for at, name in rows:
        w.at.append(at)
        w.prompt.append(10)
        w.output.append(2)
        w.adapter.append(NAMES.index(name))
    return w


def joined(eng: Engine) -> Replica:
    return eng._by_id["replica-3"]


def test_the_joined_replica_registers_its_first_ram_slots_and_pulls_the_rest_to_disk():
    assert len(OWNED) > 2 * RP.ram_slots  # enough beyond RAM to matter
    eng = Engine(workload((0.0, NAMES[0])), RP, FP, events=[FleetEvent(ADD_AT, "add")]).run()
    replica = joined(eng)
    plan = prewarm_pass(OWNED, RP.ram_slots)
    assert replica.warm.passed
    assert replica.warm.current is None
    assert replica.cache.slots.registered() == list(plan.register)
    assert set(replica.cache.disk.order()) == set(OWNED)
    # One fetch at a time from the object store: the pass takes a remote load per adapter.
    assert eng.now == pytest.approx(JOINED + len(OWNED) * RP.remote_s)


def test_a_request_after_the_pass_loads_from_disk_and_one_during_its_pull_is_remote():
    last = prewarm_pass(OWNED, RP.ram_slots).to_disk[-1]
    pass_ends = JOINED + len(OWNED) * RP.remote_s
    gate = replace(FP, prewarm_gate_s=1.0)  # serve during the pass, as after the timeout
    during, after = pass_ends - 0.5 * RP.remote_s, pass_ends + 10.0
    eng = Engine(
        workload((0.0, NAMES[0]), (during, last)), RP, gate, events=[FleetEvent(ADD_AT, "add")]
    ).run()
    # Arrived while the pass fetched it: waits for that fetch (remote), then loads from disk.
    assert eng.replica_of[1] == 3
    assert eng.tier[1] == 3
    assert eng.first_token[1] - eng.arrival[1] == pytest.approx(
        0.5 * RP.remote_s + RP.disk_s + 10 / RP.prefill_tps, abs=0.06
    )
    eng = Engine(
        workload((0.0, NAMES[0]), (after, last)), RP, gate, events=[FleetEvent(ADD_AT, "add")]
    ).run()
    assert eng.replica_of[1] == 3
    assert eng.tier[1] == 2


def test_the_pass_loads_in_the_order_the_agents_planner_gives_for_its_annotation(monkeypatch):
    started: list[str] = []
    start_load = Replica.start_load

    def record(self: Replica, name: str, tier: Tier, now: float, reqs: list[int]) -> None:
        if self.id == "replica-3":
            started.append(name)
        start_load(self, name, tier, now, reqs)

    monkeypatch.setattr(Replica, "start_load", record)
    eng = Engine(workload((0.0, NAMES[0])), RP, FP, events=[FleetEvent(ADD_AT, "add")]).run()
    # What the agent would read from the pod's annotation, split by the agent's own planner.
    records = decode_owned(eng.annotations.written["replica-3"])
    plan = prewarm_pass(records, RP.ram_slots)
    assert started == [r.id for r in (*plan.register, *plan.to_disk)]
    assert [r.id for r in records] == OWNED  # by id, as the operator writes it


def test_a_pod_owning_more_than_its_annotation_holds_prewarms_only_what_the_annotation_lists():
    small = replace(FP, owned_annotation_max_bytes=4096)  # ~9 rows of ~416 bytes
    eng = Engine(workload((0.0, NAMES[0])), RP, small, events=[FleetEvent(ADD_AT, "add")]).run()
    listed = [r.id for r in decode_owned(eng.annotations.written["replica-3"])]
    assert RP.ram_slots < len(listed) < len(OWNED)
    assert set(joined(eng).cache.disk.order()) == set(listed)


def test_a_later_pass_registers_only_what_the_annotation_newly_lists(monkeypatch):
    passes: list[tuple[str, PrewarmPass[str]]] = []
    start_pass = Replica.start_pass

    def record(self: Replica, plan: PrewarmPass[str]) -> None:
        passes.append((self.id, plan))
        start_pass(self, plan)

    monkeypatch.setattr(Replica, "start_pass", record)
    rp = replace(RP, ram_slots=500)  # everything owned fits in RAM: one list to compare

    def passes_of_replica_1(fp: FleetParams) -> list[PrewarmPass[str]]:
        passes.clear()
        Engine(workload((0.0, NAMES[0])), rp, fp, events=[FleetEvent(ADD_AT, "fail", 0)]).run()
        return [plan for rid, plan in passes if rid == "replica-1"]

    def owned_by_1(members: tuple[str, ...]) -> list[str]:
        return sorted(n for n in NAMES if owners(n, members, 1) == ["replica-1"])

    had, with_0_gone = owned_by_1(MEMBERS[:3]), owned_by_1(MEMBERS[1:3])
    # replica-0 fails, so replica-1 takes some of its adapters; it comes back and takes them.
    whole = passes_of_replica_1(replace(FP, prewarm_changes_only=False))
    assert [list(p.register) for p in whole] == [with_0_gone, had]
    only_new = passes_of_replica_1(replace(FP, prewarm_changes_only=True))
    gained = [n for n in with_0_gone if n not in had]
    assert gained
    assert [list(p.register) for p in only_new] == [gained, []]
    # what it listed before is still pulled to disk (skipped where present): no RAM slot
    assert [list(p.to_disk) for p in only_new] == [had, had]


def test_a_later_pass_paces_the_pulls_that_evict_from_a_full_disk(monkeypatch):
    pulls: list[tuple[float, str, bool]] = []  # (when, adapter, evicts) of replica-1's fetches
    start_load = Replica.start_load

    def record(self: Replica, name: str, tier: Tier, now: float, reqs: list[int]) -> None:
        if self.id == "replica-1" and tier is Tier.REMOTE and not reqs:
            pulls.append((now, name, bool(self.cache.disk_victims(self.p.adapter_bytes))))
        start_load(self, name, tier, now, reqs)

    monkeypatch.setattr(Replica, "start_load", record)
    had = sorted(n for n in NAMES if owners(n, MEMBERS[:3], 1) == ["replica-1"])
    gained = sorted(
        n for n in NAMES if owners(n, MEMBERS[1:3], 1) == ["replica-1"] and n not in had
    )
    # Its disk holds exactly what it owns: every adapter it gains evicts one.
    rp = replace(RP, disk_bytes=len(had) * RP.adapter_bytes)
    down = FleetEvent(ADD_AT, "fail", 0, down_s=600.0)  # back after the pass ends
    Engine(workload((0.0, NAMES[0])), rp, FP, events=[down]).run()
    later = [p for p in pulls if p[0] >= ADD_AT]  # the fleet started warm: none before
    # Every gained adapter was pulled; on the full disk each pull evicted (LRU: what the pod
    # owned before, which a later pull then fetched again), each a full gap after the last.
    assert len(gained) >= 3
    assert set(gained) <= {p[1] for p in later}
    assert all(p[2] for p in later)
    gap = 60.0 / PREWARM_EVICTING_PULLS_PER_MIN
    starts = [p[0] for p in later]
    assert starts[0] == pytest.approx(ADD_AT)
    gaps = [b - a for a, b in pairwise(starts)]
    assert min(gaps) == pytest.approx(gap)  # back to back at the pace (0.4 s unpaced)
    assert all(g >= gap - 1e-9 for g in gaps)
