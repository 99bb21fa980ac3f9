"""Hostile headers and framing over real HTTP (httpx and raw sockets) against the gateway's
uvicorn protocol: bodies that are not plain JSON (415), two Authorization headers (400),
headers over the limit that arrive in one read (431), a broken chunked body (400). Each
answer is an OpenAI error body and nothing reaches a replica."""

from __future__ import annotations

import gzip
import json
import socket
from collections.abc import Iterator

import httpx
import pytest

from tests.gateway.conftest import (
    KEYS,
    MSG_DEFAULT,
    GatewayEnv,
    start_env,
    stop_env,
)
from tests.gateway.conftest import openai_error as _error

CHAT = json.dumps({"model": "acme/support:prod", "messages": MSG_DEFAULT}).encode()
BEARER = f"Bearer {KEYS['acme']}"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayEnv]:
    # Every test here fails on purpose: the early-failure limit is set out of the way.
    e = start_env(tmp_path_factory.mktemp("headers"), n_replicas=1, failed_requests_burst=10_000)
    try:
        yield e
    finally:
        stop_env(e)


def _sent(env: GatewayEnv) -> int:
    return len(env.replicas["replica-0"].requests)


def _post(env: GatewayEnv, content: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(
        env.base_url + "/chat/completions",
        content=content,
        headers={"authorization": BEARER, **headers},
        timeout=10,
    )


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json; charset=utf-16",
    ],
)
def test_a_body_declared_as_something_else_than_json_is_415(env: GatewayEnv, content_type: str):
    before = _sent(env)
    error = _error(_post(env, CHAT, {"content-type": content_type}), 415)
    assert (error["type"], error["code"]) == ("invalid_request_error", "unsupported_media_type")
    assert _sent(env) == before


@pytest.mark.parametrize(
    "content_type", [None, "", "application/json", "Application/JSON; charset=UTF-8"]
)
def test_json_or_no_content_type_is_served(env: GatewayEnv, content_type: str | None):
    headers = {"content-type": content_type} if content_type is not None else {}
    assert _post(env, CHAT, headers).status_code == 200


def test_a_gzip_bomb_is_415_and_never_inflated(env: GatewayEnv):
    # 50 MB of JSON whitespace in 49 KB: inflating it would pass every limit on bytes received.
    bomb = gzip.compress(b"{" + b" " * 50_000_000 + b"}")
    assert len(bomb) < env.gw.settings.max_body_bytes
    before = _sent(env)
    resp = _post(env, bomb, {"content-type": "application/json", "content-encoding": "gzip"})
    error = _error(resp, 415)
    assert error["code"] == "unsupported_content_encoding"
    assert resp.headers["accept-encoding"] == "identity"
    assert _sent(env) == before
    plain = {"content-type": "application/json", "content-encoding": "identity"}
    assert _post(env, CHAT, plain).status_code == 200


@pytest.mark.parametrize("second", [KEYS["globex"], KEYS["acme"]])
def test_two_authorization_headers_are_400_whichever_keys(env: GatewayEnv, second: str):
    before = _sent(env)
    headers = [("authorization", BEARER), ("authorization", f"Bearer {second}")]
    headers.append(("content-type", "application/json"))
    resp = httpx.post(env.base_url + "/chat/completions", content=CHAT, headers=headers)
    assert _error(resp, 400)["code"] == "duplicate_authorization"
    resp = httpx.get(env.base_url + "/models", headers=headers)
    assert _error(resp, 400)["code"] == "duplicate_authorization"
    assert _sent(env) == before


def _raw(env: GatewayEnv, data: bytes) -> tuple[int, dict[str, object]]:
    host, port = env.server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(data)
        out = b""
        while chunk := sock.recv(65536):  # the server closes: the answer ends the connection
            out += chunk
    head, _, body = out.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower()
    error: dict[str, object] = json.loads(body)["error"]
    assert set(error) - {"request_id"} == {"message", "type", "param", "code"}
    return int(head.split(b" ", 2)[1]), error


@pytest.mark.parametrize("where", ["header", "url", "many-headers"])
def test_headers_over_the_limit_in_one_read_are_431(env: GatewayEnv, where: str):
    # Under one socket read (64 KiB) but twice the 32 KiB limit: the count of bytes received
    # before the headers end never sees them, the parsed size does.
    big = 65_000
    path, extra = b"/v1/models", b""
    if where == "url":
        path = b"/v1/models/" + b"a" * big
    elif where == "header":
        extra = b"x-big: " + b"a" * big + b"\r\n"
    else:
        extra = b"".join(b"x-%d: y\r\n" % i for i in range(5_000))  # ~50 KB
    request = b"GET " + path + b" HTTP/1.1\r\nhost: gw\r\n" + extra
    request += b"authorization: " + BEARER.encode() + b"\r\n\r\n"
    assert 32_768 * 1.5 < len(request) < 65_536 + 2_000
    status, error = _raw(env, request)
    assert (status, error["code"]) == (431, "request_header_fields_too_large")


