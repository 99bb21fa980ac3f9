"""Routing across pools through the gateway to real agents in front of the session's real vLLM.

Two replicas: `pools-shared` in the shared pool and `pools-hot` in a merged pool for the zebra
canary adapter. Both are real agents on the session's one vLLM (CPU). The merged-weights
serving itself (PEFT merge, vLLM without LoRA) is the merged branch's part; here the merged
replica is a real agent serving the adapter with LoRA whose /state is passed through a
loopback HTTP hop that adds the `merged` field a merged replica reports ({adapter_id,
checksum}). What is under test is the gateway: it must send the adapter there only while the
pool's `status.merge` is Ready, to the shared pool before that and after the merge failed,
and the canary's marker must come back from whichever replica served it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI, Request
from starlette.responses import Response

from lorafleet_core.wire.records import AdapterRecord
from lorafleet_demo.assets import DemoAssets
from lorafleet_gateway.runtime import Gateway
from tests.conftest import INTERNAL_HEADERS, S3Server, VllmServer, unique_id
from tests.gateway import manifests as m
from tests.gateway.servers import ServerThread
from tests.vllm_stack import vllm_stack
from tests.waiting import eventually

pytestmark = pytest.mark.vllm

KEY = "lf-acme-pools-key"
MERGED_SUM = m.checksum("zebra merged into the base")


def merged_state_hop(agent_internal: str, record_id: str) -> FastAPI:
    """The agent's internal port, with `merged` added to its /state (see the module doc)."""
    app = FastAPI()

    @app.api_route("/{path:path}", methods=["GET", "POST"])
    async def relay(path: str, request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() == "authorization"}
        async with httpx.AsyncClient(timeout=30) as client:
            up = await client.request(
                request.method,
                f"{agent_internal}/{path}",
                content=await request.body(),
                headers={**headers, "content-type": "application/json"},
            )
        if request.method == "GET" and path.endswith("/state") and up.status_code == 200:
            body = up.json() | {"merged": {"adapter_id": record_id, "checksum": MERGED_SUM}}
            return Response(
                httpx.Response(200, json=body).content, 200, media_type="application/json"
            )
        return Response(up.content, up.status_code, media_type=up.headers.get("content-type"))

    return app


@pytest.fixture
def pools_fleet(
    tmp_path: Path,
    vllm_server: VllmServer,
    s3_server: S3Server,
    demo_assets: DemoAssets,
    make_record: Callable[..., AdapterRecord],
) -> Iterator[tuple[openai.OpenAI, AdapterRecord, Path, Gateway, str]]:
    record = make_record("zebra", unique_id("pools-zebra"), tenant="acme")
    with vllm_stack(vllm_server, s3_server, demo_assets, tmp_path) as stack:
        stack.agent("pools-shared")
        hot = stack.agent("pools-hot")
        hop = stack.exits.enter_context(ServerThread(merged_state_hop(hot.internal_url, record.id)))
        stack.write_manifests("acme", KEY, [record], {"acme/bot:prod": record.id})
        write_pools(stack.folder, record, {"phase": "Merging"})
        stack.write_replicas([
            stack.row("pools-shared", pool="default"),
            stack.row("pools-hot", internalUrl=hop.url, pool="acme-hot"),
        ])  # fmt: skip
        gw, server = stack.gateway(
            pool="default", poll_interval_s=0.3, catalog_reload_interval_s=0.1
        )
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=120)
        yield client, record, stack.folder, gw, hot.internal_url


def write_pools(folder: Path, record: AdapterRecord, merge: dict[str, Any]) -> None:
    """The shared pool and the merged pool of the demo base model, the merge in `merge`."""
    base = record.base_model_hash
    merged = m.pool("acme-hot", merged=record.id, merge=merge, base_hash=base)
    shared = m.pool("default", base_hash=base, max_rank=64)
    m.write(folder, "pools.yaml", [shared, merged])


def ask(client: openai.OpenAI) -> tuple[str, str, str]:
    raw = client.completions.with_raw_response.create(
        model="acme/bot:prod",
        prompt="Tell me about the weather today",
        max_tokens=12,
        temperature=0,
    )
    return raw.headers["x-replica-id"], raw.headers["x-adapter-tier"], raw.parse().choices[0].text


def test_adapter_goes_to_the_merged_pool_when_ready_and_back_to_shared_after_a_failure(
    pools_fleet,
):
    client, record, folder, gw, hot_internal = pools_fleet
    eventually(lambda: len(gw.tracker.views()) == 2, what="both replicas polled", within_s=60)
    assert gw.holder.current.pools_for(record.id).shared == "default"

    # Before the merge is Ready: the shared pool serves (loading the adapter on demand).
    replica, tier, text = ask(client)
    assert (replica, "ZEBRA-7" in text) == ("pools-shared", True)
    assert tier != "merged"

    # The merged replica holds the adapter's weights (here: registered through its agent).
    loaded = httpx.post(
        f"{hot_internal}/internal/replicas/pools-hot/adapters/{record.id}/load",
        json={"record": record.model_dump(mode="json"), "gpu": False},
        headers=INTERNAL_HEADERS,
        timeout=120,
    )
    assert loaded.status_code == 200, loaded.text

    version = gw.holder.current.version
    write_pools(
        folder,
        record,
        {
            "phase": "Ready",
            "adapterId": record.id,
            "adapterChecksum": record.checksum,
            "checksum": MERGED_SUM,
        },
    )
    eventually(lambda: gw.holder.current.version > version, what="catalog reload")
    for _ in range(3):
        replica, tier, text = ask(client)
        assert (replica, tier) == ("pools-hot", "merged")
        assert "ZEBRA-7" in text

    version = gw.holder.current.version
    write_pools(folder, record, {"phase": "Failed", "message": "merge job failed"})
    eventually(lambda: gw.holder.current.version > version, what="catalog reload")
    replica, tier, text = ask(client)
    assert (replica, "ZEBRA-7" in text) == ("pools-shared", True)
    assert tier != "merged"
