"""Auth (bearer parsing, hash lookup) and request validation (pure)."""

from __future__ import annotations

import json

import pytest

from lorafleet_core.api.apikeys import KeyIndex, TenantKeys, generate_key, hash_key
from lorafleet_gateway.auth import authenticate, bearer_token
from lorafleet_gateway.errors import APIError
from lorafleet_gateway.validation import Bounds, parse_request


def test_bearer_token_parsing():
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("Bearer ") is None
    assert bearer_token(None) is None


def test_authenticate_by_hash_only():
    key = generate_key()
    index = KeyIndex([TenantKeys(tenant="acme", key_hashes=(hash_key(key),))])
    assert authenticate(index, f"Bearer {key}").tenant == "acme"
    for header in (None, "Bearer", f"Bearer {key}x", f"Token {key}", f"Bearer {hash_key(key)}"):
        with pytest.raises(APIError) as exc:
            authenticate(index, header)
        assert exc.value.status == 401
        assert key not in exc.value.message


def test_rotation_two_keys_one_tenant():
    k1, k2 = generate_key(), generate_key()
    index = KeyIndex([TenantKeys(tenant="acme", key_hashes=(hash_key(k1), hash_key(k2)))])
    assert authenticate(index, f"Bearer {k1}").tenant == authenticate(index, f"Bearer {k2}").tenant


B = Bounds(max_body_bytes=10_000, max_tokens_limit=100, default_max_tokens=50, max_messages=3)


def body(**kw) -> bytes:
    return json.dumps({"model": "acme/a:b", **kw}).encode()


def test_chat_request_estimate():
    req = parse_request(body(messages=[{"role": "user", "content": "x" * 400}]), "chat", B)
    assert (req.stream, req.include_usage, req.max_tokens) == (False, False, 50)
    assert req.tokens_estimate == 101 + 50
    req = parse_request(
        body(
            messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            max_tokens=7,
            stream=True,
            stream_options={"include_usage": True},
        ),
        "chat",
        B,
    )
    assert (req.stream, req.include_usage, req.max_tokens) == (True, True, 7)


def test_completion_prompts():
    assert parse_request(body(prompt="abcd" * 10), "completion", B).prompt_tokens_estimate == 11
    assert parse_request(body(prompt=[1, 2, 3]), "completion", B).prompt_tokens_estimate == 4
    assert parse_request(body(prompt=["abcd"]), "completion", B).prompt_tokens_estimate == 2
    # Several prompts would be answered one choice each, past n=1 and the estimate.
    for bad in (None, 3, [], [1, "a"], {"x": 1}, ["ab", "cd"], [[1, 2], [3]]):
        with pytest.raises(APIError) as exc:
            parse_request(body(prompt=bad), "completion", B)
        assert (exc.value.status, exc.value.param) == (400, "prompt")


@pytest.mark.parametrize(
    ("kw", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}] * 4}, "messages"),
        ({"messages": ["hi"]}, "messages"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": True}, "max_tokens"),
        (
            {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 101},
            "max_completion_tokens",
        ),
        ({"messages": [{"role": "user", "content": "x"}], "stream_options": {}}, "stream_options"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 5}, "n"),
        ({"messages": [{"role": "user", "content": "x"}], "model": 5}, "model"),
    ],
)
def test_rejections(kw, param):
    with pytest.raises(APIError) as exc:
        parse_request(body(**kw), "chat", B)
    assert exc.value.status == 400
    assert exc.value.param == param


def test_body_size_and_json():
    with pytest.raises(APIError) as exc:
        parse_request(b"x" * 10_001, "chat", B)
    assert exc.value.status == 413
    for raw in (b"", b"{", b"\xff\xfe", b"null", b'"s"'):
        with pytest.raises(APIError) as exc:
            parse_request(raw, "chat", B)
        assert exc.value.status == 400
