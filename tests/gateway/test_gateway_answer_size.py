"""Long non-stream answers: relayed as they arrive (a gateway holds at most
`answer_buffer_bytes` of one), metered by their usage, retried only inside the held part."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.gateway.conftest import KEYS, GatewayEnv, start_env, stop_env
from tests.scrape import Scrape
from tests.waiting import eventually

BODY = {"model": "acme/support:prod", "messages": [{"role": "user", "content": "hello"}]}
HEADERS = {"authorization": f"Bearer {KEYS['acme']}"}
HELD = 32 * 1024  # the gateway's answer_buffer_bytes here (below the replica's 64 KiB pieces)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[GatewayEnv]:
    e = start_env(tmp_path, answer_buffer_bytes=HELD)
    try:
        yield e
    finally:
        stop_env(e)


def _sample(env: GatewayEnv, name: str, **labels: str) -> float:
    return Scrape.of_registry(env.gw.metrics.registry).value(name, **labels)


def _pad_all(env: GatewayEnv, pad: int) -> None:
    for replica in env.replicas.values():
        replica.answer_pad = pad


def _long_held_answers(env: GatewayEnv) -> threading.Event:
    """2 MB answers whose replica sends its first piece, then waits for the event."""
    _pad_all(env, 2 * 2**20)
    hold = threading.Event()
    for replica in env.replicas.values():
        replica.hold_streams = hold
    return hold


def _metered(env: GatewayEnv) -> tuple[float, float, float]:
    """acme's prompt and completion usage, and the gateway's completion tokens."""
    labels = {"tenant": "acme", "adapter": "acme-support-v1"}
    return (
        _sample(env, "lorafleet_gateway_usage_prompt_tokens_total", **labels),
        _sample(env, "lorafleet_gateway_usage_completion_tokens_total", **labels),
        _sample(env, "lorafleet_gateway_tokens_total", kind="completion"),
    )


def test_a_long_answer_reaches_the_client_while_the_replica_is_still_sending_it(
    env: GatewayEnv,
) -> None:
    """Held whole, 64 answers of 10 MB were 640 MB in a gateway pod limited to 1 GiB: the
    client reads the first part while the replica holds back the rest, and the answer is
    still metered by the usage at its end, with the headers it always had."""
    hold = _long_held_answers(env)
    url = f"{env.base_url}/chat/completions"
    try:
        with httpx.stream("POST", url, json=BODY, headers=HEADERS, timeout=10) as resp:
            assert resp.status_code == 200
            pieces = resp.iter_raw()
            first = next(pieces)  # before the replica has sent more than its first piece
            assert len(first) <= 2 * 65536
            hold.set()
            raw = first + b"".join(pieces)
    finally:
        hold.set()
    assert int(resp.headers["content-length"]) == len(raw) > 2 * 2**20
    assert resp.headers["x-replica-id"] in env.replicas
    assert resp.headers["x-adapter-id"] == "acme-support-v1"
    usage = json.loads(raw)["usage"]
    # Accounted once the last byte has gone: the client may have it a moment before.
    eventually(
        lambda: (
            _sample(env, "lorafleet_gateway_requests_total", endpoint="chat", status="200") == 1
        ),
        what="the request counted as answered",
    )
    metered = _metered(env)
    assert metered == (usage["prompt_tokens"], usage["completion_tokens"],
                       usage["completion_tokens"])  # fmt: skip


def test_a_replica_failing_inside_the_held_part_is_retried_past_it_cuts_the_client(
    env: GatewayEnv,
) -> None:
    """Inside the first `answer_buffer_bytes` nothing reached the client: the next candidate
    is tried, as for any failure before the first byte. Past it the client's connection ends
    short of the declared length (never a short body that parses) and nothing is retried."""
    for replica in env.replicas.values():
        replica.die_after_chunks = 0  # dies before any byte of its answer
    _pad_all(env, 3 * 2**20)
    resp = httpx.post(f"{env.base_url}/chat/completions", json=BODY, headers=HEADERS, timeout=10)
    assert resp.status_code == 503, resp.text
    assert _sample(env, "lorafleet_gateway_routing_total", outcome="retry") >= 1
    retries = _sample(env, "lorafleet_gateway_routing_total", outcome="retry")
    tried = sum(len(r.requests) for r in env.replicas.values())

    for replica in env.replicas.values():
        replica.die_after_chunks = 4  # 256 KiB sent: past the 32 KiB the gateway holds
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(f"{env.base_url}/chat/completions", json=BODY, headers=HEADERS, timeout=10)
    assert sum(len(r.requests) for r in env.replicas.values()) == tried + 1
    assert _sample(env, "lorafleet_gateway_routing_total", outcome="retry") == retries
    eventually(
        lambda: _sample(
            env, "lorafleet_gateway_requests_total", endpoint="chat", status="stream_error"
        ) == 1,
        what="the cut answer counted as failed",
    )  # fmt: skip
    assert _sample(env, "lorafleet_gateway_requests_in_flight") == 0


def test_a_long_answer_its_client_leaves_early_is_billed_the_engines_usage(
    env: GatewayEnv,
) -> None:
    """The usage of a non-stream answer is at its end: a client that reads the first part and
    leaves used to be billed no completion at all. The gateway reads the rest for its usage."""
    hold = _long_held_answers(env)
    url = f"{env.base_url}/chat/completions"
    try:
        with httpx.stream("POST", url, json=BODY, headers=HEADERS, timeout=10) as resp:
            assert resp.status_code == 200
            next(resp.iter_raw())  # the first part, then the client closes its connection
        # Gone before the replica sent the rest (and the usage): the gateway has not billed it.
        assert _sample(env, "lorafleet_gateway_tokens_total", kind="completion") == 0
    finally:
        hold.set()
    eventually(
        lambda: _sample(
            env, "lorafleet_gateway_requests_total", endpoint="chat", status="client_closed"
        ) == 1,
        what="the request counted as left by its client",
    )  # fmt: skip
    replica = env.replicas[resp.headers["x-replica-id"]]
    usage = {"prompt_tokens": 7, "completion_tokens": replica.n_tokens}
    metered = _metered(env)
    assert metered == (usage["prompt_tokens"], usage["completion_tokens"],
                       usage["completion_tokens"])  # fmt: skip
    assert usage["completion_tokens"] > 0
    assert _sample(env, "lorafleet_gateway_requests_in_flight") == 0
