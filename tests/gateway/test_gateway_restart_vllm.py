"""The gateway process stopped with streams in flight: `python -m lorafleet_gateway` in front
of a real agent and the session's real vLLM (CPU), clients on the official `openai` client.

The agent reaches vLLM through a throttling TCP proxy (tests.fault_proxy), so a stream takes
seconds however fast the tiny engine is, and the signal lands mid-stream.

- SIGTERM: the public port stops accepting at once, /readyz answers 503 on both ports, the
  streams already running finish whole, then the process exits 0; a stream longer than the
  drain window is cut with an error its client sees.
- SIGKILL: every client sees a connection error at once (nothing hangs); the agent notices
  its client is gone and frees everything the streams held (adapter references, running
  requests, tokens in flight); a new gateway on the same port serves at once.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from lorafleet_core.wire.records import AdapterRecord
from lorafleet_demo.assets import DemoAssets
from tests.agent_thread import RunningAgent
from tests.conftest import (
    REPO,
    TEST_DATA_TOKEN,
    TEST_INTERNAL_TOKEN,
    S3Server,
    VllmServer,
    free_port,
    unique_id,
)
from tests.fault_proxy import FaultProxy
from tests.vllm_stack import vllm_stack
from tests.waiting import eventually

pytestmark = pytest.mark.vllm

KEY = "lf-acme-restart-key"
MODEL = "acme/bot:prod"
PROMPT = "Tell me about the weather today"
STREAMS = 4
SLOW_BYTES_PER_S = 1500.0  # ~30 SSE events of ~250 bytes: about 5 s per stream


@dataclass
class Stack:
    agent: RunningAgent
    proxy: FaultProxy
    record: AdapterRecord
    folder: Path
    tmp: Path
    port: int
    internal_port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def client(self, port: int | None = None) -> openai.OpenAI:
        base_url = f"http://127.0.0.1:{port}/v1" if port else self.base_url
        return openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=30)

    def gateway(
        self, name: str, ports: tuple[int, int] | None = None, **env: str
    ) -> subprocess.Popen[bytes]:
        """A gateway process on the stack's ports (or `ports`: public, internal: another pod),
        ready (a healthy replica) when returned."""
        port, internal_port = ports or (self.port, self.internal_port)
        values = os.environ | {
            "LORAFLEET_GATEWAY_HOST": "127.0.0.1",
            "LORAFLEET_GATEWAY_PORT": str(port),
            "LORAFLEET_GATEWAY_INTERNAL_PORT": str(internal_port),
            "LORAFLEET_GATEWAY_MANIFESTS_DIR": str(self.folder),
            "LORAFLEET_GATEWAY_REPLICA_TOKEN": TEST_INTERNAL_TOKEN,
            "LORAFLEET_GATEWAY_REPLICA_DATA_TOKEN": TEST_DATA_TOKEN,
            "LORAFLEET_GATEWAY_POLL_INTERVAL_S": "0.3",
            **env,
        }
        log_path = self.tmp / f"{name}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "lorafleet_gateway"], env=values, stderr=log, cwd=REPO
            )
        eventually(
            lambda: self.internal("/readyz", internal_port).status_code == 200,
            within_s=60,
            interval_s=0.1,
            what=f"{name} ready",
            ignore=(httpx.HTTPError,),
            abort=lambda: None if proc.poll() is None else log_path.read_text()[-3000:],
        )
        return proc

    def internal(self, path: str, port: int | None = None) -> httpx.Response:
        return httpx.get(f"http://127.0.0.1:{port or self.internal_port}{path}", timeout=5)

    def held(self) -> tuple[int, int, int, int]:
        """(adapter references, running requests, queued, tokens in flight) on the agent."""
        manager = self.agent.agent.manager
        state = httpx.get(
            f"{self.agent.internal_url}/internal/replicas/{self.agent.agent.settings.replica_id}"
            "/state",
            timeout=5,
        ).json()
        return (
            manager.refs.get(self.record.id, 0),
            state["running_requests"],
            state["queue_depth"],
            state["tokens_in_flight"],
        )


@pytest.fixture
def stack(
    tmp_path: Path,
    vllm_server: VllmServer,
    s3_server: S3Server,
    demo_assets: DemoAssets,
    make_record: Callable[..., AdapterRecord],
) -> Iterator[Stack]:
    record = make_record("zebra", unique_id("restart-zebra"), tenant="acme")
    proxy = FaultProxy(vllm_server.port)
    with vllm_stack(vllm_server, s3_server, demo_assets, tmp_path) as built:
        built.exits.callback(proxy.close)
        agent = built.agent("restart-r0", vllm_url=proxy.url)
        built.write_manifests("acme", KEY, [record], {MODEL: record.id}, requests_per_second=1000)
        built.write_replicas()
        yield Stack(agent, proxy, record, built.folder, tmp_path, free_port(), free_port())


@dataclass
class Outcome:
    text: str
    done: bool  # the stream ended normally (the client saw [DONE])
    error: BaseException | None
    ended_at: float


def stream_in_thread(
    stack: Stack,
    pool: concurrent.futures.ThreadPoolExecutor,
    started: list[int],
    port: int | None = None,
) -> concurrent.futures.Future[Outcome]:
    """One streaming completion read to its end in `pool`; `started` counts first chunks.
    `port`: through another gateway than the stack's."""

    def run() -> Outcome:
        text = ""
        try:
            stream = stack.client(port).completions.create(
                model=MODEL,
                prompt=PROMPT,
                max_tokens=30,
                temperature=0,
                stream=True,
                extra_body={"ignore_eos": True},
            )
            for i, chunk in enumerate(stream):
                if i == 0:
                    started.append(1)
                text += "".join(c.text for c in chunk.choices)
        except (openai.APIError, httpx.HTTPError) as exc:
            return Outcome(text, False, exc, time.monotonic())
        return Outcome(text, True, None, time.monotonic())

    return pool.submit(run)


