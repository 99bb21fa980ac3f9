"""Agent test helpers: an in-process agent (uvicorn on free ports) against the session vLLM."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lorafleet_agent.settings import AgentSettings
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_demo.assets import DemoAssets
from tests.agent_thread import RunningAgent, agent_in_thread
from tests.conftest import INTERNAL_HEADERS, S3Server, VllmServer, session_agent_settings
from tests.scrape import Scrape

AgentFactory = Callable[..., contextlib.AbstractContextManager[RunningAgent]]


@pytest.fixture
def agent_settings(
    tmp_path: Path, vllm_server: VllmServer, s3_server: S3Server, demo_assets: DemoAssets
) -> Callable[..., AgentSettings]:
    def make(**overrides: Any) -> AgentSettings:
        cache_dir = overrides.pop("cache_dir", tmp_path / "cache")  # a test may move it
        return session_agent_settings(vllm_server, s3_server, demo_assets, cache_dir, **overrides)

    return make


@pytest.fixture
def run_agent(agent_settings: Callable[..., AgentSettings]) -> AgentFactory:
    """with run_agent(**setting_overrides) as agent: ...  (stopped on exit)"""

    @contextlib.contextmanager
    def run(**overrides: Any) -> Iterator[RunningAgent]:
        with agent_in_thread(agent_settings(**overrides)) as running:
            yield running

    return run


def load(agent: RunningAgent, record: AdapterRecord, **extra: Any) -> httpx.Response:
    rid = agent.agent.settings.replica_id
    return httpx.post(
        f"{agent.internal_url}/internal/replicas/{rid}/adapters/{record.id}/load",
        json={"record": record.model_dump(mode="json"), "gpu": False, **extra},
        headers=INTERNAL_HEADERS,
        timeout=120,
    )


def unload(agent: RunningAgent, adapter_id: str) -> httpx.Response:
    rid = agent.agent.settings.replica_id
    return httpx.post(
        f"{agent.internal_url}/internal/replicas/{rid}/adapters/{adapter_id}/unload",
        headers=INTERNAL_HEADERS,
        timeout=30,
    )


def forget(agent: RunningAgent, adapter_id: str) -> httpx.Response:
    rid = agent.agent.settings.replica_id
    return httpx.post(
        f"{agent.internal_url}/internal/replicas/{rid}/adapters/{adapter_id}/forget",
        headers=INTERNAL_HEADERS,
        timeout=30,
    )


def state(agent: RunningAgent) -> dict[str, Any]:
    rid = agent.agent.settings.replica_id
    r = httpx.get(f"{agent.internal_url}/internal/replicas/{rid}/state", timeout=10)
    r.raise_for_status()
    data: dict[str, Any] = r.json()
    return data


def metric(agent: RunningAgent, name: str, **labels: str) -> float:
    """A sample's value from the agent's /metrics (tests/scrape.py: a missing series fails)."""
    return Scrape.of(f"{agent.internal_url}/metrics").value(name, **labels)
