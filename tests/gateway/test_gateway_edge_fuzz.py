"""Fuzzing the public API: schemathesis over the gateway's OpenAPI document (authenticated, over
real HTTP, with zero 5xx allowed) and hypothesis over raw request bodies (never anything but a
CompletionRequest or a 4xx, and whatever is accepted re-encodes as strict JSON for the engine)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lorafleet_gateway.errors import APIError
from lorafleet_gateway.openapi import OPENAPI
from lorafleet_gateway.upstream import upstream_body
from lorafleet_gateway.validation import Bounds, parse_request
from tests.gateway.conftest import KEYS, GatewayEnv, start_env, stop_env


def _fuzz_schema() -> dict[str, Any]:
    """The published document, with `model` drawn mostly from real aliases so generated
    requests reach the replicas too (negative cases still send anything)."""
    spec = copy.deepcopy(OPENAPI)
    models = ["acme/support:prod", "acme/support:canary", "globex/bot:prod", "acme/none:x"]
    for name in ("ChatCompletionRequest", "CompletionRequest"):
        spec["components"]["schemas"][name]["properties"]["model"] = {"enum": models}
    return spec


schema = schemathesis.openapi.from_dict(_fuzz_schema())
# Both what the document allows and what it does not (wrong types, missing fields, ...).
schema.config.generation.update(
    modes=[schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
)


@pytest.fixture(scope="module")
def fuzz_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayEnv]:
    # Every generated request comes from one address and key: the early-failure limit would
    # soon answer 429 to all of them and hide what the gateway does with the rest.
    e = start_env(tmp_path_factory.mktemp("fuzz"), n_replicas=2, failed_requests_burst=1_000_000)
    try:
        yield e
    finally:
        stop_env(e)


@schema.parametrize()
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_input_from_the_schema_makes_a_5xx(case: schemathesis.Case[Any], fuzz_env: GatewayEnv):
    response = case.call(
        base_url=fuzz_env.server.url,
        headers={"authorization": f"Bearer {KEYS['acme']}"},
        timeout=10,
    )
    assert response.status_code < 500, (case.as_curl_command(), response.text[:500])
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) - {"request_id"} == {"message", "type", "param", "code"}


B = Bounds(max_body_bytes=100_000)

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(st.characters(exclude_categories=()), max_size=8)  # lone surrogates included
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(st.characters(exclude_categories=()), max_size=4), inner, max_size=4
        )
    ),
    max_leaves=30,
)


def _check(raw: bytes, kind: str) -> None:
    try:
        req = parse_request(raw, kind, B)
    except APIError as exc:
        status = exc.status
    else:
        status = 200
    assert status == 200 or 400 <= status < 500
    if status != 200:
        return
    # Accepted: the engine must be able to read it back as strict UTF-8 JSON.
    strict = json.dumps(json.loads(upstream_body(req, "a1")), ensure_ascii=False, allow_nan=False)
    strict.encode("utf-8")


@given(extra=_values, field=st.sampled_from(["temperature", "messages", "user", "tools", "n"]))
@settings(max_examples=300, deadline=None)
def test_any_json_value_in_a_chat_body_is_accepted_cleanly_or_a_4xx(extra: Any, field: str):
    body: dict[str, Any] = {"model": "acme/support:prod", "messages": [{"role": "user"}]}
    body[field] = extra
    _check(json.dumps(body, allow_nan=True).encode(), "chat")


@given(raw=st.binary(max_size=200) | _values.map(lambda v: json.dumps(v).encode()))
@settings(max_examples=300, deadline=None)
def test_any_bytes_as_a_completion_body_are_accepted_cleanly_or_a_4xx(raw: bytes):
    _check(raw, "completion")


@given(depth=st.integers(1, 5000), opener=st.sampled_from(["[", '{"a":']))
@settings(max_examples=50, deadline=None)
def test_any_nesting_depth_is_accepted_cleanly_or_a_4xx(depth: int, opener: str):
    closer = "]" if opener == "[" else "}"
    nested = opener * depth + "1" + closer * depth
    _check(f'{{"model":"m","prompt":"x","user":{nested}}}'.encode(), "completion")
