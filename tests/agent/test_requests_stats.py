"""Token counting on SSE streams and the in-flight estimate."""

from __future__ import annotations

import json

from lorafleet_agent.requests_stats import SseTokenCounter, estimate_tokens


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


def test_estimate_is_prompt_chars_over_four_plus_max_tokens():
    assert estimate_tokens({"prompt": "x" * 38, "max_tokens": 10}) == 10 + 10
    assert estimate_tokens({"messages": [], "max_completion_tokens": 7}) == 7
    assert estimate_tokens({"prompt": ""}) == 16
