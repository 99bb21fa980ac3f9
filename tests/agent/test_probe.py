"""The replica pod's exec hooks: vLLM's health probe and the preStop drain."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest

from lorafleet_agent.metrics import AgentMetrics
from lorafleet_agent.probe import busy_requests, drain, engine_healthy, main


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[tuple[str, type[_Health]]]:
    handler = type("H", (_Health,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_engine_probe_follows_vllms_health(health_server):
    url, handler = health_server
    assert engine_healthy(url, 2.0)
    assert main(["engine", "--url", url]) == 0
    handler.status = 500
    assert not engine_healthy(url, 2.0)
    assert main(["engine", "--url", url]) == 1


def test_engine_probe_fails_when_nothing_listens():
    assert main(["engine", "--url", "http://127.0.0.1:9", "--timeout", "1"]) == 1


def test_busy_requests_reads_the_agents_own_gauges():
    metrics = AgentMetrics()
    metrics.running.set(3)
    metrics.queue_depth.set(2)
    assert busy_requests(generate_latest(metrics.registry).decode()) == 5
    metrics.running.set(0)
    metrics.queue_depth.set(0)
    assert busy_requests(generate_latest(metrics.registry).decode()) == 0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_drain_waits_for_running_streams_then_returns():
    clock = FakeClock()
    busy = iter([2, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])
    why = drain(lambda: next(busy), timeout_s=60, settle_s=3, clock=clock, pause=clock.advance)
    assert why == "idle"
    assert clock.now >= 3  # never before the gateways had time to see the pod terminating


def test_drain_gives_up_at_the_timeout_and_when_the_agent_is_gone():
    clock = FakeClock()
    assert drain(lambda: 1, timeout_s=10, settle_s=1, clock=clock, pause=clock.advance) == (
        "timeout"
    )
    assert 10 <= clock.now < 11
    assert drain(lambda: None, timeout_s=10, settle_s=1, clock=FakeClock()) == "gone"
