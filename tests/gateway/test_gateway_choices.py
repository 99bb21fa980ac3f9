"""n > 1: up to the configured limit, estimated and rate limited per choice, metered; and the
max_tokens cap never above the pool's context length."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai
import pytest

from lorafleet_core.planning.tokens import prompt_chars, prompt_tokens
from tests.gateway import manifests as m
from tests.gateway.conftest import KEYS, MSG_DEFAULT, GatewayEnv, start_env, stop_env
from tests.scrape import Scrape
from tests.waiting import eventually


def test_n_2_returns_two_choices_and_the_estimate_counts_both(env: GatewayEnv) -> None:
    raw = env.client().chat.completions.with_raw_response.create(
        model="acme/support:prod", messages=MSG_DEFAULT, n=2, max_tokens=30
    )
    answer = raw.parse()
    assert [c.index for c in answer.choices] == [0, 1]
    replica = env.replicas[raw.headers["x-replica-id"]]
    assert replica.requests[-1]["n"] == 2
    expected = prompt_tokens(prompt_chars({"messages": MSG_DEFAULT})) + 2 * 30
    assert replica.request_headers[-1]["x-lorafleet-tokens-estimate"] == str(expected)


def test_a_streamed_n_2_is_metered_for_both_choices(env: GatewayEnv) -> None:
    chunks = list(
        env.client().chat.completions.create(
            model="acme/support:prod",
            messages=MSG_DEFAULT,
            n=2,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert {c.choices[0].index for c in chunks if c.choices} == {0, 1}
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.completion_tokens == 2 * env.replicas["replica-0"].n_tokens
    registry = env.gw.metrics.registry

    def metered() -> float:
        return Scrape.of_registry(registry).value(
            "lorafleet_gateway_usage_completion_tokens_total",
            tenant="acme",
            adapter="acme-support-v1",
        )

    eventually(lambda: metered() == usage.completion_tokens, what="metered completion tokens")


def test_n_above_the_configured_limit_is_refused(tmp_path: Path) -> None:
    env = start_env(tmp_path, max_n=2)
    try:
        with pytest.raises(openai.BadRequestError) as caught:
            env.client().chat.completions.create(
                model="acme/support:prod", messages=MSG_DEFAULT, n=3
            )
        assert caught.value.param == "n"
        assert "between 1 and 2" in caught.value.message
        assert all(not r.requests for r in env.replicas.values())
    finally:
        stop_env(env)


def test_the_tokens_per_minute_limit_counts_every_choice(tmp_path: Path) -> None:
    env = start_env(tmp_path)
    try:
        m.write(
            env.folder,
            "keys.yaml",
            [
                m.key_secret("acme", KEYS["acme"], tokens_per_minute=100),
                m.key_secret("globex", KEYS["globex"]),
            ],
        )
        env.write_aliases([m.alias("acme/support:prod", "acme-support-v1")])
        client = env.client()
        # one choice of 40 fits the minute's 100 tokens; three choices of 40 never can
        client.chat.completions.create(
            model="acme/support:prod", messages=MSG_DEFAULT, max_tokens=40
        )
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(
                model="acme/support:prod", messages=MSG_DEFAULT, max_tokens=40, n=3
            )
    finally:
        stop_env(env)


def test_max_tokens_is_capped_by_the_pools_context_length(tmp_path: Path) -> None:
    env = start_env(tmp_path, max_tokens_limit=4096)
    try:
        pool = m.pool(owners=2)
        pool["spec"]["engine"] = {"maxModelLen": 512}
        version = env.gw.holder.current.version
        m.write(env.folder, "pool.yaml", [pool])
        eventually(lambda: env.gw.holder.current.version > version, what="catalog reload")
        client = env.client()
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(
                model="acme/support:prod", messages=MSG_DEFAULT, max_tokens=1000
            )
        assert caught.value.param == "max_tokens"
        assert "between 1 and 512" in caught.value.message
        ok = client.chat.completions.create(
            model="acme/support:prod", messages=MSG_DEFAULT, max_tokens=500
        )
        assert ok.choices
    finally:
        stop_env(env)


def test_a_request_without_an_output_bound_is_held_to_max_tokens_limit_on_a_long_context(
    tmp_path: Path,
) -> None:
    """Unbounded, vLLM generates up to the model's whole context (ignore_eos or min_tokens see
    that it does): 32k tokens per choice on a 32k pool, past `max_tokens_limit`, which an
    explicit max_tokens above is refused for. vLLM clamps the bound to what the context
    leaves, so on a pool whose context is within the limit nothing is added."""
    env = start_env(tmp_path, n_replicas=1, max_tokens_limit=4096)
    replica = env.replicas["replica-0"]
    cases: list[tuple[str, dict[str, object], str]] = [
        ("/chat/completions", {"messages": MSG_DEFAULT, "ignore_eos": True}, "max_tokens"),
        ("/completions", {"prompt": "hi", "min_tokens": 100_000}, "max_tokens"),
        ("/responses", {"input": "hi"}, "max_output_tokens"),
    ]

    def sent_bounds(path: str, body: dict[str, object]) -> dict[str, object]:
        resp = httpx.post(
            env.base_url + path,
            json={"model": "acme/support:prod", **body},
            headers={"authorization": f"Bearer {KEYS['acme']}"},
        )
        assert resp.status_code == 200, resp.text
        return {k: v for k, v in replica.requests[-1].items() if k.startswith("max_")}

    try:
        for context, added in ((32_768, 4096), (512, None), (None, None)):
            pool = m.pool(owners=2)
            if context is not None:
                pool["spec"]["engine"] = {"maxModelLen": context}
            version = env.gw.holder.current.version
            m.write(env.folder, "pool.yaml", [pool])
            eventually(
                lambda v=version: env.gw.holder.current.version > v,  # type: ignore[misc]
                what="catalog reload",
            )
            for path, body, param in cases:
                assert sent_bounds(path, body) == ({param: added} if added else {}), context
                explicit = "max_completion_tokens" if path == "/chat/completions" else param
                assert sent_bounds(path, {**body, explicit: 7}) == {explicit: 7}
    finally:
        stop_env(env)


def test_completions_are_estimated_by_max_tokens_the_bound_vllm_reads_there(
    env: GatewayEnv,
) -> None:
    """vLLM's completions endpoint has no max_completion_tokens: `max_tokens: 120,
    max_completion_tokens: 1` generated 120 tokens on the real engine while the gateway's
    estimate (rate limit, tokens in flight, the agent's count) took 1. Chat reads
    max_completion_tokens over max_tokens, as vLLM does."""

    bounds = {"max_tokens": 120, "max_completion_tokens": 1}

    def estimate_sent(path: str, body: dict[str, object]) -> int:
        resp = httpx.post(
            env.base_url + path,
            json={"model": "acme/support:prod", **bounds, **body},
            headers={"authorization": f"Bearer {KEYS['acme']}"},
        )
        assert resp.status_code == 200, resp.text
        replica = env.replicas[resp.headers["x-replica-id"]]
        return int(replica.request_headers[-1]["x-lorafleet-tokens-estimate"])

    prompt = prompt_tokens(len("hello"))
    assert estimate_sent("/completions", {"prompt": "hello"}) == prompt + 120
    chat_prompt = prompt_tokens(prompt_chars({"messages": MSG_DEFAULT}))
    assert estimate_sent("/chat/completions", {"messages": MSG_DEFAULT}) == chat_prompt + 1
