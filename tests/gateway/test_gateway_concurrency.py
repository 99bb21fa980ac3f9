"""The per-tenant cap on requests running at once (lorafleet_gateway.concurrency), over real HTTP.

Streams are held open by the stand-in replica until the test lets them go (or the client
hangs up), so "while two are running" is a fact of the test, not a race against a timer.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lorafleet_gateway.concurrency import ConcurrencyLimited, ConcurrencyLimiter
from lorafleet_gateway.ratelimit import Limits, RateLimiter
from lorafleet_gateway.replica_poller import ReplicaTracker
from lorafleet_gateway.reservation import RateLimited, Reservation
from tests.gateway import manifests as m
from tests.gateway.conftest import KEYS, GatewayEnv, start_env, stop_env
from tests.scrape import Scrape
from tests.waiting import eventually

CHAT: dict[str, object] = {
    "model": "acme/support:prod",
    "messages": [{"role": "user", "content": "hi"}],
}
GLOBEX: dict[str, object] = {
    "model": "globex/bot:prod",
    "messages": [{"role": "user", "content": "hi"}],
}


@pytest.fixture
def env(tmp_path: Path) -> Iterator[GatewayEnv]:
    """Tenant acme capped at 2 requests at once (its Secret); globex has the default."""
    e = start_env(tmp_path, n_replicas=1)
    m.write(
        e.folder,
        "keys.yaml",
        [
            m.key_secret("acme", KEYS["acme"], max_concurrent_requests=2),
            m.key_secret("globex", KEYS["globex"]),
        ],
    )
    version = e.gw.holder.current.version
    eventually(lambda: e.gw.holder.current.version > version, what="keys reloaded")
    hold = threading.Event()
    e.replicas["replica-0"].hold_streams = hold
    try:
        yield e
    finally:
        hold.set()  # let held streams (and their waiting threads) finish
        stop_env(e)


def post(env: GatewayEnv, body: dict[str, object], tenant: str = "acme") -> httpx.Response:
    headers = {"authorization": f"Bearer {KEYS[tenant]}"}
    return httpx.post(f"{env.base_url}/chat/completions", json=body, headers=headers, timeout=30)


@contextlib.contextmanager
def open_stream(
    client: httpx.Client, env: GatewayEnv, tenant: str = "acme"
) -> Iterator[Iterator[str]]:
    """A stream whose first event has arrived (the replica then holds it)."""
    body = {**(CHAT if tenant == "acme" else GLOBEX), "stream": True}
    headers = {"authorization": f"Bearer {KEYS[tenant]}"}
    with client.stream(
        "POST", f"{env.base_url}/chat/completions", json=body, headers=headers
    ) as resp:
        assert resp.status_code == 200, resp.read()
        lines = resp.iter_lines()
        assert next(lines).startswith("data: ")
        yield lines


def refused(resp: httpx.Response) -> None:
    assert resp.status_code == 429, resp.text
    error = resp.json()["error"]
    assert error["code"] == "concurrency_limit_exceeded"
    assert "at most 2" in error["message"]
    assert resp.headers["retry-after"] == "1"


def rate_limited_metric(env: GatewayEnv) -> float:
    return Scrape.of(f"{env.internal_url}/metrics").value(
        "lorafleet_gateway_rate_limited_total", limit="concurrency"
    )


def test_a_tenant_at_its_cap_is_refused_while_others_are_served_and_a_finished_stream_frees_a_slot(
    env: GatewayEnv,
):
    hold = env.replicas["replica-0"].hold_streams
    assert hold is not None
    with httpx.Client(timeout=30) as c1, httpx.Client(timeout=30) as c2:
        with open_stream(c1, env) as first, open_stream(c2, env):
            assert env.gw.concurrency.running("acme") == 2
            refused(post(env, CHAT))  # a third, stream or not
            refused(post(env, {**CHAT, "stream": True}))
            assert rate_limited_metric(env) == 2
            # Another tenant is not affected (its own slots, its own default cap).
            with httpx.Client(timeout=30) as c3, open_stream(c3, env, "globex"):
                assert env.gw.concurrency.running("globex") == 1
            hold.set()  # the streams end normally: [DONE], then the gateway gives back
            assert "data: [DONE]" in list(first)  # the whole answer arrived
        eventually(lambda: env.gw.concurrency.running("acme") == 0, what="slots given back")
    assert post(env, CHAT).status_code == 200


def test_a_client_that_hangs_up_mid_stream_gives_its_slot_back(env: GatewayEnv):
    with (
        httpx.Client(timeout=30) as c1,
        httpx.Client(timeout=30) as c2,
        open_stream(c1, env),
        open_stream(c2, env),
    ):
        refused(post(env, CHAT))
    # Both closed before their end (the replica still holds them): the clients hung up.
    eventually(lambda: env.gw.concurrency.running("acme") == 0, what="slots of hung-up streams")
    with (
        httpx.Client(timeout=30) as c1,
        httpx.Client(timeout=30) as c2,
        open_stream(c1, env),
        open_stream(c2, env),
    ):
        assert env.gw.concurrency.running("acme") == 2  # both slots usable again


async def test_a_rate_limited_request_holds_no_slot_and_a_refused_one_costs_no_budget():
    limits = Limits(requests_per_second=1.0, tokens_per_minute=10**6)
    limiter = RateLimiter(limits)
    tracker = ReplicaTracker(httpx.AsyncClient())
    slots = ConcurrencyLimiter()

    def reservation() -> Reservation:
        return Reservation(limiter, tracker, "t", 10, limits, concurrency=slots, max_concurrent=1)

    async with reservation():
        assert slots.running("t") == 1
        with pytest.raises(ConcurrencyLimited):
            async with reservation():
                pass
        assert slots.running("t") == 1
    assert slots.running("t") == 0
    # The refused request took no request token: the bucket's one token went to the first.
    with pytest.raises(RateLimited):
        async with reservation():
            pass
    assert slots.running("t") == 0  # refused by the rate limit: the slot was given back


def test_the_cap_defaults_per_pod_and_a_tenant_secret_overrides_it(env: GatewayEnv):
    snap = env.gw.holder.current
    acme = snap.keys.tenant_for(KEYS["acme"])
    globex = snap.keys.tenant_for(KEYS["globex"])
    assert acme is not None
    assert globex is not None
    assert env.gw.max_concurrent_for(acme) == 2
    assert env.gw.max_concurrent_for(globex) == env.gw.settings.max_concurrent_requests == 64
