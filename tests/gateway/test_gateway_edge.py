"""Edge limits on raw sockets against the real uvicorn server with the gateway's protocol:
header size (431), header and body timeouts (408), body size (413), clients that leave, and
the early-failure rate limit per client address and per key."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lorafleet_gateway.edge import FailureLimiter
from tests.gateway import manifests as m
from tests.gateway.conftest import KEYS, MSG_DEFAULT, GatewayEnv, openai_error, start_env, stop_env
from tests.raw_http import read_all, send_until_answered
from tests.scrape import Scrape
from tests.waiting import eventually

TIMEOUT_S = 0.5


@pytest.fixture
def env(tmp_path: Path) -> Iterator[GatewayEnv]:
    e = start_env(tmp_path, n_replicas=1, header_timeout_s=TIMEOUT_S, body_timeout_s=TIMEOUT_S)
    try:
        yield e
    finally:
        stop_env(e)


def _connect(env: GatewayEnv) -> socket.socket:
    host, port = env.server.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _status_and_error(raw: bytes) -> tuple[int, dict[str, object]]:
    """A raw HTTP answer's status and its OpenAI error body, checked by conftest.openai_error."""
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    status = int(status_line.split(" ", 2)[1])
    headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in lines)]
    return status, openai_error(httpx.Response(status, headers=headers, content=body), status)


def _requests_total(env: GatewayEnv, status: str, endpoint: str = "chat") -> float:
    return Scrape.of_registry(env.gw.metrics.registry).value(
        "lorafleet_gateway_requests_total", endpoint=endpoint, status=status
    )


HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\n"
    b"authorization: Bearer " + KEYS["acme"].encode() + b"\r\n"
)


def test_headers_never_finished_are_answered_408_and_closed(env: GatewayEnv):
    with _connect(env) as sock:
        sock.sendall(HEAD)  # no blank line: the headers never end
        t0 = time.monotonic()
        status, error = _status_and_error(read_all(sock))
        assert time.monotonic() - t0 < TIMEOUT_S + 2
    assert (status, error["code"], error["type"]) == (
        408,
        "request_timeout",
        "invalid_request_error",
    )


def test_bytes_that_are_not_http_get_an_openai_400(env: GatewayEnv):
    with _connect(env) as sock:
        sock.sendall(b"\x16\x03\x01 hello, this is not HTTP\r\n\r\n")
        status, error = _status_and_error(read_all(sock))
    assert (status, error["code"]) == (400, "invalid_http_request")


def test_connection_that_sends_nothing_is_closed_after_the_header_timeout(env: GatewayEnv):
    with _connect(env) as sock:
        status, _ = _status_and_error(read_all(sock))
    assert status == 408


def test_slow_body_is_answered_408_and_closed(env: GatewayEnv):
    with _connect(env) as sock:
        sock.sendall(HEAD + b"content-type: application/json\r\ncontent-length: 100\r\n\r\n{")
        status, error = _status_and_error(read_all(sock))
    assert (status, error["code"]) == (408, "request_timeout")
    assert env.replicas["replica-0"].requests == []


def test_64_mib_header_is_refused_431_without_reading_it_whole(env: GatewayEnv):
    with _connect(env) as sock:
        raw, sent = send_until_answered(
            sock, HEAD + b"x-big: ", 64 * 1024 * 1024, piece=b"a" * 65536
        )
    # The answer came long before 64 MiB were sent: the header was never read whole. (What
    # the client has "sent" includes the loopback socket buffers, a few MiB.)
    assert sent < 16 * 1024 * 1024
    status, error = _status_and_error(raw)
    assert (status, error["code"]) == (431, "request_header_fields_too_large")


def test_slow_body_on_a_get_is_timed_out_too(env: GatewayEnv):
    with _connect(env) as sock:
        sock.sendall(
            b"GET /v1/models HTTP/1.1\r\nhost: gw\r\ncontent-length: 100\r\n"
            b"authorization: Bearer " + KEYS["acme"].encode() + b"\r\n\r\n{"
        )
        status, error = _status_and_error(read_all(sock))
    assert (status, error["code"]) == (408, "request_timeout")


def test_declared_body_over_the_limit_is_413_before_it_is_sent(env: GatewayEnv):
    with _connect(env) as sock:
        sock.sendall(HEAD + b"content-length: 99999999\r\n\r\n")
        status, error = _status_and_error(read_all(sock))
    assert (status, error["code"]) == (413, "request_too_large")


