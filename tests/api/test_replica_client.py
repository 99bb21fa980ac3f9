"""The one /state client against a raw socket server that behaves as a replica's uvicorn does
when a kept-alive connection times out just as a poll goes out: it reads the request and closes
without answering. The client retries such a GET once on a fresh connection."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import pytest

from lorafleet_core.wire.replica_client import StateUnavailable, fetch_state, fetch_state_sync
from lorafleet_core.wire.replica_state import ReplicaState


class ClosingServer:
    """Closes the first `drops` connections after reading a request; answers the rest."""

    def __init__(self, drops: int) -> None:
        self.drops = drops
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.body = ReplicaState(replica_id="r0").model_dump_json().encode()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self.connections += 1
                conn.recv(65536)
                if self.connections <= self.drops:
                    continue  # closed without a response
                head = (
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(self.body)}\r\nconnection: close\r\n\r\n"
                )
                conn.sendall(head.encode() + self.body)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def once_dropping() -> Iterator[ClosingServer]:
    server = ClosingServer(drops=1)
    yield server
    server.close()


async def test_a_connection_closed_without_an_answer_is_retried_once(once_dropping):
    async with httpx.AsyncClient(timeout=5.0) as client:
        state = await fetch_state(client, once_dropping.url, "r0")
    assert state.replica_id == "r0"
    assert once_dropping.connections == 2


def test_the_sync_client_retries_the_same_way(once_dropping):
    with httpx.Client(timeout=5.0) as client:
        assert fetch_state_sync(client, once_dropping.url, "r0").replica_id == "r0"
    assert once_dropping.connections == 2


async def test_a_replica_that_never_answers_is_unavailable_after_one_retry():
    server = ClosingServer(drops=10)
    try:
        async with httpx.AsyncClient(timeout=5.0) as client:
            with pytest.raises(StateUnavailable) as info:
                await fetch_state(client, server.url, "r0")
        assert not info.value.timed_out
        assert server.connections == 2
    finally:
        server.close()


@pytest.mark.parametrize("rate", ["NaN", "Infinity", "-Infinity"])
def test_a_replica_reporting_a_non_finite_rate_is_unavailable(rate):
    server = ClosingServer(drops=0)
    server.body = ('{"replica_id": "r0", "tokens_per_second": {"a": ' + rate + "}}").encode()
    try:
        with httpx.Client(timeout=5.0) as client, pytest.raises(StateUnavailable):
            fetch_state_sync(client, server.url, "r0")
    finally:
        server.close()
