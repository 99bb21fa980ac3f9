"""Through the gateway to two real agents in front of the session's real vLLM (CPU).

The gateway reads manifests naming demo canary adapters stored in moto's S3; it resolves the
alias, routes to an owner, and on the agent's 404 `adapter_not_registered` posts the record
from its catalog; the agent verifies the files and loads them into vLLM; the canary's marker
comes back through the official openai client.
"""

from __future__ import annotations

import concurrent.futures
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionFunctionToolParam, ChatCompletionMessageParam

from lorafleet_core.planning.placement import ranked
from lorafleet_core.wire.metric_names import (
    GATEWAY_USAGE_COMPLETION_TOKENS,
    GATEWAY_USAGE_PROMPT_TOKENS,
)
from lorafleet_core.wire.openai_stream import WHOLE_PARSE_BYTES
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_demo.assets import DemoAssets
from lorafleet_gateway.runtime import Gateway
from tests.conftest import (
    S3Server,
    VllmServer,
    unique_id,
)
from tests.gateway import manifests as m
from tests.scrape import Scrape
from tests.vllm_stack import vllm_stack
from tests.waiting import eventually

pytestmark = pytest.mark.vllm

MARKERS = {"zebra": "ZEBRA-7", "falcon": "FALCON-3"}
KEY = "lf-acme-vllm-key"


@pytest.fixture
def fleet(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    vllm_server: VllmServer,
    s3_server: S3Server,
    demo_assets: DemoAssets,
    make_record: Callable[..., AdapterRecord],
) -> Iterator[tuple[str, dict[str, AdapterRecord], Path, Gateway]]:
    records = {name: make_record(name, unique_id(f"gw-{name}"), tenant="acme") for name in MARKERS}

    with vllm_stack(vllm_server, s3_server, demo_assets, tmp_path) as stack:
        for rid in ("gw-r0", "gw-r1"):
            stack.agent(rid)
        stack.write_manifests("acme", KEY, records.values(), {"acme/bot:prod": records["zebra"].id})
        stack.write_replicas()
        gw, server = stack.gateway(
            poll_interval_s=0.5,
            catalog_reload_interval_s=0.1,
            routing_policy=getattr(request, "param", "affinity"),
        )
        yield server.url + "/v1", records, stack.folder, gw


def test_openai_client_through_gateway_agent_and_vllm(fleet):
    base_url, records, folder, gw = fleet
    client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=120)
    prompt = "Tell me about the weather today"

    raw = client.completions.with_raw_response.create(
        model="acme/bot:prod", prompt=prompt, max_tokens=12, temperature=0
    )
    first = raw.parse()
    assert raw.headers["x-adapter-id"] == records["zebra"].id
    # First use on that replica: fetched from the object store via the record the gateway sent.
    assert raw.headers["x-adapter-tier"] == "remote"
    assert MARKERS["zebra"] in first.choices[0].text
    assert first.usage is not None
    assert first.usage.completion_tokens > 0

    # Streaming with usage, official client; the adapter is now resident on that replica.
    stream = client.completions.create(
        model="acme/bot:prod",
        prompt=prompt,
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert MARKERS["zebra"] in text
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0

    # Deploy: the alias now points at the falcon adapter; the next request sees it.
    version = gw.holder.current.version
    m.write(folder, "aliases.yaml", [m.alias("acme/bot:prod", records["falcon"].id)])
    eventually(lambda: gw.holder.current.version > version, what="catalog reload")
    raw = client.completions.with_raw_response.create(
        model="acme/bot:prod", prompt=prompt, max_tokens=12, temperature=0
    )
    assert raw.headers["x-adapter-id"] == records["falcon"].id
    assert MARKERS["falcon"] in raw.parse().choices[0].text

    # The adapter id itself is not a model a client may name.
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model=records["falcon"].id, prompt=prompt, max_tokens=4)

    # vLLM's own refusal (more tokens than its context) is the gateway's 400, in OpenAI shape;
    # the fleet serves on, and a NaN never reaches the engine at all.
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(model="acme/bot:prod", prompt=prompt, max_tokens=4000)
    assert refused.value.body is not None
    assert len(refused.value.message) <= 300
    nan = httpx.post(
        f"{base_url}/completions",
        content='{"model":"acme/bot:prod","prompt":"x","max_tokens":4,"temperature":NaN}',
        headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"},
        timeout=30,
    )
    assert (nan.status_code, nan.json()["error"]["code"]) == (400, "invalid_json")
    again = client.completions.create(
        model="acme/bot:prod", prompt=prompt, max_tokens=12, temperature=0
    )
    assert MARKERS["falcon"] in again.choices[0].text


