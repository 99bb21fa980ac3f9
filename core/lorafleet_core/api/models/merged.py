"""ReplicaPool merged mode: spec.merged (the one adapter served merged) and status.merge."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from lorafleet_core.api.models.common import (
    SHA256_REF,
    WEIGHTS_URI,
    AdapterName,
    CamelModel,
    SpecModel,
)


class MergedSpec(SpecModel):
    """Merged mode: the pool serves one adapter merged into the base weights, LoRA disabled.

    For a tenant whose own traffic fills replicas: merged serving runs at base-model speed but
    serves only this adapter. A merge step (PEFT merge_and_unload, run as a Job) writes the
    merged weights to the object store; status.merge shows its progress and checksum.
    """

    adapter: AdapterName = Field(
        description="Name of the LoRAAdapter (same namespace) to merge and serve. Its "
        "baseModelHash must equal this pool's baseModel.hash. Changing it merges the new "
        "version and rolls the replicas over to it."
    )


class MergePhase(StrEnum):
    PENDING = "Pending"
    MERGING = "Merging"
    READY = "Ready"
    FAILED = "Failed"


class MergeStatus(CamelModel):
    """Progress of the merge step of a merged pool (written by the operator)."""

    phase: MergePhase = Field(
        description="Pending (waiting for the adapter or the Job), Merging (the Job runs), "
        "Ready (merged weights stored; replicas serve them), Failed (see message)."
    )
    adapter_id: str | None = Field(
        default=None, max_length=253, description="The LoRAAdapter merged (spec.merged.adapter)."
    )
    adapter_checksum: str | None = Field(
        default=None,
        pattern=SHA256_REF,
        description="spec.checksum of the LoRAAdapter that was merged: the merge is Ready only "
        "for that content. An adapter recreated under the same name with other weights has "
        "another checksum, so the pool merges again and serves nothing merged meanwhile.",
    )
    checksum: str | None = Field(
        default=None,
        pattern=SHA256_REF,
        description="sha256:<hex> of the merged model folder "
        "(lorafleet_core.storage.merged_weights); replicas verify it before serving.",
    )
    uri: str | None = Field(
        default=None,
        pattern=WEIGHTS_URI,
        max_length=2048,
        description="Where the merged weights are: a content-addressed prefix ending in the "
        "checksum's hex.",
    )
    message: str = Field(default="", max_length=32768, description="What happened, in words.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation this merge status is for."
    )
