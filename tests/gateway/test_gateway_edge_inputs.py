"""Hostile request bodies over real HTTP: each is a 400 (or 404/405) in OpenAI's shape, never a
5xx, never reaches a replica, and is never echoed or logged whole."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import httpx
import openai
import pytest

from lorafleet_gateway.output_schema import MAX_CHOICES, MAX_CONSTRAINT_CHARS, MAX_SCHEMA_CHARS
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


def _schema_format(schema: object) -> dict[str, object]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


LOOP_DEFS = {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
LINKED_LIST = {"type": "object", "properties": {"v": {"type": "integer"}, "next": {"$ref": "#"}}}
TREE = {
    "$defs": {"n": {"type": "object", "properties": {"kids": {"items": {"$ref": "#/$defs/n"}}}}},
    "$ref": "#/$defs/n",
}


@pytest.mark.parametrize(
    ("path", "extra", "param"),
    [
        # Real vLLM answered each of these with a 500 (its grammar compiler failed).
        ("/chat/completions", {"response_format": _schema_format({"$ref": "#"})}, None),
        ("/chat/completions", {"response_format": _schema_format(LOOP_DEFS)}, None),
        ("/chat/completions", {"structured_outputs": {"json": {"$ref": "#"}}}, None),
        ("/chat/completions", {"structured_outputs": "x"}, "structured_outputs"),
        (
            "/completions",
            {
                "response_format": _schema_format(
                    {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#"}}}
                )
            },
            None,
        ),
        (
            "/responses",
            {"text": {"format": {"type": "json_schema", "name": "x", "schema": {"$ref": "#"}}}},
            "text.format.schema",
        ),
    ],
)
def test_schemas_the_engine_cannot_compile_are_400(
    env: GatewayEnv, path: str, extra: dict[str, object], param: str | None
):
    before = _sent(env)
    body: dict[str, object] = {"model": "acme/support:prod", **extra}
    if path == "/chat/completions":
        body["messages"] = [{"role": "user", "content": "hi"}]
    elif path == "/completions":
        body["prompt"] = "hi"
    else:
        body["input"] = "hi"
    error = _error(_post(env, json.dumps(body), path), 400)
    assert error["code"] in ("invalid_schema",), error
    if param is not None:
        assert error["param"] == param
    assert _sent(env) == before


@pytest.mark.parametrize(
    ("outputs", "param"),
    [
        ({"choice": [f"label-{i}" for i in range(MAX_CHOICES + 1)]}, "structured_outputs.choice"),
        ({"choice": ["x" * (MAX_CONSTRAINT_CHARS // 2 + 1)] * 2}, "structured_outputs.choice"),
        ({"regex": "a" * (MAX_CONSTRAINT_CHARS + 1)}, "structured_outputs.regex"),
        ({"grammar": "r" * (MAX_CONSTRAINT_CHARS + 1)}, "structured_outputs.grammar"),
    ],
)
def test_constraints_too_large_to_compile_in_time_are_400(
    env: GatewayEnv, outputs: dict[str, object], param: str
):
    """A 5,000-entry choice list took the engine minutes to compile while other requests
    waited; past the bounds nothing reaches a replica."""
    before = _sent(env)
    body = {
        "model": "acme/support:prod",
        "messages": [{"role": "user", "content": "hi"}],
        "structured_outputs": outputs,
    }
    error = _error(_post(env, json.dumps(body), "/chat/completions"), 400)
    assert (error["code"], error["param"]) == ("invalid_request", param)
    assert _sent(env) == before


def test_constraints_within_the_bounds_reach_the_engine(env: GatewayEnv):
    before = _sent(env)
    body = {
        "model": "acme/support:prod",
        "messages": [{"role": "user", "content": "hi"}],
        "structured_outputs": {"choice": [f"label-{i}" for i in range(MAX_CHOICES)]},
    }
    _post(env, json.dumps(body), "/chat/completions")
    assert _sent(env) == before + 1


def _enum_schema(values: int) -> dict[str, object]:
    """An object whose one property is an enum of `values` 100-character labels."""
    labels = [f"label-{i:05d}-" + "x" * 88 for i in range(values)]
    return {"type": "object", "properties": {"a": {"type": "string", "enum": labels}}}


BIG = _enum_schema(400)  # ~41 KB of JSON: past MAX_SCHEMA_CHARS
FITS = _enum_schema(300)  # ~31 KB


def _tools(parameters: object, *, flat: bool = False) -> list[dict[str, object]]:
    spec = {"name": "f", "parameters": parameters}
    return [{"type": "function", **spec}] if flat else [{"type": "function", "function": spec}]


@pytest.mark.parametrize(
    ("path", "extra", "param"),
    [
        # Real vLLM took 79 s to compile a 5,000-value enum given as a response_format schema
        # (a concurrent request waited seconds meanwhile), 14 s for 5,000 properties.
        ("/chat/completions", {"response_format": _schema_format(BIG)},
         "response_format.json_schema.schema"),
        ("/chat/completions", {"structured_outputs": {"json": BIG}}, "structured_outputs.json"),
        ("/chat/completions", {"structured_outputs": {"json": json.dumps(BIG)}},
         "structured_outputs.json"),
        ("/chat/completions", {"structured_outputs": {"structural_tag": json.dumps(BIG)}},
         "structured_outputs.structural_tag"),
        ("/chat/completions",
         {"response_format": {"type": "structural_tag", "format": {"schema": BIG}}},
         "response_format"),
        # A forced tool call compiles every tool's parameters into one grammar.
        ("/chat/completions", {"tools": _tools(FITS) * 2, "tool_choice": "required"}, "tools"),
        ("/completions", {"response_format": _schema_format(BIG)},
         "response_format.json_schema.schema"),
        ("/responses",
         {"text": {"format": {"type": "json_schema", "name": "x", "schema": BIG}}},
         "text.format.schema"),
        ("/responses", {"tools": _tools(BIG, flat=True)}, "tools"),
    ],
)  # fmt: skip
def test_schemas_too_large_to_compile_in_time_are_400(
    env: GatewayEnv, path: str, extra: dict[str, object], param: str
):
    before = _sent(env)
    error = _error(_post(env, json.dumps(_body(path, extra)), path), 400)
    assert (error["code"], error["param"]) == ("invalid_request", param)
    assert str(MAX_SCHEMA_CHARS) in str(error["message"])
    assert _sent(env) == before


@pytest.mark.parametrize(
    "extra",
    [
        {"response_format": _schema_format(FITS)},
        {"structured_outputs": {"json": json.dumps(FITS)}},
        {"tools": _tools(FITS), "tool_choice": "required"},
    ],
)
def test_schemas_within_the_bound_reach_the_engine(env: GatewayEnv, extra: dict[str, object]):
    before = _sent(env)
    body = _body("/chat/completions", extra)
    assert _post(env, json.dumps(body)).status_code == 200
    assert _sent(env) == before + 1


def test_a_schema_sent_as_json_text_is_held_to_the_bodys_rules(env: GatewayEnv):
    """vLLM parses `structured_outputs.json` text itself: 10,000 levels deep it would
    recurse past Python's limit; a $ref loop would fail its compiler."""
    before = _sent(env)
    for text in ("[" * 10_000 + "]" * 10_000, '{"type": "object", "x": NaN}', '{"$ref": "#"}'):
        body = _body("/chat/completions", {"structured_outputs": {"json": text}})
        error = _error(_post(env, json.dumps(body)), 400)
        assert (error["code"], error["param"]) == ("invalid_schema", "structured_outputs.json")
    assert _sent(env) == before


