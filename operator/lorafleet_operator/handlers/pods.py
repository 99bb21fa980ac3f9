"""Replica pods: readiness and annotations feed placement; FleetSync patches annotations."""

from __future__ import annotations

from typing import Any

import kopf

from lorafleet_core.api.names import LABEL_COMPONENT
from lorafleet_core.planning.pods import COMPONENT_REPLICA
from lorafleet_operator.runtime import runtime


@kopf.index("", "v1", "pods", labels={LABEL_COMPONENT: COMPONENT_REPLICA})
async def pod_index(*, body: kopf.Body, namespace: str | None, **_: Any) -> None:
    """Every non-deletion event, during kopf's initial list too (why: the handlers package)."""
    assert namespace is not None  # lorafleet resources and pods are namespaced
    runtime().fleet(namespace, indexing=True).index.upsert_pod(body)


@kopf.on.event("", "v1", "pods", labels={LABEL_COMPONENT: COMPONENT_REPLICA})
async def pod_event(*, type: str, name: str, namespace: str | None, **_: Any) -> None:
    assert namespace is not None
    fleet = runtime().fleet(namespace)
    if type == "DELETED":
        fleet.index.remove_pod(name)
