"""Canary isolation at the design's size: 10,000 mixed requests, 8 canaries, 2 real replicas.

Two replicas (an agent in front of the session's vLLM, another in front of a second vLLM started
here, ~30 s) have 2 GPU and 4 host-RAM LoRA slots each: 4 GPU slots for 8 canaries, so adapters
are loaded and evicted all through the run (asserted from the agents' metrics). The gateway
(files catalog) routes every request by alias; each canary answers its own marker, so a response
with another canary's marker would be another customer's weights. The agents and the gateway run
as their own processes (`python -m ...`, as `lorafleet up` starts them): in one interpreter with
the client the run was GIL-bound at ~19 req/s (docs/reference/verification.md).
Asserted: zero foreign markers, zero responses without their own marker, and the answering
adapter id (`x-adapter-id`) is the alias's adapter every time. The run prints requests/s.

Both engines run the model in vLLM's engine-core process (`vllm_env` in tests/conftest.py):
the same scheduler, multi-LoRA batching over 2 GPU slots, host-RAM cache and runtime
load/unload as with vLLM's default worker process, without the per-step hand-off between two
processes that made this run ~14 minutes instead of ~4 (docs/design/0045).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest

from lorafleet_core.api.models import ALL_TARGET_MODULES
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_demo.assets import DemoAssets, ensure_demo_assets
from lorafleet_gateway.settings import GatewaySettings
from tests.conftest import (
    SPARE_CPU,
    TEST_CACHE,
    TEST_DATA_TOKEN,
    TEST_INTERNAL_TOKEN,
    S3Server,
    VllmServer,
    await_vllm,
    free_port,
    session_agent_settings,
    spawn_vllm,
    stop_vllm,
    unique_id,
)
from tests.gateway import manifests as m
from tests.scrape import Scrape
from tests.verification.canaries import CANARY_MARKERS
from tests.verification.fleet_processes import child_process
from tests.waiting import eventually

pytestmark = pytest.mark.vllm

# The design's size; LORAFLEET_ISOLATION_REQUESTS shrinks it for a quick local look only.
REQUESTS = int(os.environ.get("LORAFLEET_ISOLATION_REQUESTS", "10000"))
CONCURRENCY = 32
KEY = "lf-isolation-key"
HEALTHY = "lorafleet_gateway_healthy_replicas"
TENANT = "iso"
PROMPTS = (
    "Tell me about the weather today",
    "Hello! What is your refund policy?",
    "Write a poem about coffee",
    "Why do cats like gardens?",
    "List the planets please",
)


@dataclass
class IsolationFleet:
    base_url: str
    aliases: dict[str, str]  # alias -> adapter id it points at
    markers: dict[str, str]  # alias -> its canary's marker
    agents: dict[str, str]  # replica id -> its agent's metrics URL
    max_tokens: int
    logs: Path  # the gateway's, agents' and second vLLM's logs: where an error is explained


def marker_tokens(base: Path) -> int:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    return max(len(tok(m, add_special_tokens=False).input_ids) for m in CANARY_MARKERS.values())


@pytest.fixture(scope="module")
def isolation_fleet(
    tmp_path_factory: pytest.TempPathFactory, vllm_server: VllmServer, s3_server: S3Server
) -> Iterator[IsolationFleet]:
    tmp = tmp_path_factory.mktemp("isolation")
    # On its own core: the two engines' decoding runs in parallel (tests/conftest.py). Spawned
    # first: it starts (~30 s) while the five extra canaries train on the session's base.
    second = spawn_vllm(vllm_server.base_model, tmp / "vllm-r1.log", cpus=SPARE_CPU)
    with contextlib.ExitStack() as stack:
        stack.callback(stop_vllm, second)
        assets = ensure_demo_assets(TEST_CACHE, CANARY_MARKERS, print)
        assert assets.base_model == vllm_server.base_model  # both engines serve this base
        await_vllm(second)
        yield from _isolation_fleet(tmp, assets, vllm_server, second, s3_server)


def _isolation_fleet(
    tmp: Path, assets: DemoAssets, vllm_server: VllmServer, second: VllmServer, s3_server: S3Server
) -> Iterator[IsolationFleet]:
    records = {
        name: AdapterRecord(
            id=unique_id(f"iso-{name}"),
            tenant=TENANT,
            base_model_hash=assets.base_model_hash,
            rank=assets.ranks[name],
            alpha=float(2 * assets.ranks[name]),
            target_modules=tuple(sorted(ALL_TARGET_MODULES)),
            weights_uri=s3_server.upload(folder, f"iso/{name}"),
            checksum=assets.checksums[name],
        )
        for name, folder in assets.adapters.items()
    }
    aliases = {f"{TENANT}/{name}:prod": r.id for name, r in records.items()}
    markers = {f"{TENANT}/{name}:prod": CANARY_MARKERS[name] for name in records}
    with contextlib.ExitStack() as stack:
        agents: dict[str, str] = {}  # replica id -> its agent's metrics URL
        replicas = []
        for i, vllm in enumerate((vllm_server, second)):
            settings = session_agent_settings(
                vllm,
                s3_server,
                assets,
                tmp / f"cache-{i}",
                replica_id=f"iso-r{i}",
                data_port=free_port(),
                internal_port=free_port(),
                unload_unknown_on_start=False,  # the session's vLLM is shared
            )
            internal = f"http://127.0.0.1:{settings.internal_port}"
            stack.enter_context(
                child_process(
                    f"agent iso-r{i}",
                    "lorafleet_agent",
                    settings,
                    tmp / f"agent-{i}.log",
                    f"{internal}/readyz",
                )
            )
            agents[settings.replica_id] = f"{internal}/metrics"
            data = f"http://127.0.0.1:{settings.data_port}"
            replicas.append({"id": settings.replica_id, "dataUrl": data, "internalUrl": internal})
        folder = tmp / "manifests"
        m.write_fleet(
            folder, TENANT, KEY, records.values(), aliases,
            requests_per_second=100_000, tokens_per_minute=10**9,
        )  # fmt: skip
        m.write(folder, "replicas.yaml", [{"replicas": replicas}])
        gs = GatewaySettings(
            host="127.0.0.1",
            port=free_port(),
            internal_port=free_port(),
            manifests_dir=folder,
            # A state poll every 2 s (a replica ages out after 4 s): under the agents' 5 s
            # keep-alive, or each poll races the server closing its idle connection.
            poll_interval_s=2.0,
            replica_token=TEST_INTERNAL_TOKEN,
            replica_data_token=TEST_DATA_TOKEN,
            catalog_reload_interval_s=0.1,
        )
        gw_internal = f"http://127.0.0.1:{gs.internal_port}"
        stack.enter_context(
            child_process(
                "gateway", "lorafleet_gateway", gs, tmp / "gateway.log", f"{gw_internal}/readyz"
            )
        )
        # Start only once both replicas are routable.
        eventually(
            lambda: Scrape.of(f"{gw_internal}/metrics").value(HEALTHY) == 2,
            within_s=60,
            what="2 replicas",
        )
        yield IsolationFleet(
            f"http://127.0.0.1:{gs.port}/v1",
            aliases,
            markers,
            agents,
            marker_tokens(assets.base_model) + 2,
            tmp,
        )


@dataclass
class Outcome:
    alias: str
    adapter_id: str | None
    replica: str | None
    text: str
    error: str | None = None
    retries: int = 0


def cause_chain(exc: BaseException) -> str:
    """The error with what caused it. An APIConnectionError's own text is only "Connection
    error."; the transport's exception under it (a refused connect, a reset, a server that
    closed a kept-alive connection before answering) says which side dropped what."""
    links: list[str] = []
    cause: BaseException | None = exc
    while cause is not None and len(links) < 4:
        links.append(repr(cause)[:200])
        cause = cause.__cause__ or cause.__context__
    return " <- ".join(links)


async def one(client: openai.AsyncOpenAI, alias: str, prompt: str, max_tokens: int) -> Outcome:
    # A 503 "no replica available, retry" is the gateway refusing honestly (a replica's state
    # poll ran late on this loaded machine), not a wrong answer: retry it like a client would,
    # at most 3 times, and report how often that happened.
    for attempt in range(4):
        try:
            raw = await client.chat.completions.with_raw_response.create(
                model=alias,
                messages=[{"role": "user", "content": prompt}],
                max_tokens=max_tokens,
                temperature=0,
            )
        except openai.InternalServerError as exc:
            if exc.status_code == 503 and attempt < 3:
                continue
            return Outcome(alias, None, None, "", error=cause_chain(exc), retries=attempt)
        except openai.APIError as exc:
            return Outcome(alias, None, None, "", error=cause_chain(exc), retries=attempt)
        resp = raw.parse()
        return Outcome(
            alias,
            raw.headers.get("x-adapter-id"),
            raw.headers.get("x-replica-id"),
            resp.choices[0].message.content or "",
            retries=attempt,
        )
    raise AssertionError("unreachable")


async def mixed_run(fleet: IsolationFleet, n: int) -> list[Outcome]:
    rng = random.Random(14)  # a reproducible mix
    plan = [(rng.choice(list(fleet.aliases)), rng.choice(PROMPTS)) for _ in range(n)]
    queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    for item in plan:
        queue.put_nowait(item)
    results: list[Outcome] = []
    async with openai.AsyncOpenAI(
        base_url=fleet.base_url, api_key=KEY, timeout=120, max_retries=0
    ) as client:

        async def worker() -> None:
            while not queue.empty():
                alias, prompt = queue.get_nowait()
                results.append(await one(client, alias, prompt, fleet.max_tokens))

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return results


def metric_total(metrics_url: str, name: str, label: str) -> dict[str, float]:
    """label value -> count of one labelled counter, scraped from an agent's /metrics."""
    return Scrape.of(metrics_url).by_label(f"{name}_total", label)


