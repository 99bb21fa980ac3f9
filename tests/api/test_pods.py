"""One definition of a serving replica pod, shared by the operator and the gateway."""

from __future__ import annotations

from typing import Any

import pytest

from lorafleet_core.api.names import LABEL_COMPONENT, LABEL_POOL
from lorafleet_core.planning.pods import COMPONENT_REPLICA, replica_pool, serving
from lorafleet_gateway.catalog_kube import pod_endpoint
from lorafleet_operator.fleet_index import FleetIndex


def pod(**status: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "main-0",
        "labels": {LABEL_POOL: "main", LABEL_COMPONENT: COMPONENT_REPLICA},
    }
    if status.pop("deleting", False):
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    base = {
        "phase": "Running",
        "podIP": "10.0.0.5",
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    return {"metadata": meta, "status": {**base, **status}}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (pod(), True),
        (pod(conditions=[{"type": "Ready", "status": "False"}]), False),
        (pod(phase="Succeeded"), False),  # Ready left True by a finished container
        (pod(deleting=True), False),  # terminating: no new work
        (pod(podIP=None), False),  # nowhere to send a request
    ],
)
def test_operator_and_gateway_agree_on_which_pods_serve(body: dict[str, Any], expected: bool):
    assert serving(body) is expected
    assert (pod_endpoint(body, 8100, 8101) is not None) is expected
    index = FleetIndex("ns")  # what the operator's sync loop plans from
    index.upsert_pod(body)
    assert index.pods["main-0"].ready is expected


def test_only_replica_pods_of_a_pool_count():
    assert replica_pool(pod()) == "main"
    other = pod()
    other["metadata"]["labels"][LABEL_COMPONENT] = "gateway"
    assert replica_pool(other) is None