def test_chunked_body_over_the_limit_is_413(env: GatewayEnv):
    limit = env.gw.settings.max_body_bytes
    chunk = b"a" * 65536
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(limit // len(chunk) + 2))
    received: list[bytes] = []
    with _connect(env) as sock:
        reader = threading.Thread(target=lambda: received.append(read_all(sock)), daemon=True)
        reader.start()
        with contextlib.suppress(OSError):
            sock.sendall(HEAD + b"transfer-encoding: chunked\r\n\r\n" + body + b"0\r\n\r\n")
        reader.join(10)
    status, error = _status_and_error(received[0])
    assert (status, error["code"]) == (413, "request_too_large")


def test_client_leaving_mid_body_is_client_closed_not_500(env: GatewayEnv):
    with _connect(env) as sock:
        sock.sendall(HEAD + b'content-length: 1000\r\n\r\n{"model":')
        # The client leaves once the gateway is reading its body (well within the body
        # timeout), not after a guessed pause that a loaded machine may outlast.
        eventually(
            lambda: env.gw.bodies.in_transit > 0, interval_s=0.005, what="the body being read"
        )
    eventually(lambda: _requests_total(env, "client_closed") == 1, what="client_closed counted")
    assert _requests_total(env, "500") == 0


def test_keep_alive_connection_serves_several_requests(env: GatewayEnv):
    # The header clock restarts per request: a healthy keep-alive client is never cut.
    body = json.dumps({"model": "acme/support:prod", "messages": MSG_DEFAULT})
    with httpx.Client(
        base_url=env.base_url, headers={"authorization": f"Bearer {KEYS['acme']}"}
    ) as c:
        for _ in range(3):
            assert c.post("/chat/completions", content=body).status_code == 200
            time.sleep(TIMEOUT_S * 0.6)  # idle between requests, under the keep-alive timeout


def _client(env: GatewayEnv, address: str, key: str | None) -> httpx.Client:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=env.base_url, headers=headers, transport=transport, timeout=10)


def test_early_failures_are_rate_limited_per_address_and_per_key(tmp_path: Path):
    env = start_env(
        tmp_path, n_replicas=1, failed_requests_burst=5, failed_requests_per_second=0.01
    )
    try:
        bad_model = {"model": "acme/nope:x", "messages": MSG_DEFAULT}
        good = {"model": "acme/support:prod", "messages": MSG_DEFAULT}
        with _client(env, "127.0.0.1", "lf-wrong") as prober:
            assert [prober.get("/models").status_code for _ in range(5)] == [401] * 5
            refused = prober.get("/models")
        assert refused.status_code == 429
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        # The key's tenant floods 404s from another address: the key is limited wherever it goes.
        with _client(env, "127.0.0.2", KEYS["acme"]) as acme:
            codes = [acme.post("/chat/completions", json=bad_model).status_code for _ in range(5)]
            assert codes == [404] * 5
        with _client(env, "127.0.0.3", KEYS["acme"]) as acme_elsewhere:
            assert acme_elsewhere.post("/chat/completions", json=good).status_code == 429
        # Another tenant from a clean address is untouched.
        with _client(env, "127.0.0.4", KEYS["globex"]) as globex:
            ok = {"model": "globex/bot:prod", "messages": MSG_DEFAULT}
            assert globex.post("/chat/completions", json=ok).status_code == 200
    finally:
        stop_env(env)


def test_a_valid_key_is_not_locked_out_by_failures_from_its_address(tmp_path: Path):
    """Behind a NAT, an ingress not named in forwarded_allow_ips, or under `lorafleet up`,
    an attacker shares the tenants' address: its failures must not lock them out."""
    env = start_env(
        tmp_path, n_replicas=1, failed_requests_burst=5, failed_requests_per_second=0.01
    )
    try:
        with _client(env, "127.0.0.1", None) as prober:
            probes = [
                prober.get("/models", headers={"authorization": f"Bearer lf-guess-{i}"})
                for i in range(6)
            ]
            assert [r.status_code for r in probes] == [401] * 5 + [429]
            # Still refused from that address: no key, or yet another guessed one.
            assert prober.get("/models").status_code == 429
            guess = {"authorization": "Bearer lf-guess-new"}
            assert prober.get("/models", headers=guess).status_code == 429
        good = {"model": "acme/support:prod", "messages": MSG_DEFAULT}
        with _client(env, "127.0.0.1", KEYS["acme"]) as acme:
            assert acme.post("/chat/completions", json=good).status_code == 200
            assert acme.get("/models").status_code == 200
    finally:
        stop_env(env)


