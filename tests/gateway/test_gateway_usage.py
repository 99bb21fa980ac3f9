"""Usage metering: the per-tenant, per-adapter counters equal what the responses said."""

from __future__ import annotations

import httpx
from openai.types.chat import ChatCompletionMessageParam
from prometheus_client.parser import text_string_to_metric_families

from lorafleet_core.planning.tokens import prompt_chars, prompt_tokens
from tests.gateway.conftest import MSG_DEFAULT, GatewayEnv
from tests.waiting import eventually


def usage_counters(env: GatewayEnv) -> dict[tuple[str, str, str], float]:
    """(metric, tenant, adapter) -> value, scraped from the internal /metrics over HTTP."""
    text = httpx.get(f"{env.internal_url}/metrics").text
    out: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("lorafleet_gateway_usage_"):
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                key = (family.name, sample.labels["tenant"], sample.labels["adapter"])
                out[key] = sample.value
    return out


def test_usage_counters_equal_the_sum_of_the_responses_usage(env: GatewayEnv) -> None:
    primed = usage_counters(env)
    acme, globex = env.client("acme"), env.client("globex")
    expected: dict[tuple[str, str], list[int]] = {}  # (tenant, adapter) -> requests, p, c

    def add(tenant: str, adapter: str, prompt: int, completion: int) -> None:
        row = expected.setdefault((tenant, adapter), [0, 0, 0])
        row[0] += 1
        row[1] += prompt
        row[2] += completion

    for _ in range(3):
        r = acme.chat.completions.create(model="acme/support:prod", messages=MSG_DEFAULT)
        assert r.usage is not None
        add("acme", "acme-support-v1", r.usage.prompt_tokens, r.usage.completion_tokens)
    c = acme.completions.create(model="acme/support:canary", prompt="hi there")
    assert c.usage is not None
    add("acme", "acme-support-v2", c.usage.prompt_tokens, c.usage.completion_tokens)
    for _ in range(2):  # streamed, with usage asked for
        chunks = list(
            globex.chat.completions.create(
                model="globex/bot:prod",
                messages=MSG_DEFAULT,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        usage = chunks[-1].usage
        assert usage is not None
        add("globex", "globex-bot-v1", usage.prompt_tokens, usage.completion_tokens)
    # streamed without asking for usage: the client never sees it, the meter still does
    list(acme.chat.completions.create(model="acme/support:prod", messages=MSG_DEFAULT, stream=True))
    fake = env.replicas["replica-0"]
    add("acme", "acme-support-v1", 7, fake.n_tokens)  # the stand-in's usage
    # an aborted stream: the client reads two tokens and leaves; the replica sends no more
    for replica in env.replicas.values():
        replica.stall_after_chunks = 2
    aborted: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "please stop half way through"}
    ]
    stream = acme.chat.completions.create(model="acme/support:prod", messages=aborted, stream=True)
    got = [next(stream), next(stream)]
    assert all(ch.choices[0].delta.content for ch in got)
    stream.close()
    chars = prompt_chars({"messages": list(aborted)})
    add("acme", "acme-support-v1", prompt_tokens(chars), 2)

    def as_counters() -> dict[tuple[str, str, str], float]:
        out = {}
        for (tenant, adapter), (n, p, c) in expected.items():
            out[("lorafleet_gateway_usage_requests", tenant, adapter)] = float(n)
            out[("lorafleet_gateway_usage_prompt_tokens", tenant, adapter)] = float(p)
            out[("lorafleet_gateway_usage_completion_tokens", tenant, adapter)] = float(c)
        return out

    # the aborted stream is metered when the gateway notices the client left
    eventually(lambda: usage_counters(env) == {**primed, **as_counters()}, what="usage counters")


def test_refused_requests_are_not_metered(env: GatewayEnv) -> None:
    r = httpx.post(
        f"{env.base_url}/chat/completions",
        json={"model": "acme/nope:x", "messages": MSG_DEFAULT},
        headers={"authorization": "Bearer lf-acme-key-0001"},
    )
    assert r.status_code == 404
    counters = usage_counters(env)
    assert set(counters.values()) == {0.0}
    # Every pair a request may be billed under is exported at 0 before its first request
    # (increase() takes a series' first sample as its baseline), and nothing else is.
    pairs = set(env.gw.holder.current.served_pairs())
    assert {(tenant, adapter) for _, tenant, adapter in counters} == pairs
