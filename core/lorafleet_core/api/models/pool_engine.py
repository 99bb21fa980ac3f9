"""A ReplicaPool's base model and how each replica runs vLLM (spec.baseModel, spec.engine)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints, field_validator

from lorafleet_core.api.kube_schemas import kube_field
from lorafleet_core.api.models.common import (
    ALL_TARGET_MODULES,
    MAX_MODEL_LEN,
    SHA256_REF,
    ModuleName,
    SpecModel,
    immutable,
)
from lorafleet_core.api.models.engine_args import (
    EXTRA_ARGS_MESSAGE,
    EXTRA_ARGS_RULE,
    RESERVED_FLAGS,
    check_extra_args,
)


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
        description="Where replicas load the base model from: file:///p or /p (a folder in "
        "the image or on a template volume), s3://bucket/prefix/ (streamed by vLLM, "
        "--load-format runai_streamer), or a Hugging Face id (given to vLLM as it is).",
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
        description="Modules adapters may target; others are rejected (at most 64).",
        max_length=64,  # an adapter targets at most 32 (LoRAAdapterSpec.target_modules)
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    max_model_len: int | None = Field(
        default=None,
        ge=16,
        le=MAX_MODEL_LEN,
        description="vLLM --max-model-len (optional; at most 2^24 tokens).",
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
