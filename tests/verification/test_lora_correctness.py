"""Unmerged multi-LoRA serving in real vLLM is exact: the same logprobs as the merged model.

Three random adapters (ranks 4/8/16; q+v, all attention, all seven projections) are registered
on the session's vLLM under fresh names and asked for greedy completions with logprobs; each
completion is rescored by transformers on the PEFT-merged model (`merge_and_unload`). fp32 on
both sides; the tolerance is 1e-4 (measured differences are ~1e-6; an adapter's effect on these
logprobs is >0.1, so a missing or wrong adapter fails by orders of magnitude).

The batch test: at temperature 0 a request yields the same tokens alone and inside a batch of
32 (31 concurrent requests for the other adapters and the base model).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from lorafleet_cli.demo_assets import DemoAssets
from tests.conftest import VllmServer, start_vllm, stop_vllm, unique_id
from tests.verification.lora_math import SPECS, merged_logprobs, save_merged, write_random_adapter

pytestmark = pytest.mark.vllm

TOLERANCE = 1e-4
MAX_TOKENS = 8
TEXTS = (
    "Tell me about the weather today",
    "Please explain how rivers form in the mountains",
    "Write a poem about coffee and books",
    "Hello! What is your refund policy?",
)


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[float]


@dataclass
class Registered:
    names: dict[str, str]  # spec name -> name registered on vLLM
    folders: dict[str, Path]
    prompts: list[list[int]]


def prompt_ids(base: Path) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    return [list(tok(t, add_special_tokens=False).input_ids) for t in TEXTS]


def parse(choice: Any) -> Completion:
    # return_tokens_as_token_ids: tokens come back as "token_id:N", exact ids, no decoding.
    lp = choice.logprobs
    return Completion([int(t.split(":")[1]) for t in lp.tokens], list(lp.token_logprobs))


async def complete(client: openai.AsyncOpenAI, model: str, prompt: list[int]) -> Completion:
    resp = await client.completions.create(
        model=model,
        prompt=prompt,
        max_tokens=MAX_TOKENS,
        temperature=0,
        logprobs=1,
        extra_body={"return_tokens_as_token_ids": True, "ignore_eos": True},
    )
    return parse(resp.choices[0])


@pytest.fixture(scope="module")
def registered(
    vllm_server: VllmServer, demo_assets: DemoAssets, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Registered]:
    tmp = tmp_path_factory.mktemp("lora-correctness")
    names: dict[str, str] = {}
    folders: dict[str, Path] = {}
    for spec in SPECS:
        folders[spec.name] = write_random_adapter(demo_assets.base_model, spec, tmp / spec.name)
        names[spec.name] = unique_id(f"verify-{spec.name}")
        r = httpx.post(
            f"{vllm_server.url}/v1/load_lora_adapter",
            json={"lora_name": names[spec.name], "lora_path": str(folders[spec.name])},
            timeout=60,
        )
        assert r.status_code == 200, r.text
    try:
        yield Registered(names, folders, prompt_ids(demo_assets.base_model))
    finally:
        for name in names.values():
            httpx.post(
                f"{vllm_server.url}/v1/unload_lora_adapter", json={"lora_name": name}, timeout=60
            )


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_unmerged_vllm_logprobs_match_the_peft_merged_model(
    registered: Registered, vllm_server: VllmServer, demo_assets: DemoAssets
):
    async def serve(model: str) -> list[Completion]:
        async with openai.AsyncOpenAI(base_url=f"{vllm_server.url}/v1", api_key="x") as client:
            return [await complete(client, model, p) for p in registered.prompts]

    worst_overall = 0.0
    for spec in SPECS:
        served = run(serve(registered.names[spec.name]))
        sequences = [(p, c.token_ids) for p, c in zip(registered.prompts, served, strict=True)]
        merged = merged_logprobs(demo_assets.base_model, registered.folders[spec.name], sequences)
        base = merged_logprobs(demo_assets.base_model, None, sequences)
        diffs = [
            abs(v - m)
            for c, ms in zip(served, merged, strict=True)
            for v, m in zip(c.logprobs, ms, strict=True)
        ]
        effect = max(
            abs(m - b)
            for ms, bs in zip(merged, base, strict=True)
            for m, b in zip(ms, bs, strict=True)
        )
        worst = max(diffs)
        worst_overall = max(worst_overall, worst)
        print(
            f"{spec.name} (rank {spec.rank}, {'+'.join(spec.targets)}): "
            f"{len(diffs)} logprobs, max |vLLM unmerged - merged| = {worst:.2e}, "
            f"adapter effect vs base = {effect:.2f}"
        )
        assert effect > 100 * TOLERANCE, f"{spec.name} barely changes the model: {effect}"
        assert worst < TOLERANCE, f"{spec.name}: max |delta logprob| {worst} >= {TOLERANCE}"
    print(f"max |delta logprob| over {len(SPECS)} adapters: {worst_overall:.2e} (tol {TOLERANCE})")


def test_the_merged_model_served_by_vllm_matches_the_unmerged_adapter(
    registered: Registered, vllm_server: VllmServer, demo_assets: DemoAssets, tmp_path: Path
):
    # One extra vLLM (~30 s): the widest adapter, merged, served as a plain model.
    spec = SPECS[-1]
    merged_dir = save_merged(demo_assets.base_model, registered.folders[spec.name], tmp_path / "m")
    merged_server = start_vllm(merged_dir, tmp_path / "merged-vllm.log")
    try:

        async def serve(url: str, model: str) -> list[Completion]:
            async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x") as client:
                return [await complete(client, model, p) for p in registered.prompts]

        unmerged = run(serve(vllm_server.url, registered.names[spec.name]))
        merged = run(serve(merged_server.url, merged_server.served_name))
    finally:
        stop_vllm(merged_server)
    same_tokens = all(u.token_ids == m.token_ids for u, m in zip(unmerged, merged, strict=True))
    diff = max(
        abs(a - b)
        for u, m in zip(unmerged, merged, strict=True)
        for a, b in zip(u.logprobs, m.logprobs, strict=True)
    )
    print(f"{spec.name}: vLLM unmerged vs vLLM serving the merged model: tokens equal="
          f"{same_tokens}, max |delta logprob| = {diff:.2e}")  # fmt: skip
    assert same_tokens
    assert diff < TOLERANCE


def test_a_greedy_request_is_the_same_alone_and_inside_a_batch_of_32(
    registered: Registered, vllm_server: VllmServer
):
    target = registered.names[SPECS[0].name]
    others = [registered.names[s.name] for s in SPECS[1:]] + [vllm_server.served_name]
    prompt = registered.prompts[0]

    async def scenario() -> tuple[Completion, Completion, int]:
        async with openai.AsyncOpenAI(base_url=f"{vllm_server.url}/v1", api_key="x") as client:
            alone = await complete(client, target, prompt)
            crowd = [
                complete(client, others[i % len(others)], registered.prompts[i % 4])
                for i in range(31)
            ]
            results = await asyncio.gather(complete(client, target, prompt), *crowd)
            return alone, results[0], len(results)

    alone, batched, size = run(scenario())
    diff = max(abs(a - b) for a, b in zip(alone.logprobs, batched.logprobs, strict=True))
    print(f"alone vs in a batch of {size}: tokens equal={alone.token_ids == batched.token_ids}, "
          f"max |delta logprob| = {diff:.2e}")  # fmt: skip
    assert size == 32
    assert batched.token_ids == alone.token_ids
    assert diff < TOLERANCE
