"""Request bodies in transit are bounded per key and on the gateway pod (body_budget.py)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.gateway.conftest import KEYS, MSG_DEFAULT, GatewayEnv, openai_error, start_env, stop_env
from tests.waiting import eventually

MAX_BODY = 200_000
PER_KEY = 300_000
TOTAL = 450_000
HELD = 150_000  # bytes each held connection sends of its MAX_BODY-byte body


@pytest.fixture
def env(tmp_path: Path) -> Iterator[GatewayEnv]:
    e = start_env(
        tmp_path,
        n_replicas=1,
        max_body_bytes=MAX_BODY,
        max_buffered_body_bytes_per_key=PER_KEY,
        max_buffered_body_bytes=TOTAL,
        body_timeout_s=30.0,  # the held bodies must not time out during the test
    )
    try:
        yield e
    finally:
        stop_env(e)


def _head(tenant: str, length: int) -> bytes:
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer {KEYS[tenant]}"
        f"\r\ncontent-type: application/json\r\ncontent-length: {length}\r\n\r\n"
    ).encode()


def _hold(env: GatewayEnv, tenant: str) -> socket.socket:
    """A connection that has sent HELD bytes of a MAX_BODY-byte body and then waits."""
    host, port = env.server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(_head(tenant, MAX_BODY) + b" " * HELD)
    return sock


def _chat(env: GatewayEnv, tenant: str) -> httpx.Response:
    body = {"model": "acme/support:prod", "messages": MSG_DEFAULT, "max_tokens": 4}
    if tenant == "globex":
        body["model"] = "globex/bot:prod"
    return httpx.post(
        env.base_url + "/chat/completions",
        content=json.dumps(body).encode().ljust(50_000),  # a body worth counting
        headers={"authorization": f"Bearer {KEYS[tenant]}", "content-type": "application/json"},
        timeout=10,
    )


def test_bodies_held_open_under_one_key_are_bounded_and_other_keys_still_served(
    env: GatewayEnv,
):
    """Before the bound, 400 connections holding 1 MB bodies under one key grew a gateway by
    375 MiB (the concurrency cap and rate limits are taken after the body): one tenant could
    take a pod past its memory limit, every other tenant's streams with it."""
    bodies = env.gw.bodies
    held = [_hold(env, "acme"), _hold(env, "acme")]
    try:
        eventually(lambda: bodies.in_transit == 2 * HELD, what="acme's bodies in transit")
        # acme's next body would pass its 300 kB: refused at once, not read to the end.
        refused = _chat(env, "acme")
        error = openai_error(refused, 429)
        assert error["code"] == "concurrency_limit_exceeded"
        assert refused.headers["retry-after"] == "1"
        assert refused.headers["connection"] == "close"
        # Another tenant is not held back by acme's uploads.
        assert _chat(env, "globex").status_code == 200
        # The pod's total bounds many keys together: 503, whoever asks.
        held.append(_hold(env, "globex"))
        eventually(lambda: bodies.in_transit == 3 * HELD, what="globex's body in transit")
        error = openai_error(_chat(env, "globex"), 503)
        assert error["code"] == "server_busy"
        for sock in held[:2]:
            sock.close()
        eventually(lambda: bodies.in_transit == HELD, what="acme's bodies given back")
        assert _chat(env, "acme").status_code == 200
    finally:
        for sock in held:
            sock.close()
    eventually(lambda: bodies.in_transit == 0 and len(bodies) == 0, what="nothing in transit")


def test_a_completed_body_gives_its_bytes_back(env: GatewayEnv):
    """Counted bytes are given back once the body is whole, answered or refused: a key that
    sends full-size bodies one after another never runs out."""
    for _ in range(5):  # 5 x 50 kB, past the key's 300 kB if nothing were given back
        assert _chat(env, "acme").status_code == 200
    raw = b"{" + b" " * (MAX_BODY + 10)  # over max_body_bytes: 413, given back too
    resp = httpx.post(
        env.base_url + "/chat/completions",
        content=raw,
        headers={"authorization": f"Bearer {KEYS['acme']}", "content-type": "application/json"},
        timeout=10,
    )
    assert resp.status_code == 413
    eventually(lambda: env.gw.bodies.in_transit == 0, what="nothing in transit")
