"""`lorafleet status` over real HTTP: a `lorafleet up` state file pointing at a replica agent's
state and metrics endpoints and the gateway's metrics (stand-in servers speaking the real
formats, built from the components' own metric registries), in text, JSON and YAML."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from prometheus_client import generate_latest

from lorafleet_agent.metrics import AgentMetrics
from lorafleet_cli.main import main
from lorafleet_cli.status_report import (
    cluster_merged_pools,
    fleet_totals,
    merged_replica_state,
    replica_report,
    worst_tenants,
)
from lorafleet_core.wire.agent_api import AGENT_ONLY_METRICS
from lorafleet_core.wire.replica_state import MergedServing, ReplicaState
from lorafleet_gateway.metrics import GatewayMetrics


def gateway_metrics_text() -> str:
    metrics = GatewayMetrics()
    for tenant, n, missed in (("acme", 100, 30), ("globex", 50, 1), ("initech", 40, 0)):
        for i in range(n):
            metrics.tenants.observe(tenant, over_target=i < missed)
    return generate_latest(metrics.registry).decode()


def agent_metrics_text() -> str:
    metrics = AgentMetrics()
    metrics.requests.labels("gpu").inc(9)
    metrics.requests.labels("disk").inc(1)
    return generate_latest(metrics.registry).decode()


STATE = ReplicaState(
    replica_id="demo-0",
    gpu_adapters=["a", "b"],
    disk_adapters=["c"],
    queue_depth=3,
    tokens_in_flight=1200,
    evictions_per_min=2.5,
)

SUM = "sha256:" + "b" * 64
MERGED_STATE = ReplicaState(
    replica_id="hot-merged-0",
    queue_depth=1,
    tokens_in_flight=700,
    merged=MergedServing(adapter_id="acme-hot-v1", checksum=SUM),
)


class Handler(BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[str, str]]] = {
        "/internal/replicas/demo-0/state": ("application/json", STATE.model_dump_json()),
        "/internal/replicas/hot-merged-0/state": (
            "application/json",
            MERGED_STATE.model_dump_json(),
        ),
        AGENT_ONLY_METRICS: ("text/plain", agent_metrics_text()),
        "/gateway/metrics": ("text/plain", gateway_metrics_text()),
    }

    def do_GET(self) -> None:
        found = self.routes.get(self.path)
        if found is None:
            self.send_error(404)
            return
        body = found[1].encode()
        self.send_response(200)
        self.send_header("Content-Type", found[0])
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def up_state(tmp_path: Path) -> Iterator[Path]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    up = {
        "phase": "ready",
        "manifests": str(tmp_path / "m"),
        "gateway": {"url": "http://127.0.0.1:1", "internalUrl": f"{base}/gateway"},
        "replicas": [
            {"id": "demo-0", "internalUrl": base},
            {"id": "demo-1", "internalUrl": "http://127.0.0.1:9"},  # down
        ],
        "mergedPools": [
            {
                "pool": "hot-merged",
                "adapter": "acme-hot-v1",
                "checksum": SUM,
                "replicas": [
                    {"id": "hot-merged-0", "internalUrl": base},
                    {"id": "hot-merged-1", "internalUrl": "http://127.0.0.1:9"},  # down
                ],
            }
        ],
        "processes": {"gateway": {"pid": 1, "running": True, "restarts": 0}},
    }
    (tmp_path / "up.json").write_text(json.dumps(up))
    reconcile = {
        "models": {"acme/support:prod": "acme-support-v2"},
        "adapters": {"acme-support-v2": {"phase": "Ready", "owners": ["demo-0"]}},
        "problems": [],
    }
    (tmp_path / "reconcile.json").write_text(json.dumps(reconcile))
    try:
        yield tmp_path
    finally:
        server.shutdown()
        server.server_close()


def test_worst_tenants_rank_by_share_over_target():
    rows = worst_tenants(gateway_metrics_text())
    assert [(r["tenant"], r["overTarget"], r["requests"]) for r in rows] == [
        ("acme", 30, 100),
        ("globex", 1, 50),
    ]  # initech has no request over target


def test_fleet_totals_skip_unreachable_replicas():
    one = replica_report(STATE, {"gpu": 9.0, "disk": 1.0})
    totals = fleet_totals([one, {"id": "x", "reachable": False}])
    assert (totals["replicas"], totals["reachable"], totals["queueDepth"]) == (2, 1, 3)
    assert totals["gpuHitRate"] == pytest.approx(0.9)
    assert totals["adapters"] == {"gpu": 2, "ram": 0, "disk": 1}


def test_status_text_answers_the_first_questions(up_state, capsys):
    assert main(["status", "--state-dir", str(up_state)]) == 0
    out = capsys.readouterr().out
    assert "fleet: 1/2 replicas answer, queue 3, tokens in flight 1200, evictions/min 2.5" in out
    assert "GPU hit rate 90%" in out
    assert "demo-1: unreachable" in out
    assert "acme/support:prod -> acme-support-v2" in out
    assert "acme: 30% (30/100)" in out
    assert "adapters: 1 (owners: -o wide)" in out


def test_status_as_json_and_yaml(up_state, capsys):
    assert main(["status", "--state-dir", str(up_state), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fleet"]["tokensInFlight"] == 1200
    assert report["replicas"][0]["adapters"]["gpu"] == 2
    assert report["worstTenants"][0]["tenant"] == "acme"
    assert report["aliases"] == [{"model": "acme/support:prod", "serving": "acme-support-v2"}]
    assert main(["status", "--state-dir", str(up_state), "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == report


def test_status_lists_merged_pools_replicas_with_their_adapter_checksum_and_state(up_state, capsys):
    assert main(["status", "--state-dir", str(up_state), "-o", "json"]) == 0
    [pool] = json.loads(capsys.readouterr().out)["mergedPools"]
    assert (pool["pool"], pool["adapter"], pool["checksum"]) == ("hot-merged", "acme-hot-v1", SUM)
    assert [(r["id"], r["state"]) for r in pool["replicas"]] == [
        ("hot-merged-0", "serving"),
        ("hot-merged-1", "unreachable"),
    ]
    assert pool["replicas"][0]["tokensInFlight"] == 700
    assert main(["status", "--state-dir", str(up_state)]) == 0
    out = capsys.readouterr().out
    assert f"hot-merged: adapter acme-hot-v1, weights {SUM}" in out
    assert "hot-merged-0: serving, queue 1, tokens in flight 700" in out
    # merged replicas are not counted as the shared pool's
    assert "fleet: 1/2 replicas answer" in out


def test_a_merged_replica_serving_other_weights_is_named_so():
    other = MERGED_STATE.model_copy(
        update={"merged": MergedServing(adapter_id="acme-hot-v1", checksum="sha256:" + "c" * 64)}
    )
    assert merged_replica_state(other, "acme-hot-v1", SUM).startswith("wrong weights")
    assert merged_replica_state(STATE, "acme-hot-v1", SUM) == "not merged"
    warming = MERGED_STATE.model_copy(update={"warming": True})
    assert merged_replica_state(warming, "acme-hot-v1", SUM) == "warming"
    assert merged_replica_state(None, "acme-hot-v1", SUM) == "unreachable"
    down = MERGED_STATE.model_copy(update={"engine_ready": False})
    assert merged_replica_state(down, "acme-hot-v1", SUM) == "engine down"


def test_cluster_report_lists_merged_pools_with_their_merge_and_drain():
    pools: list[dict[str, Any]] = [
        {"metadata": {"name": "default"}, "spec": {}},
        {
            "metadata": {
                "name": "hot-merged",
                "labels": {"app.kubernetes.io/managed-by": "lorafleet-operator"},
            },
            "spec": {"merged": {"adapter": "acme-hot-v1"}},
            "status": {
                "replicas": 2,
                "readyReplicas": 2,
                "merge": {"phase": "Ready", "checksum": SUM},
                "conditions": [{"type": "Ready", "status": "False", "reason": "Draining"}],
            },
        },
    ]
    assert cluster_merged_pools(pools) == [
        {
            "pool": "hot-merged",
            "adapter": "acme-hot-v1",
            "checksum": SUM,
            "merge": "Ready",
            "replicas": 2,
            "readyReplicas": 2,
            "state": "Draining",
            "autoMerge": True,
        }
    ]


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("up.json", '{"phase": "ready", "gateway": '),  # cut off mid-write
        ("up.json", "[1, 2]"),
        ("up.json", '{"phase": "ready"}'),  # no gateway
        ("reconcile.json", '{"models": ["not", "a", "map"]}'),
    ],
)
def test_corrupt_state_files_are_a_clear_error(up_state, capsys, name, text):
    (up_state / name).write_text(text)
    assert main(["status", "--state-dir", str(up_state)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: "), err
    assert name in err, err
    assert "Traceback" not in err


def test_an_up_that_was_killed_is_not_reported_running(up_state, capsys):
    import subprocess
    import sys

    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    doc = json.loads((up_state / "up.json").read_text())
    doc["pid"] = int(gone.stdout)  # exited: its pid no longer exists
    (up_state / "up.json").write_text(json.dumps(doc))
    assert main(["status", "--state-dir", str(up_state), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["phase"].startswith("not running"), report["phase"]
    assert not any(p["running"] for p in report["processes"].values())
