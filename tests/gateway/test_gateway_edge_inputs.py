"""Hostile request bodies over real HTTP: each is a 400 (or 404/405) in OpenAI's shape, never a
5xx, never reaches a replica, and is never echoed or logged whole."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import httpx
import openai
import pytest

from lorafleet_gateway.upstream import upstream_body
from lorafleet_gateway.validation import Bounds, parse_request
from tests.gateway.conftest import (
    KEYS,
    MSG_DEFAULT,
    GatewayEnv,
    start_env,
    stop_env,
)
from tests.gateway.conftest import openai_error as _error

CHAT = '{"model":"acme/support:prod","messages":[{"role":"user","content":"hi"}]'
AUTH = {"authorization": f"Bearer {KEYS['acme']}", "content-type": "application/json"}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayEnv]:
    # One gateway for the module; every test here fails on purpose, so the early-failure
    # limit (tested in test_gateway_edge) is set out of the way.
    e = start_env(tmp_path_factory.mktemp("inputs"), n_replicas=1, failed_requests_burst=10_000)
    try:
        yield e
    finally:
        stop_env(e)


def _sent(env: GatewayEnv) -> int:
    """Requests that reached a replica so far."""
    return sum(len(r.requests) for r in env.replicas.values())


def _post(env: GatewayEnv, content: bytes | str, path: str = "/chat/completions") -> httpx.Response:
    return httpx.post(env.base_url + path, content=content, headers=AUTH, timeout=10)


@pytest.mark.parametrize(
    "extra",
    [
        ',"temperature":NaN',
        ',"temperature":Infinity',
        ',"top_p":-Infinity',
        ',"temperature":1e999',
        ',"logit_bias":{"1":-1e400}',
        # Beyond the engine's range: real vLLM answered the first with a 500, and cast the
        # second to infinity in a float32 tensor.
        ',"top_k":9999999999999999999999999',
        ',"seed":-9223372036854775809',
        ',"repetition_penalty":1e300',
        ',"logit_bias":{"1":-3.5e38}',
    ],
)
def test_non_finite_numbers_are_400(env: GatewayEnv, extra: str):
    before = _sent(env)
    error = _error(_post(env, CHAT + extra + "}"), 400)
    assert error["code"] == "invalid_json"
    assert "finite" in str(error["message"])
    assert _sent(env) == before


@pytest.mark.parametrize(
    "body",
    [
        '{"model":"acme/support:prod","messages":[{"role":"user","content":"a\\ud800b"}]}',
        '{"model":"acme/support:prod","messages":[{"role":"user","content":"x"}],"user":"\\udfff"}',
        '{"model":"acme/support:prod","messages":[{"role":"user","content":"x"}],'
        '"metadata":{"\\ud83d":1}}',
        '{"model":"acme/support:prod","messages":[{"role":"user","content":"\\n\\uDBFF"}]}',
    ],
)
def test_lone_surrogates_are_400(env: GatewayEnv, body: str):
    before = _sent(env)
    assert _error(_post(env, body), 400)["code"] == "invalid_unicode"
    assert _sent(env) == before


@pytest.mark.parametrize(
    "extra", [',"seed":9223372036854775807', ',"seed":-9223372036854775808', ',"top_p":3.4e38']
)
def test_numbers_at_the_edge_of_the_range_pass(env: GatewayEnv, extra: str):
    assert _post(env, CHAT + extra + "}").status_code == 200


def test_surrogate_pairs_are_fine(env: GatewayEnv):
    body = CHAT.replace('"hi"', '"smile \\ud83d\\ude00"') + "}"
    assert _post(env, body).status_code == 200


def test_invalid_utf8_is_400(env: GatewayEnv):
    assert _error(_post(env, CHAT.encode()[:-3] + b'\xff"}]}'), 400)["code"] == "invalid_json"


@pytest.mark.parametrize("depth", [65, 2_000, 200_000])
def test_deep_nesting_is_400(env: GatewayEnv, depth: int):
    body = CHAT + ',"tools":' + "[" * depth + "]" * depth + "}"
    error = _error(_post(env, body), 400)
    assert error["code"] == "invalid_json"
    assert "nested deeper" in str(error["message"])


def test_nesting_within_the_bound_passes(env: GatewayEnv):
    body = CHAT + ',"metadata":' + '{"a":' * 30 + "1" + "}" * 30 + "}"
    assert _post(env, body).status_code == 200


def test_megabyte_model_name_is_400_and_neither_echoed_nor_logged(
    env: GatewayEnv, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="lorafleet.gateway.requests")
    name = "acme/" + "m" * 1_000_000
    resp = _post(env, json.dumps({"model": name, "messages": MSG_DEFAULT}))
    error = _error(resp, 400)
    assert (error["param"], error["code"]) == ("model", "string_above_max_length")
    assert len(resp.content) < 500
    assert len(caplog.text) < 5_000


def test_long_unknown_model_in_path_is_404_with_a_short_echo(env: GatewayEnv):
    resp = httpx.get(f"{env.base_url}/models/acme/{'x' * 20_000}", headers=AUTH)
    error = _error(resp, 404)
    assert error["code"] == "model_not_found"
    assert len(str(error["message"])) < 200


def test_prompt_array_of_several_prompts_is_refused(env: GatewayEnv):
    before = _sent(env)
    with pytest.raises(openai.BadRequestError) as exc:
        env.client().completions.create(model="acme/support:prod", prompt=["one", "two", "three"])
    assert (exc.value.param, exc.value.code) == ("prompt", "too_many_prompts")
    assert _sent(env) == before
    one = env.client().completions.create(model="acme/support:prod", prompt=["only one"])
    assert len(one.choices) == 1


@pytest.mark.parametrize(
    ("param", "value"), [("n", True), ("n", 2.0), ("n", 0), ("n", 5), ("best_of", 3)]
)
def test_work_multipliers_are_refused(env: GatewayEnv, param: str, value: object):
    body = {"model": "acme/support:prod", "prompt": "x", param: value}
    assert _error(_post(env, json.dumps(body), "/completions"), 400)["param"] == param


def test_wrong_method_is_405_invalid_request_error(env: GatewayEnv):
    resp = httpx.get(f"{env.base_url}/chat/completions", headers=AUTH)
    error = _error(resp, 405)
    assert (error["type"], error["code"]) == ("invalid_request_error", "method_not_allowed")
    assert "POST" in resp.headers["allow"]


def test_unknown_path_is_404_in_openai_shape(env: GatewayEnv):
    error = _error(_post(env, CHAT + "}", "/nope"), 404)
    assert (error["type"], error["code"]) == ("not_found_error", "unknown_url")
    assert "POST /v1/nope" in str(error["message"])


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/v1/chat/completions/"), ("POST", "/v1/completions/"), ("GET", "/healthz/")],
)
def test_a_trailing_slash_is_404_never_a_redirect_to_the_host_the_client_named(
    env: GatewayEnv, method: str, path: str
):
    """Starlette would answer 307 with an empty body and a Location built from the request's
    Host header (any host the client names), before the key is checked."""
    resp = httpx.request(
        method, env.server.url + path, content=CHAT + "}", headers={**AUTH, "host": "evil.example"}
    )
    assert _error(resp, 404)["code"] == "unknown_url"
    assert "location" not in resp.headers


@pytest.mark.parametrize("path", ["/chat/completions", "/completions"])
def test_beam_search_is_refused_as_a_work_multiplier(env: GatewayEnv, path: str):
    """vLLM runs an engine request per beam per token: 4 beams of 200 tokens took 17 s of
    engine time against 1.7 s sampled, for the same estimate and usage."""
    before = _sent(env)
    for value in (True, 1, "yes"):
        body = _completion(path, {"use_beam_search": value, "n": 4})
        error = _error(_post(env, json.dumps(body), path), 400)
        assert (error["code"], error["param"]) == ("unsupported_parameter", "use_beam_search")
    assert _sent(env) == before
    assert _post(env, json.dumps(_completion(path, {"use_beam_search": False})), path).is_success
    assert _sent(env) == before + 1


@pytest.mark.parametrize("path", ["/chat/completions", "/completions"])
def test_a_request_cannot_set_its_own_priority(env: GatewayEnv, path: str):
    """Under a pool's priority scheduling a negative priority would jump every queue."""
    before = _sent(env)
    for value in (-(2**62), -1, 1, 0.0, "0", True):
        error = _error(_post(env, json.dumps(_completion(path, {"priority": value})), path), 400)
        assert (error["code"], error["param"]) == ("unsupported_parameter", "priority")
    assert _sent(env) == before
    assert _post(env, json.dumps(_completion(path, {"priority": 0})), path).is_success
    assert _sent(env) == before + 1