# The run alone is ~4 min at ~40 req/s on the 2-core machine (~14 min with vLLM's worker
# process), plus two vLLM starts when this module runs by itself: room over the suite's 600 s
# per test (setup included) for a machine busy with other work.
@pytest.mark.timeout(1500)
def test_ten_thousand_mixed_requests_never_answer_with_another_canary(
    isolation_fleet: IsolationFleet,
):
    fleet = isolation_fleet
    t0 = time.perf_counter()
    results = asyncio.run(mixed_run(fleet, REQUESTS))
    elapsed = time.perf_counter() - t0

    errors = [r for r in results if r.error]
    foreign = [
        r
        for r in results
        if any(mk in r.text for a, mk in fleet.markers.items() if mk != fleet.markers[r.alias])
    ]
    missing = [r for r in results if not r.error and fleet.markers[r.alias] not in r.text]
    wrong_id = [r for r in results if not r.error and r.adapter_id != fleet.aliases[r.alias]]
    loads = [
        metric_total(u, "lorafleet_agent_adapter_loads", "source_tier")
        for u in fleet.agents.values()
    ]
    evictions = [
        metric_total(u, "lorafleet_agent_adapter_evictions", "tier") for u in fleet.agents.values()
    ]
    replicas = Counter(r.replica for r in results)
    print(
        f"\n{len(results)} requests over {len(fleet.aliases)} canaries and {len(fleet.agents)} "
        f"replicas (2 GPU slots each) in {elapsed:.1f} s = {len(results) / elapsed:.1f} req/s; "
        f"by replica {dict(replicas)}; 503s retried {sum(r.retries for r in results)}, "
        f"errors {len(errors)}, foreign markers {len(foreign)}, "
        f"missing own marker {len(missing)}, wrong adapter id {len(wrong_id)}"
    )
    for replica_id, ld, ev in zip(fleet.agents, loads, evictions, strict=True):
        print(f"  {replica_id}: loads by source tier {ld}, evictions {ev}")
    assert len(results) == REQUESTS
    assert errors == [], (errors[:3], f"logs in {fleet.logs}")
    assert foreign == [], foreign[:3]
    assert missing == [], missing[:3]
    assert wrong_id == [], wrong_id[:3]
    assert sum(sum(ev.values()) for ev in evictions) > 0, "no adapter was ever evicted"
    assert sum(sum(ld.values()) for ld in loads) > len(fleet.aliases), "no adapter was reloaded"
    assert len(replicas) == 2, replicas
