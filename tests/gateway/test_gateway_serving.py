"""Routing, retries, on-demand loads, alias changes, rate limits and metrics over real HTTP."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from lorafleet_core import logs
from lorafleet_core.planning.placement import owners
from lorafleet_core.planning.tokens import estimate
from lorafleet_core.wire.headers import HEADER_LOADED_FROM, HEADER_TOKENS_ESTIMATE
from tests.gateway import manifests as m
from tests.gateway.conftest import (
    KEYS,
    MSG_DEFAULT,
    GatewayEnv,
    default_aliases,
    start_env,
    stop_env,
)
from tests.scrape import Scrape
from tests.waiting import eventually

MSG = MSG_DEFAULT


def _owners(env: GatewayEnv, adapter: str) -> list[str]:
    return owners(adapter, list(env.replicas), 2)


def _served_by(env: GatewayEnv, model: str = "acme/support:prod", tenant: str = "acme") -> str:
    raw = env.client(tenant).chat.completions.with_raw_response.create(model=model, messages=MSG)
    return raw.headers["x-replica-id"]


def _metric(env: GatewayEnv, name: str, **labels: str) -> float:
    return Scrape.of(f"{env.internal_url}/metrics").value(name, **labels)


def test_requests_go_to_owners_and_stick_to_the_resident_one(env: GatewayEnv):
    own = _owners(env, "acme-support-v1")
    first = _served_by(env)
    assert first in own
    # The replica now reports the adapter in a GPU slot; the next poll tells the gateway.
    eventually(lambda: "acme-support-v1" in env.gw.tracker.views()[first].gpu_adapters)
    assert {_served_by(env) for _ in range(5)} == {first}
    assert _metric(env, "lorafleet_gateway_routing_total", outcome="owner_resident") >= 5


def test_overloaded_owners_spill_to_another_replica(env: GatewayEnv):
    own = _owners(env, "acme-support-v1")
    other = next(r for r in env.replicas if r not in own)
    for rid in own:
        env.replicas[rid].tokens_in_flight = 10**6
    eventually(lambda: all(env.gw.tracker.views()[r].tokens_in_flight >= 10**6 for r in own))
    assert _served_by(env) == other
    assert _metric(env, "lorafleet_gateway_routing_total", outcome="spill") == 1


def test_503_before_first_byte_retries_next_candidate(env: GatewayEnv):
    own = _owners(env, "acme-support-v1")
    for rid in own:
        env.replicas[rid].fail_status = 503
    served = _served_by(env)
    assert served not in own
    assert _metric(env, "lorafleet_gateway_routing_total", outcome="retry") == 2
    # Every replica failing: a 503 in OpenAI format (the client's own retry policy applies).
    for r in env.replicas.values():
        r.fail_status = 503
    with pytest.raises(openai.InternalServerError) as exc:
        env.client().chat.completions.create(model="acme/support:prod", messages=MSG)
    assert exc.value.status_code == 503


def test_connect_error_retries_and_drops_replica(env: GatewayEnv):
    own = _owners(env, "acme-support-v1")
    dead = own[0]
    env.replica_servers[dead].stop()  # port closed: connection refused
    for rid in own[1:]:
        env.replicas[rid].fail_status = 503  # force the request through the dead one first
    env.replicas[own[0]].gpu.add("acme-support-v1")
    served = _served_by(env)
    assert served not in own
    eventually(lambda: dead not in env.gw.tracker.healthy_ids(), within_s=1.0)


def test_failure_after_first_byte_ends_stream_with_error_event(
    env: GatewayEnv, caplog: pytest.LogCaptureFixture
):
    """The client gets the chunks sent and an error event; the gateway's warning about it
    names the request's tenant, adapter and replica (lorafleet_core.logs context)."""
    caplog.set_level(logging.WARNING, logger="lorafleet_gateway.relay")
    caplog.handler.addFilter(logs.ContextFilter())  # what the process's handler has
    for r in env.replicas.values():
        r.die_after_chunks = 2
    stream = env.client().chat.completions.create(
        model="acme/support:prod", messages=MSG, stream=True
    )
    got: list[object] = []

    def consume() -> None:
        got.extend(stream)

    with pytest.raises(openai.APIError) as exc:
        consume()
    assert len(got) == 2  # the chunks sent before the failure reached the client
    assert "mid-stream" in exc.value.message
    eventually(
        lambda: (
            _metric(env, "lorafleet_gateway_requests_total", endpoint="chat", status="stream_error")
            == 1
        )
    )
    (warning,) = [r for r in caplog.records if "mid-stream" in r.getMessage()]
    fields = (warning.tenant, warning.adapter_id, warning.replica)  # type: ignore[attr-defined]
    assert fields[:2] == ("acme", "acme-support-v1")
    assert fields[2] in env.replicas


