"""The host CPU model of the request path (processor sharing), by hand-worked answers."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from lorafleet_sim.engine import Engine
from lorafleet_sim.host import HostCpu
from lorafleet_sim.params import FleetParams, ReplicaParams
from lorafleet_sim.workload import Mix, Workload, build

ONE = FleetParams(replicas=1, owners_per_adapter=1, gateways=1, prewarm=False)


class Clock:
    """A minimal event loop for HostCpu alone: (time, seq) order, as the simulator's."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Callable[[float, Any], None], Any]] = []
        self.seq = 0

    def schedule(self, at: float, fn: Callable[[float, Any], None], arg: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, fn, arg))

    def run(self) -> None:
        while self.heap:
            at, _, fn, arg = heapq.heappop(self.heap)
            fn(at, arg)


def finish_times(cores: float, jobs: list[tuple[float, float]]) -> list[float]:
    """Each (submitted at, CPU-seconds) job's finish time on a fresh host."""
    clock = Clock()
    host = HostCpu(cores, clock.schedule)
    done = [0.0] * len(jobs)

    def record(t: float, i: int) -> None:
        done[i] = t

    def submit(t: float, job: tuple[int, float]) -> None:
        host.submit(t, job[1], record, job[0])

    for i, (at, work) in enumerate(jobs):
        clock.schedule(at, submit, (i, work))
    clock.run()
    return done


def test_two_jobs_on_one_core_take_twice_as_long_as_one():
    assert finish_times(1.0, [(0.0, 0.010)]) == pytest.approx([0.010])
    assert finish_times(1.0, [(0.0, 0.010), (0.0, 0.010)]) == pytest.approx([0.020, 0.020])


def test_two_cores_serve_two_jobs_at_full_speed_and_share_beyond():
    assert finish_times(2.0, [(0.0, 0.010), (0.0, 0.010)]) == pytest.approx([0.010, 0.010])
    # three jobs on two cores: 2/3 of a core each
    assert finish_times(2.0, [(0.0, 0.010)] * 3) == pytest.approx([0.015] * 3)


def test_a_job_arriving_mid_way_shares_the_rest():
    # A (10 ms) alone for 4 ms, then shares with B (2 ms): B done at 4 + 4 = 8 ms,
    # A has 6 - 2 = 4 ms left, alone again: done at 12 ms (total work 12 ms, work conserving).
    assert finish_times(1.0, [(0.0, 0.010), (0.004, 0.002)]) == pytest.approx([0.012, 0.008])


def one_request(rp: ReplicaParams, n: int = 1, output: int = 1) -> Engine:
    w = Workload(names=("a",), label="hand-made")
    for _ in range(n):
        w.at.append(0.0)
        w.prompt.append(100)
        w.output.append(output)
        w.adapter.append(0)
    return Engine(w, rp, ONE).run()


def test_first_tokens_queue_on_a_contended_host_and_add_path_s():
    # 60 ms of CPU before the first token: 30 ms on the way back (one chunk, what a token
    # costs), so 30 ms on the way in.
    rp = replace(
        ReplicaParams(), ram_s=0.0, decode_s=0.001, path_s=0.002, host_cores=1.0,
        host_ttft_cpu_s=0.060, host_token_cpu_s=0.030,
    )  # fmt: skip
    no_host = one_request(replace(rp, host_cores=0.0))
    alone = one_request(rp)
    assert alone.engine_first[0] == pytest.approx(no_host.engine_first[0] + 0.030)
    assert alone.first_token[0] == pytest.approx(alone.engine_first[0] + 0.030 + 0.002)
    # Two at once: their ways in share the core (60 ms for both), then one prefill step of
    # 12.5 ms each (100 tokens at 8,000 tokens/s). The first's 30 ms back runs alone for
    # 12.5 ms, then shares the core with the second's: it ends 35 ms later (47.5 ms), the
    # second's last 12.5 ms alone after that (60 ms in all).
    both = one_request(rp, n=2)
    e0, e1 = both.engine_first
    assert e0 == pytest.approx(no_host.engine_first[0] + 0.060)
    assert e1 - e0 == pytest.approx(0.0125)
    assert both.first_token[0] == pytest.approx(e0 + 0.0475 + 0.002)
    assert both.first_token[1] == pytest.approx(e0 + 0.060 + 0.002)


def test_busy_streams_slow_a_later_first_token():
    rp = replace(ReplicaParams(), ram_s=0.0, host_cores=1.0, host_ttft_cpu_s=0.004)
    w = Workload(names=("a",), label="hand-made")
    for at, out in ((0.0, 40), (0.5, 1)):
        w.at.append(at)
        w.prompt.append(10)
        w.output.append(out)
        w.adapter.append(0)
    quiet = Engine(w, rp, ONE).run()
    # The first request streams 39 more tokens, 50 ms apart; each costs 30 ms of host CPU.
    busy = Engine(w, replace(rp, host_token_cpu_s=0.030), ONE).run()
    assert busy.first_token[0] == pytest.approx(quiet.first_token[0])  # before any stream
    delay = (busy.first_token[1] - busy.engine_first[1]) - (
        quiet.first_token[1] - quiet.engine_first[1]
    )
    assert delay > 0.002  # shared with a stream's token job: slower than alone


