"""Requests the agent tests send through the session's real vLLM: the openai client on an
agent's data port, a completion with its headers, the gateway's load-on-404, and slow streams
that stay in flight while a test looks."""

from __future__ import annotations

import http.client
import json
import socket
from urllib.parse import urlparse

import openai
import pytest

from lorafleet_core.wire.headers import HEADER_LOADED_FROM
from tests.agent.conftest import load
from tests.conftest import DATA_HEADERS, TEST_DATA_TOKEN

# Far below the ~8 MB slow stream, well above a loopback segment (64 KiB).
RECEIVE_BUFFER_BYTES = 256 * 1024
MARKERS = {"zebra": "ZEBRA-7", "falcon": "FALCON-3", "otter": "OTTER-9"}


def client(agent) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{agent.data_url}/v1", api_key=TEST_DATA_TOKEN, max_retries=0)


def gateway_style_load(agent, record) -> dict[str, str]:
    """What the gateway does first: request -> 404 adapter_not_registered -> post the record.
    Its retry then carries the answer's `from` (complete(..., loaded_from=...))."""
    with pytest.raises(openai.NotFoundError) as err:
        client(agent).completions.create(model=record.id, prompt="Hi", max_tokens=4)
    assert err.value.code == "adapter_not_registered"
    r = load(agent, record)
    assert r.status_code == 200, r.text
    body: dict[str, str] = r.json()
    return body


def complete(
    agent,
    model: str,
    prompt: str = "Tell me about the weather today",
    loaded_from: str | None = None,
):
    headers = {HEADER_LOADED_FROM: loaded_from} if loaded_from else None
    raw = client(agent).completions.with_raw_response.create(
        model=model, prompt=prompt, max_tokens=12, temperature=0, extra_headers=headers
    )
    return raw.headers, raw.parse().choices[0].text


def stream_choices(lines) -> dict[int, tuple[str, int, str | None]]:
    """SSE completion chunks -> per choice index: (text, tokens, finish_reason)."""
    out: dict[int, tuple[str, int, str | None]] = {}
    for line in lines:
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in json.loads(line[6:]).get("choices", []):
            text, tokens, finish = out.get(choice["index"], ("", 0, None))
            text += choice.get("text") or ""
            tokens += len((choice.get("logprobs") or {}).get("tokens") or [])
            out[choice["index"]] = (text, tokens, choice.get("finish_reason") or finish)
    return out


def slow_stream(
    url: str, body: dict[str, object], headers: dict[str, str] | None = None
) -> http.client.HTTPResponse:
    """A streaming request read through a fixed receive buffer: the agent cannot finish relaying
    (and so keeps the adapter's reference) until the test reads the rest.

    The buffer is fixed (no autotuning while the test does not read) but not tiny: with 4 KiB
    one loopback segment of the SSE can outweigh the whole buffer, the kernel then drops it
    (TcpExtRcvPruned) and the stream waits for retransmission timeouts that double while the
    test is not reading. One CI run spent 387 s idle in a test that takes 8 s, most likely so;
    the rest of the stream also drains in 0.05 s instead of 0.6 s."""
    parsed = urlparse(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)
    sock.connect((host, port))
    conn = http.client.HTTPConnection(host, port, timeout=120)
    conn.sock = sock
    conn.request(
        "POST",
        "/v1/completions",
        body=json.dumps(body),
        headers={"content-type": "application/json", **DATA_HEADERS, **(headers or {})},
    )
    return conn.getresponse()


def slow_long_stream(
    url: str, model: str, headers: dict[str, str] | None = None
) -> http.client.HTTPResponse:
    """A stream larger than the kernel's and uvicorn's buffers (48 sequences x 230 tokens with
    logprobs, ~8 MB of SSE), read slowly: it stays in flight until the test reads the rest."""
    body: dict[str, object] = {
        "model": model,
        "prompt": "Tell me a story",
        "max_tokens": 230,
        "n": 48,
        "logprobs": 20,
        "ignore_eos": True,
        "stream": True,
    }
    return slow_stream(url, body, headers)