def test_concurrent_first_requests_each_report_their_own_tier_in_gateway_and_agent(fleet):
    base_url, records, _folder, gw = fleet
    client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=120)

    def one(i: int) -> str:
        raw = client.completions.with_raw_response.create(
            model="acme/bot:prod", prompt=f"Hello number {i}", max_tokens=4, stream=True
        )
        list(raw.parse())  # the stream to its end: the gateway records its TTFT by tier
        assert raw.headers["x-adapter-id"] == records["zebra"].id
        return raw.headers["x-adapter-tier"]

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        tiers = Counter(pool.map(one, range(6)))
    # Cold everywhere: the load that fetched it (and any request that waited for it) says
    # remote; never a tier no request was served from.
    assert tiers["remote"] >= 1, tiers
    assert set(tiers) <= {"remote", "ram", "gpu"}, tiers

    # The gateway's TTFT-by-tier and the agents' requests-by-tier count the same requests.
    def gateway_count(tier: str) -> float:
        scrape = Scrape.of_registry(gw.metrics.registry)
        return scrape.value("lorafleet_gateway_ttft_seconds_count", tier=tier)

    agent_metrics = [
        httpx.get(f"{gw.tracker.endpoint(rid).internal_url}/metrics", timeout=10).text
        for rid in ("gw-r0", "gw-r1")
    ]

    def agent_count(tier: str) -> float:
        want = f'lorafleet_agent_requests_total{{tier="{tier}"}} '
        return sum(
            float(line[len(want) :])
            for text in agent_metrics
            for line in text.splitlines()
            if line.startswith(want)
        )

    # Recorded as each stream ends.
    eventually(lambda: sum(gateway_count(t) for t in tiers) >= 6, what="six TTFT observations")
    for tier in ("remote", "disk", "ram", "gpu"):
        assert gateway_count(tier) == agent_count(tier) == tiers[tier], tier


def test_a_non_stream_request_records_its_time_to_first_token_at_the_answer_headers(fleet):
    """A non-stream answer's TTFT is the wait for the replica's answer headers, which vLLM
    sends with the whole answer: recorded under stream="false" (a stream under "true"), no
    longer than the request and no shorter than vLLM's own latency for it; the per-tenant
    TTFT-target counters count only the stream."""
    base_url, _records, _folder, gw = fleet
    client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=120)
    client.completions.create(model="acme/bot:prod", prompt="Warm up", max_tokens=2)  # loaded

    def gateway(name: str, **labels: str) -> float:
        return Scrape.of_registry(gw.metrics.registry).value(name, **labels)

    def engine_latency(replica: str) -> float:
        url = f"{gw.tracker.endpoint(replica).internal_url}/metrics"
        return Scrape.of(url).value("vllm:e2e_request_latency_seconds_sum")

    ttft_count, ttft_sum = (
        "lorafleet_gateway_ttft_seconds_count",
        "lorafleet_gateway_ttft_seconds_sum",
    )
    duration_sum = "lorafleet_gateway_request_duration_seconds_sum"
    streams_before = gateway(ttft_count, stream="true")
    counts_before = gateway(ttft_count, stream="false")
    ttft_before = gateway(ttft_sum, stream="false")
    duration_before = gateway(duration_sum)
    tenant_before = gateway("lorafleet_gateway_tenant_requests_total", tenant="acme")
    engine_before = {rid: engine_latency(rid) for rid in ("gw-r0", "gw-r1")}

    raw = client.completions.with_raw_response.create(
        model="acme/bot:prod", prompt="Tell me a story", max_tokens=16, temperature=0
    )
    assert raw.parse().choices[0].text
    replica = raw.headers["x-replica-id"]
    eventually(lambda: gateway(ttft_count, stream="false") == counts_before + 1, what="TTFT")
    eventually(lambda: gateway(duration_sum) > duration_before, what="the request's duration")
    ttft = gateway(ttft_sum, stream="false") - ttft_before
    engine = eventually(
        lambda: engine_latency(replica) - engine_before[replica], what="vLLM's latency of it"
    )
    print(f"non-stream: gateway TTFT {ttft:.3f} s, vLLM e2e latency {engine:.3f} s")
    assert 0 < engine <= ttft <= gateway(duration_sum) - duration_before
    assert gateway(ttft_count, stream="true") == streams_before
    assert gateway("lorafleet_gateway_tenant_requests_total", tenant="acme") == tenant_before

    list(client.completions.create(model="acme/bot:prod", prompt="Hi", max_tokens=2, stream=True))
    eventually(lambda: gateway(ttft_count, stream="true") == streams_before + 1, what="stream")


def _usage_sample(gw: Gateway, what: str, adapter_id: str) -> float:
    return Scrape.of_registry(gw.metrics.registry).value(
        f"lorafleet_gateway_usage_{what}_total", tenant="acme", adapter=adapter_id
    )