def test_competing_threads_take_their_share_of_the_cores():
    # One always-runnable background thread on one core: a 10 ms job gets half of it.
    rp = replace(
        ReplicaParams(),
        ram_s=0.0,
        host_cores=1.0,
        host_background=1.0,
        host_ttft_cpu_s=0.010,
        host_token_cpu_s=0.010,
    )  # fmt: skip: all of it on the way back
    eng = one_request(rp)
    assert eng.first_token[0] - eng.engine_first[0] == pytest.approx(0.020)
    # The engine's threads compete only while it steps: after a one-token request the engine
    # idles, so its busy threads do not slow that request's path work.
    idle_after = one_request(replace(rp, host_background=0.0, host_engine_busy=3.0))
    assert idle_after.first_token[0] - idle_after.engine_first[0] == pytest.approx(0.010)
    # A second request still prefilling competes: the first's path work shares the core
    # with the engine's 3 threads (1/4 of it) until the engine goes idle.
    two = one_request(replace(rp, host_background=0.0, host_engine_busy=3.0), n=2)
    assert two.first_token[0] - two.engine_first[0] > 0.010


def test_a_pause_holds_every_job_until_it_ends():
    clock = Clock()
    host = HostCpu(1.0, clock.schedule)
    done: list[float] = []
    host.submit(0.0, 0.010, lambda t, _: done.append(t))
    clock.schedule(0.004, lambda t, _: host.pause(t, 0.100), None)
    clock.schedule(0.050, lambda t, _: host.submit(t, 0.002, lambda t2, _: done.append(t2)), None)
    clock.run()
    # A: 4 ms, stopped 4-104 ms, then its 6 ms shared with B's 2 ms: B at 108 ms, A at 112 ms.
    assert done == pytest.approx([0.108, 0.112])


def test_every_nth_arrival_pauses_the_path():
    rp = replace(
        ReplicaParams(), ram_s=0.0, host_cores=1.0, host_ttft_cpu_s=0.001,
        host_pause_per_request=0.5, host_pause_s=0.2,
    )  # fmt: skip
    w = Workload(names=("a",), label="hand-made")
    for at in (0.0, 5.0, 10.0, 15.0):
        w.at.append(at)
        w.prompt.append(10)
        w.output.append(1)
        w.adapter.append(0)
    eng = Engine(w, rp, ONE).run()
    quiet = Engine(w, replace(rp, host_pause_per_request=0.0), ONE).run()
    extra = [a - b for a, b in zip(eng.first_token, quiet.first_token, strict=True)]
    assert extra == pytest.approx([0.0, 0.2, 0.0, 0.2])  # the 2nd and 4th arrivals


def test_every_nth_adapter_load_pauses_the_path_from_its_registration():
    # Four requests, 5 s apart, each for an adapter not yet on the replica: four loads.
    rp = replace(
        ReplicaParams(), ram_s=0.0, host_cores=1.0, host_ttft_cpu_s=0.001,
        host_pause_per_load=0.5, host_pause_load_s=0.2,
    )  # fmt: skip
    w = Workload(names=("a", "b", "c", "d"), label="hand-made")
    for i, at in enumerate((0.0, 5.0, 10.0, 15.0)):
        w.at.append(at)
        w.prompt.append(10)
        w.output.append(1)
        w.adapter.append(i)
    eng = Engine(w, rp, ONE).run()
    quiet = Engine(w, replace(rp, host_pause_per_load=0.0), ONE).run()
    extra = [a - b for a, b in zip(eng.first_token, quiet.first_token, strict=True)]
    # The 2nd and 4th loads stop the host for 0.2 s from their registration on; the engine
    # computes the first token meanwhile (one 50 ms step), so its way back waits 0.15 s.
    assert extra == pytest.approx([0.0, 0.15, 0.0, 0.15])
    assert eng.engine_first == quiet.engine_first  # the engine itself is not stopped


def test_set_competing_changes_the_rate_from_then_on():
    clock = Clock()
    host = HostCpu(1.0, clock.schedule)
    done: list[float] = []
    host.submit(0.0, 0.010, lambda t, _: done.append(t))
    clock.schedule(0.004, lambda t, _: host.set_competing(t, 1.0), None)
    clock.run()
    # 4 ms alone, then the remaining 6 ms at half speed: 12 ms more.
    assert done == pytest.approx([0.016])


def test_the_host_model_is_off_by_default_and_results_are_unchanged():
    assert ReplicaParams().host_cores == 0.0
    w = build(mix=Mix.zipf(50, 1.0), rate=5.0, duration_s=60.0, seed=3)
    fleet = replace(FleetParams(), replicas=3)
    base = Engine(w, ReplicaParams(), fleet, seed=3).run()
    costly = replace(ReplicaParams(), host_ttft_cpu_s=0.5, host_token_cpu_s=0.5)
    same = Engine(w, costly, fleet, seed=3).run()  # costs without cores: no host model
    assert same.first_token == base.first_token
    assert same.finish_time == base.finish_time
    assert all(r.host is None for r in same.replicas)


def test_a_host_model_run_is_deterministic():
    w = build(mix=Mix.zipf(12, 1.0), rate=20.0, duration_s=20.0, seed=1)
    rp = replace(
        ReplicaParams(),
        host_cores=1.0,
        host_ttft_cpu_s=0.01,
        host_token_cpu_s=0.002,
        host_end_cpu_s=0.005,
    )
    fleet = replace(FleetParams(), replicas=2)
    a = Engine(w, rp, fleet, seed=1).run()
    b = Engine(w, rp, fleet, seed=1).run()
    assert a.first_token == b.first_token
    assert a.finish_time == b.finish_time