def test_unregistered_adapter_is_loaded_from_catalog_then_retried(tmp_path: Path):
    env = start_env(tmp_path, registered_everywhere=False)
    try:
        raw = env.client().chat.completions.with_raw_response.create(
            model="acme/support:prod", messages=MSG
        )
        replica = env.replicas[raw.headers["x-replica-id"]]
        assert [r.id for r in replica.loads] == ["acme-support-v1"]
        assert replica.loads[0].checksum == m.checksum("acme-support-v1")
        assert len(replica.requests) == 2  # 404 adapter_not_registered, then served
        assert _metric(env, "lorafleet_gateway_routing_total", outcome="load_on_demand") == 1
        # The retried request carries the tier the load found it in, and reports it.
        first, retried = replica.request_headers
        assert HEADER_LOADED_FROM not in first
        assert retried[HEADER_LOADED_FROM] == "remote"
        assert raw.headers["x-adapter-tier"] == "remote"
        # Both carry the gateway's token estimate: "hello" (5 chars) -> 2, + 256 default.
        want = str(estimate({"messages": MSG}))
        assert first[HEADER_TOKENS_ESTIMATE] == retried[HEADER_TOKENS_ESTIMATE] == want == "258"
        # The next request finds it resident: no load, no loaded-from header, tier gpu.
        raw = env.client().chat.completions.with_raw_response.create(
            model="acme/support:prod", messages=MSG
        )
        assert raw.headers["x-adapter-tier"] == "gpu"
        # A replica that verifies and refuses the files: 502, no endless retries.
        for r in env.replicas.values():
            r.reject_loads = True
        with pytest.raises(openai.APIStatusError) as exc:
            env.client("globex").chat.completions.create(model="globex/bot:prod", messages=MSG)
        assert exc.value.status_code == 502
        assert exc.value.body["code"] == "adapter_rejected"  # type: ignore[index]
    finally:
        stop_env(env)


def test_alias_change_applies_to_next_request_in_flight_keeps_version(env: GatewayEnv):
    for r in env.replicas.values():
        r.chunk_delay = 0.15
    stream = env.client().chat.completions.create(
        model="acme/support:prod", messages=MSG, stream=True
    )
    first = next(iter(stream))
    assert "|acme-support-v1]" in (first.choices[0].delta.content or "")
    # Deploy: prod now points at v2.
    aliases = default_aliases()
    aliases[0]["spec"]["adapter"] = "acme-support-v2"
    env.write_aliases(aliases)
    rest = list(stream)
    assert rest[-1].choices[0].finish_reason == "stop"
    raw = env.client().chat.completions.with_raw_response.create(
        model="acme/support:prod", messages=MSG
    )
    assert raw.headers["x-adapter-id"] == "acme-support-v2"
    # An alias that points at another tenant's adapter never serves.
    aliases[0]["spec"]["adapter"] = "globex-bot-v1"
    env.write_aliases(aliases)
    with pytest.raises(openai.NotFoundError):
        env.client().chat.completions.create(model="acme/support:prod", messages=MSG)


def test_replica_that_stops_answering_state_leaves_within_two_intervals(env: GatewayEnv):
    interval = env.gw.settings.poll_interval_s
    rid = "replica-1"
    assert rid in env.gw.tracker.healthy_ids()
    env.replicas[rid].state_mode = "hang"
    t0 = time.monotonic()
    eventually(lambda: rid not in env.gw.tracker.healthy_ids(), within_s=5)
    assert time.monotonic() - t0 <= 2 * interval + 0.25
    env.replicas[rid].state_mode = "ok"
    eventually(lambda: rid in env.gw.tracker.healthy_ids(), within_s=5)


def test_rate_limit_429_with_retry_headers(tmp_path: Path):
    env = start_env(tmp_path, requests_per_second=1.0, tokens_per_minute=100_000)
    try:
        url = f"{env.base_url}/chat/completions"
        auth = {"authorization": f"Bearer {KEYS['acme']}"}
        body = {"model": "acme/support:prod", "messages": MSG, "max_tokens": 4}
        assert httpx.post(url, json=body, headers=auth).status_code == 200
        r = httpx.post(url, json=body, headers=auth)
        assert r.status_code == 429
        assert r.json()["error"]["type"] == "rate_limit_error"
        assert int(r.headers["retry-after"]) >= 1
        assert 0 < int(r.headers["retry-after-ms"]) <= 1000
        # Another tenant has its own buckets.
        other = {"authorization": f"Bearer {KEYS['globex']}"}
        ok = httpx.post(url, json={**body, "model": "globex/bot:prod"}, headers=other)
        assert ok.status_code == 200
        assert _metric(env, "lorafleet_gateway_rate_limited_total", limit="requests") == 1
        # The official client honours retry-after-ms and gets through on its retry.
        client = openai.OpenAI(base_url=env.base_url, api_key=KEYS["acme"], max_retries=2)
        assert client.chat.completions.create(**body).choices  # type: ignore[call-overload]
    finally:
        stop_env(env)