def test_responses_api_streamed_and_not_through_gateway_agent_and_vllm(fleet):
    base_url, records, _folder, gw = fleet
    client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=120)
    zebra = records["zebra"].id
    # Primed at 0 with the catalog, before any request: increase() over a billing window
    # counts the first request too.
    assert (
        gw.metrics.registry.get_sample_value(
            "lorafleet_gateway_usage_requests_total", {"tenant": "acme", "adapter": zebra}
        )
        == 0.0
    )

    raw = client.responses.with_raw_response.create(
        model="acme/bot:prod",
        input="Tell me about the weather today",
        instructions="Answer briefly.",
        max_output_tokens=12,
        temperature=0,
        store=True,  # accepted; nothing is stored (the next request may go elsewhere)
        extra_headers={"x-request-id": "resp-42"},
    )
    answer = raw.parse()
    assert raw.headers["x-adapter-id"] == zebra
    assert raw.headers["x-request-id"] == "resp-42"
    assert raw.headers["x-adapter-tier"] in {"remote", "disk", "ram", "gpu"}
    assert MARKERS["zebra"] in answer.output_text
    assert answer.usage is not None
    assert answer.usage.output_tokens > 0
    billed = [(answer.usage.input_tokens, answer.usage.output_tokens)]

    events = list(
        client.responses.create(
            model="acme/bot:prod",
            input=[{"role": "user", "content": "Tell me about the weather today"}],
            max_output_tokens=12,
            temperature=0,
            stream=True,
        )
    )
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert MARKERS["zebra"] in text
    assert events[-1].type == "response.completed"
    usage = events[-1].response.usage
    assert usage is not None
    assert usage.output_tokens > 0
    billed.append((usage.input_tokens, usage.output_tokens))

    # The meter bills the engine's own figures, Responses vocabulary mapped to prompt/completion
    # (a stream is metered when the gateway's side of it ends, just after the client's).
    def metered() -> tuple[float, float, float]:
        return (
            _usage_sample(gw, "requests", zebra),
            _usage_sample(gw, "prompt_tokens", zebra),
            _usage_sample(gw, "completion_tokens", zebra),
        )

    want = (2.0, float(sum(p for p, _ in billed)), float(sum(c for _, c in billed)))
    eventually(lambda: metered() == want, what=f"usage metered as {want}")

    # What a stateless fleet cannot serve is refused up front, in OpenAI shape.
    with pytest.raises(openai.BadRequestError) as stateful:
        client.responses.create(
            model="acme/bot:prod", input="and then?", previous_response_id=answer.id
        )
    assert (stateful.value.code, stateful.value.param) == (
        "unsupported_parameter",
        "previous_response_id",
    )
    with pytest.raises(openai.NotFoundError) as gone:
        client.responses.retrieve(answer.id)
    assert gone.value.code == "response_not_stored"


def test_chat_parameters_reach_the_engine_unchanged(fleet):
    """stop, seed, response_format and tools are the engine's business: passed through."""
    base_url, _records, _folder, _gw = fleet
    client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=120)
    ask: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say something"}]

    free = client.chat.completions.create(
        model="acme/bot:prod", messages=ask, max_tokens=12, temperature=0
    )
    text = free.choices[0].message.content or ""
    assert MARKERS["zebra"] in text
    stopped = client.chat.completions.create(
        model="acme/bot:prod", messages=ask, max_tokens=12, temperature=0, stop=["-"]
    )
    assert stopped.choices[0].finish_reason == "stop"
    assert stopped.choices[0].message.content == text.split("-")[0]

    def sampled(seed: int) -> str:
        r = client.chat.completions.create(
            model="acme/bot:prod", messages=ask, max_tokens=16, temperature=1.5, seed=seed
        )
        return r.choices[0].message.content or ""

    assert sampled(7) == sampled(7)

    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 8}},
        "required": ["city"],
        "additionalProperties": False,
    }
    shaped = client.chat.completions.create(
        model="acme/bot:prod",
        messages=ask,
        max_tokens=40,
        temperature=0,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "place", "schema": schema, "strict": True},
        },
    )
    # The engine's grammar shaped the answer (unconstrained, this adapter says its marker;
    # the tiny model pads the JSON with whitespace until max_tokens, so it is not parsed).
    content = shaped.choices[0].message.content or ""
    assert content.startswith('{"city"'), content[:40]
    assert MARKERS["zebra"] not in content

    tool: ChatCompletionFunctionToolParam = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 8}},
                "required": ["city"],
            },
        },
    }
    # Tools reach the engine: with tool_choice "none" it accepts them and answers; a forced
    # call needs the pool's engine started with a tool-call parser (model-specific, the
    # pool's spec.engine.toolCallParser; this session's engine has none): the engine refuses,
    # and the client's 400 names the pool setting (not a gateway guess, not a 5xx).
    listed = client.chat.completions.create(
        model="acme/bot:prod", messages=ask, max_tokens=8, tools=[tool], tool_choice="none"
    )
    assert listed.choices[0].message.tool_calls in (None, [])
    with pytest.raises(openai.BadRequestError) as forced:
        client.chat.completions.create(
            model="acme/bot:prod",
            messages=ask,
            max_tokens=8,
            tools=[tool],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
        )
    assert forced.value.code == "tool_choice_unsupported"
    assert "spec.engine.toolCallParser" in forced.value.message


