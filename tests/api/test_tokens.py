"""The one token estimate (gateway limiter, router, agent tokens in flight, autoscaler)."""

from __future__ import annotations

from lorafleet_core.planning.tokens import DEFAULT_MAX_TOKENS, estimate, max_tokens, parse_header


def test_estimate_is_prompt_chars_over_four_plus_one_plus_max_tokens():
    assert estimate({"prompt": "x" * 38, "max_tokens": 10}) == 38 // 4 + 1 + 10
    chat = {
        "messages": [
            {"role": "system", "content": "x" * 8},
            {"role": "user", "content": [{"type": "text", "text": "y" * 12}]},
        ],
        "max_completion_tokens": 7,
    }
    assert estimate(chat) == 20 // 4 + 1 + 7
    assert estimate({"prompt": [1, 2, 3]}) == 3 + 1 + DEFAULT_MAX_TOKENS  # token ids: one each


def test_max_tokens_takes_the_largest_bound_set_and_ignores_junk():
    assert max_tokens({"max_tokens": 5, "max_completion_tokens": 9}) == 9
    # vLLM's completions read max_tokens only: 120 tokens come back, never count them as 1.
    assert max_tokens({"max_tokens": 120, "max_completion_tokens": 1}) == 120
    assert max_tokens({"max_tokens": "lots", "max_output_tokens": 33}) == 33
    assert max_tokens({"max_tokens": "lots"}) == DEFAULT_MAX_TOKENS
    assert max_tokens({"max_tokens": True}) == DEFAULT_MAX_TOKENS
    assert max_tokens({}, default=16) == 16


def test_header_figure_parses_only_plain_small_integers():
    assert parse_header("1234") == 1234
    for bad in (None, "", "-3", "1e3", "²", "9" * 10):
        assert parse_header(bad) is None


def test_estimate_counts_max_tokens_once_per_choice():
    body = {"prompt": "x" * 8, "max_tokens": 10, "n": 3}
    assert estimate(body) == 8 // 4 + 1 + 3 * 10
    assert estimate({**body, "n": True}) == 8 // 4 + 1 + 10  # junk n: one choice


def test_tool_definitions_and_tool_calls_count_as_prompt():
    """A chat template renders `tools` into the prompt (as JSON) and reads back the calls of
    assistant turns: tiny messages with a 100 KB tools array are a 25,000-token prefill."""
    tools = [{"type": "function", "function": {"name": f"f{i}", "description": "d" * 1000}}
             for i in range(100)]  # fmt: skip
    tiny = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    assert estimate(tiny) == 2 // 4 + 1 + 1
    assert estimate(tiny | {"tools": tools}) > 100_000 // 4
    assert estimate(tiny | {"functions": [t["function"] for t in tools]}) > 100_000 // 4
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "a" * 4000}}
    replay = {"messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]}
    assert estimate(replay | {"max_tokens": 1}) == 4001 // 4 + 1 + 1
    responses = {"input": "hi", "tools": [{"type": "function", "name": "f",
                                            "parameters": {"d": "x" * 8000}}]}  # fmt: skip
    assert estimate(responses | {"max_output_tokens": 1}) > 8000 // 4
