"""The one reader of OpenAI stream events (gateway relay and agent counter): both formats."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import pytest

from lorafleet_core.wire.openai_stream import (
    WHOLE_PARSE_BYTES,
    AnswerUsage,
    answer_usage,
    ends_stream,
    event_usage,
    is_content_event,
    usage_of,
    usage_tokens,
)


def _data(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _named(kind: str, **data: object) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def test_content_events_of_both_formats():
    assert is_content_event(_data({"choices": [{"delta": {"content": "a"}}]}))
    assert is_content_event(_data({"choices": [{"text": "a"}]}))
    assert not is_content_event(_data({"choices": [{"delta": {"content": ""}}]}))
    assert not is_content_event(_data({"choices": [], "usage": {"completion_tokens": 1}}))
    assert is_content_event(_named("response.output_text.delta", delta="a"))
    assert is_content_event(_named("response.reasoning_text.delta", delta="a"))
    assert not is_content_event(_named("response.output_text.done", text="abc"))
    assert not is_content_event(_named("response.created", response={}))


def test_the_end_of_both_formats():
    assert ends_stream(b"data: [DONE]\n\n")
    assert not ends_stream(_data({"choices": []}))
    for kind in ("response.completed", "response.incomplete", "response.failed", "error"):
        assert ends_stream(_named(kind, response={}))
    assert not ends_stream(_named("response.in_progress", response={}))


def test_usage_in_either_place_and_vocabulary():
    chat = _data({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})
    done = _named("response.completed", response={"usage": {"input_tokens": 5, "output_tokens": 6}})
    assert usage_tokens(event_usage(chat) or {}) == (3, 4)
    assert usage_tokens(event_usage(done) or {}) == (5, 6)
    assert event_usage(_data({"choices": [], "usage": None})) is None
    assert usage_of({"output": [], "usage": {"input_tokens": 1, "output_tokens": 2}}) == {
        "input_tokens": 1,
        "output_tokens": 2,
    }
    # a replica's lenient JSON: NaN, strings, negatives, booleans count 0, never raise
    assert usage_tokens({"prompt_tokens": float("nan"), "completion_tokens": "7"}) == (0, 0)
    assert usage_tokens({"input_tokens": -3, "output_tokens": True}) == (0, 0)


def test_role_only_and_finish_only_chunks_generate_nothing_tool_call_pieces_do():
    assert not is_content_event(_data({"choices": [{"delta": {"role": "assistant"}}]}))
    assert not is_content_event(_data({"choices": [{"delta": {}, "finish_reason": "stop"}]}))
    call = {"index": 0, "function": {"arguments": '{"ci'}}
    assert is_content_event(_data({"choices": [{"delta": {"content": "", "tool_calls": [call]}}]}))
    assert is_content_event(_data({"choices": [{"delta": {"reasoning_content": "hm"}}]}))


def _echo_answer(prompt_tokens: int) -> bytes:
    """A completions answer shaped as vLLM writes one for `echo` + `logprobs` +
    `prompt_logprobs` (20 alternatives per prompt token), usage last; some alternatives are
    the token `usage` itself."""
    alternatives = {
        str(i): {"logprob": -1.5, "rank": i, "decoded_token": "usage" if i == 3 else f"t{i}"}
        for i in range(21)
    }
    top = {("usage" if i == 2 else f"t{i}"): -0.5 for i in range(20)}
    choice = {
        "index": 0,
        "text": 'echo "usage": {"prompt_tokens": 1}',  # escaped in JSON: not a key
        "logprobs": {"tokens": ["x"] * prompt_tokens, "top_logprobs": [top] * prompt_tokens},
        "prompt_logprobs": [None] + [alternatives] * (prompt_tokens - 1),
    }
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 8, "total_tokens": 8}
    return json.dumps({"id": "cmpl-1", "choices": [choice], "usage": usage}).encode()


def test_the_usage_of_a_large_answer_is_read_without_parsing_it_whole():
    """A 10 MB answer took 238 ms to parse whole (the gateway's event loop blocked) to read
    three integers; the tail holds them."""
    small, large = _echo_answer(10), _echo_answer(8_000)
    assert len(small) <= WHOLE_PARSE_BYTES < len(large)
    assert answer_usage(small) == json.loads(small)["usage"]
    tracemalloc.start()
    try:
        usage = answer_usage(large)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert usage == {"prompt_tokens": 8_000, "completion_tokens": 8, "total_tokens": 8}
    assert peak < 64 * 1024, peak  # a window of the tail, not the document
    chat = json.dumps({"choices": [], "usage": usage, "prompt_logprobs": [None] * 100_000})
    assert answer_usage(chat.encode()) == usage  # vLLM's chat answer: prompt_logprobs last
    assert answer_usage(b"x" * (WHOLE_PARSE_BYTES + 1)) is None
    assert answer_usage(b'{"usage": 1}' + b" " * WHOLE_PARSE_BYTES) is None


def _fed(body: bytes, piece: int) -> tuple[dict[str, Any] | None, int]:
    """(AnswerUsage's reading of `body` fed in pieces of `piece` bytes, its peak memory)."""
    reader = AnswerUsage()
    pieces = [body[i : i + piece] for i in range(0, len(body), piece)]
    tracemalloc.start()
    try:
        for chunk in pieces:
            reader.feed(chunk)
        usage = reader.usage()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return usage, peak


@pytest.mark.parametrize("piece", [1, 7, 4099, 65536])
def test_the_usage_of_an_answer_read_in_pieces_is_the_whole_answers_in_bounded_memory(
    piece: int,
) -> None:
    """The gateway and the agent relay a large answer as it arrives: any cut of it (a key or
    its value split across two reads) reads the same usage, holding about one piece."""
    small, large = _echo_answer(10), _echo_answer(8_000)
    assert _fed(small, piece)[0] == answer_usage(small) == json.loads(small)["usage"]
    if piece < 1024:
        return  # a few bytes at a time through 24 MB is only slow, not different
    usage, peak = _fed(large, piece)
    assert usage == answer_usage(large) == {"prompt_tokens": 8_000, "completion_tokens": 8,
                                            "total_tokens": 8}  # fmt: skip
    assert peak < 3 * WHOLE_PARSE_BYTES + 4 * piece, peak  # not the 24 MB document


def test_a_responses_answer_whose_tools_echo_sits_between_output_and_usage_is_metered() -> None:
    """vLLM's Responses answer echoes the request's `tools` after `output` and before `usage`:
    up to the request's size (1 MiB) between the text and the figures, past any fixed tail."""
    tools = [
        {"type": "function", "name": f"f{i}", "parameters": {"x": "y" * 900}} for i in range(1200)
    ]
    usage = {"input_tokens": 12, "output_tokens": 30, "total_tokens": 42}
    body = json.dumps(
        {
            "output": [{"type": "message", "content": [{"text": "z" * 400_000}]}],
            "tools": tools,
            "usage": usage,
            "user": None,
        }
    ).encode()
    assert len(body) > 4 * WHOLE_PARSE_BYTES
    assert _fed(body, 65536)[0] == answer_usage(body) == usage
