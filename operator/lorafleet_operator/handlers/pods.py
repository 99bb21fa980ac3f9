"""Replica pods: readiness and annotations feed placement; FleetSync patches annotations."""

from __future__ import annotations

from typing import Any

import kopf

from lorafleet_core.names import LABEL_COMPONENT
from lorafleet_core.pods import COMPONENT_REPLICA
from lorafleet_operator.runtime import runtime


@kopf.on.event("", "v1", "pods", labels={LABEL_COMPONENT: COMPONENT_REPLICA})
async def pod_event(
    *, type: str, body: kopf.Body, name: str, namespace: str | None, **_: Any
) -> None:
    assert namespace is not None  # lorafleet resources and pods are namespaced
    fleet = runtime().fleet(namespace)
    if type == "DELETED":
        fleet.remove_pod(name)
    else:
        fleet.upsert_pod(body)
