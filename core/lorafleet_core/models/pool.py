"""ReplicaPool: a scalable pool of vLLM replicas for one base model."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from lorafleet_core.models.common import (
    ALL_TARGET_MODULES,
    SHA256_REF,
    CamelModel,
    Condition,
    ModuleName,
    ObjectMeta,
    immutable,
)


class BaseModelRef(CamelModel):
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


class EngineSpec(CamelModel):
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
    extra_args: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(
        default_factory=list, max_length=64, description="Extra vLLM command-line arguments."
    )
    resources: dict[str, Any] = Field(
        default_factory=dict,
        description="Container resources (requests/limits), as in a Pod spec.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class ReplicaBounds(CamelModel):
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


class AutoscalingSpec(CamelModel):
    """Autoscaling on load scraped from the replicas' state endpoints."""

    enabled: bool = Field(default=True, description="Scale on scraped replica load.")
    target_tokens_in_flight: int = Field(
        default=4096, ge=1, description="Tokens in flight per replica the autoscaler aims for."
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


class CacheSpec(CamelModel):
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


class ReplicaPoolSpec(CamelModel):
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


class ReplicaPool(CamelModel):
    """A scalable pool of vLLM replicas serving one base model with many adapters.

    Short name: rpool.
    """

    api_version: Literal["lorafleet.dev/v1alpha1"] = "lorafleet.dev/v1alpha1"
    kind: Literal["ReplicaPool"] = "ReplicaPool"
    metadata: ObjectMeta
    spec: ReplicaPoolSpec = Field(
        description="Base model, engine, replica bounds, placement and autoscaling."
    )
    status: ReplicaPoolStatus | None = Field(
        default=None, description="Observed state, written by the operator."
    )
