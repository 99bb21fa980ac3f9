"""Traces as shipped: `python -m lorafleet_gateway` and `python -m lorafleet_agent` as processes,
configured only by the standard OTEL_* variables, export to a real OTLP/HTTP receiver (its own
process, tests.otlp_receiver) while serving one streamed chat from the session's real vLLM.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import httpx
import openai
import pytest

from lorafleet_core.wire.records import AdapterRecord
from lorafleet_demo.assets import DemoAssets
from tests.conftest import (
    REPO,
    TEST_DATA_TOKEN,
    TEST_INTERNAL_TOKEN,
    S3Server,
    VllmServer,
    free_port,
    unique_id,
)
from tests.gateway import manifests as m
from tests.waiting import eventually

pytestmark = pytest.mark.vllm

KEY = "lf-trace-secret-key-7f3a"
ALIAS = "trace/bot:prod"
PROMPT = "Say hello to the tracing prompt 51c9e2."
SERVER, CLIENT = 2, 3  # OTLP span kinds
GATEWAY_SPANS = {"POST /v1/chat/completions", "auth", "route", "upstream attempt"}
AGENT_SPANS = {"POST /v1/chat/completions", "adapter acquire", "engine"}


@contextlib.contextmanager
def process(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        yield proc
    finally:  # SIGTERM: each process flushes its last spans as it exits
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextlib.contextmanager
def receiver(out: Path) -> Iterator[int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.otlp_receiver", str(out)],
        stdout=subprocess.PIPE,
        cwd=REPO,
    )
    try:
        stdout: IO[bytes] | None = proc.stdout
        assert stdout is not None
        line = stdout.readline().decode()  # printed once it listens
        assert line.startswith("listening "), line
        yield int(line.split()[1])
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def read_spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@pytest.mark.timeout(240)
def test_a_streamed_chat_is_one_trace_from_the_clients_parent_through_gateway_and_agent(
    tmp_path: Path,
    vllm_server: VllmServer,
    s3_server: S3Server,
    demo_assets: DemoAssets,
    make_record: Callable[..., AdapterRecord],
):
    """Every span both processes export is in the client's trace, and they form one tree under
    the client's span: the gateway's request span, its auth, route and upstream attempt; the
    agent's request span under that attempt (the traceparent the gateway sent), its adapter
    acquire and engine call. The request span carries the GenAI attributes; no attribute holds
    the API key, the data credential or the prompt."""
    spans_file = tmp_path / "spans.jsonl"
    record = make_record("zebra", unique_id("trace-zebra"), tenant="trace")
    folder = tmp_path / "manifests"
    m.write_fleet(folder, "trace", KEY, [record], {ALIAS: record.id}, requests_per_second=100)
    data_port, internal_port = free_port(), free_port()
    agent_url = f"http://127.0.0.1:{data_port}"
    m.write(
        folder,
        "replicas.yaml",
        [
            {
                "replicas": [
                    {
                        "id": "trace-r0",
                        "dataUrl": agent_url,
                        "internalUrl": f"http://127.0.0.1:{internal_port}",
                    }
                ]
            }
        ],
    )
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    with receiver(spans_file) as otlp_port:
        otel = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{otlp_port}",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        agent_env = (
            base_env
            | otel
            | {
                "LORAFLEET_AGENT_REPLICA_ID": "trace-r0",
                "LORAFLEET_AGENT_HOST": "127.0.0.1",
                "LORAFLEET_AGENT_DATA_PORT": str(data_port),
                "LORAFLEET_AGENT_INTERNAL_PORT": str(internal_port),
                "LORAFLEET_AGENT_VLLM_URL": vllm_server.url,
                "LORAFLEET_AGENT_BASE_MODEL_HASH": demo_assets.base_model_hash,
                "LORAFLEET_AGENT_BASE_MODEL_DIR": str(demo_assets.base_model),
                "LORAFLEET_AGENT_MAX_RANK": str(vllm_server.max_rank),
                "LORAFLEET_AGENT_GPU_SLOTS": str(vllm_server.gpu_slots),
                "LORAFLEET_AGENT_CPU_SLOTS": str(vllm_server.cpu_slots),
                "LORAFLEET_AGENT_CACHE_DIR": str(tmp_path / "cache"),
                "LORAFLEET_AGENT_S3_ENDPOINT_URL": s3_server.endpoint_url,
                "LORAFLEET_AGENT_S3_ACCESS_KEY_ID": s3_server.access_key_id,
                "LORAFLEET_AGENT_S3_SECRET_ACCESS_KEY": s3_server.secret_access_key,
                "LORAFLEET_AGENT_INTERNAL_TOKEN": TEST_INTERNAL_TOKEN,
                "LORAFLEET_AGENT_DATA_TOKEN": TEST_DATA_TOKEN,
                "LORAFLEET_AGENT_UNLOAD_UNKNOWN_ON_START": "false",  # the engine is shared
            }
        )
        port, internal = free_port(), free_port()
        gateway_env = (
            base_env
            | otel
            | {
                "LORAFLEET_GATEWAY_HOST": "127.0.0.1",
                "LORAFLEET_GATEWAY_PORT": str(port),
                "LORAFLEET_GATEWAY_INTERNAL_PORT": str(internal),
                "LORAFLEET_GATEWAY_MANIFESTS_DIR": str(folder),
                "LORAFLEET_GATEWAY_REPLICA_TOKEN": TEST_INTERNAL_TOKEN,
                "LORAFLEET_GATEWAY_REPLICA_DATA_TOKEN": TEST_DATA_TOKEN,
            }
        )
        agent_log, gateway_log = tmp_path / "agent.log", tmp_path / "gateway.log"
        with (
            process([sys.executable, "-m", "lorafleet_agent"], agent_env, agent_log) as agent,
            process([sys.executable, "-m", "lorafleet_gateway"], gateway_env, gateway_log) as gw,
        ):

            def gone() -> str | None:
                for proc, log in ((agent, agent_log), (gw, gateway_log)):
                    if proc.poll() is not None:
                        return log.read_text()
                return None

            eventually(
                lambda: httpx.get(f"http://127.0.0.1:{internal}/readyz").status_code == 200,
                within_s=120,
                interval_s=0.5,
                what="the gateway ready with the agent healthy",
                ignore=(httpx.HTTPError,),
                abort=gone,
            )
            trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY)
            stream = client.chat.completions.create(
                model=ALIAS,
                messages=[{"role": "user", "content": PROMPT}],
                max_tokens=8,
                stream=True,
                stream_options={"include_usage": True},
                extra_headers={"traceparent": f"00-{trace_id}-{parent_id}-01"},
            )
            chunks = list(stream)
            assert chunks
            assert chunks[-1].usage is not None

            def exported() -> bool:
                names = {(s["service"], s["name"]) for s in read_spans(spans_file)}
                return {("lorafleet-gateway", n) for n in GATEWAY_SPANS} | {
                    ("lorafleet-agent", n) for n in AGENT_SPANS
                } <= names

            eventually(exported, within_s=20, interval_s=0.1, what="every span exported")
        # Both processes have exited (flushing whatever else they held): the whole export.
        spans = read_spans(spans_file)

    assert {s["service"] for s in spans} == {"lorafleet-gateway", "lorafleet-agent"}
    assert {s["trace_id"] for s in spans} == {trace_id}
    by_id = {s["span_id"]: s for s in spans}
    assert len(by_id) == len(spans)
    # One tree: the gateway's request span is the only child of the client's span; every other
    # span's parent is a span of the trace.
    roots = [s for s in spans if s["parent_span_id"] == parent_id]
    assert [(r["service"], r["name"], r["kind"]) for r in roots] == [
        ("lorafleet-gateway", "POST /v1/chat/completions", SERVER)
    ]
    assert all(s["parent_span_id"] in by_id for s in spans if s is not roots[0])

    def one(service: str, name: str) -> dict[str, Any]:
        (span,) = [s for s in spans if (s["service"], s["name"]) == (service, name)]
        return span

    request = roots[0]
    attempt = one("lorafleet-gateway", "upstream attempt")
    for name in ("auth", "route", "upstream attempt"):
        assert one("lorafleet-gateway", name)["parent_span_id"] == request["span_id"]
    assert attempt["kind"] == CLIENT
    assert attempt["attributes"]["lorafleet.replica_id"] == "trace-r0"
    assert attempt["attributes"]["lorafleet.attempt"] == 1
    assert one("lorafleet-gateway", "route")["attributes"]["lorafleet.route"]
    # The agent is asked twice within the one attempt: 404 (not registered yet), then after
    # the gateway's on-demand load the request it serves; both are children of the attempt.
    agent_requests = sorted(
        (s for s in spans if s["service"] == "lorafleet-agent" and s["kind"] == SERVER),
        key=lambda s: int(s["start"]),
    )
    assert [s["attributes"]["http.response.status_code"] for s in agent_requests] == [404, 200]
    assert {s["parent_span_id"] for s in agent_requests} == {attempt["span_id"]}
    served = agent_requests[1]
    acquire, engine = one("lorafleet-agent", "adapter acquire"), one("lorafleet-agent", "engine")
    assert acquire["parent_span_id"] == engine["parent_span_id"] == served["span_id"]
    assert acquire["attributes"]["lorafleet.adapter.tier"]
    assert engine["kind"] == CLIENT

    attributes = request["attributes"]
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == ALIAS
    assert attributes["gen_ai.response.model"] == record.id
    assert attributes["gen_ai.usage.input_tokens"] == chunks[-1].usage.prompt_tokens
    assert attributes["gen_ai.usage.output_tokens"] == chunks[-1].usage.completion_tokens
    assert attributes["http.response.status_code"] == 200
    exported_text = json.dumps(spans)
    for secret in (KEY, TEST_DATA_TOKEN, TEST_INTERNAL_TOKEN, PROMPT):
        assert secret not in exported_text
