"""LoRAAdapter: one immutable adapter version of a tenant."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from lorafleet_core.api.models.common import (
    DNS_LABEL,
    MAX_BYTES,
    MODULE_NAME,
    SHA256_REF,
    WEIGHTS_URI,
    CamelModel,
    Condition,
    ModuleName,
    ObjectMeta,
    ReplicaId,
    SpecModel,
)


class AdapterPhase(StrEnum):
    PENDING = "Pending"
    READY = "Ready"
    REJECTED = "Rejected"
    FAILED = "Failed"


class LoRAAdapterSpec(SpecModel):
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
        description="sha256 over the adapter's files (see lorafleet_core.storage.adapter_files), "
        "as sha256:<64 hex>.",
        pattern=SHA256_REF,
    )
    size_bytes: int | None = Field(
        default=None,
        ge=0,
        le=MAX_BYTES,
        description="Total size of the adapter files in bytes (optional).",
    )

    @model_validator(mode="after")
    def _modules_are_names(self) -> LoRAAdapterSpec:
        import re

        bad = [m for m in self.target_modules if not re.fullmatch(MODULE_NAME, m)]
        if bad:
            raise ValueError(f"targetModules must be Python identifiers, got {bad}")
        if len(set(self.target_modules)) != len(self.target_modules):
            raise ValueError("targetModules must not repeat a module")
        return self


class AdapterStats(CamelModel):
    """The adapter's traffic across the fleet over the last minute, as the operator last wrote it.

    Written at most once a minute per adapter and only on a meaningful change
    (lorafleet_core.planning.adapter_stats), so steady traffic costs no writes.
    """

    requests_per_minute: int = Field(
        ge=0, description="Requests over the last minute, all replicas."
    )
    tokens_per_second: float = Field(ge=0, description="Tokens/s served, all replicas.")
    gpu_hit_rate: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Share of requests that found the adapter in a GPU slot; unset when idle.",
    )
    replicas: int = Field(ge=0, description="Replicas that served it in the window.")
    updated_at: datetime = Field(description="When these figures were written (RFC 3339).")


class Placement(CamelModel):
    """Where one copy of the adapter is: a replica, its role there, the tier it sits in."""

    replica: ReplicaId = Field(description="Replica id (pod name).")
    role: Literal["owner", "spill"] = Field(
        description="owner: placement assigns it here; spill: loaded here on demand."
    )
    tier: Literal["gpu", "ram", "disk", "remote"] = Field(
        description="Where the replica holds it (remote: an owner that has not fetched it yet)."
    )
    last_used: datetime | None = Field(
        default=None, description="Last time a request for it was seen on this replica."
    )


MAX_PLACEMENTS = 32
MAX_OWNERS = 256  # status.owners' bound; the owner-count planner never plans more


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
        max_length=MAX_OWNERS,
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
    stats: AdapterStats | None = Field(
        default=None, description="Traffic over the last minute (requests, tokens/s, GPU hits)."
    )
    placements: list[Placement] = Field(
        default_factory=list,
        max_length=MAX_PLACEMENTS,
        description="Where the adapter is: owners first, then by tier (at most 32; refreshed "
        "with the stats, at most once a minute, and whenever the owners change).",
    )


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
