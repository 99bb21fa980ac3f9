"""Keyless /healthz and /readyz on the public port: yes or no, nothing more."""

from __future__ import annotations

import httpx

from tests.gateway.conftest import GatewayEnv
from tests.waiting import eventually


def test_public_health_paths_answer_without_a_key_and_reveal_nothing(env: GatewayEnv):
    health = httpx.get(f"{env.server.url}/healthz")
    ready = httpx.get(f"{env.server.url}/readyz")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
    # No version, counts, replica ids or tenants in either answer.
    for r in (health, ready):
        assert "replica" not in r.text
        assert "acme" not in r.text
        assert not any(ch.isdigit() for ch in r.text)


def test_without_healthy_replicas_readyz_is_503_but_healthz_keeps_the_gateway_in_rotation(
    env: GatewayEnv,
):
    for r in env.replicas.values():
        r.state_mode = "error"
    eventually(lambda: httpx.get(f"{env.server.url}/readyz").status_code == 503, what="503")
    body = httpx.get(f"{env.server.url}/readyz").json()
    assert body["error"]["code"] == "not_ready"
    assert set(body["error"]) - {"request_id"} == {"message", "type", "param", "code"}
    # Still alive and answering: the client gets lorafleet's JSON, not the ingress's 503 page.
    assert httpx.get(f"{env.server.url}/healthz").status_code == 200


def test_probe_paths_accept_only_get(env: GatewayEnv):
    assert httpx.post(f"{env.server.url}/healthz").status_code == 405