def test_tokens_per_minute_override_from_secret(tmp_path: Path):
    env = start_env(tmp_path)
    try:
        m.write(
            env.folder,
            "keys.yaml",
            [
                m.key_secret("acme", KEYS["acme"], tokens_per_minute=300),
                m.key_secret("globex", KEYS["globex"]),
            ],
        )
        eventually(lambda: env.gw.holder.current.tenants["acme"].tokens_per_minute == 300)
        client = env.client()
        # Estimates (prompt + max_tokens ~ 202) are reconciled with real usage (7 + 4): short
        # answers give the unused tokens back, so these pass one after another.
        for _ in range(3):
            client.chat.completions.create(model="acme/support:prod", messages=MSG, max_tokens=200)
        for r in env.replicas.values():
            r.n_tokens = 200  # now each answer really uses its 200 tokens
        client.chat.completions.create(model="acme/support:prod", messages=MSG, max_tokens=200)
        with pytest.raises(openai.RateLimitError) as exc:
            client.chat.completions.create(model="acme/support:prod", messages=MSG, max_tokens=200)
        assert exc.value.response.headers["retry-after-ms"]
        # A single request above the whole minute's budget can never pass.
        with pytest.raises(openai.RateLimitError, match="too large"):
            client.chat.completions.create(model="acme/support:prod", messages=MSG, max_tokens=400)
    finally:
        stop_env(env)


def test_metrics_health_and_readiness(env: GatewayEnv):
    list(env.client().chat.completions.create(model="acme/support:prod", messages=MSG, stream=True))
    eventually(
        lambda: _metric(env, "lorafleet_gateway_requests_total", endpoint="chat", status="200") == 1
    )
    text = httpx.get(f"{env.internal_url}/metrics").text
    for le in ("0.5", "1.0", "2.0"):
        bucket = f'lorafleet_gateway_ttft_seconds_bucket{{le="{le}",stream="true",tier="disk"}}'
        assert f"{bucket} 1.0" in text
    assert 'lorafleet_gateway_tenant_requests_total{tenant="acme"} 1.0' in text
    assert "lorafleet_gateway_time_per_output_token_seconds_count 1.0" in text
    duration = 'lorafleet_gateway_request_duration_seconds_count{endpoint="chat",tier="disk"} 1.0'
    assert duration in text
    assert "_created" not in text  # lorafleet_core.web.exposition
    with pytest.raises(openai.NotFoundError):  # no replica answers it: tier "none"
        env.client().chat.completions.create(model="acme/nothing:prod", messages=MSG)
    eventually(
        lambda: _metric(env, "lorafleet_gateway_request_duration_seconds_count", tier="none") == 1
    )
    assert _metric(env, "lorafleet_gateway_healthy_replicas") == 3
    assert httpx.get(f"{env.internal_url}/healthz").status_code == 200
    assert httpx.get(f"{env.internal_url}/readyz").status_code == 200
    # The public port serves only the OpenAI API.
    assert httpx.get(f"{env.server.url}/metrics").status_code == 404


def test_not_ready_without_healthy_replicas(env: GatewayEnv):
    for r in env.replicas.values():
        r.state_mode = "error"
    eventually(lambda: httpx.get(f"{env.internal_url}/readyz").status_code == 503)
    with pytest.raises(openai.InternalServerError):
        env.client().chat.completions.create(model="acme/support:prod", messages=MSG)


def test_concurrent_streams_all_complete(env: GatewayEnv):
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            tenant = "acme" if i % 2 else "globex"
            model = "acme/support:prod" if i % 2 else "globex/bot:prod"
            chunks = list(
                env.client(tenant).chat.completions.create(model=model, messages=MSG, stream=True)
            )
            assert chunks[-1].choices[0].finish_reason == "stop"
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # Every request's in-flight tokens were released.
    eventually(lambda: all(t == 0 for t in env.gw.tracker.local_tokens().values()))


