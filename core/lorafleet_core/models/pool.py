"""ReplicaPool: a scalable pool of vLLM replicas for one base model."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, StringConstraints, field_validator, model_validator

from lorafleet_core.kube_schemas import kube_field
from lorafleet_core.models.common import (
    ALL_TARGET_MODULES,
    SHA256_REF,
    WEIGHTS_URI,
    CamelModel,
    Condition,
    ModuleName,
    ObjectMeta,
    SpecModel,
    immutable,
)
from lorafleet_core.models.engine_args import (
    EXTRA_ARGS_MESSAGE,
    EXTRA_ARGS_RULE,
    RESERVED_FLAGS,
    check_extra_args,
)
from lorafleet_core.models.merged import MergedSpec, MergeStatus


class BaseModelRef(SpecModel):
    """The base model every replica of the pool serves."""

    name: str = Field(description="Display name of the base model.", min_length=1, max_length=253)
    hash: str = Field(
        description="sha256 of the base model, sha256:<64 hex>; adapters must match.",
        pattern=SHA256_REF,
        # Every adapter was validated against this hash: a new base model is a new pool.
        json_schema_extra=immutable(
            "baseModel.hash is immutable: a new base model is a new ReplicaPool"
        ),
    )
    uri: str = Field(
        description="Where replicas load the base model from (s3://, file:// or a "
        "path inside the image).",
        min_length=1,
        max_length=2048,
    )


TOOL_PARSER_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class EngineSpec(SpecModel):
    """How each replica runs vLLM: image, LoRA slots and the rank cap."""

    image: str = Field(
        default="ghcr.io/lorafleet/replica:0.1.0",
        description="Replica image (vLLM + lorafleet agent).",
        min_length=1,
        max_length=1024,
    )
    gpu_slots: int = Field(
        default=250, ge=1, le=4096, description="LoRA slots on the GPU (vLLM --max-loras)."
    )
    host_ram_slots: int = Field(
        default=1000,
        ge=1,
        le=65536,
        description="Adapters cached in host RAM (vLLM --max-cpu-loras).",
    )
    max_rank: int = Field(
        default=16, ge=1, le=256, description="Largest LoRA rank served (vLLM --max-lora-rank)."
    )
    allowed_target_modules: list[ModuleName] = Field(
        default_factory=lambda: list(ALL_TARGET_MODULES),
        description="Modules adapters may target; others are rejected.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    max_model_len: int | None = Field(
        default=None, ge=16, description="vLLM --max-model-len (optional)."
    )
    tool_call_parser: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        # vLLM's parser names (hermes, llama3_json, granite-20b-fc, ...) and a plugin's; the
        # operator has no vLLM to ask, and a typo fails the engine's start, which says so.
        pattern=TOOL_PARSER_NAME,
        description="vLLM tool-call parser for the base model (hermes, llama3_json, mistral, "
        "pythonic, ...): sets --enable-auto-tool-choice --tool-call-parser, so requests with "
        "tools and tool_choice auto, required or a named function are served. Unset: only "
        "tool_choice none.",
    )
    extra_args: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=list,
        max_length=64,
        description="Extra vLLM command-line arguments, after lorafleet's own. Flags lorafleet "
        "sets or refuses (" + ", ".join(f"--{f}" for f in RESERVED_FLAGS) + ") and "
        "abbreviations of them are refused.",
        json_schema_extra={
            "x-kubernetes-validations": [{"rule": EXTRA_ARGS_RULE, "message": EXTRA_ARGS_MESSAGE}]
        },
    )
    resources: dict[str, Any] = Field(
        default_factory=lambda: {
            "requests": {"cpu": "4", "memory": "32Gi"},
            "limits": {"memory": "32Gi"},
        },
        description="The vLLM container's resources (core/v1 ResourceRequirements). Default: "
        "requests cpu 4, memory 32Gi; limits memory 32Gi. The GPU is added from `gpus` and "
        "`gpuResource` unless the limits already name that resource.",
        json_schema_extra=kube_field("Container", "resources"),
    )
    gpus: int = Field(
        default=1,
        ge=0,
        le=16,
        description="GPUs per replica (limits[gpuResource]; 0 for a CPU-only pool). More than "
        "one also sets vLLM --tensor-parallel-size unless extraArgs does.",
    )
    gpu_resource: str = Field(
        default="nvidia.com/gpu",
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$",
        description="Extended resource name of the GPU (nvidia.com/gpu, amd.com/gpu, ...).",
    )
    startup_seconds: int = Field(
        default=1200,
        ge=30,
        le=7200,
        description="Longest a replica may take to load the base model before the kubelet "
        "restarts it (vLLM startupProbe budget: download, weights, CUDA graphs).",
    )
    drain_seconds: int = Field(
        default=120,
        ge=0,
        le=3600,
        description="On pod shutdown, how long running streams may finish before the "
        "containers are stopped (preStop drain; the grace period adds 30 s).",
    )

    _extra_args_checked = field_validator("extra_args")(check_extra_args)


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


class ReplicaBounds(SpecModel):
    """Replica count bounds; spec.replicas.desired is the scale subresource's target."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self.min <= self.max", "message": "replicas.min must be <= replicas.max"}
            ]
        }
    )

    min: int = Field(default=1, ge=0, le=1000, description="Fewest replicas the autoscaler keeps.")
    max: int = Field(default=4, ge=1, le=1000, description="Most replicas the autoscaler creates.")
    desired: int | None = Field(
        default=None,
        ge=0,
        le=1000,
        description="Replica count set through the scale subresource (kubectl scale). With "
        "autoscaling disabled it is the count; with autoscaling on it is the starting point. "
        "Always clamped to [min, max].",
    )

    @model_validator(mode="after")
    def _min_le_max(self) -> ReplicaBounds:
        if self.min > self.max:
            raise ValueError(f"replicas.min ({self.min}) must be <= replicas.max ({self.max})")
        return self