@pytest.mark.parametrize("path", ["/chat/completions", "/completions"])
def test_beam_search_is_refused_as_a_work_multiplier(env: GatewayEnv, path: str):
    """vLLM runs an engine request per beam per token: 4 beams of 200 tokens took 17 s of
    engine time against 1.7 s sampled, for the same estimate and usage."""
    before = _sent(env)
    for value in (True, 1, "yes"):
        body = _body(path, {"use_beam_search": value, "n": 4})
        error = _error(_post(env, json.dumps(body), path), 400)
        assert (error["code"], error["param"]) == ("unsupported_parameter", "use_beam_search")
    assert _sent(env) == before
    assert _post(env, json.dumps(_body(path, {"use_beam_search": False})), path).is_success
    assert _sent(env) == before + 1


def _body(path: str, extra: dict[str, object]) -> dict[str, object]:
    body: dict[str, object] = {"model": "acme/support:prod", **extra}
    if path == "/chat/completions":
        body["messages"] = [{"role": "user", "content": "hi"}]
    elif path == "/completions":
        body["prompt"] = "hi"
    else:
        body["input"] = "hi"
    return body


@pytest.mark.parametrize("schema", [LINKED_LIST, TREE, {"$ref": "#/nowhere"}])
def test_recursive_schemas_with_a_base_case_reach_the_engine(env: GatewayEnv, schema: object):
    """Recursion through properties or items compiles (real vLLM answered 200); an unknown
    pointer is the engine's own 400 to give."""
    before = _sent(env)
    body = {
        "model": "acme/support:prod",
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": _schema_format(schema),
    }
    assert _post(env, json.dumps(body)).status_code == 200
    assert _sent(env) == before + 1
