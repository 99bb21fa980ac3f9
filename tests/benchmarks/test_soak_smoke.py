"""`benchmarks/soak.py` for ten seconds against a real stack, so the script cannot rot.

The stack is the in-process gateway (with its real edge protocol, header and body timeouts cut
to about a second) in front of one real agent on the session's vLLM: no new vLLM starts. RSS
is sampled for the session's vLLM (and its engine child) and for this test process, which
hosts the gateway and the agent.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks import soak
from lorafleet_agent.server import agent_in_thread
from lorafleet_cli.demo_assets import DemoAssets
from lorafleet_core.records import AdapterRecord
from lorafleet_gateway.__main__ import public_protocol_options
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

KEY = "lf-soak-smoke-key"
MARKERS = {"soak/zebra:prod": "ZEBRA-7", "soak/falcon:prod": "FALCON-3"}


@dataclass
class SmokeStack:
    base_url: str
    metrics_url: str


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
    vllm_server: VllmServer,
    s3_server: S3Server,
    demo_assets: DemoAssets,
    make_record: Callable[..., AdapterRecord],
) -> Iterator[SmokeStack]:
    tmp = tmp_path_factory.mktemp("soak-smoke")
    records = {
        "soak/zebra:prod": make_record("zebra", unique_id("soak-zebra"), tenant="soak"),
        "soak/falcon:prod": make_record("falcon", unique_id("soak-falcon"), tenant="soak"),
    }
    settings = session_agent_settings(
        vllm_server, s3_server, demo_assets, tmp / "cache", replica_id="soak-r0",
        unload_unknown_on_start=False,  # the session's vLLM is shared with other tests
    )  # fmt: skip
    with contextlib.ExitStack() as stack:
        agent = stack.enter_context(agent_in_thread(settings))
        folder = tmp / "manifests"
        m.write(folder, "keys.yaml", [m.key_secret("soak", KEY, requests_per_second=1000)])
        m.write(
            folder, "adapters.yaml", [m.adapter_from_record(r, "soak") for r in records.values()]
        )
        m.write(folder, "aliases.yaml", [m.alias(a, r.id) for a, r in records.items()])
        replica = {"id": "soak-r0", "dataUrl": agent.data_url, "internalUrl": agent.internal_url}
        m.write(folder, "replicas.yaml", [{"replicas": [replica]}])
        gs = GatewaySettings(
            manifests_dir=folder,
            poll_interval_s=0.5,
            catalog_reload_interval_s=0.1,
            replica_token=TEST_INTERNAL_TOKEN,
            header_timeout_s=1.0,
            body_timeout_s=1.5,
        )
        gw = Gateway(gs, FileCatalog(CatalogHolder(), folder, interval_s=0.1))
        server = stack.enter_context(
            ServerThread(
                create_public_app(gw),
                create_internal_app(gw),
                first_options=public_protocol_options(gs),
            )
        )
        yield SmokeStack(server.url + "/v1", server.url_of(1) + "/metrics")


def test_soak_for_ten_seconds_reports_rss_ttft_and_cuts_slow_clients(
    stack: SmokeStack, vllm_server: VllmServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    out = tmp_path / "soak.json"
    rc = soak.main([
        "--base-url", stack.base_url, "--api-key", KEY, "--aliases", *MARKERS,
        "--markers", *(f"{k}={v}" for k, v in MARKERS.items()),
        "--pid", f"vllm={vllm_server.process.pid}", "--pid", f"gateway+agent={os.getpid()}",
        "--gateway-metrics", stack.metrics_url,
        "--duration", "10", "--rate", "3", "--sample-interval", "0.5", "--warmup", "2",
        "--max-prompt-tokens", "48", "--max-output-tokens", "16",
        "--slow-clients", "6", "--slow-start", "2", "--slow-duration", "4", "--trickle-s", "0.2",
        # A test process's RSS moves with whatever else the session runs: judged elsewhere.
        "--min-rise-mib", "100000",
        "--out", str(out), "--plot", str(tmp_path / "soak.png"), "--no-progress",
    ])  # fmt: skip
    printed = capsys.readouterr().out
    assert rc == 0, printed
    doc = json.loads(out.read_text())
    v = doc["verdict"]
    assert v["requests"] >= 20
    assert v["status_5xx"] == 0
    assert v["marker_mismatches"] == 0
    assert set(v["ttft"]) >= {"all", "before", "during", "after"}
    assert v["slow_clients"]["headers"].get("408", 0) >= 1
    assert v["slow_clients"]["body"].get("408", 0) >= 1
    assert set(v["slow_clients"]["reader"]) == {"200 complete"}
    assert v["slow_5xx"] == 0
    labels = {s["label"] for s in v["rss"]}
    assert "vllm" in labels
    assert any(lb.startswith("vllm>") for lb in labels), labels
    statuses = doc["gateway_statuses"]
    assert not any(s.isdigit() and int(s) >= 500 for s in statuses), statuses
    # A slow reader got its whole answer: the gateway must count it as served, not as gone.
    assert "client_closed" not in statuses, statuses
    assert (tmp_path / "soak.png").stat().st_size > 10_000
    assert "command: .venv/bin/python -m benchmarks.soak --base-url" in printed
