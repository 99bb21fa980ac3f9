"""The control API's edge on raw sockets: the credential before the body, body and header
limits, timeouts and duplicate credentials (lorafleet_operator.control.edge), against the real
uvicorn server with the control API's protocol over a manifests folder."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lorafleet_core.api.names import KIND_ADAPTER
from lorafleet_core.storage.manifests import load_folder, write_object
from lorafleet_operator.control.edge import MAX_BODY_BYTES
from lorafleet_operator.control.store import FolderStore
from tests.gateway.servers import ServerThread
from tests.operator.control_support import ADMIN_TOKEN, AUTH, control_server, registration
from tests.operator.factories import pool_body
from tests.raw_http import read_all, send_until_answered

pytestmark = pytest.mark.timeout(60)

TIMEOUT_S = 0.5


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    pool = pool_body("pool", engine={"maxRank": 16})
    del pool["metadata"]["namespace"]
    write_object(tmp_path, pool)
    return tmp_path


@pytest.fixture
def server(folder: Path) -> Iterator[ServerThread]:
    with control_server(FolderStore(folder), timeout_s=TIMEOUT_S) as srv:
        yield srv


def _connect(server: ServerThread) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.ports[0]), timeout=10)


def _answer(raw: bytes) -> tuple[int, str, str]:
    """(status, error code, error type) of a raw HTTP answer with an OpenAI error body."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    error = httpx.Response(status, content=body).json()["error"]
    return status, error["code"], error["type"]


def _post_head(length: int, *auth_headers: bytes) -> bytes:
    return (
        b"POST /internal/adapters HTTP/1.1\r\nhost: control\r\n"
        + b"".join(b"authorization: " + a + b"\r\n" for a in auth_headers)
        + b"content-type: application/json\r\ncontent-length: "
        + str(length).encode()
        + b"\r\n\r\n"
    )


def test_unauthenticated_100_mb_post_is_refused_before_its_body_is_read(server):
    with _connect(server) as sock:
        raw, sent = send_until_answered(sock, _post_head(100 * 2**20), 100 * 2**20)
    assert _answer(raw) == (401, "unauthorized", "authentication_error")
    assert b"www-authenticate: bearer" in raw.lower()
    # Answered long before 100 MB went out (what counts as sent includes socket buffers).
    assert sent < 16 * 2**20


def test_declared_body_over_the_limit_is_413_before_it_is_sent(server):
    with _connect(server) as sock:
        sock.sendall(_post_head(MAX_BODY_BYTES + 1, f"Bearer {ADMIN_TOKEN}".encode()))
        raw = read_all(sock)
    assert _answer(raw) == (413, "request_too_large", "invalid_request_error")


def test_chunked_body_past_the_limit_is_413(server, folder):
    head = (
        b"POST /internal/adapters HTTP/1.1\r\nhost: control\r\n"
        b"authorization: Bearer " + ADMIN_TOKEN.encode() + b"\r\n"
        b"content-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    chunk = b"10000\r\n" + b" " * 0x10000 + b"\r\n"
    with _connect(server) as sock:
        sock.sendall(head)
        with contextlib.suppress(OSError):
            for _ in range(MAX_BODY_BYTES // 0x10000 + 2):
                sock.sendall(chunk)
        raw = read_all(sock)
    assert _answer(raw)[:2] == (413, "request_too_large")
    assert load_folder(folder).of_kind(KIND_ADAPTER) == []


def test_two_authorization_headers_are_400_even_if_one_is_valid(server, folder):
    body = httpx.Request("POST", "http://x", json=registration("dup-v1")).read()
    with _connect(server) as sock:
        sock.sendall(
            _post_head(len(body), f"Bearer {ADMIN_TOKEN}".encode(), b"Bearer other") + body
        )
        raw = read_all(sock)
    assert _answer(raw) == (400, "duplicate_authorization", "invalid_request_error")
    assert load_folder(folder).of_kind(KIND_ADAPTER) == []


def test_headers_never_finished_are_answered_408_and_closed(server):
    with _connect(server) as sock:
        sock.sendall(b"POST /internal/adapters HTTP/1.1\r\nhost: control\r\n")
        t0 = time.monotonic()
        raw = read_all(sock)
        assert time.monotonic() - t0 < TIMEOUT_S + 2
    assert _answer(raw)[:2] == (408, "request_timeout")


def test_slow_body_is_answered_408(server, folder):
    with _connect(server) as sock:
        sock.sendall(_post_head(100, f"Bearer {ADMIN_TOKEN}".encode()) + b"{")
        raw = read_all(sock)
    assert _answer(raw)[:2] == (408, "request_timeout")
    assert load_folder(folder).of_kind(KIND_ADAPTER) == []


def test_a_valid_request_still_passes_the_edge(server, folder):
    with httpx.Client(base_url=server.url, timeout=10) as client:
        resp = client.post("/internal/adapters", json=registration("edge-v1"), headers=AUTH)
        assert resp.status_code == 201, resp.text
        assert client.get("/internal/openapi.json").status_code == 200  # open, no credential
    assert [o.name for o in load_folder(folder).of_kind(KIND_ADAPTER)] == ["edge-v1"]
