"""The replica tracker's candidate set over real HTTP (a stand-in replica, a controllable clock):
who is routed to when answers are fresh, aged out, or refused."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from lorafleet_gateway.catalog import ReplicaEndpoint
from lorafleet_gateway.replica_poller import ReplicaTracker
from tests.gateway.fake_replica import FakeReplica
from tests.gateway.servers import ServerThread


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def replicas() -> Iterator[dict[str, tuple[FakeReplica, ServerThread]]]:
    out = {}
    for rid in ("r0", "r1"):
        replica = FakeReplica(rid)
        out[rid] = (replica, ServerThread(replica.app()).start())
    try:
        yield out
    finally:
        for _, server in out.values():
            server.stop()


def _tracker(replicas, clock: Clock) -> ReplicaTracker:
    tracker = ReplicaTracker(httpx.AsyncClient(timeout=5.0), interval_s=1.0, clock=clock)
    tracker.set_endpoints(
        [ReplicaEndpoint(rid, server.url, server.url) for rid, (_, server) in replicas.items()]
    )
    return tracker


async def test_a_replica_whose_answer_aged_out_leaves_while_another_is_fresh(replicas):
    clock = Clock()
    tracker = _tracker(replicas, clock)
    await tracker.poll_once()
    assert set(tracker.views()) == {"r0", "r1"}
    replicas["r1"][0].state_mode = "hang"
    clock.t += 1.5
    tracker.client.timeout = httpx.Timeout(0.2)
    await tracker.poll_once()  # r0 answers, r1 times out and keeps its old answer
    clock.t += 1.0  # r1's last answer is now 2.5 intervals old, r0's 1 interval
    assert set(tracker.views()) == {"r0"}
    assert tracker.healthy_ids() == ["r0"]


async def test_when_every_answer_aged_out_the_last_good_ones_stay_candidates(replicas):
    """The gateway itself stalled (no poll for 5 intervals): routing to the replicas that last
    answered well beats answering 503 to every client; readiness still reports the truth."""
    clock = Clock()
    tracker = _tracker(replicas, clock)
    await tracker.poll_once()
    clock.t += 5.0
    assert tracker.healthy_ids() == []
    assert set(tracker.views()) == {"r0", "r1"}


async def test_a_replica_that_refused_is_no_fallback(replicas):
    clock = Clock()
    tracker = _tracker(replicas, clock)
    await tracker.poll_once()
    replicas["r1"][0].state_mode = "error"
    await tracker.poll_once()
    clock.t += 5.0
    assert set(tracker.views()) == {"r0"}  # aged out, but its last poll succeeded
    tracker.mark_failed("r0")
    assert tracker.views() == {}


async def test_a_warming_replica_is_left_out_while_another_serves_and_joins_when_warm(replicas):
    clock = Clock()
    tracker = _tracker(replicas, clock)
    replicas["r1"][0].warming = True  # a new replica still pre-warming its owned adapters
    await tracker.poll_once()
    assert set(tracker.views()) == {"r0"}
    assert set(tracker.healthy_ids()) == {"r0", "r1"}  # healthy, just not a candidate yet
    replicas["r1"][0].warming = False
    clock.t += 1.0
    await tracker.poll_once()
    assert set(tracker.views()) == {"r0", "r1"}


async def test_when_every_replica_is_warming_they_all_serve(replicas):
    clock = Clock()
    tracker = _tracker(replicas, clock)
    for replica, _ in replicas.values():
        replica.warming = True  # a whole pool starting: no one to wait for
    await tracker.poll_once()
    assert set(tracker.views()) == {"r0", "r1"}


async def test_a_replica_whose_engine_is_down_is_left_out_until_it_is_back(replicas):
    clock = Clock()
    tracker = _tracker(replicas, clock)
    replicas["r1"][0].engine_ready = False  # its agent answers; its vLLM does not
    await tracker.poll_once()
    assert set(tracker.views()) == {"r0"}
    assert tracker.healthy_ids() == ["r0"]
    replicas["r1"][0].engine_ready = True
    clock.t += 1.0
    await tracker.poll_once()
    assert set(tracker.views()) == {"r0", "r1"}