@pytest.mark.parametrize("path", ["/chat/completions", "/completions"])
@pytest.mark.parametrize("param", ["kv_transfer_params", "ec_transfer_params", "vllm_xargs"])
def test_a_request_cannot_steer_the_engines_connectors(env: GatewayEnv, path: str, param: str):
    """With a KV connector configured, `kv_transfer_params` names the hosts and blocks the
    engine pulls from or pushes to: a tenant's request never carries it."""
    before = _sent(env)
    value = {"remote_host": "10.0.0.9", "remote_port": 5557, "do_remote_prefill": True}
    error = _error(_post(env, json.dumps(_completion(path, {param: value})), path), 400)
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "unsupported_parameter",
        param,
    )
    assert _sent(env) == before
    assert _post(env, json.dumps(_completion(path, {param: None})), path).is_success
    assert _sent(env) == before + 1


def test_stream_options_flags_must_be_booleans(env: GatewayEnv):
    """The engine would read `1` as true; the relay reads the client's choice as it does."""
    before = _sent(env)
    for flag in ("include_usage", "continuous_usage_stats"):
        body = _completion("/chat/completions", {"stream": True, "stream_options": {flag: 1}})
        error = _error(_post(env, json.dumps(body), "/chat/completions"), 400)
        assert error["param"] == "stream_options"
    assert _sent(env) == before


