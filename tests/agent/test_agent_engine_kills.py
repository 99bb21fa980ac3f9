"""vLLM killed in the middle of an adapter load, and the agent restarted beside a running vLLM:
what the agent reports must match what vLLM really holds (its `/v1/models`).

The agent reaches the session's vLLM through a proxy (tests.fault_proxy): the load call is held
there, then the connection reset and refused, which is what the agent meets when vLLM is
SIGKILLed. A fresh vLLM holds no adapters: the test unregisters the adapter behind the agent's
back before the proxy listens again, as the session's one vLLM cannot really restart here.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import httpx
import pytest

from tests.agent.conftest import load, state
from tests.conftest import DATA_HEADERS, unique_id
from tests.fault_proxy import FaultProxy
from tests.waiting import eventually

pytestmark = pytest.mark.vllm


def _held_by_agent(s: dict[str, Any]) -> set[str]:
    return set(s["gpu_adapters"]) | set(s["ram_adapters"])


def _ask(agent_url: str, adapter_id: str) -> httpx.Response:
    return httpx.post(
        f"{agent_url}/v1/completions",
        json={"model": adapter_id, "prompt": "Tell me a story", "max_tokens": 8},
        headers=DATA_HEADERS,
        timeout=60,
    )


@pytest.mark.parametrize("registered", [False, True], ids=["before-vllm-acted", "after"])
def test_vllm_killed_during_an_adapter_load_leaves_nothing_half_loaded(
    registered, run_agent, make_record, vllm_server
):
    """`registered`: vLLM had registered the adapter when it died (its answer lost) or not."""
    record = make_record("zebra", unique_id("kill-load"))
    proxy = FaultProxy(vllm_server.port)
    with contextlib.closing(proxy), run_agent(vllm_url=proxy.url, engine_check_s=0.5) as agent:
        proxy.stall(answers_only=registered)
        outcome: list[httpx.Response] = []
        loading = threading.Thread(target=lambda: outcome.append(load(agent, record)))
        loading.start()
        if registered:
            eventually(lambda: record.id in vllm_server.lora_names(), what="vLLM registered it")
        else:
            eventually(
                lambda: any(b"/v1/load_lora_adapter" in data for data in list(proxy.held)),
                what="the load call held at the engine",
            )
        proxy.cut()  # SIGKILL: the held call reset, new connections refused
        loading.join(60)
        assert outcome, "the load call never returned"
        assert outcome[0].status_code in (502, 503), outcome[0].text
        assert record.id not in _held_by_agent(state(agent))  # nothing believed half-loaded
        assert record.id not in state(agent)["failed_adapters"]  # not the adapter's fault

        # A fresh vLLM comes back on the port, holding nothing.
        httpx.post(f"{vllm_server.url}/v1/unload_lora_adapter", json={"lora_name": record.id})
        proxy.restore()
        eventually(
            lambda: httpx.get(f"{agent.internal_url}/readyz", timeout=5).status_code == 200,
            within_s=30,
            what="the agent ready again",
        )
        assert _held_by_agent(state(agent)) <= set(vllm_server.lora_names())
        # The adapter loads on demand: the disk copy (verified at download) is registered.
        answer = _ask(agent.data_url, record.id)
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-adapter-tier"] in ("disk", "remote")
        assert record.id in _held_by_agent(state(agent))
        assert record.id in vllm_server.lora_names()


def test_a_restarted_agent_holds_exactly_what_vllm_holds_and_reloads_on_demand(
    run_agent, make_record, vllm_server, tmp_path
):
    """The agent dies (its process, not vLLM) with adapters registered, and starts again on the
    same cache beside the same, still running vLLM."""
    records = [make_record(name, unique_id(f"restart-{name}")) for name in ("zebra", "falcon")]
    cache = tmp_path / "agent-cache"
    with run_agent(cache_dir=cache) as agent:
        for record in records:
            assert load(agent, record).status_code == 200
        assert {r.id for r in records} <= set(vllm_server.lora_names())
    # The old agent is gone; vLLM still holds its registrations. A new agent trusts none of
    # them (it cannot know they are the files it would verify): it unregisters them.
    with run_agent(cache_dir=cache, unload_unknown_on_start=True) as agent:
        s = state(agent)
        assert _held_by_agent(s) == set() == set(vllm_server.lora_names())
        assert {r.id for r in records} <= set(s["disk_adapters"])  # adopted, re-verified on use
        for record in records:
            assert load(agent, record).status_code == 200
            answer = _ask(agent.data_url, record.id)
            assert (answer.status_code, answer.headers["x-adapter-tier"]) == (200, "ram")
        assert _held_by_agent(state(agent)) == set(vllm_server.lora_names())
