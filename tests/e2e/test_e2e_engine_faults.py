"""An engine dying under a two-replica fleet: gateway -> two real agents -> the session's vLLM.

Each agent reaches vLLM through its own cuttable TCP proxy (tests.fault_proxy), so one replica's
"engine" dies alone, with the reset and the refusals a killed vLLM gives, while the other
keeps serving; no extra vLLM start. The restart is the proxy coming back after vLLM has lost the
adapter's registration (unloaded behind the agents' backs), which is what a fresh vLLM is.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from lorafleet_core.wire.records import AdapterRecord
from lorafleet_demo.assets import DemoAssets
from lorafleet_gateway.runtime import Gateway
from tests.agent_thread import RunningAgent
from tests.conftest import S3Server, VllmServer, unique_id
from tests.fault_proxy import FaultProxy
from tests.scrape import Scrape
from tests.vllm_stack import vllm_stack
from tests.waiting import eventually

pytestmark = pytest.mark.vllm

KEY = "lf-chaos-key-0001"
MODEL = "chaos/bot:prod"
PROMPT: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Tell me about the weather today"}
]


@dataclass
class Fleet:
    url: str
    agents: dict[str, RunningAgent]
    proxies: dict[str, FaultProxy]
    record: AdapterRecord
    gateway: Gateway

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=KEY, max_retries=0, timeout=60)

    def ask(self) -> tuple[str, str]:
        """(answer, replica that served it)."""
        raw = self.client().chat.completions.with_raw_response.create(
            model=MODEL, messages=PROMPT, max_tokens=8, temperature=0
        )
        return raw.parse().choices[0].message.content or "", raw.headers["x-replica-id"]

    def retries(self) -> float:
        """Requests the gateway moved to another candidate after one failed."""
        scrape = Scrape.of_registry(self.gateway.metrics.registry)
        return scrape.value("lorafleet_gateway_routing_total", outcome="retry")

    def ready(self, rid: str) -> bool:
        return httpx.get(f"{self.agents[rid].internal_url}/readyz", timeout=5).status_code == 200

    def wait_routable(self, rid: str) -> None:
        eventually(
            lambda: rid in self.gateway.tracker.healthy_ids(),
            within_s=10,
            what=f"the gateway routing to {rid} again",
        )


@pytest.fixture
def fleet(
    tmp_path: Path,
    vllm_server: VllmServer,
    s3_server: S3Server,
    demo_assets: DemoAssets,
    make_record: Callable[..., AdapterRecord],
) -> Iterator[Fleet]:
    with _fleet(tmp_path, vllm_server, s3_server, demo_assets, make_record) as fleet:
        yield fleet


@pytest.fixture
def quick_to_fail_fleet(
    tmp_path: Path,
    vllm_server: VllmServer,
    s3_server: S3Server,
    demo_assets: DemoAssets,
    make_record: Callable[..., AdapterRecord],
) -> Iterator[Fleet]:
    """Agents that fail what a hung engine holds 1 s after calling it hung (default 30 s)."""
    with _fleet(
        tmp_path, vllm_server, s3_server, demo_assets, make_record, engine_hung_fail_s=1.0
    ) as fleet:
        yield fleet


@contextlib.contextmanager
def _fleet(
    tmp_path: Path,
    vllm_server: VllmServer,
    s3_server: S3Server,
    demo_assets: DemoAssets,
    make_record: Callable[..., AdapterRecord],
    **agent_settings: Any,
) -> Iterator[Fleet]:
    record = make_record("zebra", unique_id("chaos-zebra"), tenant="chaos")
    rids = ("chaos-r0", "chaos-r1")
    proxies = {rid: FaultProxy(vllm_server.port) for rid in rids}
    with vllm_stack(vllm_server, s3_server, demo_assets, tmp_path) as stack:
        for proxy in proxies.values():
            stack.exits.callback(proxy.close)
        for rid in rids:
            stack.agent(rid, vllm_url=proxies[rid].url, engine_check_s=0.2, **agent_settings)
        stack.write_manifests("chaos", KEY, [record], {MODEL: record.id}, requests_per_second=1000)
        stack.write_replicas()
        gateway, server = stack.gateway(poll_interval_s=0.3, catalog_reload_interval_s=0.1)
        yield Fleet(server.url, stack.agents, proxies, record, gateway)


def test_an_engine_dying_mid_stream_ends_it_cleanly_others_serve_and_it_returns_without_404(
    fleet: Fleet, vllm_server: VllmServer
) -> None:
    # Both replicas hold the adapter (each the gateway's on-demand load, or the first one's).
    for _ in range(4):
        assert fleet.ask()[0].startswith("ZEBRA-7")

    body = {
        "model": MODEL,
        "messages": PROMPT,
        "max_tokens": 220,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,  # long enough to be cut mid-stream
    }
    headers = {"authorization": f"Bearer {KEY}"}
    url = f"{fleet.url}/v1/chat/completions"
    for proxy in fleet.proxies.values():
        proxy.slow(4096)  # ~15 s for the whole answer: the cut surely lands inside it
    with httpx.stream("POST", url, json=body, headers=headers, timeout=60) as resp:
        assert resp.status_code == 200
        victim = resp.headers["x-replica-id"]
        (survivor,) = set(fleet.agents) - {victim}
        lines = resp.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))  # flowing
        fleet.proxies[victim].cut()  # the victim's vLLM dies
        cut_at = time.monotonic()
        rest = [line for line in lines if line.startswith("data: ")]
        assert time.monotonic() - cut_at < 2.0
    for proxy in fleet.proxies.values():
        proxy.slow(None)
    errors = [json.loads(line[6:])["error"] for line in rest if '"error"' in line]
    assert errors, rest[-3:]  # an in-band SSE error event, in the OpenAI shape
    assert set(errors[-1]) >= {"message", "type", "code"}

    # Requests that had not started go to the survivor; the client sees no error at all.
    for _ in range(5):
        answer, served_by = fleet.ask()
        assert answer.startswith("ZEBRA-7")
        assert served_by == survivor
    eventually(
        lambda: not fleet.ready(victim), within_s=10, what="victim unready while its engine is down"
    )

    # The engine comes back fresh: it has lost the adapter's registration.
    r = httpx.post(f"{vllm_server.url}/v1/unload_lora_adapter", json={"lora_name": fleet.record.id})
    assert r.status_code == 200, r.text
    fleet.proxies[victim].restore()
    eventually(lambda: fleet.ready(victim), within_s=30, what="victim ready again (resynchronised)")
    # The gateway learns it at its next state poll; until then it still routes around it.
    fleet.wait_routable(victim)

    # Now the survivor's engine dies: everything must go to the restarted one, with no 404.
    fleet.proxies[survivor].cut()
    for _ in range(5):
        answer, served_by = fleet.ask()
        assert answer.startswith("ZEBRA-7")
        assert served_by == victim
    fleet.proxies[survivor].restore()
    eventually(lambda: fleet.ready(survivor), within_s=30, what="survivor ready again")
    fleet.wait_routable(survivor)
    for _ in range(3):
        assert fleet.ask()[0].startswith("ZEBRA-7")


def test_a_stalled_engine_holds_its_streams_its_replica_goes_unready_and_comes_back(
    fleet: Fleet,
) -> None:
    """The victim's engine stops answering (what SIGSTOP gives: the kernel still accepts
    connections) for as long as its agent takes to call it hung, then resumes."""
    for _ in range(4):
        assert fleet.ask()[0].startswith("ZEBRA-7")
    body = {"model": MODEL, "messages": PROMPT, "max_tokens": 40, "temperature": 0}
    undisturbed = fleet.client().chat.completions.create(**body)  # type: ignore[call-overload]
    headers = {"authorization": f"Bearer {KEY}"}
    url = f"{fleet.url}/v1/chat/completions"
    with httpx.stream(
        "POST", url, json=body | {"stream": True}, headers=headers, timeout=120
    ) as resp:
        assert resp.status_code == 200
        victim = resp.headers["x-replica-id"]
        (survivor,) = set(fleet.agents) - {victim}
        lines = resp.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        fleet.proxies[victim].stall()
        stalled_at = time.monotonic()
        # The agent calls its engine hung after 3 health checks time out (2 s each): unready,
        # and its state says so, which takes it out of the gateway's candidates.
        eventually(lambda: not fleet.ready(victim), within_s=20, what="the victim unready")
        eventually(
            lambda: victim not in fleet.gateway.tracker.healthy_ids(),
            within_s=5,
            what="the gateway routing around the victim",
        )
        retries = fleet.retries()
        # Nothing new waits on the stalled engine or is even tried there: the survivor serves.
        for _ in range(5):
            asked = time.monotonic()
            answer, served_by = fleet.ask()
            assert (answer.startswith("ZEBRA-7"), served_by) == (True, survivor)
            assert time.monotonic() - asked < 10
        assert fleet.retries() == retries
        fleet.proxies[victim].resume()
        held_s = time.monotonic() - stalled_at
        rest = [line for line in lines if line.startswith("data: ")]
    # The held stream resumes where it stopped and ends whole: no error, no cut.
    assert rest[-1] == "data: [DONE]", rest[-3:]
    chunks = [json.loads(line[6:]) for line in [first, *rest[:-1]]]
    assert not [c for c in chunks if "error" in c]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == undisturbed.choices[0].message.content
    assert held_s > 6  # it really was held past the health checks' verdict
    eventually(lambda: fleet.ready(victim), within_s=20, what="the victim ready again")
    eventually(lambda: fleet.ask()[1] == victim, within_s=30, what="the victim serving again")


def test_a_stream_held_by_an_engine_hung_past_the_bound_ends_with_an_error_the_client_can_retry(
    quick_to_fail_fleet: Fleet,
) -> None:
    """The victim's engine stops and stays stopped. Its stream is not left to the 300 s / 600 s
    read timeouts: once the agent has called the engine hung and ENGINE_HUNG_FAIL_S has
    passed, the client gets the in-band OpenAI error event and its retry is served by the
    other replica."""
    for _ in range(4):
        assert quick_to_fail_fleet.ask()[0].startswith("ZEBRA-7")
    body = {"model": MODEL, "messages": PROMPT, "max_tokens": 120, "temperature": 0,
            "ignore_eos": True, "stream": True}  # fmt: skip
    headers = {"authorization": f"Bearer {KEY}"}
    for proxy in quick_to_fail_fleet.proxies.values():
        proxy.slow(2048)  # the stream is surely still running when the engine stops
    url = f"{quick_to_fail_fleet.url}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=120) as resp:
        assert resp.status_code == 200
        victim = resp.headers["x-replica-id"]
        (survivor,) = set(quick_to_fail_fleet.agents) - {victim}
        lines = resp.iter_lines()
        assert next(line for line in lines if line.startswith("data: "))
        quick_to_fail_fleet.proxies[victim].stall()
        stalled_at = time.monotonic()
        rest = [line for line in lines if line.startswith("data: ")]
        ended_after = time.monotonic() - stalled_at
    for proxy in quick_to_fail_fleet.proxies.values():
        proxy.slow(None)
    errors = [json.loads(line[6:])["error"] for line in rest if '"error"' in line]
    assert errors, rest[-3:]
    assert errors[-1]["code"] == "upstream_error"
    assert ended_after < 30, ended_after  # the verdict (~7 s) and the bound, not minutes
    answer, served_by = quick_to_fail_fleet.ask()  # the client's retry
    assert (answer.startswith("ZEBRA-7"), served_by) == (True, survivor)
    quick_to_fail_fleet.proxies[victim].resume()
    eventually(
        lambda: quick_to_fail_fleet.ready(victim), within_s=20, what="the victim ready again"
    )
