"""`benchmarks/soak.py` for ten seconds against a real stack, so the script cannot rot.

The stack is the in-process gateway (with its real edge protocol, header and body timeouts cut
to about a second) in front of one real agent on the session's vLLM: no new vLLM starts. RSS
is sampled for the session's vLLM (and its engine child) and for this test process, which
hosts the gateway and the agent.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchmarks import soak
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_demo.assets import DemoAssets
from tests.conftest import S3Server, VllmServer, unique_id
from tests.vllm_stack import vllm_stack

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
    with vllm_stack(vllm_server, s3_server, demo_assets, tmp) as stack:
        stack.agent("soak-r0")
        aliases = {a: r.id for a, r in records.items()}
        stack.write_manifests("soak", KEY, records.values(), aliases, requests_per_second=1000)
        stack.write_replicas()
        _, server = stack.gateway(
            edge_protocol=True,
            poll_interval_s=0.5,
            catalog_reload_interval_s=0.1,
            header_timeout_s=1.0,
            body_timeout_s=1.5,
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
    doc = json.loads(out.read_text())["details"]  # benchmarks/results.py: the soak's own doc
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
