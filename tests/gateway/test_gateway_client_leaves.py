"""A client that leaves before its answer starts: the gateway stops waiting for the replica.

uvicorn does not cancel a request when its client disconnects; the request only hears of it
from `receive()`. The gateway used to wait out the replica's whole answer (a non-stream
completion: all of its generation) for nobody, holding the request's reservation and the
replica's in-flight tokens, and spilling to the next candidate on the way.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.gateway.conftest import KEYS, MSG_DEFAULT, GatewayEnv, start_env, stop_env
from tests.scrape import Scrape
from tests.waiting import eventually

IN_FLIGHT = "lorafleet_gateway_requests_in_flight"
SLOW_S = 60.0  # far longer than any wait below: only the gateway giving up ends the request


@pytest.fixture
def env(tmp_path: Path) -> Iterator[GatewayEnv]:
    e = start_env(tmp_path, n_replicas=2)
    try:
        yield e
    finally:
        stop_env(e)


def _gauge(env: GatewayEnv, name: str, labels: dict[str, str] | None = None) -> float:
    return Scrape.of_registry(env.gw.metrics.registry).value(name, **(labels or {}))


def _local_tokens(env: GatewayEnv) -> dict[str, int]:
    return env.gw.tracker.local_tokens()


def _send_and_leave(env: GatewayEnv, body: dict[str, object], until: Callable[[], bool]) -> None:
    raw = json.dumps(body).encode()
    host, port = env.server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\n"
            b"authorization: Bearer " + KEYS["acme"].encode() + b"\r\n"
            b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(raw), raw)
        )
        eventually(until, what="the request to reach the slow replica")
    # closed: the client is gone


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_leaving_during_the_spill_stops_the_request_and_releases_its_counts(
    env: GatewayEnv, stream: bool
):
    failing, slow = env.replicas["replica-0"], env.replicas["replica-1"]
    failing.fail_status = 503  # the first candidate refuses: the gateway spills to the other
    slow.first_byte_delay = SLOW_S
    body = {"model": "acme/support:prod", "messages": MSG_DEFAULT, "stream": stream}
    _send_and_leave(env, body, lambda: len(slow.requests) == 1)
    assert len(failing.requests) == 1  # it did spill
    eventually(lambda: _gauge(env, IN_FLIGHT) == 0, within_s=5, what="the request to end")
    assert _local_tokens(env) == {"replica-0": 0, "replica-1": 0}
    labels = {"endpoint": "chat", "status": "client_closed"}
    assert _gauge(env, "lorafleet_gateway_requests_total", labels) == 1
    assert _gauge(env, "lorafleet_gateway_requests_total", {**labels, "status": "500"}) == 0
