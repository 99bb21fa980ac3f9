"""Structured-output constraints over real HTTP: what vLLM's grammar compiler cannot compile,
or not in reasonable time, is a 400 naming the parameter and never reaches a replica; what it
can is passed on."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from lorafleet_gateway.output_schema import MAX_CHOICES, MAX_CONSTRAINT_CHARS, MAX_SCHEMA_CHARS
from tests.gateway.conftest import GatewayEnv, start_env, stop_env
from tests.gateway.conftest import openai_error as _error
from tests.gateway.test_gateway_edge_inputs import _post, _sent


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayEnv]:
    # Every test here fails on purpose: the early-failure limit is set out of the way.
    e = start_env(tmp_path_factory.mktemp("schemas"), n_replicas=1, failed_requests_burst=10_000)
    try:
        yield e
    finally:
        stop_env(e)


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
    error = _error(_post(env, json.dumps(_body(path, extra)), path), 400)
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