def _completion(path: str, extra: dict[str, object]) -> dict[str, object]:
    prompt = {"messages": MSG_DEFAULT} if path == "/chat/completions" else {"prompt": "hi"}
    return {"model": "acme/support:prod", **prompt, **extra}


def test_a_repeated_key_counts_once_and_what_is_forwarded_is_what_was_checked(env: GatewayEnv):
    """JSON with `model` twice: the last one wins (json's rule) for the alias, and the
    replica gets the re-encoded body with that one model; another tenant's alias in either
    place never reaches its adapter."""
    replica = next(iter(env.replicas.values()))
    msgs = json.dumps(MSG_DEFAULT)
    theirs_first = f'{{"model":"globex/bot:prod","model":"acme/support:prod","messages":{msgs}}}'
    assert _post(env, theirs_first).status_code == 200
    assert replica.requests[-1]["model"] == "acme-support-v1"
    before = _sent(env)
    theirs_last = f'{{"model":"acme/support:prod","model":"globex/bot:prod","messages":{msgs}}}'
    assert _error(_post(env, theirs_last), 404)["code"] == "model_not_found"
    assert _sent(env) == before
    req = parse_request(theirs_first.encode(), "chat", Bounds())
    assert upstream_body(req, "acme-support-v1").count(b'"model"') == 1


@pytest.mark.parametrize(
    ("path", "extra", "param"),
    [
        ("/completions", {"prompt_logprobs": 0}, "prompt_logprobs"),
        ("/completions", {"prompt_logprobs": 20}, "prompt_logprobs"),
        ("/completions", {"echo": True, "logprobs": 0}, "echo"),
        ("/chat/completions", {"echo": True}, "echo"),  # vLLM takes top_logprobs (0)
        ("/chat/completions", {"prompt_logprobs": 1}, "prompt_logprobs"),
    ],
)
def test_prompt_logprobs_are_refused_they_kill_vllms_lora_engine(
    env: GatewayEnv, path: str, extra: dict[str, object], param: str
):
    """Eight such requests at once killed real vLLM's engine (LoRA + prompt logprobs)."""
    before = _sent(env)
    error = _error(_post(env, json.dumps(_completion(path, extra)), path), 400)
    assert (error["code"], error["param"]) == ("unsupported_parameter", param)
    assert _sent(env) == before


@pytest.mark.parametrize(
    ("path", "extra"),
    [
        ("/completions", {"echo": True}),
        ("/completions", {"logprobs": 5}),
        ("/chat/completions", {"logprobs": True, "top_logprobs": 5, "echo": False}),
    ],
)
def test_logprobs_of_generated_tokens_and_a_plain_echo_reach_the_engine(
    env: GatewayEnv, path: str, extra: dict[str, object]
):
    before = _sent(env)
    assert _post(env, json.dumps(_completion(path, extra)), path).status_code == 200
    assert _sent(env) == before + 1


def test_every_stream_asks_the_engine_for_usage_on_every_chunk():
    """The bill of a stream cut anywhere is the engine's count of what was handed over, so
    the replica is always asked for continuous usage; what the client sees is its own choice
    (relay.UsageFilter; tests/gateway/test_gateway_cut_streams.py against real vLLM)."""

    def forwarded(options: dict[str, bool]) -> object:
        body = {"model": "acme/support:prod", "messages": MSG_DEFAULT, "stream": True}
        req = parse_request(
            json.dumps(body | {"stream_options": options}).encode(), "chat", Bounds()
        )
        return json.loads(upstream_body(req, "a1"))["stream_options"]

    both = {"include_usage": True, "continuous_usage_stats": True}
    for options in ({}, {"continuous_usage_stats": True}, {"include_usage": False}, both):
        assert forwarded(options) == both
