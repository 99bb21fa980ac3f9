"""Pod hygiene of a replica: probes, resources, security contexts, drain, the pool's template.

Pure builders used by `planning.pool`. What each container runs is the replica image's own
interpreter (`python3`, as replica-image/Dockerfile and entrypoint.sh use it; the vLLM image
has no `python`), and the user is the image's non-root user.

Probes (the kubelet's view of "alive" and "ready"):
- vLLM listens on 127.0.0.1 only, so its probes are exec hooks inside the container
  (`python3 -m lorafleet_agent.probe engine`, GET /health on loopback). The startupProbe gives
  the base model `engine.startupSeconds` to load; after it, a liveness failure for 30 s
  (3 x 10 s) restarts a hung or dead engine.
- The agent is ready when its /readyz says so: the agent took over vLLM and vLLM answers
  (base loaded + agent ready); the pod is Ready only when both containers are.
- The agent's liveness is its own /healthz (a wedged event loop stops answering it).

Security: both containers run as non-root with no privilege escalation, every capability
dropped and the RuntimeDefault seccomp profile (the "restricted" Pod Security Standard). The
agent's root filesystem is read-only (it writes only to its cache volume and /tmp); vLLM's is
not: torch.compile, Triton and FlashInfer write JIT caches under $HOME/.cache at run time.
"""

from __future__ import annotations

import math
from typing import Any

from lorafleet_core.api.models import ReplicaPool
from lorafleet_core.wire.agent_api import AGENT_ONLY_METRICS

REPLICA_UID = 10001  # the `lorafleet` user of replica-image/Dockerfile
PYTHON = "python3"
PROBE_PERIOD_S = 10
# Stop accepting work, let running streams finish, then SIGTERM: the grace period covers the
# drain plus the containers' own shutdown.
SHUTDOWN_MARGIN_S = 30


def probe_command(*args: str) -> list[str]:
    return [PYTHON, "-m", "lorafleet_agent.probe", *args]


def engine_probes(pool: ReplicaPool) -> dict[str, Any]:
    check = {"exec": {"command": probe_command("engine")}, "timeoutSeconds": 5}
    startup = math.ceil(pool.spec.engine.startup_seconds / PROBE_PERIOD_S)
    return {
        "startupProbe": {**check, "periodSeconds": PROBE_PERIOD_S, "failureThreshold": startup},
        "livenessProbe": {**check, "periodSeconds": PROBE_PERIOD_S, "failureThreshold": 3},
    }


def agent_probes(internal_port: str) -> dict[str, Any]:
    http = {"port": internal_port}
    return {
        "readinessProbe": {
            "httpGet": {**http, "path": "/readyz"},
            "periodSeconds": 5,
            "timeoutSeconds": 3,
            "failureThreshold": 2,
        },
        "livenessProbe": {
            "httpGet": {**http, "path": "/healthz"},
            "periodSeconds": 10,
            "timeoutSeconds": 3,
            "failureThreshold": 6,
        },
    }


def drain_hook(pool: ReplicaPool, internal_port: int) -> dict[str, Any]:
    """preStop of both containers: wait for the agent's running streams (see probe.drain)."""
    timeout = pool.spec.engine.drain_seconds
    command = probe_command(
        "drain",
        "--metrics",
        f"http://127.0.0.1:{internal_port}{AGENT_ONLY_METRICS}",
        "--timeout",
        str(timeout),
    )
    return {"preStop": {"exec": {"command": command}}}


def grace_period_seconds(pool: ReplicaPool) -> int:
    return pool.spec.engine.drain_seconds + SHUTDOWN_MARGIN_S


def container_security(*, read_only_root: bool) -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": read_only_root,
        "runAsNonRoot": True,
    }


def pod_security(pool: ReplicaPool) -> dict[str, Any]:
    """The pod's security context; spec.template.securityMode `platform` leaves the UID, GID
    and fsGroup to a platform that assigns them and refuses fixed ones (OpenShift)."""
    out: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    if pool.spec.template.security_mode == "image":
        out |= {
            "runAsUser": REPLICA_UID,
            "runAsGroup": REPLICA_UID,
            # Volumes the pods write (cache, extra volumes such as a model cache) get the group.
            "fsGroup": REPLICA_UID,
            "fsGroupChangePolicy": "OnRootMismatch",
        }
    return out


def topology_spread(pool: ReplicaPool, selector: dict[str, str]) -> list[dict[str, Any]]:
    """The template's spread constraints, else one soft spread over nodes: an adapter's owners
    are two replicas, and two on one node are lost together. Soft (ScheduleAnyway), so a pool
    with more replicas than GPU nodes still schedules."""
    if pool.spec.template.topology_spread_constraints:
        return list(pool.spec.template.topology_spread_constraints)
    return [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": dict(selector)},
        }
    ]


def engine_resources(pool: ReplicaPool) -> dict[str, Any]:
    """The pool's vLLM resources plus its GPUs (limits[gpuResource] = gpus) unless named."""
    engine = pool.spec.engine
    out = {k: dict(v) for k, v in engine.resources.items()}
    if engine.gpus > 0:
        limits = out.setdefault("limits", {})
        requested = out.get("requests", {}).get(engine.gpu_resource)
        # Extended resources need a limit; a request alone is copied to it.
        limits.setdefault(engine.gpu_resource, requested or str(engine.gpus))
    return out


def tensor_parallel_args(pool: ReplicaPool) -> list[str]:
    engine = pool.spec.engine
    if engine.gpus > 1 and "--tensor-parallel-size" not in engine.extra_args:
        return ["--tensor-parallel-size", str(engine.gpus)]
    return []


def merged_env(ours: list[dict[str, Any]], pool: ReplicaPool) -> list[dict[str, Any]]:
    """The template's env, then ours; a template entry with one of our names is dropped (the
    variables lorafleet sets, such as the replica id or the agent's pool policy, win)."""
    taken = {e["name"] for e in ours}
    return [e for e in pool.spec.template.env if e.get("name") not in taken] + ours


def merged_labels(ours: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    return {**extra, **ours}


def template_pod_fields(pool: ReplicaPool, agent_account: str | None = None) -> dict[str, Any]:
    """PodSpec fields taken as they are from spec.template; unset ones are null, not absent:
    the operator merge-patches the StatefulSet, and only a null removes a field a user took
    out of the template (an absent key would leave the old tolerations in place).

    The ServiceAccount is the template's if it names one, else `agent_account` (the chart's
    agent account, with RBAC for TokenReview and Events)."""
    t = pool.spec.template
    fields: dict[str, Any] = {
        "nodeSelector": dict(t.node_selector),
        "tolerations": list(t.tolerations),
        "affinity": t.affinity,
        "topologySpreadConstraints": list(t.topology_spread_constraints),
        "priorityClassName": t.priority_class_name,
        "serviceAccountName": t.service_account_name or agent_account,
        "runtimeClassName": t.runtime_class_name,
        "imagePullSecrets": list(t.image_pull_secrets),
    }
    return {k: v or None for k, v in fields.items()}