def test_client_leaving_mid_stream_releases_everything(env: GatewayEnv):
    for replica in env.replicas.values():
        replica.chunk_delay = 0.3
        replica.n_tokens = 20
    body = {"model": "acme/support:prod", "messages": MSG, "stream": True}
    headers = {"authorization": f"Bearer {KEYS['acme']}"}
    with (
        httpx.Client(timeout=10) as client,
        client.stream("POST", f"{env.base_url}/chat/completions", json=body, headers=headers) as r,
    ):
        assert r.status_code == 200
        chunks = r.iter_raw()  # held: a dropped iterator would close the connection now
        next(chunks)
        assert _metric(env, "lorafleet_gateway_requests_in_flight") == 1
    # Connection closed by the client: the gateway logs it, releases the replica's tokens.
    eventually(
        lambda: (
            _metric(
                env, "lorafleet_gateway_requests_total", endpoint="chat", status="client_closed"
            )
            == 1
        )
    )
    assert _metric(env, "lorafleet_gateway_requests_in_flight") == 0
    assert all(t == 0 for t in env.gw.tracker.local_tokens().values())


def test_client_closing_right_after_done_is_counted_as_served(env: GatewayEnv):
    # The `openai` client closes its connection as soon as it reads `data: [DONE]`; a replica
    # that ends its response a little later (a busy machine) must not turn that delivered
    # answer into `client_closed` (the soak benchmark counted such answers as clients gone).
    for replica in env.replicas.values():
        replica.end_delay = 1.0
    stream = env.client().chat.completions.create(
        model="acme/support:prod", messages=MSG, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    eventually(
        lambda: (
            _metric(env, "lorafleet_gateway_requests_total", endpoint="chat", status="200") == 1
        ),
        within_s=5,
    )
    assert not _metric(
        env, "lorafleet_gateway_requests_total", endpoint="chat", status="client_closed"
    )
    assert _metric(env, "lorafleet_gateway_requests_in_flight") == 0


def test_replica_silent_past_read_timeout_is_504(tmp_path: Path):
    env = start_env(tmp_path, read_timeout_s=0.5)
    try:
        for r in env.replicas.values():
            r.first_byte_delay = 3.0
        t0 = time.monotonic()
        with pytest.raises(openai.APIStatusError) as exc:
            env.client().chat.completions.create(model="acme/support:prod", messages=MSG)
        assert exc.value.status_code == 504
        assert exc.value.code == "upstream_timeout"
        assert time.monotonic() - t0 < 2.5  # not retried on every replica
    finally:
        stop_env(env)


def test_stream_with_crlf_split_across_chunks_keeps_every_event_and_the_usage(env: GatewayEnv):
    for r in env.replicas.values():
        r.split_crlf = True  # CRLF line ends, each event sent in two reads cut inside a CRLF
    stream = env.client().chat.completions.create(
        model="acme/support:prod",
        messages=MSG,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.endswith(" tok0 tok1 tok2")
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 4
    eventually(lambda: _metric(env, "lorafleet_gateway_tokens_total", kind="completion") == 4)


def test_on_demand_loads_send_the_current_token_of_a_rotated_token_file(tmp_path: Path):
    # On a cluster the file is a projected ServiceAccount token the kubelet rewrites before it
    # expires: every load carries the file's current content, never the one read at start-up.
    token_file = tmp_path / "agent-token"
    token_file.write_text("sa-token-1\n")
    env = start_env(tmp_path, registered_everywhere=False, replica_token_file=token_file)
    try:
        env.client().chat.completions.create(model="acme/support:prod", messages=MSG)
        token_file.write_text("sa-token-2\n")
        os.utime(token_file, (1, 1))  # a new mtime, as the kubelet's atomic swap gives
        env.client("globex").chat.completions.create(model="globex/bot:prod", messages=MSG)
        sent = [h["authorization"] for r in env.replicas.values() for h in r.load_headers]
        assert sorted(sent) == ["Bearer sa-token-1", "Bearer sa-token-2"]
    finally:
        stop_env(env)


def test_an_alias_moved_to_another_adapter_counts_one_change(env: GatewayEnv):
    """A deploy (or rollback) taking effect is one alias change; an alias added is none, and so
    is the first catalog: the dashboard's deploy annotations read the counter."""
    changes = "lorafleet_gateway_alias_changes_total"
    assert _metric(env, changes) == 0
    moved = [m.alias("acme/support:prod", "acme-support-v2"), *default_aliases()[1:]]
    env.write_aliases(moved)
    out = env.client().chat.completions.create(model="acme/support:prod", messages=MSG)
    assert "|acme-support-v2]" in (out.choices[0].message.content or "")
    assert _metric(env, changes) == 1
    env.write_aliases([*moved, m.alias("acme/support:beta", "acme-support-v1")])
    assert _metric(env, changes) == 1
