"""ReplicaPool -> StatefulSet, headless Service and PodDisruptionBudget manifests.

A StatefulSet (not a Deployment) because replica ids must be stable: the id is the pod name
(`<pool>-0`, `<pool>-1`, ...), rendezvous placement hashes it, and a restarted pod coming back
under the same id finds the same owned adapters. Each pod runs two containers from the pool's
image: vLLM bound to 127.0.0.1:8000 (only the agent talks to it) and the lorafleet agent on
8100 (data) and 8101 (internal). The pod's annotations are projected by the downward API to
`/etc/lorafleet/podinfo/annotations`, which the agent watches to pre-warm owned adapters.
Probes, resources, security contexts, the drain and the pool's `spec.template` are applied by
`planning.replica_pod`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lorafleet_core.api.models import MergePhase, MergeStatus, ReplicaPool
from lorafleet_core.api.names import LABEL_COMPONENT, LABEL_POOL
from lorafleet_core.planning import replica_pod
from lorafleet_core.planning.base_model import base_model_source, model_args, object_store_env
from lorafleet_core.planning.pods import COMPONENT_REPLICA
from lorafleet_core.planning.replica_config import (
    AGENT_ENV_PREFIX,
    SECRET_MODE,
    InsideAuth,
    agent_env,
    agent_secret_env,
    engine_flags,
    merged_model_env,
    vllm_secret_env,
)

PODINFO_DIR = "/etc/lorafleet/podinfo"
ANNOTATIONS_FILE = f"{PODINFO_DIR}/annotations"
CACHE_DIR = "/var/cache/lorafleet"
VLLM_PORT = 8000
DATA_PORT = 8100
INTERNAL_PORT = 8101
INTERNAL_PORT_NAME = "internal"
MERGED_DIR = f"{CACHE_DIR}/merged"


def merged_model_dir(checksum: str) -> str:
    """Where a replica keeps a merged pool's weights (on its cache volume), by checksum."""
    return f"{MERGED_DIR}/{checksum.removeprefix('sha256:')}"


def ready_merge(pool: ReplicaPool, merge: MergeStatus | None) -> MergeStatus | None:
    """The merge a merged pool's replicas can serve (Ready, for the adapter the spec names)."""
    if pool.spec.merged is None or merge is None or merge.phase != MergePhase.READY:
        return None
    if merge.adapter_id != pool.spec.merged.adapter or not merge.checksum or not merge.uri:
        return None
    return merge


@dataclass(frozen=True)
class PoolObjects:
    statefulset: dict[str, Any]
    service: dict[str, Any]
    pdb: dict[str, Any]


def replica_labels(pool_name: str) -> dict[str, str]:
    return {LABEL_POOL: pool_name, LABEL_COMPONENT: COMPONENT_REPLICA}


def selector_string(pool_name: str) -> str:
    """Label selector of the pool's pods, as the scale subresource's status.selector wants."""
    return ",".join(f"{k}={v}" for k, v in sorted(replica_labels(pool_name).items()))


def clamp_replicas(pool: ReplicaPool, wanted: int | None) -> int:
    bounds = pool.spec.replicas
    value = bounds.desired if wanted is None else wanted
    return max(bounds.min, min(bounds.max, bounds.min if value is None else value))


def engine_args(pool: ReplicaPool, merge: MergeStatus | None = None) -> list[str]:
    """vLLM command line: the base model on localhost plus the pool's multi-LoRA flags; for a
    merged pool the merged weights served under the adapter's id (what requests name)."""
    model, served = (
        model_args(base_model_source(pool.spec.base_model.uri)),
        pool.spec.base_model.name,
    )
    if merge is not None and merge.checksum and pool.spec.merged is not None:
        model, served = ["--model", merged_model_dir(merge.checksum)], pool.spec.merged.adapter
    args = [
        *model,
        "--served-model-name",
        served,
        "--host",
        "127.0.0.1",
        "--port",
        str(VLLM_PORT),
        *engine_flags(pool.spec),
        *replica_pod.tensor_parallel_args(pool),
    ]
    return args + list(pool.spec.engine.extra_args)