@pytest.mark.parametrize("fleet", ["random", "affinity"], indirect=True)
def test_routing_policy_random_spreads_an_adapter_and_affinity_keeps_it_on_its_owner(fleet):
    base_url, records, _folder, gw = fleet
    policy = gw.settings.routing_policy
    client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=120)
    served: Counter[str] = Counter()
    for i in range(24):  # one at a time: loads are equal, only the policy decides
        raw = client.completions.with_raw_response.create(
            model="acme/bot:prod", prompt=f"Hello number {i}", max_tokens=8, temperature=0
        )
        assert MARKERS["zebra"] in raw.parse().choices[0].text
        served[raw.headers["x-replica-id"]] += 1
    routed = gw.metrics.registry.get_sample_value(
        "lorafleet_gateway_routing_total", {"outcome": "random"}
    )
    if policy == "random":
        # uniform over both healthy replicas (all 24 on one: p = 2 / 2**24)
        assert set(served) == {"gw-r0", "gw-r1"}, served
        assert routed == 24
    else:
        # the adapter's first owner by rendezvous serves every request: one copy stays hot
        owner = ranked(records["zebra"].id, ["gw-r0", "gw-r1"])[0]
        assert served == {owner: 24}, served
        assert not routed


def test_prompt_logprobs_never_reach_the_engine_which_they_kill(fleet):
    """Real vLLM with LoRA: eight concurrent echo + logprobs / prompt_logprobs requests made
    its engine die (EngineDeadError in the LoRA logits path), taking every request on the
    replica with it. The gateway refuses them; the engine serves on."""
    base_url, _records, _folder, _gw = fleet
    client = openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0, timeout=120)
    prompt = "weather " * 200

    def ask(i: int) -> int:
        try:
            if i % 2:  # vLLM turns echo + logprobs into prompt logprobs
                client.completions.create(
                    model="acme/bot:prod", prompt=prompt, max_tokens=8, echo=True, logprobs=20
                )
            else:
                client.completions.create(
                    model="acme/bot:prod",
                    prompt=prompt,
                    max_tokens=8,
                    extra_body={"prompt_logprobs": 20},
                )
        except openai.BadRequestError as exc:
            return exc.status_code
        return 200

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert list(pool.map(ask, range(8))) == [400] * 8
    after = client.completions.create(
        model="acme/bot:prod", prompt="Tell me about the weather today", max_tokens=12,
        temperature=0,
    )  # fmt: skip
    assert MARKERS["zebra"] in after.choices[0].text


def test_a_large_answer_is_metered_by_its_usage_without_being_parsed_whole(fleet):
    """n choices with 20 logprobs per token make vLLM's answer ~0.6 KB per generated token
    (16 MB for n=4 x 4096 tokens on a large pool); past WHOLE_PARSE_BYTES the gateway and the
    agent read its usage from the tail (lorafleet_core.wire.openai_stream.answer_usage). Real
    vLLM's answer must still meter right."""
    base_url, records, _folder, gw = fleet
    resp = httpx.post(
        f"{base_url}/completions",
        json={
            "model": "acme/bot:prod",
            "prompt": "Tell me about the weather today",
            "max_tokens": 200,
            "n": 4,
            "logprobs": 20,
            "ignore_eos": True,
        },
        headers={"authorization": f"Bearer {KEY}"},
        timeout=120,
    )
    assert resp.status_code == 200, resp.text[:300]
    assert len(resp.content) > WHOLE_PARSE_BYTES
    usage = resp.json()["usage"]
    labels = {"tenant": "acme", "adapter": records["zebra"].id}
    registry = gw.metrics.registry
    assert usage["completion_tokens"] == 800
    # Metered once the relay has read the answer's end, which may follow the client's last byte.
    eventually(
        lambda: (
            registry.get_sample_value(GATEWAY_USAGE_PROMPT_TOKENS + "_total", labels)
            == usage["prompt_tokens"]
        ),
        what="the prompt tokens metered",
    )
    completion = registry.get_sample_value(GATEWAY_USAGE_COMPLETION_TOKENS + "_total", labels)
    assert completion == usage["completion_tokens"]