# Tokens in flight per replica the autoscaler aims for by default. A replica meets p95 TTFT
# < 1 s for every adapter at the design's 8,000 prefill tokens/s when it carries ~12 requests
# (`lorafleet sim --capacity`: 40 replicas for 40 requests/s, each request ~12 s in flight =
# ~480 in flight, 12 per replica); a request of the production trace holds 1,155 prompt +
# 211 output = 1,366 tokens, so 12 x 1,366 = ~16,400: 16,384. The earlier 4,096 was three
# such requests and sent every pool straight to replicas.max (docs/performance.md, "Ramp").
DEFAULT_TARGET_TOKENS_IN_FLIGHT = 16_384


class AutoscalingSpec(SpecModel):
    """Autoscaling on load scraped from the replicas' state endpoints."""

    enabled: bool = Field(default=True, description="Scale on scraped replica load.")
    target_tokens_in_flight: int = Field(
        default=DEFAULT_TARGET_TOKENS_IN_FLIGHT,
        ge=1,
        description="Tokens in flight (prompt + expected output of admitted requests) per "
        "replica the autoscaler aims for; the default is ~12 requests of 1,366 tokens, the "
        "load at which a replica meets p95 TTFT < 1 s at 8,000 prefill tokens/s.",
    )
    target_queue_depth: int = Field(
        default=8, ge=1, description="Queued requests per replica the autoscaler aims for."
    )
    poll_interval_seconds: float = Field(
        default=5.0, gt=0, le=300, description="How often replica state is scraped."
    )
    scale_up_stabilization_seconds: int = Field(
        default=30,
        ge=0,
        le=3600,
        description="Scale up only to the lowest recommendation seen over this window.",
    )
    scale_down_stabilization_seconds: int = Field(
        default=300,
        ge=0,
        le=86400,
        description="Scale down only to the highest recommendation seen over this window.",
    )


class CacheSpec(SpecModel):
    """Byte budgets of the agent's caches."""

    disk_bytes: int = Field(
        default=50 * 2**30, ge=0, description="Byte budget of the agent's disk cache (LRU)."
    )
    owned_annotation_max_bytes: int = Field(
        default=196_608,
        ge=1024,
        le=229_376,
        description="Largest owned-adapters annotation the operator writes on a pod; adapters "
        "past it are not pre-warmed and load on first request.",
    )


class AutoMergeSpec(SpecModel):
    """Whether the operator may create merged pools for this shared pool's hottest adapters."""

    enabled: bool = Field(
        default=False,
        description="Create a merged ReplicaPool (owned by the adapter) for an adapter whose "
        "sustained tokens/s exceeds the merge threshold (condition MergedPoolRecommended), "
        "scale it with that traffic, and delete it once the traffic stays low.",
    )
    max_pools: int = Field(
        default=2, ge=0, le=64, description="Most merged pools the operator creates for this pool."
    )
    cool_down_seconds: int = Field(
        default=1800,
        ge=0,
        le=7 * 86400,
        description="How long the recommendation must stay False (the adapter's sustained "
        "tokens/s below 80% of the threshold) before a merged pool the operator created "
        "starts draining.",
    )
    drain_seconds: int = Field(
        default=120,
        ge=0,
        le=86400,
        description="How long a draining merged pool (gateways no longer route to it; its "
        "adapter's traffic is back on this pool) keeps its replicas before the operator "
        "deletes it, so requests in flight finish.",
    )


