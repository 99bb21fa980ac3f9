"""The deletion's forget round (lorafleet_operator.forget) against real loopback replicas: who
counts as done, who holds the deletion, and the bound on how long they may hold it."""

from __future__ import annotations

from lorafleet_operator.fleet_index import Endpoint
from lorafleet_operator.forget import GiveUpClock, forget_everywhere
from tests.operator.state_servers import StateServer


def _endpoint(server: StateServer, replica_id: str | None = None) -> Endpoint:
    return Endpoint(replica_id or server.replica_id, "p", "127.0.0.1", server.port)


async def test_busy_and_unreachable_replicas_hold_the_deletion_the_others_are_done():
    idle, busy, moved, gone = (StateServer(f"p-{i}") for i in range(4))
    gone.close()  # a Ready pod whose agent no longer answers (its node went away)
    busy.forget_answers = [(409, "adapter_busy")]
    try:
        left = await forget_everywhere(
            [_endpoint(idle), _endpoint(busy), _endpoint(moved, "p-9"), _endpoint(gone)],
            "acme-v1",
            "tok",
        )
    finally:
        for s in (idle, busy, moved):
            s.close()
    assert left == {"p-1": "requests are running on it", "p-3": "unreachable (ConnectError)"}
    assert idle.forgets == [("acme-v1", "Bearer tok")]
    assert moved.forgets == []  # 404: the pod serves another replica id now, nothing to forget


def test_a_deletion_waits_for_replicas_a_bounded_time_per_adapter():
    now = [0.0]
    waits = GiveUpClock(120.0, clock=lambda: now[0])
    key = ("ns", "acme-v1")
    assert not waits.expired(key)
    now[0] = 119.0
    assert not waits.expired(key)
    assert not waits.expired(("ns", "acme-v2"))  # each deletion has its own wait
    now[0] = 120.0
    assert waits.expired(key)
    waits.done(key)
    assert not waits.expired(key)  # a later deletion of the name waits afresh
