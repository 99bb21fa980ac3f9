"""Sending the load (I/O): an open-loop trace replay and a closed-loop throughput run.

Every request is a streaming chat completion through the official `openai` client with no
client retries (a 429 or 503 is a measurement, not something to hide). The replay is open loop:
each request leaves at its trace time whatever earlier ones are doing, with at most
`concurrency` in flight (the wait for a slot is recorded, not hidden in TTFT). The throughput
run is closed loop: `concurrency` workers, worker w always asking for model w mod k, so every
batch the engine runs holds the same k distinct adapters.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from lorafleet_loadtest.plan import PlannedRequest, prompt_text
from lorafleet_loadtest.probe.client import make_client, stream_chat
from lorafleet_loadtest.probe.results import RequestResult


@dataclass(frozen=True)
class Target:
    base_url: str  # OpenAI base URL (…/v1)
    api_key: str
    markers: dict[str, str]  # alias -> expected canary marker (where known)
    aliases: tuple[str, ...] = ()  # hottest first, for callers that pick their own models


def _bar(total: int | None, desc: str, progress: bool) -> Any:
    return tqdm(total=total, unit="req", desc=desc, disable=not progress, mininterval=0.5)


async def replay(
    target: Target,
    plan: Sequence[PlannedRequest],
    *,
    concurrency: int,
    timeout_s: float,
    tokens_per_word: float,
    desc: str = "replay",
    progress: bool = True,
) -> tuple[list[RequestResult], float]:
    """Send each planned request at its time; returns the results and the elapsed seconds."""
    client = make_client(target.base_url, target.api_key, timeout_s)
    gate = asyncio.Semaphore(concurrency)
    bar = _bar(len(plan), desc, progress)
    t0 = time.perf_counter()

    async def one(req: PlannedRequest) -> RequestResult:
        await asyncio.sleep(max(0.0, req.at - (time.perf_counter() - t0)))
        async with gate:
            res = await stream_chat(
                client,
                index=req.index,
                alias=req.alias,
                prompt=prompt_text(req.prompt_tokens, req.index, tokens_per_word),
                max_tokens=req.max_tokens,
                marker=target.markers.get(req.alias),
                scheduled_at=req.at,
                run_t0=t0,
            )
        bar.update(1)
        if not res.ok:
            bar.set_postfix_str(f"last error {res.status}", refresh=False)
        return res

    try:
        results = await asyncio.gather(*(one(r) for r in plan))
    finally:
        bar.close()
        await client.close()
    return list(results), time.perf_counter() - t0


async def saturate(
    base_url: str,
    api_key: str,
    models: Sequence[str],
    *,
    concurrency: int,
    duration_s: float,
    max_tokens: int,
    prompt_tokens: int,
    tokens_per_word: float,
    timeout_s: float,
    desc: str = "throughput",
    progress: bool = True,
) -> tuple[list[RequestResult], float]:
    """Closed loop for `duration_s`: worker w sends to models[w % len(models)] back to back.

    Every request asks for exactly `max_tokens` (`ignore_eos`, a vLLM sampling parameter the
    gateway passes through), so throughput compares equal work whatever an adapter would say.
    Workers stop starting requests at the deadline; the elapsed time runs to the last answer.
    """
    client = make_client(base_url, api_key, timeout_s)
    bar = _bar(None, desc, progress)
    results: list[RequestResult] = []
    t0 = time.perf_counter()
    deadline = t0 + duration_s
    extra: dict[str, object] = {"ignore_eos": True}

    async def worker(w: int) -> None:
        model = models[w % len(models)]
        while time.perf_counter() < deadline:
            i = len(results)
            res = await stream_chat(
                client,
                index=i,
                alias=model,
                prompt=prompt_text(prompt_tokens, w, tokens_per_word),
                max_tokens=max_tokens,
                marker=None,
                scheduled_at=time.perf_counter() - t0,
                run_t0=t0,
                extra_body=extra,
            )
            results.append(res)
            bar.update(1)

    try:
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    finally:
        bar.close()
        await client.close()
    return results, time.perf_counter() - t0


async def list_models(base_url: str, api_key: str, timeout_s: float = 30.0) -> list[str]:
    """The model ids the endpoint lists for this key (a gateway: the tenant's aliases)."""
    client = make_client(base_url, api_key, timeout_s)
    try:
        page = await client.models.list()
        return [m.id for m in page.data]
    finally:
        await client.close()


async def base_model(base_url: str, api_key: str, timeout_s: float = 30.0) -> str:
    """The engine's base model: the listed model that is no LoRA adapter (vLLM gives adapters a
    `parent`, the base model none)."""
    client = make_client(base_url, api_key, timeout_s)
    try:
        page = await client.models.list()
    finally:
        await client.close()
    for m in page.data:
        if getattr(m, "parent", None) in (None, ""):
            return m.id
    raise RuntimeError(f"{base_url} lists no base model")


async def warm_up(
    base_url: str,
    api_key: str,
    models: Sequence[str],
    *,
    prompt_tokens: int,
    tokens_per_word: float,
    timeout_s: float,
) -> list[RequestResult]:
    """One short request per model, all at once: adapter loads happen before a timed run."""
    client = make_client(base_url, api_key, timeout_s)
    try:
        return list(
            await asyncio.gather(
                *(
                    stream_chat(
                        client,
                        index=i,
                        alias=m,
                        prompt=prompt_text(prompt_tokens, i, tokens_per_word),
                        max_tokens=2,
                        marker=None,
                        scheduled_at=0.0,
                        run_t0=time.perf_counter(),
                    )
                    for i, m in enumerate(models)
                )
            )
        )
    finally:
        await client.close()