class ReplicaPoolSpec(SpecModel):
    """A pool of identical replicas serving one base model and many adapters."""

    base_model: BaseModelRef = Field(description="The shared base model every adapter extends.")
    engine: EngineSpec = Field(default_factory=EngineSpec, description="vLLM engine settings.")
    replicas: ReplicaBounds = Field(
        default_factory=ReplicaBounds, description="Replica count bounds; scale subresource."
    )
    owners_per_adapter: int = Field(
        default=2, ge=1, le=16, description="Replicas that keep each adapter warm, at least."
    )
    autoscaling: AutoscalingSpec = Field(
        default_factory=AutoscalingSpec, description="Autoscaler targets and windows."
    )
    cache: CacheSpec = Field(default_factory=CacheSpec, description="Cache budgets.")
    adapter_sources: list[
        Annotated[str, StringConstraints(pattern=WEIGHTS_URI, max_length=2048)]
    ] = Field(
        default_factory=list,
        max_length=32,
        description="Object-store prefixes adapters may come from (s3://bucket/prefix/ or "
        "file:///path/): a LoRAAdapter's weightsUri must lie under <prefix>/<its tenant>/, "
        "the layout `lorafleet adapter push` writes, so no tenant can point a replica at "
        "another tenant's files or anywhere else. Empty: any s3:// or file:// location.",
    )
    template: ReplicaPodTemplate = Field(
        default_factory=ReplicaPodTemplate,
        description="Scheduling, identity, credentials and extra volumes of the replica pods.",
    )
    merged: MergedSpec | None = Field(
        default=None,
        description="Serve one adapter merged into the base weights (LoRA disabled) instead of "
        "many adapters; unset for a shared multi-LoRA pool.",
    )
    auto_merge: AutoMergeSpec = Field(
        default_factory=AutoMergeSpec,
        description="Shared pools only: let the operator create merged pools for adapters "
        "that fill a replica by themselves.",
    )


class ReplicaPoolStatus(CamelModel):
    """Written by the operator: replica counts and the autoscaler's last decision."""

    replicas: int | None = Field(default=None, ge=0, description="Replica pods that exist.")
    ready_replicas: int | None = Field(default=None, ge=0, description="Replica pods ready.")
    desired_replicas: int | None = Field(
        default=None, ge=0, description="What the autoscaler last decided."
    )
    selector: str | None = Field(
        default=None,
        max_length=4096,
        description="Label selector of the pool's pods (for the scale subresource).",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready and Scaling conditions with reasons and messages.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation last processed."
    )
    merge: MergeStatus | None = Field(
        default=None, description="Merged pools only: the merge step's progress and result."
    )


# A pool's name becomes a StatefulSet's, whose pods carry the label controller-revision-hash
# = `<name>-<10 chars>` (at most 63), and a headless Service's (a DNS-1035 label: a letter
# first, no dots). Kubernetes accepts longer or dotted names for both and then never starts a
# pod, or refuses the Service, long after the ReplicaPool was accepted: refused up front.
MAX_POOL_NAME = 52
POOL_NAME = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_POOL_NAME_MESSAGE = (
    f"a ReplicaPool's name names its StatefulSet and Service: at most {MAX_POOL_NAME} "
    "characters, lower-case letters, digits and '-', starting with a letter"
)


class ReplicaPool(CamelModel):
    """A scalable pool of vLLM replicas serving one base model with many adapters.

    Short name: rpool.
    """

    # The CRD's schema for metadata.name (the one metadata field a CRD may restrict).
    metadata_name_schema: ClassVar[dict[str, Any]] = {
        "description": _POOL_NAME_MESSAGE,
        "maxLength": MAX_POOL_NAME,
        "pattern": POOL_NAME,
    }

    api_version: Literal["lorafleet.dev/v1alpha1"] = "lorafleet.dev/v1alpha1"
    kind: Literal["ReplicaPool"] = "ReplicaPool"
    metadata: ObjectMeta
    spec: ReplicaPoolSpec = Field(
        description="Base model, engine, replica bounds, placement and autoscaling."
    )
    status: ReplicaPoolStatus | None = Field(
        default=None, description="Observed state, written by the operator."
    )

    @model_validator(mode="after")
    def _name_fits_its_objects(self) -> ReplicaPool:
        name = self.metadata.name
        if len(name) > MAX_POOL_NAME or not re.match(POOL_NAME.replace("$", r"\Z"), name):
            raise ValueError(f"metadata.name {name!r}: {_POOL_NAME_MESSAGE}")
        return self
