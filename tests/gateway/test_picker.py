"""Endpoint-picker mode: Envoy's side of the ext_proc protocol played with the generated stubs
over a real gRPC channel, against a real gateway with stand-in replicas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc
from google.protobuf import json_format
from grpc_health.v1 import health_pb2, health_pb2_grpc

from lorafleet_gateway.picker import DESTINATION_HEADER, METADATA_NAMESPACE, SERVICE_NAME
from tests.conftest import free_port
from tests.gateway import manifests as m
from tests.gateway.conftest import KEYS, GatewayEnv, default_aliases, start_env, stop_env
from tests.gateway.fake_replica import FakeReplica
from tests.gateway.servers import ServerThread
from tests.waiting import eventually

DATA_TOKEN = "agents-data-credential-0001"
REPO = Path(__file__).resolve().parents[2]
MODE = processing_mode_pb2.ProcessingMode


@dataclass
class Picked:
    """What the picker answered for one request, as Envoy would apply it."""

    immediate: ext.ImmediateResponse | None
    set_headers: dict[str, str]
    removed: list[str]
    body: bytes | None
    endpoints: list[str]  # the dynamic metadata's ordered list

    @property
    def destination(self) -> str:
        return self.set_headers[DESTINATION_HEADER]

    def error(self) -> dict[str, Any]:
        assert self.immediate is not None
        error: dict[str, Any] = json.loads(self.immediate.body)["error"]
        assert set(error) >= {"message", "type", "param", "code"}
        return error


def _headers(pairs: dict[str, str]) -> ext.HttpHeaders:
    values = [base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
    return ext.HttpHeaders(headers=base_pb2.HeaderMap(headers=values), end_of_stream=False)


def pick(
    channel: grpc.Channel,
    body: dict[str, Any],
    *,
    key: str | None = KEYS["acme"],
    mode: int = MODE.FULL_DUPLEX_STREAMED,
    extra_headers: dict[str, str] | None = None,
) -> Picked:
    raw = json.dumps(body).encode()
    headers = {
        ":method": "POST",
        ":path": "/v1/chat/completions",
        "content-type": "application/json",
    }
    if key is not None:
        headers["authorization"] = f"Bearer {key}"
    headers.update(extra_headers or {})
    config = ext.ProtocolConfiguration(request_body_mode=mode)
    # The body in two chunks, as Envoy streams it.
    messages = [
        ext.ProcessingRequest(request_headers=_headers(headers), protocol_config=config),
        ext.ProcessingRequest(request_body=ext.HttpBody(body=raw[:10], end_of_stream=False)),
        ext.ProcessingRequest(request_body=ext.HttpBody(body=raw[10:], end_of_stream=True)),
    ]
    stub = ext_grpc.ExternalProcessorStub(channel)
    answers = list(stub.Process(iter(messages), timeout=10))
    if answers[0].HasField("immediate_response"):
        assert len(answers) == 1
        return Picked(answers[0].immediate_response, {}, [], None, [])
    head, body_answer = answers
    mutation = head.request_headers.response.header_mutation
    set_headers = {h.header.key: h.header.raw_value.decode() for h in mutation.set_headers}
    meta = json_format.MessageToDict(head.dynamic_metadata)
    endpoints = meta[METADATA_NAMESPACE][DESTINATION_HEADER].split(",")
    bm = body_answer.request_body.response.body_mutation
    new_body = bm.streamed_response.body if bm.HasField("streamed_response") else bm.body
    if bm.HasField("streamed_response"):
        assert bm.streamed_response.end_of_stream
    return Picked(None, set_headers, list(mutation.remove_headers), new_body, endpoints)


def _chat(model: str = "acme/support:prod") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


@pytest.fixture
def picker_env(tmp_path: Path) -> Iterator[tuple[GatewayEnv, grpc.Channel]]:
    port = free_port()
    env = start_env(tmp_path, picker_port=port, host="127.0.0.1", replica_data_token=DATA_TOKEN)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield env, channel
    finally:
        channel.close()
        stop_env(env)


def _endpoint(env: GatewayEnv, replica_id: str) -> str:
    return env.replica_servers[replica_id].url.removeprefix("http://")


def _resident_on(env: GatewayEnv, replica_id: str, adapter: str) -> None:
    env.replicas[replica_id].gpu.add(adapter)
    eventually(
        lambda: adapter in env.gw.tracker.views()[replica_id].gpu_adapters,
        what=f"{adapter} seen resident on {replica_id}",
    )


def test_resident_adapter_goes_to_the_replica_holding_it_with_the_gateways_rewrites(picker_env):
    env, channel = picker_env
    for rid in ("replica-0", "replica-2"):  # only replica-1 holds it in a GPU slot
        env.replicas[rid].gpu.clear()
    _resident_on(env, "replica-1", "acme-support-v1")
    picked = pick(channel, _chat(), extra_headers={"x-lorafleet-loaded-from": "gpu"})
    assert picked.immediate is None
    assert picked.destination == _endpoint(env, "replica-1")
    # The metadata's ordered list: the same primary first, then distinct fallbacks.
    assert picked.endpoints[0] == picked.destination
    assert len(set(picked.endpoints)) == len(picked.endpoints) >= 2
    known = {_endpoint(env, r) for r in env.replicas}
    assert set(picked.endpoints) <= known
    # The agents' credential replaces the client's key; a client-sent internal header goes.
    assert picked.set_headers["authorization"] == f"Bearer {DATA_TOKEN}"
    assert "x-lorafleet-loaded-from" in picked.removed
    assert int(picked.set_headers["x-lorafleet-tokens-estimate"]) > 0
    assert picked.body is not None
    forwarded = json.loads(picked.body)
    assert forwarded["model"] == "acme-support-v1"  # the alias became the adapter id
    assert forwarded["messages"] == [{"role": "user", "content": "hi"}]
    assert int(picked.set_headers["content-length"]) == len(picked.body)


def test_buffered_body_mode_gets_a_whole_body_mutation(picker_env):
    _env, channel = picker_env
    picked = pick(channel, _chat("acme/support:canary"), mode=MODE.BUFFERED)
    assert picked.body is not None
    assert json.loads(picked.body)["model"] == "acme-support-v2"


def test_cold_adapter_is_loaded_on_the_picked_replica_before_the_answer(tmp_path):
    port = free_port()
    env = start_env(
        tmp_path,
        registered_everywhere=False,
        picker_port=port,
        host="127.0.0.1",
        replica_data_token=DATA_TOKEN,
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            picked = pick(channel, _chat())
        (primary,) = [r for r in env.replicas if _endpoint(env, r) == picked.destination]
        loaded = [r for r, rep in env.replicas.items() if rep.loads]
        assert loaded == [primary]  # loaded where the request is sent, nowhere else
        assert env.replicas[primary].loads[0].id == "acme-support-v1"
        # Forwarded as Envoy would: the picked agent serves it with the mutated headers/body.
        assert picked.body is not None
        headers = {k: v for k, v in picked.set_headers.items() if k not in (DESTINATION_HEADER,)}
        headers["content-type"] = "application/json"
        resp = httpx.post(
            f"http://{picked.destination}/v1/chat/completions",
            content=picked.body,
            headers=headers,
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["choices"][0]["message"]["content"].startswith(
            f"[{primary}|acme-support-v1]"
        )
        seen = env.replicas[primary].request_headers[-1]
        assert seen["authorization"] == f"Bearer {DATA_TOKEN}"
        assert KEYS["acme"] not in json.dumps(seen)
    finally:
        stop_env(env)


def test_unknown_alias_is_an_immediate_404(picker_env):
    _env, channel = picker_env
    picked = pick(channel, _chat("acme/nope:prod"))
    assert picked.immediate is not None
    assert picked.immediate.status.code == 404
    assert picked.error()["code"] == "model_not_found"
    # Another tenant's alias reads the same.
    other = pick(channel, _chat("globex/bot:prod"))
    assert other.immediate is not None
    assert other.immediate.status.code == 404


def test_bad_or_missing_key_is_an_immediate_401(picker_env):
    _env, channel = picker_env
    for key in ("lf-not-a-key", None):
        picked = pick(channel, _chat(), key=key)
        assert picked.immediate is not None
        assert picked.immediate.status.code == 401
        assert picked.error()["code"] in ("invalid_api_key", "missing_api_key")


def test_tenant_over_its_limit_is_an_immediate_429(tmp_path):
    port = free_port()
    env = start_env(tmp_path, picker_port=port, host="127.0.0.1", requests_per_second=1)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            first = pick(channel, _chat())
            second = pick(channel, _chat())
        assert first.immediate is None
        assert second.immediate is not None
        assert second.immediate.status.code == 429
        assert second.error()["code"] == "rate_limit_exceeded"
        retry = {h.header.key for h in second.immediate.headers.set_headers}
        assert "retry-after" in retry
    finally:
        stop_env(env)


def test_a_failed_replica_is_not_picked_nor_in_the_fallback_list(picker_env):
    env, channel = picker_env
    for rid in ("replica-0", "replica-2"):
        env.replicas[rid].gpu.clear()
    _resident_on(env, "replica-1", "acme-support-v1")
    assert pick(channel, _chat()).destination == _endpoint(env, "replica-1")
    env.replicas["replica-1"].state_mode = "error"
    eventually(
        lambda: "replica-1" not in env.gw.tracker.healthy_ids(), what="replica-1 seen failed"
    )
    picked = pick(channel, _chat())
    assert picked.immediate is None
    dead = _endpoint(env, "replica-1")
    assert picked.destination != dead
    assert dead not in picked.endpoints
    assert picked.endpoints[0] == picked.destination


def test_grpc_health_says_serving(picker_env):
    _env, channel = picker_env
    stub = health_pb2_grpc.HealthStub(channel)
    for service in ("", SERVICE_NAME):
        answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_full_duplex_answer_chunks_are_handed_back_unchanged(picker_env):
    """In FULL_DUPLEX_STREAMED response mode Envoy waits for each answer chunk back."""
    _env, channel = picker_env
    raw = json.dumps(_chat()).encode()
    config = ext.ProtocolConfiguration(
        request_body_mode=MODE.FULL_DUPLEX_STREAMED,
        response_body_mode=MODE.FULL_DUPLEX_STREAMED,
    )
    auth = {":path": "/v1/chat/completions", "authorization": f"Bearer {KEYS['acme']}"}
    messages = [
        ext.ProcessingRequest(request_headers=_headers(auth), protocol_config=config),
        ext.ProcessingRequest(request_body=ext.HttpBody(body=raw, end_of_stream=True)),
        ext.ProcessingRequest(response_headers=_headers({":status": "200"})),
        ext.ProcessingRequest(response_body=ext.HttpBody(body=b"data: 1", end_of_stream=False)),
        ext.ProcessingRequest(response_body=ext.HttpBody(body=b"data: 2", end_of_stream=True)),
    ]
    answers = list(ext_grpc.ExternalProcessorStub(channel).Process(iter(messages), timeout=10))
    kinds = [a.WhichOneof("response") for a in answers]
    assert kinds == [
        "request_headers",
        "request_body",
        "response_headers",
        "response_body",
        "response_body",
    ]
    echoed = [a.response_body.response.body_mutation.streamed_response for a in answers[3:]]
    assert [(e.body, e.end_of_stream) for e in echoed] == [(b"data: 1", False), (b"data: 2", True)]


def _serving(channel: grpc.Channel) -> bool:
    try:
        answer = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=1
        )
    except grpc.RpcError:
        return False
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def test_gateway_process_serves_the_picker_when_its_port_is_set(tmp_path: Path):
    """`python -m lorafleet_gateway` (uvloop, both HTTP ports) with only the setting added."""
    replica = FakeReplica("replica-0", registered=("acme-support-v1",))
    with ServerThread(replica.app()) as upstream:
        folder = tmp_path / "manifests"
        docs = [m.pool(), m.key_secret("acme", KEYS["acme"]), m.adapter("acme-support-v1", "acme")]
        m.write(folder, "all.yaml", [*docs, *default_aliases()[:1]])
        replicas = tmp_path / "replicas.json"
        replicas.write_text(json.dumps(m.replicas_doc({"replica-0": upstream.url})))
        picker_port = free_port()
        env = {
            **os.environ,
            "LORAFLEET_GATEWAY_HOST": "127.0.0.1",
            "LORAFLEET_GATEWAY_PORT": str(free_port()),
            "LORAFLEET_GATEWAY_INTERNAL_PORT": str(free_port()),
            "LORAFLEET_GATEWAY_MANIFESTS_DIR": str(folder),
            "LORAFLEET_GATEWAY_REPLICAS_FILE": str(replicas),
            "LORAFLEET_GATEWAY_PICKER_PORT": str(picker_port),
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "lorafleet_gateway"],
            env=env,
            cwd=REPO,
            stderr=subprocess.DEVNULL,
        )
        try:
            with grpc.insecure_channel(f"127.0.0.1:{picker_port}") as channel:
                eventually(
                    lambda: _serving(channel),
                    within_s=60,
                    what="the picker's health to say SERVING",
                    abort=lambda: None if proc.poll() is None else "the gateway exited",
                )
                picked = pick(channel, _chat())
            assert picked.destination == upstream.url.removeprefix("http://")
            assert picked.body is not None
            assert json.loads(picked.body)["model"] == "acme-support-v1"
        finally:
            proc.terminate()
            assert proc.wait(timeout=30) == 0


def test_no_healthy_replica_is_an_immediate_503_and_refunds_the_tokens(tmp_path: Path):
    port = free_port()
    # Room for one request's estimate (1,000 output tokens and the prompt), not two.
    env = start_env(tmp_path, picker_port=port, host="127.0.0.1", tokens_per_minute=1500)
    big = {**_chat(), "max_tokens": 1000}
    try:
        for replica in env.replicas.values():
            replica.state_mode = "error"
        eventually(lambda: not env.gw.tracker.healthy_ids(), what="every replica seen failed")
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            refused = pick(channel, big)
            assert refused.immediate is not None
            assert refused.immediate.status.code == 503
            for replica in env.replicas.values():
                replica.state_mode = "ok"
            eventually(lambda: env.gw.tracker.healthy_ids(), what="a replica back")
            # The refused request's tokens were given back, so this one fits; the next does not.
            assert pick(channel, big).immediate is None
            over = pick(channel, big).immediate
            assert over is not None
            assert over.status.code == 429
    finally:
        stop_env(env)
