"""Pydantic models of lorafleet's custom resources: the one source of truth.

`crds/*.yaml` is generated from these models (see lorafleet_api.crds); a test fails when the
committed YAML drifts. Python attributes are snake_case; the wire format (and the YAML a user
writes) is camelCase, as everywhere in Kubernetes.

Constraints live twice on purpose: as pydantic validation (what the operator, gateway, CLI and
standalone mode enforce) and as OpenAPI/CEL in the CRD (what the API server enforces before any
lorafleet code runs). Cross-field rules are written as CEL in `json_schema_extra` and mirrored by
model validators here.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
SHA256_REF = r"^sha256:[0-9a-f]{64}$"
WEIGHTS_URI = r"^(s3|file)://.+$"
# tenant/name:tag — the public model name a client sends.
_NAME_PART = r"[a-z0-9]([-a-z0-9._]{0,61}[a-z0-9])?"
ALIAS_MODEL = rf"^[a-z0-9]([-a-z0-9]{{0,61}}[a-z0-9])?/{_NAME_PART}:{_NAME_PART}$"
MODULE_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"

# Bounded item types: the API server estimates CEL cost from maxLength, so every string a rule
# can reach carries one.
ModuleName = Annotated[str, StringConstraints(pattern=MODULE_NAME, max_length=128)]
ReplicaId = Annotated[str, StringConstraints(min_length=1, max_length=253)]
AdapterName = Annotated[str, StringConstraints(pattern=DNS_SUBDOMAIN, max_length=253)]

# The seven projections of a Llama-style decoder layer.
ALL_TARGET_MODULES: tuple[str, ...] = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)


class CamelModel(BaseModel):
    """Base: camelCase on the wire, snake_case in Python, unknown fields refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=False,
    )

    def wire(self) -> dict[str, Any]:
        """The object as Kubernetes stores it: camelCase keys, unset optionals left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(CamelModel):
    """One observation of an object's state, following Kubernetes API conventions."""

    type: str = Field(
        description="Condition type in CamelCase, e.g. Validated, Placed, Ready, Conflict.",
        pattern=r"^[A-Z][A-Za-z0-9]*$",
        max_length=316,
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(
        description="One CamelCase word a program can switch on, e.g. RankTooHigh.",
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        max_length=1024,
    )
    message: str = Field(
        default="",
        description="Human-readable details: what is wrong and how to fix it.",
        max_length=32768,
    )
    last_transition_time: datetime = Field(description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the condition was computed for."
    )


# ---------------------------------------------------------------------------------------------
# LoRAAdapter


class AdapterPhase(StrEnum):
    PENDING = "Pending"
    READY = "Ready"
    REJECTED = "Rejected"
    FAILED = "Failed"


class LoRAAdapterSpec(CamelModel):
    """One immutable adapter version. Publishing a new version means creating a new object."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self == oldSelf",
                    "message": "spec is immutable: publish a new version as a new LoRAAdapter",
                }
            ]
        }
    )

    tenant: str = Field(
        description="Tenant (customer) that owns the adapter; a DNS label.",
        pattern=DNS_LABEL,
        max_length=63,
    )
    version: str = Field(
        description="Version label of this adapter, e.g. v3 or 2026-11-29.",
        pattern=r"^[A-Za-z0-9]([-A-Za-z0-9._]{0,61}[A-Za-z0-9])?$",
        max_length=63,
    )
    base_model_hash: str = Field(
        description="sha256 of the base model the adapter was trained on, as sha256:<64 hex>. "
        "Must equal the ReplicaPool's spec.baseModel.hash.",
        pattern=SHA256_REF,
    )
    rank: int = Field(
        description="LoRA rank r (1-256); must not exceed the pool's maxRank.", ge=1, le=256
    )
    alpha: float = Field(description="LoRA alpha (scaling = alpha / rank).", gt=0, le=4096)
    target_modules: list[ModuleName] = Field(
        description="Projection modules the adapter modifies, e.g. q_proj, v_proj.",
        min_length=1,
        max_length=32,
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    weights_uri: str = Field(
        description="Where the PEFT adapter folder lives: s3://bucket/prefix/ or file:///path/. "
        "No other scheme is accepted.",
        pattern=WEIGHTS_URI,
        max_length=2048,
    )
    checksum: str = Field(
        description="sha256 over the adapter's files (see lorafleet_api.adapter_files), "
        "as sha256:<64 hex>.",
        pattern=SHA256_REF,
    )
    size_bytes: int | None = Field(
        default=None, ge=0, description="Total size of the adapter files in bytes (optional)."
    )

    @model_validator(mode="after")
    def _modules_are_names(self) -> LoRAAdapterSpec:
        import re

        bad = [m for m in self.target_modules if not re.match(MODULE_NAME, m)]
        if bad:
            raise ValueError(f"targetModules must be Python identifiers, got {bad}")
        if len(set(self.target_modules)) != len(self.target_modules):
            raise ValueError("targetModules must not repeat a module")
        return self


class LoRAAdapterStatus(CamelModel):
    """Written by the operator: validation outcome, placement and readiness."""

    phase: AdapterPhase | None = Field(
        default=None,
        description="Pending until validated and placed; Ready when servable; "
        "Rejected (final) when the spec can never be served; Failed on a retryable error.",
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Validated, Placed and Ready conditions with reasons and messages.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    owners: list[ReplicaId] = Field(
        default_factory=list,
        max_length=256,
        description="Replica ids that keep this adapter warm.",
    )
    owner_count: int | None = Field(
        default=None,
        ge=0,
        description="How many owners the adapter should have; grows with traffic.",
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation this status was computed for."
    )


# ---------------------------------------------------------------------------------------------
# AdapterAlias


class AdapterAliasSpec(CamelModel):
    """A public model name pointing at one LoRAAdapter. Changing `adapter` deploys."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "self.model.startsWith(self.tenant + '/')",
                    "message": "model must start with '<spec.tenant>/': an alias can only name "
                    "its own tenant's models",
                }
            ]
        }
    )

    model: str = Field(
        description="Public model name clients send, tenant/name:tag, e.g. acme/support:prod.",
        pattern=ALIAS_MODEL,
        max_length=191,
    )
    tenant: str = Field(
        description="Tenant that owns the alias; a DNS label.", pattern=DNS_LABEL, max_length=63
    )
    adapter: str = Field(
        description="Name of the LoRAAdapter (same namespace, same tenant) the alias serves.",
        pattern=DNS_SUBDOMAIN,
        max_length=253,
    )

    @model_validator(mode="after")
    def _model_in_tenant(self) -> AdapterAliasSpec:
        if not self.model.startswith(self.tenant + "/"):
            raise ValueError(
                f"model {self.model!r} must start with {self.tenant + '/'!r}: an alias can "
                "only name its own tenant's models"
            )
        return self


