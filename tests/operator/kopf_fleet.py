"""A fleet for the operator's kopf tests on kmock: the operator's settings, replica pods whose
`internal` port answers /state from a real loopback server, and readers of what the operator
wrote (status, conditions, a pod's owned adapters)."""

from __future__ import annotations

from typing import Any

from lorafleet_core.api.names import ANNOTATION_OWNED_ADAPTERS, LABEL_COMPONENT, LABEL_POOL
from lorafleet_core.wire.records import decode_owned
from tests.operator.factories import adapter_body, pool_body
from tests.operator.kmock_cluster import Cluster
from tests.operator.state_servers import StateServer

POD_INTERVAL = 2.0
ENV = {
    "LORAFLEET_OPERATOR_SYNC_DEBOUNCE_SECONDS": "0.2",
    "LORAFLEET_OPERATOR_SYNC_MAX_DELAY_SECONDS": "1.0",
    "LORAFLEET_OPERATOR_POD_PATCH_INTERVAL_SECONDS": str(POD_INTERVAL),
    "LORAFLEET_OPERATOR_SCRAPE_TIMEOUT_SECONDS": "1",
    # The agents' token the operator holds (secret mode): a merged pool's Secret copies it.
    "LORAFLEET_OPERATOR_REPLICA_TOKEN": "tok-shared",
    # ... and the agents' data-port token, copied the same way (in every mode).
    "LORAFLEET_OPERATOR_REPLICA_DATA_TOKEN": "data-tok-shared",
    # The gateway pool whose inside Secret the operator creates when it is missing (the chart's
    # `<gateway.pool>-internal`).
    "LORAFLEET_OPERATOR_INTERNAL_SECRET": "gwpool-internal",
}


def pod_body(name: str, pool: str, port: int, ready: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {LABEL_POOL: pool, LABEL_COMPONENT: "replica"}},
        "spec": {
            "containers": [
                {"name": "agent", "ports": [{"name": "internal", "containerPort": port}]}
            ]
        },
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def status(cluster: Cluster, plural: str, name: str) -> dict[str, Any]:
    obj = cluster.get(cluster.path(plural, name)) or {}
    out: dict[str, Any] = obj.get("status") or {}
    return out


def cond(st: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions", []) if c["type"] == type_), {})


def owned(cluster: Cluster, pod: str) -> set[str]:
    obj = cluster.get(cluster.path("pods", pod, group="v1")) or {}
    value = obj.get("metadata", {}).get("annotations", {}).get(ANNOTATION_OWNED_ADAPTERS)
    return {r.id for r in decode_owned(value)} if value else set()


def make_pool(cluster: Cluster, name: str, n_pods: int, **spec: Any) -> list[StateServer]:
    body = pool_body(name, **spec)
    del body["metadata"]["namespace"]
    cluster.create(cluster.path("replicapools"), body)
    servers = [StateServer(f"{name}-{i}") for i in range(n_pods)]
    for s in servers:
        cluster.create(cluster.path("pods", group="v1"), pod_body(s.replica_id, name, s.port))
    return servers


def make_adapter(cluster: Cluster, name: str, **kw: Any) -> None:
    body = adapter_body(name, **kw)
    del body["metadata"]["namespace"]
    cluster.create(cluster.path("loraadapters"), body)
