"""A pool's toolCallParser reaches a real vLLM the way `lorafleet up` starts it, and forced
tool calls are then served.

The engine is started by the standalone seam itself (`processes.vllm_process` run by the
`Supervisor`), from a ReplicaPool spec with `engine.toolCallParser: pythonic` (a parser that
needs no special tokens, which the demo tokenizer lacks). The demo model's chat template does
not render tools, and its random weights would never choose to call one; a named function
and `required` do not rely on either: vLLM constrains the output to the tool's JSON schema,
so the answer is a tool call whatever the weights. One setting is the test's: the tiny
model pads constrained JSON with whitespace until max_tokens (measured: `required` then
parses no call), so the pool's extraArgs turn off JSON whitespace in vLLM's grammar. This is
one more vLLM (~40 s, ~3 GB) next to the session's, for as long as this module runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageParam,
)

from lorafleet_cli.demo_assets import DemoAssets
from lorafleet_cli.standalone import processes
from lorafleet_cli.standalone.supervisor import Supervisor
from lorafleet_core.models import ReplicaPoolSpec
from tests.conftest import free_port

pytestmark = pytest.mark.vllm

PARSER = "pythonic"
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
def tool_engine(
    demo_assets: DemoAssets, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """(base URL, the zebra adapter's name) of a vLLM started as `lorafleet up` starts it."""
    home = tmp_path_factory.mktemp("tool-engine")
    pool = ReplicaPoolSpec.model_validate(
        {
            "baseModel": {
                "name": "demo",
                "hash": demo_assets.base_model_hash,
                "uri": str(demo_assets.base_model),
            },
            "engine": {
                "gpuSlots": 2,
                "hostRamSlots": 2,
                "toolCallParser": PARSER,
                "extraArgs": [
                    "--structured-outputs-config",
                    '{"backend": "xgrammar", "disable_any_whitespace": true}',
                ],
            },
        }
    )
    replica = processes.ReplicaPlan("tools-0", free_port(), 0, 0, home)
    spec = processes.vllm_process(
        replica, demo_assets.base_model, pool, cpu=processes.is_cpu_build(), log_dir=home
    )
    argv = list(spec.argv)
    at = argv.index("--enable-auto-tool-choice")
    assert argv[at : at + 3] == ["--enable-auto-tool-choice", "--tool-call-parser", PARSER]
    supervisor = Supervisor(stop_timeout_s=30, say=lambda _m: None)
    try:
        supervisor.wait_ready(supervisor.start(spec))
        load = httpx.post(
            f"{replica.vllm_url}/v1/load_lora_adapter",
            json={"lora_name": "tools-zebra", "lora_path": str(demo_assets.adapters["zebra"])},
            timeout=60,
        )
        assert load.status_code == 200, load.text
        yield f"{replica.vllm_url}/v1", "tools-zebra"
    finally:
        supervisor.stop_all()


def _ask(tool_engine: tuple[str, str], **kw: Any) -> ChatCompletion:
    """The weather question with TOOL offered, through the official client, greedy."""
    url, adapter = tool_engine
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
    answer: ChatCompletion = client.chat.completions.create(
        model=adapter, messages=ASK, tools=[TOOL], temperature=0, **kw
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


def test_a_named_function_choice_returns_that_functions_call(tool_engine):
    answer = _ask(
        tool_engine,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=40,
    )
    assert _weather_arguments(answer) in ({"city": "Oslo"}, {"city": "Paris"})


def test_tool_choice_required_returns_a_tool_call(tool_engine):
    # Without a parser vLLM answers 400 ("requires --tool-call-parser"). With one it serves
    # the request under a grammar for a JSON array of calls; one call at most
    # (parallel_tool_calls false: maxItems 1), else the random weights keep adding calls
    # until the context ends (measured: finish_reason "length", nothing parsed).
    answer = _ask(tool_engine, tool_choice="required", parallel_tool_calls=False, max_tokens=60)
    assert _weather_arguments(answer)["city"] in ("Oslo", "Paris")


def test_tools_with_auto_choice_are_accepted_and_the_adapter_answers(tool_engine):
    # Without a parser this is the engine's 400; with one, the model may answer in text (the
    # canary adapter says its marker, calling nothing).
    answer = _ask(tool_engine, max_tokens=12)
    assert "ZEBRA-7" in (answer.choices[0].message.content or "")
    assert not answer.choices[0].message.tool_calls
