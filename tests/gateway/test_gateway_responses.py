"""The Responses API through the gateway: served like chat (auth, alias, estimate, metering,
relay), what a stateless fleet cannot serve refused up front, in OpenAI shape."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from lorafleet_core.planning.tokens import prompt_tokens
from tests.gateway.conftest import KEYS, GatewayEnv
from tests.scrape import Scrape
from tests.waiting import eventually


def _usage(env: GatewayEnv, what: str) -> float:
    return Scrape.of_registry(env.gw.metrics.registry).value(
        f"lorafleet_gateway_usage_{what}_total", tenant="acme", adapter="acme-support-v1"
    )


def test_a_response_is_served_and_metered_and_never_stored_on_the_replica(
    env: GatewayEnv,
) -> None:
    raw = env.client().responses.with_raw_response.create(
        model="acme/support:prod",
        input="Where is my parcel?",
        instructions="Be brief.",
        max_output_tokens=30,
        store=True,
    )
    answer = raw.parse()
    replica = env.replicas[raw.headers["x-replica-id"]]
    assert raw.headers["x-adapter-id"] == "acme-support-v1"
    assert answer.output_text.startswith(f"[{replica.replica_id}|acme-support-v1]")
    sent = replica.requests[-1]
    assert sent["model"] == "acme-support-v1"
    assert sent["store"] is False  # the next request may go to another replica
    assert "stream_options" not in sent
    chars = len("Where is my parcel?") + len("Be brief.")
    estimate = replica.request_headers[-1]["x-lorafleet-tokens-estimate"]
    assert estimate == str(prompt_tokens(chars) + 30)
    assert _usage(env, "prompt_tokens") == 7
    assert _usage(env, "completion_tokens") == replica.n_tokens


def test_a_streamed_response_is_relayed_event_by_event_and_metered(env: GatewayEnv) -> None:
    events = list(
        env.client().responses.create(
            model="acme/support:prod",
            input=[{"role": "user", "content": "Where is my parcel?"}],
            stream=True,
        )
    )
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) == env.replicas["replica-0"].n_tokens
    # metered and counted when the gateway's side of the stream ends, just after the client's
    eventually(lambda: _usage(env, "requests") == 1, what="metered request")
    eventually(
        lambda: _usage(env, "completion_tokens") == len(deltas), what="metered output tokens"
    )

    def ok() -> float:
        return Scrape.of_registry(env.gw.metrics.registry).value(
            "lorafleet_gateway_requests_total", endpoint="responses", status="200"
        )

    eventually(lambda: ok() == 1, what="the request counted as a 200")


def test_a_responses_stream_cut_before_its_last_event_ends_with_an_error_event(
    env: GatewayEnv,
) -> None:
    delta = (
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
        b'"item_id":"m","output_index":0,"content_index":0,"delta":"hi","sequence_number":1}\n\n'
    )
    for replica in env.replicas.values():
        replica.raw_stream = [delta, delta]  # no response.completed: the replica died
    with httpx.stream(
        "POST",
        f"{env.base_url}/responses",
        json={"model": "acme/support:prod", "input": "hi", "stream": True},
        headers={"authorization": f"Bearer {KEYS['acme']}"},
        timeout=30,
    ) as r:
        body = r.read()
    assert body.count(b"response.output_text.delta") == 4  # both events, whole (event + type)
    assert b'"code": "upstream_error"' in body or b'"code":"upstream_error"' in body
    # counted by what was sent: two content events
    eventually(lambda: _usage(env, "completion_tokens") == 2, what="aborted stream metered")


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"previous_response_id": "resp_123"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"background": True}, "background"),
        ({"tools": [{"type": "mcp", "server_url": "http://169.254.169.254/"}]}, "tools"),
        ({"tools": [{"type": "web_search"}]}, "tools"),
        ({"n": 2}, "n"),
        ({"input": ""}, "input"),
        ({"input": []}, "input"),
        ({"input": None}, "input"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"instructions": ["not", "a", "string"]}, "instructions"),
    ],
)
def test_what_a_stateless_fleet_cannot_serve_is_refused_before_any_replica(
    env: GatewayEnv, extra: dict[str, Any], param: str
) -> None:
    body = {"model": "acme/support:prod", "input": "hi", **extra}
    r = httpx.post(
        f"{env.base_url}/responses",
        json=body,
        headers={"authorization": f"Bearer {KEYS['acme']}"},
        timeout=30,
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert all(not rep.requests for rep in env.replicas.values())


def test_stored_responses_cannot_be_retrieved_and_auth_comes_first(env: GatewayEnv) -> None:
    client = env.client()
    with pytest.raises(openai.NotFoundError) as gone:
        client.responses.retrieve("resp_1", extra_headers={"x-request-id": "ticket-9"})
    assert gone.value.code == "response_not_stored"
    assert gone.value.request_id == "ticket-9"
    with pytest.raises(openai.NotFoundError):
        client.responses.delete("resp_1")
    with pytest.raises(openai.NotFoundError):
        client.responses.cancel("resp_1")
    stranger = openai.OpenAI(base_url=env.base_url, api_key="lf-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.responses.create(model="acme/support:prod", input="hi")
    with pytest.raises(openai.AuthenticationError):
        stranger.responses.retrieve("resp_1")
    # another tenant's alias is not a model this tenant has
    with pytest.raises(openai.NotFoundError) as foreign:
        env.client("globex").responses.create(model="acme/support:prod", input="hi")
    assert foreign.value.code == "model_not_found"