def test_a_broken_chunked_body_is_answered_400_not_dropped(env: GatewayEnv):
    before = _sent(env)
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
        b"authorization: " + BEARER.encode() + b"\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    status, error = _raw(env, head + b"zz\r\n{}\r\n")
    assert (status, error["code"]) == (400, "invalid_http_request")
    status, error = _raw(env, head + b"FFFFFFFFFFFFFFFFFFFF\r\nab\r\n")  # beyond 64 bits
    assert status == 400
    assert _sent(env) == before


@pytest.mark.parametrize(
    ("version", "codings", "status"),
    [
        (b"1.1", [b"gzip, chunked"], 501),
        (b"1.1", [b"identity", b"chunked"], 501),  # two fields: a proxy may read the first
        (b"1.1", [b"chunked", b"identity"], 400),  # the parser's own refusal: not last
        (b"1.0", [b"chunked"], 400),
    ],
)
def test_transfer_encoding_other_than_one_chunked_field_is_refused(
    env: GatewayEnv, version: bytes, codings: list[bytes], status: int
):
    """The parser read each of these as plain chunked and served the request: a proxy in
    front that frames them otherwise would see different requests in the same bytes
    (request smuggling). RFC 9112: 501 for a coding not understood, and Transfer-Encoding
    on HTTP/1.0 is faulty."""
    before = _sent(env)
    request = (
        b"POST /v1/chat/completions HTTP/" + version + b"\r\nhost: gw\r\n"
        b"content-type: application/json\r\nauthorization: " + BEARER.encode() + b"\r\n"
        + b"".join(b"transfer-encoding: " + c + b"\r\n" for c in codings)
        + b"\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(CHAT), CHAT)
    )  # fmt: skip
    got, error = _raw(env, request)
    code = "unsupported_transfer_encoding" if status == 501 else "invalid_http_request"
    assert (got, error["code"]) == (status, code)
    assert _sent(env) == before


@pytest.mark.parametrize("coding", [b"chunked", b"Chunked", b" chunked "])
def test_one_chunked_field_in_any_case_is_served(env: GatewayEnv, coding: bytes):
    before = _sent(env)
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json"
        b"\r\nauthorization: " + BEARER.encode() + b"\r\ntransfer-encoding: " + coding
        + b"\r\nconnection: close\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(CHAT), CHAT)
    )  # fmt: skip
    with socket.create_connection(("127.0.0.1", env.server.ports[0]), timeout=10) as sock:
        sock.sendall(request)
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    assert raw.startswith(b"HTTP/1.1 200 "), raw[:300]
    assert _sent(env) == before + 1


def test_trailers_after_a_chunked_body_are_bounded_like_headers(env: GatewayEnv):
    """uvicorn appended every trailer field to the running request's headers, with no
    limit: 300 MB of trailers grew the gateway by 300 MB in under two seconds."""
    before = _sent(env)
    trailers = b"".join(b"x-t%d: %s\r\n" % (i, b"a" * 1000) for i in range(1000))  # ~1 MB
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n"
        b"authorization: " + BEARER.encode() + b"\r\ntransfer-encoding: chunked\r\n\r\n"
        b"%x\r\n%s\r\n0\r\n" % (len(CHAT), CHAT) + trailers + b"\r\n"
    )
    status, error = _raw(env, request)
    assert (status, error["code"]) == (431, "request_header_fields_too_large")
    assert _sent(env) == before


def test_a_small_trailer_is_accepted_and_ignored(env: GatewayEnv):
    before = _sent(env)
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n"
        b"authorization: " + BEARER.encode() + b"\r\ntransfer-encoding: chunked\r\n\r\n"
        b"%x\r\n%s\r\n0\r\nauthorization: Bearer %s\r\n\r\n"
        % (len(CHAT), CHAT, KEYS["globex"].encode())
    )
    host, port = env.server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    # Served as acme's: a trailer is never read as one of the request's headers.
    assert out.startswith(b"HTTP/1.1 200"), out[:300]
    assert _sent(env) == before + 1


def test_the_internal_port_answers_errors_in_openai_shape_and_serves_no_schema(env: GatewayEnv):
    for path in ("/nope", "/v1/chat/completions", "/openapi.json", "/docs"):
        assert _error(httpx.get(env.internal_url + path), 404)["code"] == "unknown_url"
    resp = httpx.post(env.internal_url + "/metrics")
    assert _error(resp, 405)["code"] == "method_not_allowed"
    assert httpx.get(env.internal_url + "/metrics").status_code == 200
