"""The engine watch's verdict on a vLLM that is late to answer `/health`: hung only when its
answers stopped too. A real VllmClient asks a real socket that accepts and never answers (the
kernel accepts for a stopped or swamped process alike); the data path's own mark of an answer
read from vLLM (`EngineWaits.on_engine`) says whether answers still flow."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from lorafleet_agent.engine_waits import EngineWaits
from lorafleet_agent.engine_watch import EngineWatch
from lorafleet_agent.metrics import AgentMetrics
from lorafleet_agent.vllm_client import VllmClient


@dataclass
class WatchedManager:
    """What the watch reads and sets on the agent's AdapterManager."""

    vllm: VllmClient
    metrics: AgentMetrics = field(default_factory=AgentMetrics)
    ready: bool = True

    async def resync(self) -> None:  # only after an "ok" health, which never comes here
        raise AssertionError("a silent engine was resynchronised")


@pytest.fixture
def silent_engine() -> Iterator[str]:
    """A listening socket nobody accepts from: connections complete, requests time out."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


async def answer_read(waits: EngineWaits) -> None:
    with waits.on_engine():  # as data_app wraps each read of vLLM's answer
        await asyncio.sleep(0)


async def test_late_health_while_answers_flow_is_busy_once_they_stop_it_is_hung(silent_engine):
    manager = WatchedManager(VllmClient(silent_engine, timeout_s=5.0))
    waits = EngineWaits()
    watch = EngineWatch(manager, interval_s=0, slow_limit=2, waits=waits)  # type: ignore[arg-type]
    try:
        for _ in range(3):  # every /health misses its deadline, answers arrive between checks
            await answer_read(waits)
            await watch.once()
            assert manager.ready
        await watch.once()  # no answer since the last check: the first miss that counts
        assert manager.ready
        await watch.once()  # the second in a row: hung
        assert not manager.ready
        await answer_read(waits)
        await watch.once()  # answers again but /health still silent: undecided, stays out
        assert not manager.ready
    finally:
        await manager.vllm.aclose()
