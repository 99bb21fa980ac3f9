"""The official openai client, sync and async, through the gateway to stand-in replicas."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
import openai
import pytest

from lorafleet_core.planning.placement import owners
from tests.gateway.conftest import KEYS, MSG_DEFAULT, GatewayEnv
from tests.waiting import eventually

MSG = MSG_DEFAULT


def test_chat_non_stream_headers_and_body(env: GatewayEnv):
    raw = env.client().chat.completions.with_raw_response.create(
        model="acme/support:prod", messages=MSG, max_tokens=8
    )
    completion = raw.parse()
    assert raw.headers["x-adapter-id"] == "acme-support-v1"
    assert raw.headers["x-adapter-tier"] in {"gpu", "disk"}
    replica = raw.headers["x-replica-id"]
    assert (completion.choices[0].message.content or "").startswith(f"[{replica}|acme-support-v1]")
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 4
    # The replica got the immutable adapter id, never the alias.
    assert env.replicas[replica].requests[-1]["model"] == "acme-support-v1"


def test_chat_stream_without_usage_hides_the_usage_chunk(env: GatewayEnv):
    stream = env.client().chat.completions.create(
        model="acme/support:prod", messages=MSG, max_tokens=8, stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "|acme-support-v1]" in text
    assert text.endswith("tok2")
    assert all(c.choices for c in chunks), "usage-only chunk leaked to a client that didn't ask"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_chat_stream_with_include_usage(env: GatewayEnv):
    stream = env.client().chat.completions.create(
        model="acme/support:prod",
        messages=MSG,
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 11


def test_completions_stream_and_not(env: GatewayEnv):
    client = env.client()
    done = client.completions.create(model="acme/support:canary", prompt="hi", max_tokens=4)
    assert "|acme-support-v2]" in done.choices[0].text
    chunks = list(
        client.completions.create(
            model="acme/support:canary", prompt="hi", max_tokens=4, stream=True
        )
    )
    assert "|acme-support-v2]" in "".join(c.choices[0].text for c in chunks if c.choices)


def test_async_client_stream_and_not(env: GatewayEnv):
    async def go() -> tuple[str, str]:
        client = env.async_client("globex")
        done = await client.chat.completions.create(model="globex/bot:prod", messages=MSG)
        stream = await client.chat.completions.create(
            model="globex/bot:prod", messages=MSG, stream=True
        )
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        await client.close()
        return done.choices[0].message.content or "", "".join(parts)

    whole, streamed = asyncio.run(go())
    assert "|globex-bot-v1]" in whole
    assert "|globex-bot-v1]" in streamed


def test_models_lists_only_own_aliases(env: GatewayEnv):
    acme = sorted(m.id for m in env.client("acme").models.list())
    globex = sorted(m.id for m in env.client("globex").models.list())
    assert acme == ["acme/support:canary", "acme/support:prod"]
    assert globex == ["globex/bot:prod"]
    assert env.client("acme").models.retrieve("acme/support:prod").owned_by == "acme"
    with pytest.raises(openai.NotFoundError):
        env.client("globex").models.retrieve("acme/support:prod")


def test_missing_and_wrong_key_are_401(env: GatewayEnv):
    r = httpx.post(f"{env.base_url}/chat/completions", json={"model": "x", "messages": MSG})
    assert r.status_code == 401
    assert r.json()["error"]["type"] == "authentication_error"
    assert set(r.json()["error"]) - {"request_id"} == {"message", "type", "param", "code"}
    bad = openai.OpenAI(base_url=env.base_url, api_key="lf-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as exc:
        bad.chat.completions.create(model="acme/support:prod", messages=MSG)
    assert exc.value.status_code == 401
    assert "lf-wrong" not in exc.value.message
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def _error(env: GatewayEnv, tenant: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{env.base_url}/chat/completions",
        headers={"authorization": f"Bearer {KEYS[tenant]}"},
        json={"model": model, "messages": MSG},
    )


def test_other_tenants_alias_is_indistinguishable_from_missing(env: GatewayEnv):
    theirs = _error(env, "globex", "acme/support:prod")
    missing = _error(env, "globex", "acme/nothing:prod")
    assert theirs.status_code == missing.status_code == 404
    a, b = theirs.json()["error"], missing.json()["error"]
    assert a["message"].replace("acme/support:prod", "X") == b["message"].replace(
        "acme/nothing:prod", "X"
    )
    assert (a["type"], a["code"], a["param"]) == (b["type"], b["code"], b["param"])
    # Raw adapter ids, paths and URLs are just unknown models, never forwarded.
    for model in ["acme-support-v1", "acme-unaliased-v1", "/adapters/x", "s3://b/x", "file:///x"]:
        assert _error(env, "acme", model).status_code == 404
    assert all(not r.requests for r in env.replicas.values())


def test_validation_errors_are_openai_400s(env: GatewayEnv):
    url = f"{env.base_url}/chat/completions"
    auth = {"authorization": f"Bearer {KEYS['acme']}", "content-type": "application/json"}
    cases = [
        (b"{not json", None),
        (b"[1, 2]", None),
        (json.dumps({"messages": MSG}).encode(), "model"),
        (json.dumps({"model": "acme/support:prod"}).encode(), "messages"),
        (json.dumps({"model": "acme/support:prod", "messages": []}).encode(), "messages"),
        (
            json.dumps(
                {"model": "acme/support:prod", "messages": MSG, "max_tokens": 10**6}
            ).encode(),
            "max_tokens",
        ),
        (
            json.dumps({"model": "acme/support:prod", "messages": MSG, "max_tokens": "9"}).encode(),
            "max_tokens",
        ),
        (
            json.dumps({"model": "acme/support:prod", "messages": MSG, "stream": "yes"}).encode(),
            "stream",
        ),
        (
            json.dumps({"model": "acme/support:prod", "messages": [{"content": "x"}]}).encode(),
            "messages",
        ),
    ]
    for body, param in cases:
        r = httpx.post(url, content=body, headers=auth)
        assert r.status_code == 400, body
        err = r.json()["error"]
        assert err["type"] == "invalid_request_error"
        assert err["param"] == param, body
    big = {"model": "acme/support:prod", "messages": [{"role": "user", "content": "x" * 2_000_000}]}
    r = httpx.post(url, json=big, headers=auth)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"
    with pytest.raises(openai.BadRequestError):
        env.client().chat.completions.create(
            model="acme/support:prod", messages=MSG, max_tokens=999_999
        )
    assert httpx.get(f"{env.base_url}/nope").json()["error"]["code"] == "unknown_url"


def test_request_log_line_carries_adapter_id(env: GatewayEnv, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="lorafleet.gateway.requests")
    list(
        env.client().chat.completions.create(
            model="acme/support:prod", messages=MSG, stream=True, max_tokens=5
        )
    )

    def lines() -> list[dict[str, Any]]:
        return [json.loads(r.getMessage()) for r in caplog.records if r.name.endswith("requests")]

    # The line is written when the server side of the stream closes, just after [DONE].
    eventually(lambda: bool(lines()), what="request log line")
    line = lines()[-1]
    assert line["adapter_id"] == "acme-support-v1"
    assert line["tenant"] == "acme"
    assert line["model"] == "acme/support:prod"
    assert line["status"] == 200
    assert line["tier"] in {"gpu", "disk"}
    assert line["completion_tokens"] == 4
    assert line["ttft_ms"] > 0
    assert line["replica"] in owners("acme-support-v1", list(env.replicas), 2)
    assert KEYS["acme"] not in caplog.text
