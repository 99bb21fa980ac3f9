"""The control API inside the kopf operator against kmock, over real HTTP.

The operator is started as in production: its startup handler serves the control API on
`control_port`, sharing the operator's logged-in Kubernetes client. Registrations become
LoRAAdapter objects the operator then reconciles; alias changes are deploys the operator
carries out; replica calls go to the pod's agent (a real-HTTP stand-in replica). TokenReview is
answered by the emulator the way an API server answers it.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lorafleet_operator.control.auth import token_sha256
from tests.gateway.fake_replica import FakeReplica
from tests.gateway.servers import ServerThread
from tests.operator.control_support import (
    ADMIN_TOKEN,
    AGENT_TOKEN,
    AUTH,
    reasons_of,
    registration,
)
from tests.operator.factories import pool_body
from tests.operator.kmock_cluster import Cluster, eventually
from tests.operator.kopf_fleet import pod_body, status
from tests.operator.kopf_harness import operator_running

pytestmark = pytest.mark.timeout(180)

PIPELINE_TOKEN = "pipeline-sa-token"
PIPELINE_ACCOUNT = "ci:pipeline"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _token_review(request: Any) -> dict[str, Any]:
    """What an API server answers: who the token belongs to, if anyone."""
    spec = (request.data or {}).get("spec") or {}
    token = spec.get("token")
    user = {"username": f"system:serviceaccount:{PIPELINE_ACCOUNT}"}
    if token == "other-sa-token":
        user = {"username": "system:serviceaccount:ci:someone-else"}
    known = token in (PIPELINE_TOKEN, "other-sa-token")
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": spec,
        "status": {"authenticated": known, **({"user": user} if known else {})},
    }


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    c = Cluster("ctl")
    c.emulator["post /apis/authentication.k8s.io/v1/tokenreviews"] << _token_review
    yield c
    c.close()


@pytest.fixture(scope="module")
def replica_server() -> Iterator[tuple[FakeReplica, int]]:
    fake = FakeReplica("ctl-0")
    with ServerThread(fake.app()) as server:
        yield fake, server.ports[0]


@pytest.fixture(scope="module")
def replica(replica_server: tuple[FakeReplica, int]) -> FakeReplica:
    return replica_server[0]


@pytest.fixture(scope="module")
def api(cluster: Cluster, replica_server: tuple[FakeReplica, int]) -> Iterator[httpx.Client]:
    port = _free_port()
    env = {
        "LORAFLEET_OPERATOR_SYNC_DEBOUNCE_SECONDS": "0.2",
        "LORAFLEET_OPERATOR_SYNC_MAX_DELAY_SECONDS": "1.0",
        "LORAFLEET_OPERATOR_CONTROL_PORT": str(port),
        "LORAFLEET_OPERATOR_CONTROL_HOST": "127.0.0.1",
        "LORAFLEET_OPERATOR_CONTROL_TOKEN_SHA256": token_sha256(ADMIN_TOKEN),
        "LORAFLEET_OPERATOR_CONTROL_SERVICE_ACCOUNTS": PIPELINE_ACCOUNT,
        "LORAFLEET_OPERATOR_CONTROL_NAMESPACE": cluster.namespace,
        "LORAFLEET_OPERATOR_REPLICA_TOKEN": AGENT_TOKEN,
    }
    pool = pool_body("ctl", engine={"maxRank": 16})
    del pool["metadata"]["namespace"]
    cluster.create(cluster.path("replicapools"), pool)
    port_of_replica = replica_server[1]
    cluster.create(cluster.path("pods", group="v1"), pod_body("ctl-0", "ctl", port_of_replica))
    with (
        operator_running(cluster, env),
        httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client,
    ):
        eventually(lambda: client.get("/internal/openapi.json").status_code == 200,
                   ignore=(httpx.HTTPError,))  # fmt: skip
        yield client


def test_registered_adapter_is_created_and_reconciled_by_the_operator(api, cluster):
    resp = api.post("/internal/adapters", json=registration("k-v1"), headers=AUTH)
    assert resp.status_code == 201, resp.text
    stored = cluster.get(cluster.path("loraadapters", "k-v1"))
    assert stored is not None
    assert stored["spec"]["checksum"] == registration("k-v1")["checksum"]
    eventually(lambda: status(cluster, "loraadapters", "k-v1").get("phase") == "Ready")
    again = api.post("/internal/adapters", json=registration("k-v1"), headers=AUTH)
    assert again.status_code == 200
    conflict = api.post("/internal/adapters", json=registration("k-v1", alpha=8), headers=AUTH)
    assert conflict.status_code == 409
    assert cluster.get(cluster.path("loraadapters", "k-v1"))["spec"]["alpha"] == 16


def test_refused_registration_lists_every_reason_and_creates_nothing(api, cluster):
    body = registration("k-bad", rank=64, target_modules=["q_proj", "lm_head"])
    resp = api.post("/internal/adapters", json=body, headers=AUTH)
    assert resp.status_code == 422
    reasons = reasons_of(resp)
    assert any(r.startswith("RankTooHigh") for r in reasons)
    assert any(r.startswith("TargetModulesNotAllowed") for r in reasons)
    assert cluster.get(cluster.path("loraadapters", "k-bad")) is None


def test_alias_deploy_and_rollback_are_carried_out_by_the_operator(api, cluster, replica):
    for v in ("kal-v1", "kal-v2"):
        api.post("/internal/adapters", json=registration(v), headers=AUTH).raise_for_status()
        eventually(lambda v=v: status(cluster, "loraadapters", v).get("phase") == "Ready")
    replica.registered |= {"kal-v1", "kal-v2"}  # its agent verified both versions' files

    def put(adapter: str) -> dict[str, Any]:
        resp = api.put(
            "/internal/aliases/acme/kal:prod", json={"adapter_id": adapter}, headers=AUTH
        )
        assert resp.status_code == 200, resp.text
        out: dict[str, Any] = resp.json()
        return out

    def served() -> Any:
        return status(cluster, "adapteraliases", "acme-kal-prod").get("adapter")

    put("kal-v1")
    eventually(lambda: served() == "kal-v1")
    assert put("kal-v2")["previous_adapter_id"] == "kal-v1"  # deploy
    eventually(lambda: served() == "kal-v2")
    put("kal-v1")  # rollback
    st = eventually(
        lambda: (
            (s := status(cluster, "adapteraliases", "acme-kal-prod")).get("adapter") == "kal-v1"
            and s
        )
    )
    assert st["previousAdapter"] == "kal-v2"


def test_replica_calls_reach_the_pods_agent_with_the_agents_credential(api, cluster, replica):
    api.post("/internal/adapters", json=registration("kr-v1"), headers=AUTH).raise_for_status()
    resp = api.post(
        "/internal/replicas/ctl-0/adapters/kr-v1/load", json={"gpu": True}, headers=AUTH
    )
    assert resp.status_code == 200, resp.text
    assert replica.loads[-1].id == "kr-v1"
    assert replica.load_headers[-1]["authorization"] == f"Bearer {AGENT_TOKEN}"
    state = api.get("/internal/replicas/ctl-0/state", headers=AUTH)
    assert state.json()["replica_id"] == "ctl-0"
    assert (
        api.post("/internal/replicas/ctl-0/adapters/kr-v1/unload", headers=AUTH).status_code == 200
    )
    assert replica.unloads[-1] == "kr-v1"
    missing = api.get("/internal/replicas/not-a-pod/state", headers=AUTH)
    assert missing.status_code == 404


def test_service_account_tokens_pass_only_for_listed_accounts(api, cluster):
    ok = api.get(
        "/internal/replicas/ctl-0/state", headers={"authorization": f"Bearer {PIPELINE_TOKEN}"}
    )
    assert ok.status_code == 200
    other = api.get(
        "/internal/replicas/ctl-0/state", headers={"authorization": "Bearer other-sa-token"}
    )
    assert other.status_code == 401
    unknown = api.get("/internal/replicas/ctl-0/state", headers={"authorization": "Bearer nobody"})
    assert unknown.status_code == 401
    assert api.get("/internal/replicas/ctl-0/state").status_code == 401
