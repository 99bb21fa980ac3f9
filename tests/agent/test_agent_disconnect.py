"""A client that hangs up mid-stream, or before a non-stream answer, against a real agent in
front of the session's real vLLM: the adapter's reference, the replica's counters and vLLM's
own request are all given back.

The agent reaches vLLM through a throttling proxy (tests.fault_proxy): the stream then lasts
minutes however fast the engine generates, so "held while it streams" is checked while it does
(a CI run once saw the whole answer relayed before the check, and a 200 for the unload).
"""

from __future__ import annotations

import contextlib
import json
import socket
from urllib.parse import urlparse

import pytest

from tests.agent.conftest import load, state, unload
from tests.conftest import TEST_DATA_TOKEN, unique_id
from tests.fault_proxy import FaultProxy
from tests.scrape import Scrape
from tests.waiting import eventually

pytestmark = pytest.mark.vllm

SLOW_BYTES_PER_S = 10_000.0


def _vllm_metric(url: str, name: str) -> float:
    """vLLM's own figure, summed over its label sets."""
    return Scrape.of(f"{url}/metrics").value(f"vllm:{name}")


def _send_completion(sock: socket.socket, raw: bytes) -> None:
    """A completion request written by hand, so the test decides when the client hangs up."""
    sock.sendall(
        b"POST /v1/completions HTTP/1.1\r\nhost: agent\r\n"
        b"content-type: application/json\r\n"
        b"authorization: Bearer %s\r\n"
        b"content-length: %d\r\n\r\n%s" % (TEST_DATA_TOKEN.encode(), len(raw), raw)
    )


def _running_in_vllm(url: str) -> float:
    return _vllm_metric(url, "num_requests_running")


def test_a_client_leaving_mid_stream_releases_the_reference_counts_and_the_engine(
    run_agent, make_record, vllm_server
):
    record = make_record("zebra", unique_id("leave"))
    # 32 sequences x 230 tokens: seconds of decoding on this CPU, which vLLM only stops early
    # when it sees the agent hang up; about 1.5 MB of events, minutes through the proxy.
    body = {
        "model": record.id,
        "prompt": "Tell me a story",
        "max_tokens": 230,
        "n": 32,
        "ignore_eos": True,
        "stream": True,
    }
    raw = json.dumps(body).encode()
    proxy = FaultProxy(vllm_server.port)
    with contextlib.closing(proxy), run_agent(vllm_url=proxy.url) as agent:
        assert load(agent, record).status_code == 200
        proxy.slow(SLOW_BYTES_PER_S)
        url = urlparse(agent.data_url)
        for _ in range(2):  # twice: a leak would add up
            with socket.create_connection((url.hostname, url.port), timeout=60) as sock:
                _send_completion(sock, raw)
                first = sock.recv(4096)
                assert first.startswith(b"HTTP/1.1 200"), first[:200]
                eventually(lambda: state(agent)["running_requests"] == 1, what="stream running")
                assert unload(agent, record.id).status_code == 409  # held while it streams
            # The socket is closed here, mid-stream.
            eventually(
                lambda: (
                    (s := state(agent))["running_requests"] == 0
                    and s["queue_depth"] == 0
                    and s["tokens_in_flight"] == 0
                ),
                within_s=15,
                what="the replica's counters given back",
            )
        proxy.slow(None)
        eventually(
            lambda: _running_in_vllm(vllm_server.url) == 0,
            within_s=15,
            what="vLLM aborted the abandoned requests",
        )
        released = unload(agent, record.id)
        assert released.status_code == 200, released.text  # no reference left behind


def test_a_client_leaving_before_a_non_stream_answer_stops_the_engine_and_releases_counts(
    run_agent, make_record, vllm_server
):
    """A non-stream answer starts only when vLLM has generated all of it: the agent used to
    wait that long for a client already gone (uvicorn does not cancel the request), and vLLM
    generated every token of it for nobody."""
    record = make_record("zebra", unique_id("leave-json"))
    n, max_tokens = 64, 230
    body = {
        "model": record.id,
        "prompt": "Tell me a story",
        "max_tokens": max_tokens,
        "n": n,
        "ignore_eos": True,
    }
    raw = json.dumps(body).encode()
    proxy = FaultProxy(vllm_server.port)  # full speed: it only watches the agent's connection
    with contextlib.closing(proxy), run_agent(vllm_url=proxy.url) as agent:
        assert load(agent, record).status_code == 200
        url = urlparse(agent.data_url)
        hung_up = proxy.hung_up
        with socket.create_connection((url.hostname, url.port), timeout=60) as sock:
            _send_completion(sock, raw)
            eventually(lambda: _running_in_vllm(vllm_server.url) >= 1, what="generating")
        # The socket is closed here, long before the answer: the agent hangs up on vLLM (what
        # the agent does; vLLM's abort on a hang-up is vLLM's). Its answer takes seconds.
        eventually(lambda: proxy.hung_up > hung_up, within_s=30, what="the agent hung up")
        eventually(
            lambda: _running_in_vllm(vllm_server.url) == 0,
            within_s=60,
            what="vLLM ended the abandoned request",
        )
        eventually(
            lambda: (s := state(agent))["queue_depth"] == 0 and s["tokens_in_flight"] == 0,
            within_s=5,
            what="the replica's counters given back",
        )
        released = unload(agent, record.id)
        assert released.status_code == 200, released.text  # no reference left behind
