"""Hostile requests on both agent ports, over real HTTP against a real agent (no engine behind
it: everything checked here is answered before the agent would talk to vLLM), and the data
port's credential.

Each used to be a text/plain 500 (NaN, deep nesting, lone surrogates), a body passed on
whole (20 MB), or FastAPI's `{"detail": ...}` instead of an OpenAI error body.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lorafleet_agent.data_app import MAX_BODY_BYTES
from lorafleet_agent.data_auth import build_data_auth
from lorafleet_agent.internal_app import MAX_LOAD_BODY_BYTES
from lorafleet_agent.internal_auth import MissingCredential
from lorafleet_agent.server import Agent
from lorafleet_agent.settings import AgentSettings
from tests.agent_thread import RunningAgent, agent_in_thread
from tests.conftest import (
    DATA_HEADERS,
    INTERNAL_HEADERS,
    TEST_DATA_TOKEN,
    TEST_INTERNAL_TOKEN,
    free_port,
)
from tests.scrape import Scrape

pytestmark = pytest.mark.timeout(120)

CHAT = '{"model":"a1","messages":[{"role":"user","content":"hi"}]'


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAgent]:
    settings = AgentSettings(
        replica_id="r0",
        vllm_url=f"http://127.0.0.1:{free_port()}",  # no engine
        cache_dir=tmp_path_factory.mktemp("cache"),
        host="127.0.0.1",
        data_port=0,
        internal_port=0,
        internal_token=TEST_INTERNAL_TOKEN,
        data_token=TEST_DATA_TOKEN,
    )
    with agent_in_thread(settings, wait_ready=False) as running:
        yield running


def _error(resp: httpx.Response, status: int) -> dict[str, object]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    error: dict[str, object] = resp.json()["error"]
    assert set(error) - {"request_id"} == {"message", "type", "param", "code"}
    return error


def _chat(
    agent: RunningAgent, content: bytes | str, credential: dict[str, str] = DATA_HEADERS
) -> httpx.Response:
    return httpx.post(
        agent.data_url + "/v1/chat/completions",
        content=content,
        headers={"content-type": "application/json", **credential},
        timeout=30,
    )


@pytest.mark.parametrize(
    "credential",
    [
        {},
        {"authorization": "Bearer wrong"},
        {"authorization": f"Basic {TEST_DATA_TOKEN}"},
        {"authorization": f"Bearer {TEST_INTERNAL_TOKEN}"},  # the internal token is not it
    ],
)
def test_the_data_port_refuses_a_missing_or_wrong_credential_before_the_body(
    agent: RunningAgent, credential: dict[str, str]
):
    before = metric_value(agent, "lorafleet_agent_data_auth_failures_total")
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/responses"):
        resp = httpx.post(agent.data_url + path, content=CHAT + "}", headers=credential)
        assert _error(resp, 401)["code"] == "unauthorized"
        assert resp.headers["www-authenticate"] == "Bearer"
    # Refused before reading: an oversized or broken body is still 401, not 413/400.
    big = b'{"model":"a1","x":"' + b"a" * (MAX_BODY_BYTES + 1) + b'"}'
    assert _error(_chat(agent, big, credential), 401)["code"] == "unauthorized"
    assert _error(_chat(agent, "not json", credential), 401)["code"] == "unauthorized"
    assert metric_value(agent, "lorafleet_agent_data_auth_failures_total") == before + 5


def test_the_data_ports_probe_needs_no_credential(agent: RunningAgent):
    assert httpx.get(agent.data_url + "/healthz").json() == {"status": "ok"}


def test_an_agent_without_a_data_credential_refuses_to_start(tmp_path: Path):
    settings = AgentSettings(
        cache_dir=tmp_path, internal_token=TEST_INTERNAL_TOKEN, data_port=0, internal_port=0
    )
    with pytest.raises(MissingCredential, match="LORAFLEET_AGENT_DATA_TOKEN"):
        Agent(settings)
    # Explicitly allowed (throwaway tests only), it starts.
    assert Agent(settings.model_copy(update={"allow_unauthenticated_data": True}))


def test_a_rotated_data_token_file_is_the_one_accepted(tmp_path: Path):
    token_file = tmp_path / "data-token"
    token_file.write_text("first\n")
    auth = build_data_auth(AgentSettings(data_token_file=token_file))
    assert auth.allows("Bearer first")
    assert not auth.allows("Bearer second")
    token_file.write_text("second\n")
    os.utime(token_file, (1, 1))  # a different mtime, as the kubelet's symlink swap gives
    assert auth.allows("Bearer second")
    assert not auth.allows("Bearer first")


def metric_value(agent: RunningAgent, name: str) -> float:
    return Scrape.of(f"{agent.internal_url}/metrics").value(name)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (CHAT + ',"temperature":NaN}', "invalid_json"),
        (CHAT + ',"top_k":9999999999999999999999999}', "invalid_json"),
        (CHAT + ',"tools":' + "[" * 100_000 + "]" * 100_000 + "}", "invalid_json"),
        ('{"model":"a1","messages":[{"role":"user","content":"\\ud800"}]}', "invalid_unicode"),
        ("not json", "invalid_json"),
    ],
)
def test_bodies_no_engine_may_see_are_400_on_the_data_port(
    agent: RunningAgent, body: str, code: str
):
    assert _error(_chat(agent, body), 400)["code"] == code


def test_a_body_over_the_limit_is_413_declared_or_streamed(agent: RunningAgent):
    big = b'{"model":"a1","x":"' + b"a" * (MAX_BODY_BYTES + 1) + b'"}'
    assert _error(_chat(agent, big), 413)["code"] == "request_too_large"

    def pieces() -> Iterator[bytes]:  # chunked: no Content-Length to refuse up front
        yield big[: len(big) // 2]
        yield big[len(big) // 2 :]

    assert _error(_chat(agent, pieces()), 413)["code"] == "request_too_large"  # type: ignore[arg-type]


def test_a_body_within_the_limit_reaches_admission(agent: RunningAgent):
    # Past the body checks: here the missing engine is what answers.
    assert _error(_chat(agent, CHAT + "}"), 503)["code"] == "engine_unavailable"


@pytest.mark.parametrize("port", ["data", "internal"])
def test_framework_errors_are_openai_shaped_and_no_schema_is_served(agent: RunningAgent, port: str):
    base = agent.data_url if port == "data" else agent.internal_url
    assert _error(httpx.get(base + "/nope"), 404)["code"] == "unknown_url"
    for path in ("/openapi.json", "/docs", "/redoc"):
        _error(httpx.get(base + path), 404)
    if port == "data":
        resp = httpx.get(base + "/v1/chat/completions")
    else:
        resp = httpx.get(base + "/internal/replicas/r0/adapters/a1/load")
    assert _error(resp, 405)["code"] == "method_not_allowed"
    assert "POST" in resp.headers["allow"]
    # A trailing slash is an unknown URL, not a 307 to the host the Host header names.
    resp = httpx.get(base + "/healthz/", headers={"host": "evil.example"})
    assert _error(resp, 404)["code"] == "unknown_url"
    assert "location" not in resp.headers


@pytest.mark.parametrize(
    "body",
    [
        b'{"record":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"record": {"id": NaN}}',
        b'{"record": {}, "x": "' + b"a" * MAX_LOAD_BODY_BYTES + b'"}',
    ],
)
def test_hostile_load_bodies_are_4xx_after_the_credential(agent: RunningAgent, body: bytes):
    url = agent.internal_url + "/internal/replicas/r0/adapters/a1/load"
    # Without the credential nothing is read: 401 whatever the body.
    assert _error(httpx.post(url, content=body), 401)["code"] == "unauthorized"
    resp = httpx.post(url, content=body, headers=INTERNAL_HEADERS)
    assert resp.status_code in (400, 413)
    _error(resp, resp.status_code)
    assert json.loads(httpx.get(agent.internal_url + "/internal/replicas/r0/state").text)[
        "replica_id"
    ] == ("r0")


@pytest.mark.parametrize("port", ["data", "internal"])
def test_headers_that_never_finish_are_408_and_closed_on_both_ports(
    slow_agent: RunningAgent, port: str
):
    url = slow_agent.data_url if port == "data" else slow_agent.internal_url
    host, _, number = url.removeprefix("http://").partition(":")
    with socket.create_connection((host, int(number)), timeout=10) as sock:
        sock.sendall(b"GET /internal/replicas/r0/state HTTP/1.1\r\nhost: agent\r\n")  # no end
        out = b""
        while chunk := sock.recv(65536):  # the agent closes: it must
            out += chunk
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    assert json.loads(body)["error"]["code"] == "request_timeout"


@pytest.mark.parametrize("port", ["data", "internal"])
def test_a_body_trickled_a_byte_at_a_time_is_408_and_closed_on_both_ports(
    slow_agent: RunningAgent, port: str
):
    """Slowloris on the body: headers complete, then a byte every 0.1 s. It held the
    connection (and what the body had buffered) for as long as the client kept sending."""
    url = slow_agent.data_url if port == "data" else slow_agent.internal_url
    path = "/v1/chat/completions" if port == "data" else "/internal/replicas/r0/adapters/a/load"
    token = TEST_DATA_TOKEN if port == "data" else TEST_INTERNAL_TOKEN  # past the key check
    host, _, number = url.removeprefix("http://").partition(":")
    with socket.create_connection((host, int(number)), timeout=10) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nhost: agent\r\ncontent-type: application/json\r\n"
            f"authorization: Bearer {token}\r\ncontent-length: 1000\r\n\r\n".encode()
        )
        sock.settimeout(0.1)
        out = b""
        for _ in range(100):  # 10 s of trickling at most
            try:
                sock.sendall(b" ")
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break  # the agent closed
            if not chunk:
                break
            out += chunk
        sock.settimeout(5)
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                out += chunk
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), out[:300]
    assert json.loads(body)["error"]["code"] == "request_timeout"


def test_headers_over_the_limit_are_431(agent: RunningAgent):
    host, _, number = agent.internal_url.removeprefix("http://").partition(":")
    with socket.create_connection((host, int(number)), timeout=10) as sock:
        sock.sendall(
            b"GET /internal/replicas/r0/state HTTP/1.1\r\nhost: agent\r\nx-big: "
            + b"a" * 40_000
            + b"\r\n\r\n"
        )
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    assert out.startswith(b"HTTP/1.1 431")


@pytest.fixture(scope="module")
def slow_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningAgent]:
    """An agent whose header and body timeouts a test can wait out."""
    settings = AgentSettings(
        replica_id="r0",
        vllm_url=f"http://127.0.0.1:{free_port()}",
        cache_dir=tmp_path_factory.mktemp("cache"),
        host="127.0.0.1",
        data_port=0,
        internal_port=0,
        internal_token=TEST_INTERNAL_TOKEN,
        data_token=TEST_DATA_TOKEN,
        header_timeout_s=0.5,
        body_timeout_s=0.5,
    )
    with agent_in_thread(settings, wait_ready=False) as running:
        yield running
