"""A pool's toolCallParser reaches the real vLLM that `lorafleet up` starts, and forced tool
calls are then served through the gateway.

The `up` is the session's shared demo `up` (tests/standalone/up_harness.py), whose demo pool sets
`engine.toolCallParser: pythonic` (a parser that needs no special tokens, which the demo
tokenizer lacks); the demo tour in test_up_e2e runs on the same `up`. The demo model's chat
template does not render tools, and its random weights would never choose to call one; a
named function and `required` do not rely on either: vLLM constrains the output to the
tool's JSON schema, so the answer is a tool call whatever the weights. One setting is the
test's: the tiny model pads constrained JSON with whitespace until max_tokens (measured:
`required` then parses no call), so the pool's extraArgs turn off JSON whitespace in vLLM's
grammar.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
)

from tests.standalone.up_harness import TOOL_CALL_PARSER, TOOL_ENGINE_ARGS, SharedDemoUp, Up

pytestmark = pytest.mark.vllm

MODEL = "demo/zebra:prod"
ASK: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Weather in Oslo?"}]
TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Oslo", "Paris"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def up(shared_demo_up: SharedDemoUp) -> Up:
    """The shared `up`; its engine runs with the pool's parser, as `up` put it on the command
    line of the process it started (read from /proc, not from the planner)."""
    handle = shared_demo_up.get()
    pid = handle.status()["processes"]["demo-0/vllm"]["pid"]
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    at = argv.index("--enable-auto-tool-choice")
    flags = ["--enable-auto-tool-choice", "--tool-call-parser", TOOL_CALL_PARSER]
    assert argv[at : at + 3] == flags
    assert argv[-len(TOOL_ENGINE_ARGS) - 1 : -1] == TOOL_ENGINE_ARGS  # extraArgs come last
    return handle


def _ask(up: Up, **kw: Any) -> ChatCompletion:
    """The weather question with TOOL offered, through the gateway, greedy."""
    client = up.client().with_options(timeout=120)
    answer: ChatCompletion = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[TOOL], temperature=0, **kw
    )
    return answer


def _weather_arguments(answer: ChatCompletion) -> Any:
    """The answer's first tool call, which must call get_weather: its parsed arguments."""
    calls = answer.choices[0].message.tool_calls
    assert calls, answer
    call = calls[0]
    assert call.type == "function"
    assert call.function.name == "get_weather"
    return json.loads(call.function.arguments)


def test_a_named_function_choice_returns_that_functions_call(up: Up) -> None:
    answer = _ask(
        up,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=40,
    )
    assert _weather_arguments(answer) in ({"city": "Oslo"}, {"city": "Paris"})


def test_tool_choice_required_returns_a_tool_call(up: Up) -> None:
    # Without a parser vLLM answers 400 ("requires --tool-call-parser"). With one it serves
    # the request under a grammar for a JSON array of calls; one call at most
    # (parallel_tool_calls false: maxItems 1), else the random weights keep adding calls
    # until the context ends (measured: finish_reason "length", nothing parsed).
    answer = _ask(up, tool_choice="required", parallel_tool_calls=False, max_tokens=60)
    assert _weather_arguments(answer)["city"] in ("Oslo", "Paris")


def test_tools_with_auto_choice_are_accepted_and_the_adapter_answers(up: Up) -> None:
    # Without a parser this is the engine's 400; with one, the model may answer in text (the
    # canary adapter says its marker, calling nothing).
    answer = _ask(up, max_tokens=12)
    assert "ZEBRA-7" in (answer.choices[0].message.content or "")
    assert not answer.choices[0].message.tool_calls