def controller_refs(
    api_version: str, kind: str, name: str, uid: str | None
) -> list[dict[str, Any]]:
    """ownerReferences naming the controlling owner (deleted with it, and holding its
    deletion until this is gone); none without a uid (an object not read from the cluster)."""
    if not uid:
        return []
    return [
        {
            "apiVersion": api_version,
            "kind": kind,
            "name": name,
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def pool_refs(pool: ReplicaPool) -> list[dict[str, Any]]:
    """ownerReferences to `pool`, for the objects it owns (StatefulSet, Service, Jobs, ...)."""
    uid = (pool.metadata.model_extra or {}).get("uid")
    return controller_refs(pool.api_version, pool.kind, pool.metadata.name, uid)


def _meta(pool: ReplicaPool, namespace: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": pool.metadata.name,
        "namespace": namespace,
        "labels": replica_labels(pool.metadata.name),
    }
    refs = pool_refs(pool)
    if refs:
        meta["ownerReferences"] = refs
    return meta


# lorafleet_core.logs.FORMAT_ENV (planning does not import the logging setup).
LOG_FORMAT_ENV = "LORAFLEET_LOG_FORMAT"


def _agent_env(
    pool: ReplicaPool, inside: InsideAuth, merge: MergeStatus | None, log_format: str | None
) -> list[dict[str, Any]]:
    """Environment of the agent container (see planning.replica_config.agent_env)."""
    spec = pool.spec
    plain = agent_env(
        spec,
        # The downward-API annotations file; the agent reads owned-adapters from it.
        owned_adapters_file=ANNOTATIONS_FILE,
        cache_dir=f"{CACHE_DIR}/adapters",
        vllm_url=f"http://127.0.0.1:{VLLM_PORT}",
        data_port=DATA_PORT,
        internal_port=INTERNAL_PORT,
        # A folder inside the image: the agent reads its config.json for tensor shapes.
        base_model_dir=base_model_source(spec.base_model.uri).local_dir,
    )
    env: list[dict[str, Any]] = [
        # The replica id is the pod name: stable under a StatefulSet, hashed by placement.
        {
            "name": "LORAFLEET_AGENT_REPLICA_ID",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
        }
    ]
    if merge is not None and merge.checksum:
        plain |= merged_model_env(spec, merge.checksum, merged_model_dir(merge.checksum))
    # The agent's own defaults for who may load and unload, set explicitly: ours win over the
    # template's env (replica_pod.merged_env) and env wins over envFrom in Kubernetes, so no
    # template entry or ConfigMap turns the internal credential off or swaps its kind.
    plain[f"{AGENT_ENV_PREFIX}ALLOW_UNAUTHENTICATED_INTERNAL"] = "false"
    if inside.mode == "secret":  # tokenReview mode: agent_secret_env sets it
        plain[f"{AGENT_ENV_PREFIX}INTERNAL_AUTH"] = "secret"
    if log_format is not None:
        plain[LOG_FORMAT_ENV] = log_format
    env += [{"name": k, "value": v} for k, v in plain.items()]
    return env + agent_secret_env(pool.metadata.name, inside)


def _fetch_merged(pool: ReplicaPool, merge: MergeStatus, mounts: list[Any]) -> dict[str, Any]:
    """Init container: fetch and verify the merged weights before vLLM may read them."""
    assert merge.uri is not None
    assert merge.checksum is not None
    args = ["--uri", merge.uri, "--checksum", merge.checksum]
    return {
        "name": "fetch-merged",
        "image": pool.spec.engine.image,
        "command": [replica_pod.PYTHON, "-m", "lorafleet_agent.merged_model"],
        "args": [*args, "--dest", merged_model_dir(merge.checksum)],
        "env": replica_pod.merged_env([], pool),
        "securityContext": replica_pod.container_security(read_only_root=True),
        "volumeMounts": [*mounts, {"name": "tmp", "mountPath": "/tmp"}],  # noqa: S108
    }


def plan_pool_objects(
    pool: ReplicaPool,
    namespace: str,
    replicas: int,
    inside: InsideAuth = SECRET_MODE,
    *,
    merge: MergeStatus | None = None,
    log_format: str | None = None,
) -> PoolObjects:
    """The pool's objects; `inside` says how its agents authenticate their callers (the
    operator's settings, from the chart's `internalAuth`); a merged pool's need its Ready
    merge (see `ready_merge`). `log_format` (the operator's own, lorafleet_core.logs) goes to
    the agents and the engines (the image's vLLM logging config reads it) as
    LORAFLEET_LOG_FORMAT; None leaves their default and the pod template as it was (no
    rollout of every replica when the operator is upgraded)."""
    name = pool.metadata.name
    merge = ready_merge(pool, merge)
    if pool.spec.merged is not None and merge is None:
        raise ValueError(f"merged pool {name}: no Ready merge for {pool.spec.merged.adapter}")
    labels = replica_labels(name)
    engine = pool.spec.engine
    template = pool.spec.template
    drain = {"lifecycle": replica_pod.drain_hook(pool, INTERNAL_PORT)}
    shared_mounts = [{"name": "cache", "mountPath": CACHE_DIR}, *template.volume_mounts]
    # Null when unset (not absent), so a merge patch removes what the template no longer has.
    env_from = {"envFrom": list(template.env_from) or None}
    # Runtime LoRA loading only where LoRA is on (not in a merged pool).
    lora_env = [] if merge else [{"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"}]
    # An s3:// base model is streamed by vLLM, which reads the AWS names of the S3 settings;
    # a merged pool's vLLM reads the merged weights from its cache volume instead.
    source = base_model_source(pool.spec.base_model.uri)
    streamer_env = [] if merge else object_store_env(source, template.env)
    format_env = [] if log_format is None else [{"name": LOG_FORMAT_ENV, "value": log_format}]
    vllm = {
        "name": "vllm",
        "image": engine.image,
        "command": [replica_pod.PYTHON, "-m", "vllm.entrypoints.openai.api_server"],
        "args": engine_args(pool, merge),
        "env": replica_pod.merged_env(
            [*lora_env, *vllm_secret_env(name), *streamer_env, *format_env], pool
        ),
        **env_from,
        "resources": replica_pod.engine_resources(pool),
        **replica_pod.engine_probes(pool),
        **drain,
        "securityContext": replica_pod.container_security(read_only_root=False),
        "volumeMounts": [
            *shared_mounts,
            {"name": "dshm", "mountPath": "/dev/shm"},  # noqa: S108 (vLLM's shared memory)
        ],
    }
    agent = {
        "name": "agent",
        "image": engine.image,
        "command": [replica_pod.PYTHON, "-m", "lorafleet_agent"],
        "env": replica_pod.merged_env(_agent_env(pool, inside, merge, log_format), pool),
        **env_from,
        "ports": [
            {"name": "data", "containerPort": DATA_PORT},
            {"name": INTERNAL_PORT_NAME, "containerPort": INTERNAL_PORT},
        ],
        "resources": {k: dict(v) for k, v in template.agent_resources.items()},
        **replica_pod.agent_probes(INTERNAL_PORT_NAME),
        **drain,
        "securityContext": replica_pod.container_security(read_only_root=True),
        "volumeMounts": [
            {"name": "podinfo", "mountPath": PODINFO_DIR, "readOnly": True},
            *shared_mounts,
            {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 (read-only root: a scratch dir)
        ],
    }
    pod_meta: dict[str, Any] = {
        "labels": replica_pod.merged_labels(labels, template.metadata.labels),
        "annotations": dict(template.metadata.annotations) or None,
    }
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(pool, namespace),
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            # Replicas are independent: start and stop them in parallel, not one by one.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": pod_meta,
                "spec": {
                    # Null when unset, so a merge patch removes it (see template_pod_fields).
                    "initContainers": [_fetch_merged(pool, merge, shared_mounts)]
                    if merge is not None
                    else None,
                    "containers": [vllm, agent],
                    **replica_pod.template_pod_fields(pool, inside.service_account),
                    "topologySpreadConstraints": replica_pod.topology_spread(pool, labels),
                    "securityContext": replica_pod.pod_security(pool),
                    "terminationGracePeriodSeconds": replica_pod.grace_period_seconds(pool),
                    "volumes": [
                        {
                            "name": "podinfo",
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "annotations",
                                        "fieldRef": {"fieldPath": "metadata.annotations"},
                                    }
                                ]
                            },
                        },
                        {
                            "name": "cache",
                            "emptyDir": {"sizeLimit": str(pool.spec.cache.disk_bytes)},
                        },
                        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
                        *template.volumes,
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(pool, namespace),
        "spec": {
            "clusterIP": "None",
            "selector": labels,
            "ports": [
                {"name": "data", "port": DATA_PORT, "targetPort": "data"},
                {
                    "name": INTERNAL_PORT_NAME,
                    "port": INTERNAL_PORT,
                    "targetPort": INTERNAL_PORT_NAME,
                },
            ],
        },
    }
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(pool, namespace),
        # Default one replica at a time: its adapters' other owners keep them warm meanwhile.
        "spec": {
            "maxUnavailable": pool.spec.disruption_budget.max_unavailable,
            "selector": {"matchLabels": labels},
        },
    }
    return PoolObjects(statefulset=statefulset, service=service, pdb=pdb)
