"""Stops of the request path per second of engine busy time (HostCpu.engine_stepping)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lorafleet_sim.engine import Engine
from lorafleet_sim.host import HostCpu
from lorafleet_sim.params import FleetParams, ReplicaParams
from lorafleet_sim.workload import Mix, Workload, build
from tests.sim.test_sim_host_cpu import Clock

ONE = FleetParams(replicas=1, owners_per_adapter=1, gateways=1, prewarm=False)


def run_job(
    every_s: float, busy: list[tuple[float, float]], job: tuple[float, float]
) -> tuple[float, int]:
    """One job (submitted at, CPU-seconds) on one core while the engine steps in `busy`
    stretches; returns its finish time and the stops the busy time caused."""
    clock = Clock()
    host = HostCpu(1.0, clock.schedule, busy_stop_every_s=every_s, busy_stop_s=0.1)
    done: list[float] = []
    for start, end in busy:
        clock.schedule(start, lambda t, _: host.engine_stepping(t, True), None)
        clock.schedule(end, lambda t, _: host.engine_stepping(t, False), None)
    clock.schedule(job[0], lambda t, _: host.submit(t, job[1], lambda t2, _: done.append(t2)), None)
    clock.run()
    return done[0], host.busy_stops


def test_a_job_overlapping_engine_busy_time_waits_for_the_measured_stop():
    # One stop per busy second, 100 ms long: the engine steps from 0 s, so the host stops at
    # 1.0 s; a job of 200 ms CPU from 0.9 s has 100 ms left then and ends at 1.2 s, not 1.1.
    finish, stops = run_job(1.0, [(0.0, 2.5)], (0.9, 0.2))
    assert finish == pytest.approx(1.2)
    assert stops == 2  # at 1.0 s and 2.0 s (+ the stop's 0.1 s: 2.0 counts busy time alone)


def test_the_stop_clock_counts_busy_time_only_across_idle_gaps():
    # 0.6 s busy, idle until 5 s, busy again: the second busy second ends at 5.4 s.
    finish, stops = run_job(1.0, [(0.0, 0.6), (5.0, 5.5)], (5.35, 0.1))
    assert stops == 1
    assert finish == pytest.approx(5.55)  # 50 ms done, stopped 5.4-5.5, 50 ms more


def test_no_busy_time_no_stop_however_long_the_host_runs():
    finish, stops = run_job(1.0, [], (0.9, 3.0))
    assert finish == pytest.approx(3.9)
    assert stops == 0


def test_a_zero_rate_never_stops_the_host():
    finish, stops = run_job(0.0, [(0.0, 10.0)], (0.9, 0.2))
    assert finish == pytest.approx(1.1)
    assert stops == 0


def _stream(at: float) -> Workload:
    w = Workload(names=("a",), label="hand-made")
    w.at.append(at)
    w.prompt.append(10)
    w.output.append(200)
    w.adapter.append(0)
    return w


def test_a_request_whose_path_overlaps_engine_busy_time_is_delayed_by_the_stops():
    rp = replace(
        ReplicaParams(), ram_s=0.0, host_cores=1.0, host_ttft_cpu_s=0.001,
        host_token_cpu_s=0.0001, decode_s=0.01,
    )  # fmt: skip
    # A long stream keeps the engine busy (its adapter loads for 0.4 s, then 200 steps of
    # 10 ms: 0.4-2.4 s); 1.2 stops per busy second of 150 ms: the host stops at 1.23 s and
    # 2.07 s. The second request arrives inside the first stop and waits for its end.
    w = _stream(0.0)
    for at in (1.3, 4.0):  # the second during busy time, the third after the engine idled
        w.at.append(at)
        w.prompt.append(10)
        w.output.append(1)
        w.adapter.append(0)
    stopped = Engine(w, replace(rp, host_pause_per_busy_s=1.2, host_pause_busy_s=0.15), ONE)
    stopped.run()
    plain = Engine(w, rp, ONE).run()
    delay = [a - b for a, b in zip(stopped.first_token, plain.first_token, strict=True)]
    # Held to the stop's end (1.384 s), then at most one 10 ms step to the next step start.
    assert 1.384 - 1.3 - 0.001 <= delay[1] <= 1.384 - 1.3 + 0.011
    # 0.33 s of busy time is banked when the engine idles; request 3's 10 ms do not reach it.
    assert delay[2] == pytest.approx(0.0)
    assert delay[0] == pytest.approx(0.0)  # its first token came before any stop
    assert stopped.replicas[0].host is not None
    assert stopped.replicas[0].host.busy_stops == 2


def test_a_zero_busy_stop_rate_gives_the_same_results_as_none():
    w = build(mix=Mix.zipf(12, 1.0), rate=20.0, duration_s=20.0, seed=1)
    rp = replace(
        ReplicaParams(), host_cores=2.0, host_ttft_cpu_s=0.01, host_token_cpu_s=0.002,
        host_engine_busy=1.5,
    )  # fmt: skip
    a = Engine(w, rp, ONE, seed=1).run()
    b = Engine(w, replace(rp, host_pause_busy_s=0.3), ONE, seed=1).run()  # length, no rate
    assert a.first_token == b.first_token
    assert all(r.host is not None and r.host.busy_stops == 0 for r in b.replicas)
