"""Request ids: accepted or generated, echoed, in error bodies, sent on to the replica, logged."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import openai
import pytest

from lorafleet_core.web.request_ids import MAX_CHARS, accept_request_id
from tests.gateway.conftest import KEYS, MSG_DEFAULT, GatewayEnv
from tests.waiting import eventually

AUTH = {"authorization": f"Bearer {KEYS['acme']}"}
CHAT = {"model": "acme/support:prod", "messages": MSG_DEFAULT, "max_tokens": 5}


def test_client_request_id_is_echoed_and_reaches_the_replica(env: GatewayEnv) -> None:
    raw = env.client().chat.completions.with_raw_response.create(
        model="acme/support:prod",
        messages=MSG_DEFAULT,
        max_tokens=5,
        extra_headers={"x-request-id": "ticket-4711.a:b"},
    )
    assert raw.headers["x-request-id"] == "ticket-4711.a:b"
    replica = env.replicas[raw.headers["x-replica-id"]]
    assert replica.request_headers[-1]["x-request-id"] == "ticket-4711.a:b"


def test_a_request_without_an_id_gets_a_fresh_one_each_time(env: GatewayEnv) -> None:
    client = env.client()
    ids = {
        client.chat.completions.with_raw_response.create(
            model="acme/support:prod", messages=MSG_DEFAULT, max_tokens=5
        ).headers["x-request-id"]
        for _ in range(3)
    }
    assert len(ids) == 3
    assert all(i.startswith("req_") for i in ids)


@pytest.mark.parametrize(
    "sent", ["x" * (MAX_CHARS + 1), "has space", "semi;colon", "new\u00e9line", ""]
)
def test_an_unsafe_or_oversized_id_is_replaced(env: GatewayEnv, sent: str) -> None:
    r = httpx.post(
        f"{env.base_url}/chat/completions",
        json=CHAT,
        headers=[(k.encode(), v.encode()) for k, v in {**AUTH, "x-request-id": sent}.items()],
    )
    assert r.status_code == 200
    assert r.headers["x-request-id"] != sent
    assert r.headers["x-request-id"].startswith("req_")


def test_every_error_body_names_the_request_id(env: GatewayEnv) -> None:
    cases: list[tuple[str, str, dict[str, Any] | None, dict[str, str]]] = [
        ("POST", "/chat/completions", CHAT, {}),  # 401: no key
        ("POST", "/chat/completions", {**CHAT, "model": "acme/nope:x"}, AUTH),  # 404 model
        ("POST", "/chat/completions", {**CHAT, "max_tokens": -1}, AUTH),  # 400
        ("GET", "/nope", None, AUTH),  # 404 unknown url
        ("GET", "/chat/completions", None, AUTH),  # 405
    ]
    for i, (method, path, body, headers) in enumerate(cases):
        rid = f"err-{i}"
        r = httpx.request(
            method, env.base_url + path, json=body, headers={**headers, "x-request-id": rid}
        )
        assert r.status_code >= 400, (path, r.status_code)
        assert r.headers["x-request-id"] == rid
        assert r.json()["error"]["request_id"] == rid


def test_the_official_client_exposes_the_id_of_a_failed_request(env: GatewayEnv) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        env.client().chat.completions.create(
            model="acme/missing:prod", messages=MSG_DEFAULT, extra_headers={"x-request-id": "r-1"}
        )
    assert caught.value.request_id == "r-1"


def test_a_stream_and_its_log_line_carry_the_id(
    env: GatewayEnv, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lorafleet.gateway.requests")
    with env.client().chat.completions.with_streaming_response.create(
        model="acme/support:prod",
        messages=MSG_DEFAULT,
        stream=True,
        max_tokens=5,
        extra_headers={"x-request-id": "stream-77"},
    ) as response:
        assert response.headers["x-request-id"] == "stream-77"
        assert sum(1 for _ in response.iter_lines()) > 0

    def ids() -> list[str | None]:
        return [
            json.loads(r.getMessage()).get("request_id")
            for r in caplog.records
            if r.name.endswith("requests")
        ]

    eventually(lambda: "stream-77" in ids(), what="the request's log line")


def test_accept_request_id_keeps_safe_ids_only() -> None:
    assert accept_request_id("abc-DEF_1.2:3") == "abc-DEF_1.2:3"
    assert accept_request_id(b"abc") == "abc"
    assert accept_request_id(None).startswith("req_")
    assert accept_request_id("a/b").startswith("req_")
