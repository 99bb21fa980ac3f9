"""The object store down, seen through the gateway: two real agents in front of the session's
real vLLM fetch adapters from a moto server that the test stops and starts again.

A cold adapter (on no replica) cannot be served while the store is down; the client is told
exactly that (503 `store_unavailable`, Retry-After), not a generic `upstream_unavailable`,
while adapters already on a replica keep serving; once the store is back the same request
serves, fetched remotely.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from lorafleet_agent.server import agent_in_thread
from lorafleet_cli.demo_assets import DemoAssets
from lorafleet_core.records import AdapterRecord
from lorafleet_gateway.catalog import CatalogHolder
from lorafleet_gateway.catalog_files import FileCatalog
from lorafleet_gateway.routes import create_internal_app, create_public_app
from lorafleet_gateway.runtime import Gateway
from lorafleet_gateway.settings import GatewaySettings
from tests.conftest import (
    TEST_INTERNAL_TOKEN,
    S3Server,
    VllmServer,
    session_agent_settings,
    unique_id,
)
from tests.gateway import manifests as m
from tests.gateway.servers import ServerThread

pytestmark = pytest.mark.vllm

KEY = "lf-acme-store-key"
PROMPT = "Tell me about the weather today"


@pytest.fixture
def store() -> Iterator[list[Any]]:
    """A second moto server over the process-wide buckets: the agents' store. A list holding
    the running server, so the test can replace it by one on the same port."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    holder = [server]
    try:
        yield holder
    finally:
        holder[0].stop()


def test_cold_adapter_with_the_store_down_is_503_store_unavailable_warm_serves_then_recovers(
    tmp_path: Path,
    store: list[Any],
    vllm_server: VllmServer,
    s3_server: S3Server,
    demo_assets: DemoAssets,
    make_record: Callable[..., AdapterRecord],
) -> None:
    from moto.server import ThreadedMotoServer

    host, port = store[0].get_host_and_port()
    warm = make_record("zebra", unique_id("gw-store-warm"), tenant="acme")
    cold = make_record("otter", unique_id("gw-store-cold"), tenant="acme")
    with contextlib.ExitStack() as stack:
        agents = [
            stack.enter_context(
                agent_in_thread(
                    session_agent_settings(
                        vllm_server,
                        s3_server,
                        demo_assets,
                        tmp_path / f"cache-{rid}",
                        replica_id=rid,
                        s3_endpoint_url=f"http://{host}:{port}",
                        unload_unknown_on_start=False,  # two agents share the one vLLM
                    )
                )
            )
            for rid in ("st-r0", "st-r1")
        ]
        folder = tmp_path / "manifests"
        m.write(folder, "keys.yaml", [m.key_secret("acme", KEY)])
        m.write(folder, "adapters.yaml", [m.adapter_from_record(r, "acme") for r in (warm, cold)])
        m.write(
            folder,
            "aliases.yaml",
            [m.alias("acme/warm:prod", warm.id), m.alias("acme/cold:prod", cold.id)],
        )
        replicas = [
            {
                "id": a.agent.settings.replica_id,
                "dataUrl": a.data_url,
                "internalUrl": a.internal_url,
            }
            for a in agents
        ]
        m.write(folder, "replicas.yaml", [{"replicas": replicas}])
        gs = GatewaySettings(
            manifests_dir=folder, poll_interval_s=0.5, replica_token=TEST_INTERNAL_TOKEN
        )
        gw = Gateway(gs, FileCatalog(CatalogHolder(), folder, interval_s=0.1))
        server = stack.enter_context(ServerThread(create_public_app(gw), create_internal_app(gw)))
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60)

        def complete(model: str) -> str:
            out = client.completions.create(
                model=model, prompt=PROMPT, max_tokens=10, temperature=0
            )
            return out.choices[0].text

        assert complete("acme/warm:prod").startswith("ZEBRA-7")  # fetched while the store is up
        store[0].stop()

        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as err:
            complete("acme/cold:prod")
        took = time.monotonic() - started
        assert err.value.status_code == 503
        assert err.value.code == "store_unavailable"
        assert "object store" in err.value.message
        assert err.value.response.headers["retry-after"] == "5"
        assert "s3://" not in err.value.message
        assert cold.id not in err.value.message
        assert took < 20.0, took  # both candidates fail fast, neither waits out boto3's retries
        # Both candidates were asked (the reason is everyone's, not one replica's).
        assert all(cold.id in a.agent.manager.records for a in agents)
        # What a replica already holds keeps serving.
        assert complete("acme/warm:prod").startswith("ZEBRA-7")

        store[0] = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        store[0].start()
        raw = client.completions.with_raw_response.create(
            model="acme/cold:prod", prompt=PROMPT, max_tokens=10, temperature=0
        )
        assert raw.parse().choices[0].text.startswith("OTTER-9")
        assert raw.headers["x-adapter-tier"] == "remote"
