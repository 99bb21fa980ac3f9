"""The object store down, seen through the gateway: two real agents in front of the session's
real vLLM fetch adapters from a moto server that the test stops and starts again.

A cold adapter (on no replica) cannot be served while the store is down; the client is told
exactly that (503 `store_unavailable`, Retry-After), not a generic `upstream_unavailable`,
while adapters already on a replica keep serving; once the store is back the same request
serves, fetched remotely.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from lorafleet_core.wire.records import AdapterRecord
from lorafleet_demo.assets import DemoAssets
from tests.conftest import S3Server, VllmServer, unique_id
from tests.vllm_stack import vllm_stack

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
    with vllm_stack(vllm_server, s3_server, demo_assets, tmp_path) as stack:
        agents = [
            stack.agent(rid, s3_endpoint_url=f"http://{host}:{port}") for rid in ("st-r0", "st-r1")
        ]
        aliases = {"acme/warm:prod": warm.id, "acme/cold:prod": cold.id}
        stack.write_manifests("acme", KEY, [warm, cold], aliases)
        stack.write_replicas()
        _, server = stack.gateway(poll_interval_s=0.5)
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
