"""The one token estimate as the gateway applies it: what counts as prompt."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionFunctionToolParam

from lorafleet_core.wire.headers import HEADER_TOKENS_ESTIMATE
from tests.gateway import manifests as m
from tests.gateway.conftest import KEYS, MSG_DEFAULT, start_env, stop_env
from tests.waiting import eventually

MSG = MSG_DEFAULT


def test_a_huge_tools_array_with_tiny_messages_is_charged_and_routed_at_its_size(tmp_path: Path):
    """The tool definitions are prompt (the chat template renders them): a 40 KB tools array
    behind a 2-character message is ~10,000 tokens of prefill. It used to be estimated at 258
    tokens, so a tenant limited to 2,000 tokens a minute could send it (and 64 at once, each
    counted in flight as almost nothing by the router and the autoscaler)."""
    env = start_env(tmp_path)
    try:
        m.write(
            env.folder,
            "keys.yaml",
            [
                m.key_secret("acme", KEYS["acme"], tokens_per_minute=2000),
                m.key_secret("globex", KEYS["globex"]),
            ],
        )
        eventually(lambda: env.gw.holder.current.tenants["acme"].tokens_per_minute == 2000)
        tools: list[ChatCompletionFunctionToolParam] = [
            {"type": "function", "function": {"name": f"f{i}", "description": "d" * 400}}
            for i in range(100)
        ]
        client = env.client()
        with pytest.raises(openai.RateLimitError, match="too large"):
            client.chat.completions.create(
                model="acme/support:prod", messages=MSG, max_tokens=1, tools=tools
            )
        globex = env.client("globex")
        globex.chat.completions.create(model="globex/bot:prod", messages=MSG, max_tokens=1,
                                       tools=tools)  # fmt: skip
        sent = [h for r in env.replicas.values() for h in r.request_headers]
        assert int(sent[-1][HEADER_TOKENS_ESTIMATE]) > 40_000 // 4
    finally:
        stop_env(env)
