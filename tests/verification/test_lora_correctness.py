"""Unmerged multi-LoRA serving in real vLLM is exact: the same logprobs as the merged model.

Three random adapters (ranks 4/8/16; q+v, all attention, all seven projections) are registered
on the session's vLLM under fresh names and asked for greedy completions with logprobs; each
completion is rescored by transformers on the PEFT-merged model (`merge_and_unload`). fp32 on
both sides; the tolerance is 1e-4 (measured differences are ~1e-6; an adapter's effect on these
logprobs is >0.1, so a missing or wrong adapter fails by orders of magnitude).

The merged-pool test: the product's merge step merges the widest adapter, a merged-pool
replica (agent in merged mode + vLLM without LoRA, serving it under the adapter's id) answers
with the same tokens and logprobs within the same tolerance as the unmerged adapter.

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

from lorafleet_agent.merge_job import run_merge
from lorafleet_agent.merged_model import ensure_merged
from lorafleet_agent.object_store import ObjectStore, ObjectStoreConfig
from lorafleet_core.storage.adapter_files import adapter_checksum
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_demo.assets import DemoAssets
from tests.agent_thread import agent_in_thread
from tests.conftest import (
    DATA_HEADERS,
    SPARE_CPU,
    TEST_DATA_TOKEN,
    S3Server,
    VllmServer,
    session_agent_settings,
    start_vllm,
    stop_vllm,
    unique_id,
)
from tests.verification.lora_math import SPECS, merged_logprobs, write_random_adapter

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


def test_a_merged_pool_replica_serves_what_the_unmerged_adapter_serves(
    registered: Registered,
    vllm_server: VllmServer,
    demo_assets: DemoAssets,
    s3_server: S3Server,
    tmp_path: Path,
):
    """The product's merged path end to end: the merge step (lorafleet_agent.merge_job, PEFT
    merge_and_unload) stores the widest adapter merged; a merged-pool replica fetches and
    verifies it, runs vLLM without LoRA under the adapter's id and its agent in merged mode;
    through the agent it gives the same tokens at temperature 0 and logprobs within TOLERANCE
    of the unmerged adapter on the session's multi-LoRA vLLM."""
    spec = SPECS[-1]
    adapter_id = registered.names[spec.name]
    merged_dir, checksum = merge_via_store(
        demo_assets, s3_server, registered.folders[spec.name], adapter_id, spec.rank, tmp_path
    )
    # One extra vLLM (~30 s): the merged model as a plain model, named as the adapter.
    merged_server = start_vllm(
        merged_dir, tmp_path / "merged-vllm.log", served_name=adapter_id, lora=False,
        cpus=SPARE_CPU,
    )  # fmt: skip
    try:
        settings = session_agent_settings(
            merged_server,
            s3_server,
            demo_assets,
            tmp_path / "cache",
            merged_adapter_id=adapter_id,
            merged_checksum=checksum,
            merged_model_dir=merged_dir,
        )
        with agent_in_thread(settings) as agent:

            async def serve(url: str, model: str) -> list[Completion]:
                # vLLM has no key here; the agent requires its data credential.
                async with openai.AsyncOpenAI(
                    base_url=f"{url}/v1", api_key=TEST_DATA_TOKEN
                ) as client:
                    return [await complete(client, model, p) for p in registered.prompts]

            unmerged = run(serve(vllm_server.url, adapter_id))
            merged = run(serve(agent.data_url, adapter_id))
            raw = httpx.post(
                f"{agent.data_url}/v1/completions",
                json={"model": adapter_id, "prompt": "hi", "max_tokens": 1},
                headers=DATA_HEADERS,
                timeout=30,
            )
            other = httpx.post(
                f"{agent.data_url}/v1/completions",
                json={"model": registered.names[SPECS[0].name], "prompt": "hi", "max_tokens": 1},
                headers=DATA_HEADERS,
                timeout=30,
            )
            state = httpx.get(f"{agent.internal_url}/internal/replicas/r0/state", timeout=10)
    finally:
        stop_vllm(merged_server)
    same_tokens = all(u.token_ids == m.token_ids for u, m in zip(unmerged, merged, strict=True))
    diff = max(
        abs(a - b)
        for u, m in zip(unmerged, merged, strict=True)
        for a, b in zip(u.logprobs, m.logprobs, strict=True)
    )
    print(f"{spec.name}: vLLM unmerged vs a merged-pool replica (agent + vLLM without LoRA): "
          f"tokens equal={same_tokens}, max |delta logprob| = {diff:.2e}")  # fmt: skip
    assert same_tokens
    assert diff < TOLERANCE
    assert raw.status_code == 200, raw.text
    assert raw.headers["x-adapter-id"] == adapter_id
    assert raw.headers["x-adapter-tier"] == "gpu"
    assert other.status_code == 404  # LoRA is off: no other adapter is served here
    assert state.json()["merged"] == {"adapter_id": adapter_id, "checksum": checksum}
    assert adapter_id in state.json()["gpu_adapters"]


def merge_via_store(
    assets: DemoAssets, s3: S3Server, adapter: Path, adapter_id: str, rank: int, tmp: Path
) -> tuple[Path, str]:
    """Upload the adapter, merge it with the merge step, fetch the result as a replica does."""
    uri = s3.upload(adapter, f"verify/{adapter_id}")
    record = AdapterRecord(
        id=adapter_id,
        tenant="verify",
        base_model_hash=assets.base_model_hash,
        rank=rank,
        alpha=float(2 * rank),
        target_modules=tuple(sorted(SPECS[-1].targets)),
        weights_uri=uri,
        checksum=adapter_checksum(adapter),
    )
    store = ObjectStore(
        ObjectStoreConfig(s3.endpoint_url, s3.region, s3.access_key_id, s3.secret_access_key)
    )
    result = run_merge(
        record,
        base_model=str(assets.base_model),
        pool_base_hash=assets.base_model_hash,
        store_prefix=f"s3://{s3.bucket}/lorafleet-merged",
        store=store,
        work_dir=tmp / "merge",
    )
    folder = ensure_merged(store, result.uri, result.checksum, tmp / "replica" / "merged")
    return folder, result.checksum


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