class AliasHistoryEntry(CamelModel):
    """One deploy of an alias."""

    adapter: str = Field(
        description="Adapter the alias pointed to.", pattern=DNS_SUBDOMAIN, max_length=253
    )
    at: datetime = Field(description="When the alias started pointing to it.")


class AdapterAliasStatus(CamelModel):
    """Written by the operator: what the alias serves now and its deploy history."""

    adapter: str | None = Field(
        default=None, description="Adapter currently served.", max_length=253
    )
    previous_adapter: str | None = Field(
        default=None,
        description="Adapter served before the last deploy (the rollback target).",
        max_length=253,
    )
    updated_at: datetime | None = Field(default=None, description="When adapter last changed.")
    history: list[AliasHistoryEntry] = Field(
        default_factory=list, max_length=10, description="Most recent deploys, newest first."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready, Conflict and target conditions with reasons and messages.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation last processed."
    )


# ---------------------------------------------------------------------------------------------
# ReplicaPool


class BaseModelRef(CamelModel):
    """The base model every replica of the pool serves."""

    name: str = Field(description="Display name of the base model.", min_length=1, max_length=253)
    hash: str = Field(
        description="sha256 of the base model, sha256:<64 hex>; adapters must match.",
        pattern=SHA256_REF,
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


# ---------------------------------------------------------------------------------------------
# Whole objects (what a manifest holds)


class ObjectMeta(BaseModel):
    """The subset of metadata lorafleet reads; everything else passes through untouched."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(pattern=DNS_SUBDOMAIN, max_length=253)
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    generation: int | None = None


class LoRAAdapter(CamelModel):
    """One immutable version of a tenant's LoRA adapter.

    Short name: lora. A new version is a new object; the spec never changes.
    """

    api_version: Literal["lorafleet.dev/v1alpha1"] = "lorafleet.dev/v1alpha1"
    kind: Literal["LoRAAdapter"] = "LoRAAdapter"
    metadata: ObjectMeta
    spec: LoRAAdapterSpec = Field(description="The adapter version; immutable once created.")
    status: LoRAAdapterStatus | None = Field(
        default=None, description="Observed state, written by the operator."
    )


class AdapterAlias(CamelModel):
    """A tenant's public model name (tenant/name:tag) pointing at one LoRAAdapter.

    Short name: alias. Changing spec.adapter deploys; setting it back rolls back.
    """

    api_version: Literal["lorafleet.dev/v1alpha1"] = "lorafleet.dev/v1alpha1"
    kind: Literal["AdapterAlias"] = "AdapterAlias"
    metadata: ObjectMeta
    spec: AdapterAliasSpec = Field(description="The public name and the adapter it serves.")
    status: AdapterAliasStatus | None = Field(
        default=None, description="Observed state, written by the operator."
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


AnyResource = LoRAAdapter | AdapterAlias | ReplicaPool