def _probe_from(client: httpx.Client, forwarded_for: str, i: int) -> int:
    """A 401 probe claiming to come from `forwarded_for`, with a new wrong key each time (so
    only the address bucket can stop it)."""
    headers = {"authorization": f"Bearer lf-wrong-{i}", "x-forwarded-for": forwarded_for}
    return client.get("/models", headers=headers).status_code


def test_forwarded_for_is_not_believed_by_default_so_a_local_client_cannot_dodge_the_limit(
    tmp_path: Path,
):
    """What `lorafleet up` runs: uvicorn's default would believe X-Forwarded-For from
    127.0.0.1, so a local prober naming a new address each time was never limited."""
    env = start_env(
        tmp_path, n_replicas=1, failed_requests_burst=5, failed_requests_per_second=0.01
    )
    try:
        with _client(env, "127.0.0.1", None) as prober:
            codes = [_probe_from(prober, f"203.0.113.{i}", i) for i in range(6)]
        assert codes == [401] * 5 + [429]  # charged to 127.0.0.1, whatever the header says
    finally:
        stop_env(env)


def test_forwarded_for_from_a_configured_proxy_is_the_client_address(tmp_path: Path):
    env = start_env(
        tmp_path,
        n_replicas=1,
        failed_requests_burst=5,
        failed_requests_per_second=0.01,
        forwarded_allow_ips="127.0.0.1",  # the ingress' address, on a cluster
    )
    try:
        with _client(env, "127.0.0.1", None) as proxy:
            # Each forwarded client has its own bucket behind the one proxy ...
            assert [_probe_from(proxy, f"203.0.113.{i}", i) for i in range(6)] == [401] * 6
            # ... and one client behind it is limited.
            codes = [_probe_from(proxy, "198.51.100.7", 100 + i) for i in range(6)]
            assert codes == [401] * 5 + [429]
        # A peer that is not the configured proxy is not believed.
        with _client(env, "127.0.0.2", None) as other:
            codes = [_probe_from(other, f"203.0.113.{50 + i}", 200 + i) for i in range(6)]
            assert codes == [401] * 5 + [429]
    finally:
        stop_env(env)


def test_forwarded_allow_ips_is_read_from_uvicorns_own_variable_too(monkeypatch):
    from lorafleet_gateway.settings import GatewaySettings

    for name in ("FORWARDED_ALLOW_IPS", "LORAFLEET_GATEWAY_FORWARDED_ALLOW_IPS"):
        monkeypatch.delenv(name, raising=False)
    assert GatewaySettings().forwarded_allow_ips is None
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "10.0.0.0/8")
    assert GatewaySettings().forwarded_allow_ips == "10.0.0.0/8"
    monkeypatch.setenv("LORAFLEET_GATEWAY_FORWARDED_ALLOW_IPS", "10.1.0.0/16")
    assert GatewaySettings().forwarded_allow_ips == "10.1.0.0/16"


def test_key_listed_under_two_tenants_authenticates_neither(tmp_path: Path):
    env = start_env(tmp_path, n_replicas=1)
    try:
        version = env.gw.holder.current.version
        shared = m.key_secret("globex", KEYS["acme"])  # globex's Secret also lists acme's key
        shared["metadata"]["name"] = "lorafleet-keys-globex-extra"
        m.write(env.folder, "keys-extra.yaml", [shared])
        eventually(lambda: env.gw.holder.current.version > version, what="catalog reload")
        assert env.gw.holder.current.keys.conflicts[0].tenants == ("acme", "globex")
        assert httpx.get(f"{env.base_url}/models", headers=_bearer("acme")).status_code == 401
        assert httpx.get(f"{env.base_url}/models", headers=_bearer("globex")).status_code == 200
    finally:
        stop_env(env)


def _bearer(tenant: str) -> dict[str, str]:
    return {"authorization": f"Bearer {KEYS[tenant]}"}


