"""What a client sees when a replica answers badly: wrapped errors, retries, dropped connections.

The replica here is the real-HTTP stand-in (FakeReplica) or, for the connection-reuse case, a
raw socket server that misbehaves the way a crashing agent did.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from lorafleet_core.planning.placement import owners
from tests.gateway import manifests as m
from tests.gateway.conftest import KEYS, MSG_DEFAULT, GatewayEnv, openai_error, start_env, stop_env
from tests.waiting import eventually

MSG = MSG_DEFAULT


def _owners(env: GatewayEnv, adapter: str = "acme-support-v1") -> list[str]:
    return owners(adapter, list(env.replicas), 2)


def _post(env: GatewayEnv, body: dict[str, object], tenant: str = "acme") -> httpx.Response:
    return httpx.post(
        f"{env.base_url}/chat/completions",
        json=body,
        headers={"authorization": f"Bearer {KEYS[tenant]}"},
        timeout=10,
    )


def _chat(model: str = "acme/support:prod") -> dict[str, object]:
    return {"model": model, "messages": MSG}


def _assert_openai_error(resp: httpx.Response, status: int, code: str | None) -> str:
    err = openai_error(resp, status)
    assert err["code"] == code
    assert err["type"] == ("invalid_request_error" if status < 500 else "server_error")
    return str(err["message"])


def test_engine_unavailable_from_owners_is_retried_on_another_replica(env: GatewayEnv):
    own = _owners(env)
    for rid in own:
        env.replicas[rid].fail_status = 502
        env.replicas[rid].fail_code = "engine_unavailable"
    resp = _post(env, _chat())
    assert resp.status_code == 200
    assert resp.headers["x-replica-id"] not in own
    assert all(len(env.replicas[rid].requests) == 1 for rid in own)


def test_vllm_down_everywhere_answers_503_as_documented(env: GatewayEnv):
    for r in env.replicas.values():
        r.fail_status = 502
        r.fail_code = "engine_unavailable"
        r.fail_message = "vLLM unreachable: [Errno 111] Connect call failed ('127.0.0.1', 8200)"
    message = _assert_openai_error(_post(env, _chat()), 503, "upstream_unavailable")
    assert "127.0.0.1" not in message


def test_replica_that_lost_the_adapter_is_skipped(env: GatewayEnv):
    # vLLM's own 404 ("model does not exist") after an engine restart is the replica's fault.
    own = _owners(env)
    env.replicas[own[0]].fail_status = 404
    env.replicas[own[0]].fail_code = "model_not_found"
    resp = _post(env, _chat())
    assert resp.status_code == 200
    assert resp.headers["x-replica-id"] == own[1]


def test_engine_refusal_is_400_without_paths_or_digests(env: GatewayEnv):
    for r in env.replicas.values():
        r.fail_status = 400
        r.fail_message = (
            "file /var/lib/lorafleet/cache/acme-support-v1/adapter_model.safetensors has sha256:"
            + "ab" * 32
            + " from s3://bucket/acme/v1; prompt too long "
            + "x" * 2000
        )
    message = _assert_openai_error(_post(env, _chat()), 400, None)
    assert "/var/lib" not in message
    assert "ab" * 32 not in message
    assert "s3://" not in message
    assert "prompt too long" in message
    assert len(message) <= 300
    assert sum(len(r.requests) for r in env.replicas.values()) == 1  # not spread to others


def test_tools_refused_for_want_of_a_parser_name_the_pool_setting_not_vllm_flags(
    env: GatewayEnv,
):
    # vLLM 0.32's own words for tool_choice "required" on an engine started without a parser.
    for r in env.replicas.values():
        r.fail_status = 400
        r.fail_message = 'tool_choice="required" requires --tool-call-parser to be set'
    body = {
        **_chat(),
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "tool_choice": "required",
    }
    resp = _post(env, body)
    message = _assert_openai_error(resp, 400, "tool_choice_unsupported")
    assert resp.json()["error"]["param"] == "tool_choice"
    assert "spec.engine.toolCallParser" in message
    assert 'tool_choice="required"' in message  # what the engine refused, kept
    assert sum(len(r.requests) for r in env.replicas.values()) == 1  # no replica does better


def test_refused_adapter_is_502_adapter_rejected_without_checksums(env: GatewayEnv):
    for r in env.replicas.values():
        r.fail_status = 422
        r.fail_code = "adapter_rejected"
        r.fail_message = (
            "checksum mismatch: expected sha256:" + "0" * 64 + ", got sha256:" + "1" * 64
        )
    message = _assert_openai_error(_post(env, _chat()), 502, "adapter_rejected")
    assert "sha256" not in message


def test_replica_500_text_plain_becomes_openai_502(env: GatewayEnv):
    for r in env.replicas.values():
        r.fail_status = 500
        r.fail_text = "Internal Server Error"
    _assert_openai_error(_post(env, _chat()), 502, "upstream_error")
    # Not retried: a request that breaks one replica must not be sent to every other.
    assert sum(len(r.requests) for r in env.replicas.values()) == 1


class _DroppingReplica:
    """A raw HTTP/1.1 server: its first answer is a keep-alive 500; after any answer it drops
    the next request on the same connection without a reply (a crashed agent's socket that the
    client still holds). Fresh connections get a normal chat completion."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.answers = 0
        self.connections = 0
        self.port = 0
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
            self.port = server.sockets[0].getsockname()[1]
            self.server = server
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        started.wait(5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            await reader.readexactly(length)
            self.answers += 1
            if self.answers == 1:
                body = b"Internal Server Error"
                status, ctype = b"500 Internal Server Error", b"text/plain"
            else:
                status, ctype = b"200 OK", b"application/json"
                body = json.dumps(
                    {
                        "id": "c",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "acme-support-v1",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": "fresh"},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                ).encode()
            writer.write(
                b"HTTP/1.1 "
                + status
                + b"\r\ncontent-type: "
                + ctype
                + b"\r\ncontent-length: "
                + str(len(body)).encode()
                + b"\r\nx-adapter-tier: gpu\r\n\r\n"
                + body
            )
            await writer.drain()
            await reader.readuntil(b"\r\n\r\n")  # the next request on this connection...
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()  # ...is dropped unanswered

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def dropping_env(tmp_path: Path) -> Iterator[tuple[GatewayEnv, _DroppingReplica]]:
    env = start_env(tmp_path, n_replicas=1)
    raw = _DroppingReplica()
    state = env.replica_servers["replica-0"].url  # the stand-in still answers /state
    m.write(
        env.folder,
        "replicas.yaml",
        [
            {
                "replicas": [
                    {
                        "id": "replica-0",
                        "dataUrl": f"http://127.0.0.1:{raw.port}",
                        "internalUrl": state,
                    }
                ]
            }
        ],
    )
    eventually(
        lambda: str(raw.port) in getattr(env.gw.tracker.endpoint("replica-0"), "data_url", ""),
        what="replica endpoint reload",
    )
    eventually(lambda: bool(env.gw.tracker.healthy_ids()), what="healthy replica")
    try:
        yield env, raw
    finally:
        raw.stop()
        stop_env(env)


def test_connection_of_a_failed_answer_is_never_reused(
    dropping_env: tuple[GatewayEnv, _DroppingReplica],
):
    env, raw = dropping_env
    _assert_openai_error(_post(env, _chat()), 502, "upstream_error")
    # Another tenant's request right after: it must get a fresh connection, not the dead one.
    globex = _post(env, _chat("globex/bot:prod"), tenant="globex")
    assert globex.status_code == 200, globex.text
    assert globex.json()["choices"][0]["message"]["content"] == "fresh"
    assert raw.connections == 2


def test_truncated_stream_ends_with_a_clean_error_event(env: GatewayEnv):
    first = (
        b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m",'
        b'"choices":[{"index":0,"delta":{"role":"assistant","content":"par"},'
        b'"finish_reason":null}]}\n\n'
    )
    for r in env.replicas.values():
        r.raw_stream = [first, b'data: {"id":"c","object":"chat.comp']  # cut mid-event, no [DONE]
    stream = env.client().chat.completions.create(
        model="acme/support:prod", messages=MSG, stream=True
    )
    got: list[object] = []
    with pytest.raises(openai.APIError) as exc:
        got.extend(stream)
    assert len(got) == 1
    assert exc.value.code == "upstream_error"


def test_malformed_stream_ends_with_a_clean_error_event(env: GatewayEnv):
    for r in env.replicas.values():
        r.raw_stream = [b"\x00\xffnot sse at all\n\n", b"data: [DONE]\n\n"]
    stream = env.client().chat.completions.create(
        model="acme/support:prod", messages=MSG, stream=True
    )
    with pytest.raises(openai.APIError) as exc:
        list(stream)
    assert exc.value.code == "upstream_error"


def test_store_unavailable_is_told_only_when_every_candidate_tried_said_so():
    from lorafleet_gateway.replica_errors import judge, no_candidate_answered

    store_down = b'{"error": {"code": "store_unavailable", "message": "s3://b/k unreachable"}}'
    verdict = judge(503, store_down)
    assert verdict.retry
    assert verdict.code == "store_unavailable"
    everyone = no_candidate_answered(["store_unavailable", "store_unavailable"])
    assert (everyone.status, everyone.code) == (503, "store_unavailable")
    assert everyone.headers == {"retry-after": "5"}
    assert "s3://" not in everyone.message
    # One replica had the store and failed otherwise, or none was tried: the generic answer.
    for codes in (["store_unavailable", "engine_unavailable"], ["store_unavailable", None], []):
        mixed = no_candidate_answered(codes)
        assert (mixed.status, mixed.code) == (503, "upstream_unavailable"), codes
