"""ReplicaPool: a scalable pool of vLLM replicas for one base model.

The pool's engine (`pool_engine`) and pod template (`pool_template`) have modules of their own.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, StringConstraints, WithJsonSchema, model_validator

from lorafleet_core.api.models.common import (
    MAX_BYTES,
    WEIGHTS_URI,
    CamelModel,
    Condition,
    ObjectMeta,
    SpecModel,
)
from lorafleet_core.api.models.merged import MergedSpec, MergeStatus
from lorafleet_core.api.models.pool_engine import BaseModelRef, EngineSpec
from lorafleet_core.api.models.pool_template import ReplicaPodTemplate


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
# 211 output = 1,366 tokens, so 12 x 1,366 = ~16,400: 16,384. A target of 4,096 (three such
# requests) sends every pool straight to replicas.max (docs/design/0011).
DEFAULT_TARGET_TOKENS_IN_FLIGHT = 16_384


class AutoscalingSpec(SpecModel):
    """Autoscaling on load scraped from the replicas' state endpoints."""

    enabled: bool = Field(default=True, description="Scale on scraped replica load.")
    target_tokens_in_flight: int = Field(
        default=DEFAULT_TARGET_TOKENS_IN_FLIGHT,
        ge=1,
        le=2**31 - 1,
        description="Tokens in flight (prompt + expected output of admitted requests) per "
        "replica the autoscaler aims for; the default is ~12 requests of 1,366 tokens, the "
        "load at which a replica meets p95 TTFT < 1 s at 8,000 prefill tokens/s.",
    )
    target_queue_depth: int = Field(
        default=8,
        ge=1,
        le=1_000_000,
        description="Queued requests per replica the autoscaler aims for.",
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
        default=50 * 2**30,
        ge=0,
        le=MAX_BYTES,
        description="Byte budget of the agent's disk cache (LRU; at most 2^50, 1 PiB).",
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


# A share of the replicas, as a PodDisruptionBudget takes it: "0%" to "100%".
PERCENT = r"^(100|[1-9]?[0-9])%$"
MAX_UNAVAILABLE = 1000
# A count or a percentage, as the PDB's own maxUnavailable (an IntOrString). The CRD gets the
# one untyped form a structural schema allows; OpenAPI applies minimum/maximum to integers
# only and pattern to strings only, so one node carries both branches' bounds.
MaxUnavailable = Annotated[
    Annotated[int, Field(ge=0, le=MAX_UNAVAILABLE)]
    | Annotated[str, StringConstraints(pattern=PERCENT)],
    WithJsonSchema(
        {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": True,
            "minimum": 0,
            "maximum": MAX_UNAVAILABLE,
            "pattern": PERCENT,
        }
    ),
]


class DisruptionBudgetSpec(SpecModel):
    """The PodDisruptionBudget of the pool's replicas (node drains, cluster upgrades)."""

    max_unavailable: MaxUnavailable = Field(
        default=1,
        description="Replicas a voluntary disruption may take down at once: a count (0 to "
        '1000) or a share of the replicas ("25%", rounded up by Kubernetes). 1 (default): '
        "one at a time, so every adapter keeps a warm owner with ownersPerAdapter >= 2; more "
        "drains a large pool faster at the price of cold adapters; 0 blocks node drains.",
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
        "another tenant's files or anywhere else. Empty: the pool takes no adapter (each "
        "stays Pending, NoAdapterSources).",
    )
    disruption_budget: DisruptionBudgetSpec = Field(
        default_factory=DisruptionBudgetSpec,
        description="The replicas' PodDisruptionBudget.",
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
