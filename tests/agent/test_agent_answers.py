"""What the agent does with vLLM's answers in flight: a long non-stream answer is passed on as
it arrives (never held whole), and requests held by a vLLM that stays hung are failed
retryably instead of waiting out the read timeout. The agent reaches the session's vLLM
through a proxy (tests.fault_proxy) that can slow or stop what the engine sends."""

from __future__ import annotations

import contextlib
import json
import threading
import time

import httpx
import pytest

from tests.agent.conftest import load, metric, state
from tests.conftest import DATA_HEADERS, unique_id
from tests.fault_proxy import FaultProxy
from tests.waiting import eventually

pytestmark = pytest.mark.vllm

PROMPT = "Tell me about the weather today"


def test_a_long_answer_leaves_the_agent_while_vllm_is_still_sending_it(
    run_agent, make_record, vllm_server
):
    """n=4 with 20 logprobs per token: ~330 KB from vLLM, over a link slow enough that it
    takes seconds. The agent's first bytes reach its client before vLLM's last byte reached
    the agent (held whole, 64 such answers of 10 MB were 640 MB in the agent), and the answer
    is whole, with its Content-Length and usage, and counted."""
    record = make_record("zebra", unique_id("long-answer"))
    proxy = FaultProxy(vllm_server.port)
    with contextlib.closing(proxy), run_agent(vllm_url=proxy.url) as agent:
        assert load(agent, record).status_code == 200
        body = {"model": record.id, "prompt": PROMPT, "max_tokens": 200, "n": 4,
                "logprobs": 20, "ignore_eos": True}  # fmt: skip
        proxy.slow(200_000)  # bytes/s: ~1.6 s for the ~330 KB answer
        url = f"{agent.data_url}/v1/completions"
        with httpx.stream("POST", url, json=body, headers=DATA_HEADERS, timeout=120) as resp:
            assert resp.status_code == 200
            pieces = resp.iter_raw()
            first = next(pieces)
            through_at_first = proxy.sent_back
            raw = first + b"".join(pieces)
        proxy.slow(None)
        assert int(resp.headers["content-length"]) == len(raw) > 300_000
        assert through_at_first < len(raw) / 2, (through_at_first, len(raw))
        assert resp.headers["x-replica-id"] == agent.agent.settings.replica_id
        assert json.loads(raw)["usage"]["completion_tokens"] == 800
        eventually(lambda: state(agent)["running_requests"] == 0, what="the request settled")


def test_requests_held_by_a_vllm_hung_past_the_bound_fail_retryably_a_short_stall_keeps_them(
    run_agent, make_record, vllm_server
):
    """The engine stops (SIGSTOP: accepted, never answered) with a stream started and a
    non-stream request sent. Past ENGINE_HUNG_FAIL_S after the agent calls it hung, the
    non-stream one is answered 503 engine_unavailable (the gateway retries it elsewhere) and
    the stream is cut (the gateway's in-band error), long before the 600 s read timeout;
    nothing stays counted. Before that bound a stall resumes whole (the e2e test)."""
    record = make_record("zebra", unique_id("hung-engine"))
    proxy = FaultProxy(vllm_server.port)
    settings = {"vllm_url": proxy.url, "engine_check_s": 0.2, "engine_hung_fail_s": 1.0}
    with contextlib.closing(proxy), run_agent(**settings) as agent:
        assert load(agent, record).status_code == 200
        url = f"{agent.data_url}/v1/completions"
        body = {"model": record.id, "prompt": PROMPT, "max_tokens": 60, "ignore_eos": True}
        proxy.slow(2000)  # the answer is surely still on its way when the engine stops
        with httpx.stream(
            "POST", url, json=body | {"stream": True}, headers=DATA_HEADERS, timeout=120
        ) as stream:
            assert stream.status_code == 200
            lines = stream.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            proxy.stall()
            stalled_at = time.monotonic()
            answers: list[httpx.Response] = []
            asking = threading.Thread(
                target=lambda: answers.append(
                    httpx.post(url, json=body, headers=DATA_HEADERS, timeout=120)
                )
            )
            asking.start()
            with pytest.raises(httpx.RemoteProtocolError):  # cut: short of its last chunk
                for _ in lines:
                    pass
        cut_after = time.monotonic() - stalled_at
        asking.join(60)
        assert answers, "the non-stream request never returned"
        assert answers[0].status_code == 503, answers[0].text
        assert answers[0].json()["error"]["code"] == "engine_unavailable"
        assert 1.0 < cut_after < 30, cut_after  # the verdict (~7 s) + the bound, not 600 s
        assert metric(agent, "lorafleet_agent_hung_engine_failed_requests_total") == 2
        eventually(
            lambda: state(agent)["running_requests"] == 0 and state(agent)["tokens_in_flight"] == 0,
            what="nothing left counted",
        )
        proxy.slow(None)
        proxy.resume()
        eventually(
            lambda: httpx.get(f"{agent.internal_url}/readyz", timeout=5).status_code == 200,
            within_s=30,
            what="the agent ready again",
        )
        again = httpx.post(url, json=body, headers=DATA_HEADERS, timeout=60)
        assert again.status_code == 200, again.text
