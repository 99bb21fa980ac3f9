"""Token counting on SSE streams and the in-flight estimate."""

from __future__ import annotations

import json

from lorafleet_agent.requests_stats import SseTokenCounter, request_tokens
from lorafleet_core.planning.tokens import DEFAULT_MAX_TOKENS, estimate


def _event(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def test_counts_one_token_per_content_chunk_across_split_reads():
    stream = (
        _event({"choices": [{"delta": {"role": "assistant"}}]})
        + _event({"choices": [{"delta": {"content": "ZE"}}]})
        + _event({"choices": [{"delta": {"content": "BRA"}}]})
        + _event({"choices": [{"text": "-7"}]})
        + b"data: [DONE]\n\n"
    )
    c = SseTokenCounter()
    got = sum(c.feed(stream[i : i + 7]) for i in range(0, len(stream), 7))
    assert got == 3
    assert c.total == 3


def test_usage_chunk_wins():
    c = SseTokenCounter()
    c.feed(_event({"choices": [{"text": "a"}]}))
    c.feed(_event({"choices": [], "usage": {"completion_tokens": 5}}))
    assert c.total == 5


def test_counts_an_event_whose_crlf_is_split_across_reads():
    stream = (_event({"choices": [{"text": "a"}]}) + _event({"choices": [{"text": "b"}]})).replace(
        b"\n", b"\r\n"
    )
    cut = stream.index(b"\r\n\r\n") + 1  # between CR and LF
    c = SseTokenCounter()
    assert c.feed(stream[:cut]) + c.feed(stream[cut:]) == 2


def test_tokens_in_flight_are_the_gateways_figure_else_the_shared_estimate():
    body = {"prompt": "x" * 38, "max_tokens": 10}
    assert request_tokens("4321", body) == 4321
    assert request_tokens(None, body) == estimate(body) == 38 // 4 + 1 + 10
    assert request_tokens("not-a-number", {"prompt": ""}) == 1 + DEFAULT_MAX_TOKENS


def test_adapter_activity_counts_requests_gpu_hits_and_tokens_per_adapter():
    from lorafleet_agent.metrics import AgentMetrics
    from lorafleet_agent.requests_stats import RequestStats
    from lorafleet_core.wire.replica_state import ReplicaState
    from lorafleet_core.wire.tiers import Tier

    stats = RequestStats(AgentMetrics())
    for tier in (Tier.GPU, Tier.GPU, Tier.DISK):
        stats.count_request("hot", tier)
    stats.count_request("cold", Tier.REMOTE)
    stats.count_tokens("hot", 120)
    got = stats.adapter_activity()
    assert set(got) == {"hot", "cold"}
    assert (got["hot"].requests, got["hot"].gpu_hits) == (3, 2)
    assert got["hot"].tokens_per_second == 2.0  # 120 tokens over the 60 s window
    assert (got["cold"].requests, got["cold"].gpu_hits) == (1, 0)
    # It travels in the state contract and parses back.
    state = ReplicaState(replica_id="r", adapters=got)
    assert ReplicaState.model_validate_json(state.model_dump_json()).adapters == got


def test_a_shorter_activity_window_rates_over_itself_and_forgets_sooner():
    from lorafleet_agent.metrics import AgentMetrics
    from lorafleet_agent.requests_stats import RequestStats
    from lorafleet_core.wire.tiers import Tier
    from tests.waiting import eventually

    stats = RequestStats(AgentMetrics(), window_s=0.5)  # AgentSettings.activity_window_s
    stats.count_request("hot", Tier.GPU)
    stats.count_tokens("hot", 30)
    got = stats.adapter_activity()["hot"]
    assert (got.requests, got.gpu_hits) == (120, 120)  # one in 0.5 s: 120 a minute
    assert got.tokens_per_second == 60.0  # 30 tokens over the 0.5 s window
    eventually(lambda: stats.adapter_activity() == {}, within_s=5, what="the window to pass")


def _named(kind: str, **data) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def test_counts_a_responses_stream_by_deltas_until_its_usage_wins():
    stream = (
        _named("response.created", response={"usage": None})
        + _named("response.output_text.delta", delta="ZE")
        + _named("response.output_text.delta", delta="BRA")
        + _named("response.function_call_arguments.delta", delta="{}")
        + _named("response.output_text.done", text="ZEBRA")
    )
    c = SseTokenCounter()
    assert sum(c.feed(stream[i : i + 5]) for i in range(0, len(stream), 5)) == 3
    c.feed(
        _named("response.completed", response={"usage": {"input_tokens": 3, "output_tokens": 9}})
    )
    assert c.total == 9