def test_failure_limiter_blocks_after_the_burst_and_forgets_refilled_buckets():
    now = [0.0]
    limiter = FailureLimiter(per_second=1.0, burst=3, clock=lambda: now[0])
    assert not limiter.active()
    for _ in range(3):
        assert limiter.retry_after("addr:a") == 0.0
        limiter.charge("addr:a")
    assert limiter.retry_after("addr:a", "key:k") == pytest.approx(1.0)
    assert limiter.retry_after("addr:b") == 0.0  # others are not affected
    now[0] = 1.0
    assert limiter.retry_after("addr:a") == 0.0  # one failure's worth refilled
    now[0] = 10.0
    assert not limiter.active()  # full again: forgotten
    assert len(limiter) == 0


def test_a_client_that_stops_reading_a_stream_is_cut_and_releases_what_it_held(tmp_path: Path):
    """A stream its client never reads (a zero receive window) held the connection, the
    reservation and the replica's stream for as long as TCP kept it open: for ever."""
    env = start_env(tmp_path, n_replicas=1, write_timeout_s=0.5)
    try:
        env.replicas["replica-0"].n_tokens = 100_000  # ~20 MB of SSE: more than any buffer
        body = json.dumps(
            {"model": "acme/support:prod", "messages": MSG_DEFAULT, "stream": True}
        ).encode()
        in_flight = "lorafleet_gateway_requests_in_flight"
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            host, port = env.server.url.removeprefix("http://").split(":")
            sock.connect((host, int(port)))
            sock.sendall(HEAD + b"content-length: %d\r\n\r\n%s" % (len(body), body))
            eventually(lambda: env.gw.metrics.registry.get_sample_value(in_flight) == 1)
            # Never read: the gateway gives up on the client, not the client on the gateway.
            eventually(
                lambda: _requests_total(env, "client_closed") == 1,
                within_s=20,
                what="the stalled stream ended",
            )
            assert env.gw.metrics.registry.get_sample_value(in_flight) == 0
            with contextlib.suppress(OSError):  # an abort: the client sees a reset
                while sock.recv(1 << 20):
                    pass
        # A client that reads the same stream gets all of it.
        env.replicas["replica-0"].n_tokens = 20_000
        with httpx.stream(
            "POST",
            env.base_url + "/chat/completions",
            content=body,
            headers={"authorization": f"Bearer {KEYS['acme']}"},
            timeout=30,
        ) as resp:
            text = b"".join(resp.iter_raw())
        assert text.endswith(b"data: [DONE]\n\n")
    finally:
        stop_env(env)


@pytest.mark.parametrize("key", [None, "lf-wrong"])
def test_a_body_without_a_valid_key_is_answered_401_without_being_read(
    env: GatewayEnv, key: str | None
):
    """Otherwise each unauthenticated connection could make the gateway hold max_body_bytes."""
    auth = b"authorization: Bearer " + key.encode() + b"\r\n" if key else b""
    with _connect(env) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\n" + auth + b"content-type: "
            b'application/json\r\ncontent-length: 1000000\r\n\r\n{"model":'
        )
        t0 = time.monotonic()
        raw = read_all(sock)  # the answer comes, and the connection closes, at once
        assert time.monotonic() - t0 < TIMEOUT_S  # not the body timeout's 408
    status, error = _status_and_error(raw)
    assert (status, error["type"]) == (401, "authentication_error")
    assert b"connection: close" in raw.lower()
    # With a valid key the same body is read (and here, never completed: 408).
    with _connect(env) as sock:
        sock.sendall(HEAD + b"content-length: 1000000\r\n\r\n{")
        status, error = _status_and_error(read_all(sock))
    assert (status, error["code"]) == (408, "request_timeout")


@pytest.mark.parametrize("path", [b"/nope", b"/healthz", b"/v2/chat/completions"])
def test_a_body_outside_the_api_is_never_read_with_or_without_a_key(env: GatewayEnv, path: bytes):
    """No route outside /v1/ takes a body. Read anyway, it let a client without a key hold a
    connection and up to max_body_bytes for body_timeout_s, past the /v1/ rule above."""
    for auth in (b"", b"authorization: Bearer " + KEYS["acme"].encode() + b"\r\n"):
        with _connect(env) as sock:
            sock.sendall(
                b"POST " + path + b" HTTP/1.1\r\nhost: gw\r\n" + auth
                + b"content-length: 1000000\r\n\r\n{"
            )  # fmt: skip
            raw = read_all(sock)  # answered, and closed, without waiting for the body
        status, _ = _status_and_error(raw)
        assert status in (404, 405), raw[:300]
        assert b"connection: close" in raw.lower()
