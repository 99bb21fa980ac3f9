"""The replica pods' template of a ReplicaPool (spec.template): scheduling, identity,
credentials and extra volumes, with the names and paths lorafleet keeps for itself."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from lorafleet_core.api.kube_schemas import kube_field
from lorafleet_core.api.models.common import SpecModel

# Names and paths the planner uses itself; a template entry may not take them.
RESERVED_VOLUMES = frozenset({"podinfo", "cache", "dshm", "tmp"})
RESERVED_MOUNT_PATHS = frozenset(
    {"/etc/lorafleet/podinfo", "/var/cache/lorafleet", "/dev/shm", "/tmp"}  # noqa: S108
)


class PodMetadata(SpecModel):
    """Extra labels and annotations of the replica pods (lorafleet's own keys win)."""

    labels: dict[str, str] = Field(default_factory=dict, description="Extra pod labels.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Extra pod annotations.")


def _items(max_items: int, description: str, kind: str, field: str, **extra: Any) -> Any:
    return Field(
        default_factory=list,
        max_length=max_items,
        description=description,
        json_schema_extra=kube_field(kind, field, **extra),
    )


def _not_reserved(item: str, key: str, reserved: frozenset[str], what: str) -> dict[str, Any]:
    """The CRD's mirror of ReplicaPodTemplate._no_reserved_names for one list: without it the
    API server accepts a pool edit the operator and the gateway refuse, and every adapter of
    the pool stops being served."""
    listed = ", ".join(f"'{r}'" for r in sorted(reserved))
    return {
        "rules": [
            {
                "rule": f"self.all({item}, !({item}.{key} in [{listed}]))",
                "message": f"{what} {listed.replace(chr(39), '')} are lorafleet's own",
            }
        ],
        "item_max_lengths": {key: 63 if key == "name" else 4096},
    }


class ReplicaPodTemplate(SpecModel):
    """What the replica pods carry besides the engine: scheduling, identity, credentials and
    extra volumes. Each field has the schema of the core/v1 Pod field of the same name; env,
    envFrom and volumeMounts go to both containers (vLLM and the agent)."""

    metadata: PodMetadata = Field(
        default_factory=PodMetadata, description="Pod labels/annotations."
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="Node labels the replica pods require (e.g. a GPU node pool).",
        json_schema_extra=kube_field("PodSpec", "nodeSelector"),
    )
    tolerations: list[dict[str, Any]] = _items(
        64, "Taints the pods tolerate (e.g. nvidia.com/gpu:NoSchedule).", "PodSpec", "tolerations"
    )
    affinity: dict[str, Any] | None = Field(
        default=None,
        description="Node and pod (anti-)affinity of the replica pods.",
        json_schema_extra=kube_field("PodSpec", "affinity"),
    )
    topology_spread_constraints: list[dict[str, Any]] = _items(
        16,
        "How replicas spread over zones/nodes.",
        "PodSpec",
        "topologySpreadConstraints",
    )
    priority_class_name: str | None = Field(
        default=None, max_length=253, description="PriorityClass of the replica pods."
    )
    service_account_name: str | None = Field(
        default=None,
        max_length=253,
        description="ServiceAccount of the pods (IRSA / workload identity for the object store).",
    )
    runtime_class_name: str | None = Field(
        default=None, max_length=253, description="RuntimeClass (e.g. nvidia)."
    )
    security_mode: Literal["image", "platform"] = Field(
        default="image",
        description="image: the pods run as the replica image's user (UID, GID and fsGroup "
        "10001); platform: the pods set none of them and the platform assigns them (OpenShift "
        "restricted-v2). Both keep runAsNonRoot, no privilege escalation, all capabilities "
        "dropped and the RuntimeDefault seccomp profile.",
    )
    image_pull_secrets: list[dict[str, Any]] = _items(
        16, "Secrets for pulling the engine image.", "PodSpec", "imagePullSecrets"
    )
    env: list[dict[str, Any]] = _items(
        128,
        "Extra environment of both containers (e.g. LORAFLEET_AGENT_S3_ENDPOINT_URL); the "
        "variables lorafleet sets itself win.",
        "Container",
        "env",
    )
    env_from: list[dict[str, Any]] = _items(
        16, "ConfigMaps/Secrets exported into both containers.", "Container", "envFrom"
    )
    volumes: list[dict[str, Any]] = _items(
        32,
        "Extra volumes (e.g. a shared model cache).",
        "PodSpec",
        "volumes",
        **_not_reserved("v", "name", RESERVED_VOLUMES, "volume names"),
    )
    volume_mounts: list[dict[str, Any]] = _items(
        32,
        "Mounts of the extra volumes, in both containers.",
        "Container",
        "volumeMounts",
        **_not_reserved("m", "mountPath", RESERVED_MOUNT_PATHS, "mount paths"),
    )
    agent_resources: dict[str, Any] = Field(
        default_factory=lambda: {
            "requests": {"cpu": "500m", "memory": "512Mi"},
            "limits": {"memory": "2Gi"},
        },
        description="The agent container's resources (default: requests cpu 500m, memory "
        "512Mi; limits memory 2Gi).",
        json_schema_extra=kube_field("Container", "resources"),
    )

    @model_validator(mode="after")
    def _no_reserved_names(self) -> ReplicaPodTemplate:
        taken = {v.get("name") for v in self.volumes} & RESERVED_VOLUMES
        paths = {m.get("mountPath") for m in self.volume_mounts} & RESERVED_MOUNT_PATHS
        if taken or paths:
            raise ValueError(
                f"template uses names/paths lorafleet reserves: {sorted(map(str, taken | paths))}"
            )
        return self
