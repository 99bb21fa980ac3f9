"""Replica pods as the operator and the gateway read them: one definition of "serving".

Both the operator (which replicas may own adapters, and the pool's readyReplicas) and the
gateway's Kubernetes catalog (where requests may go) ask `serving()`, so a pod that one of them
treats as a replica is never skipped by the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lorafleet_core.api.names import LABEL_COMPONENT, LABEL_POOL

# The operator labels replica pods <LABEL_COMPONENT>=replica (see planning.pool).
COMPONENT_REPLICA = "replica"


def replica_pool(pod: Mapping[str, Any]) -> str | None:
    """The pool a replica pod belongs to; None for any other pod."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if labels.get(LABEL_COMPONENT) != COMPONENT_REPLICA:
        return None
    pool = labels.get(LABEL_POOL)
    return str(pool) if pool else None


def pod_ip(pod: Mapping[str, Any]) -> str | None:
    ip = (pod.get("status") or {}).get("podIP")
    return str(ip) if ip else None


def terminating(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp"))


def serving(pod: Mapping[str, Any]) -> bool:
    """Running, its Ready condition True (the agent's readiness probe), not terminating, and
    with an IP to reach it at."""
    status = pod.get("status") or {}
    if status.get("phase") != "Running" or terminating(pod) or not pod_ip(pod):
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