def warm(stack: Stack) -> str:
    """The adapter loaded on the agent at full speed; returns the whole expected answer."""
    out = stack.client().completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=30, temperature=0, extra_body={"ignore_eos": True}
    )
    return out.choices[0].text


def refused(stack: Stack) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{stack.port}/healthz", timeout=2)
    except httpx.ConnectError:
        return True
    return False


def test_sigterm_stops_accepting_finishes_running_streams_then_exits(stack: Stack) -> None:
    proc = stack.gateway("gateway")
    try:
        whole = warm(stack)
        assert whole.startswith("ZEBRA-7")
        stack.proxy.slow(SLOW_BYTES_PER_S)
        started: list[int] = []
        with concurrent.futures.ThreadPoolExecutor(STREAMS) as pool:
            futures = [stream_in_thread(stack, pool, started) for _ in range(STREAMS)]
            eventually(lambda: len(started) == STREAMS, within_s=30, what="every stream started")
            proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()

            # Draining: no new connection, not ready, while the streams still run.
            eventually(lambda: refused(stack), within_s=5, what="public port closed")
            ready = stack.internal("/readyz")
            assert ready.status_code == 503
            assert ready.json()["draining"] is True
            assert not any(f.done() for f in futures), "streams ended before the drain was seen"

            outcomes = [f.result(timeout=60) for f in futures]
        for o in outcomes:
            assert o.error is None, o.error
            assert o.done
            assert o.text == whole  # each stream whole, not cut short
        assert proc.wait(timeout=30) == 0
        assert time.monotonic() - signalled < 30
        assert stack.held() == (0, 0, 0, 0)
    finally:
        stack.proxy.slow(None)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_cuts_a_stream_longer_than_the_drain_window(stack: Stack) -> None:
    proc = stack.gateway("gateway", LORAFLEET_GATEWAY_DRAIN_TIMEOUT_S="1")
    try:
        warm(stack)
        stack.proxy.slow(SLOW_BYTES_PER_S / 4)  # ~20 s: far past the 1 s window
        started: list[int] = []
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            future = stream_in_thread(stack, pool, started)
            eventually(lambda: started, within_s=30, what="the stream started")
            proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            outcome = future.result(timeout=30)
        assert not outcome.done
        assert outcome.error is not None  # the client is told, not left with a short answer
        assert outcome.ended_at - signalled < 10
        assert proc.wait(timeout=15) == 0
        eventually(lambda: stack.held() == (0, 0, 0, 0), within_s=15, what="agent freed")
    finally:
        stack.proxy.slow(None)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigkill_fails_streams_at_once_the_agent_frees_them_and_a_new_gateway_serves(
    stack: Stack,
) -> None:
    """The other gateway pod in front of the same replica keeps serving: its streams end
    whole while the killed one's clients see their connection end."""
    proc = stack.gateway("first")
    other_ports = (free_port(), free_port())
    other = stack.gateway("other", ports=other_ports)
    replacement: subprocess.Popen[bytes] | None = None
    try:
        whole = warm(stack)
        stack.proxy.slow(SLOW_BYTES_PER_S)
        started: list[int] = []
        with concurrent.futures.ThreadPoolExecutor(STREAMS + 2) as pool:
            futures = [stream_in_thread(stack, pool, started) for _ in range(STREAMS)]
            kept = [stream_in_thread(stack, pool, started, other_ports[0]) for _ in range(2)]
            eventually(
                lambda: len(started) == STREAMS + 2, within_s=30, what="every stream started"
            )
            assert stack.held()[0] == STREAMS + 2  # each running stream holds the adapter
            proc.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            proc.wait(timeout=10)
            outcomes = [f.result(timeout=30) for f in futures]
            survivors = [f.result(timeout=60) for f in kept]
        for o in survivors:
            assert (o.done, o.error, o.text) == (True, None, whole)
        for o in outcomes:
            assert not o.done
            assert isinstance(
                o.error, openai.APIConnectionError | openai.APIError | httpx.HTTPError
            )
            assert o.ended_at - killed < 5, "a client hung on the dead gateway"
        # The agent's client (the gateway) is gone: the streams it relayed are released.
        eventually(
            lambda: stack.held() == (0, 0, 0, 0),
            within_s=20,
            what="the agent freeing the dead gateway's streams",
        )
        stack.proxy.slow(None)
        replacement = stack.gateway("replacement")
        assert warm(stack) == whole
    finally:
        stack.proxy.slow(None)
        for p in (proc, other, replacement):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
