"""Shared parts of the CR models: patterns, the camelCase base, conditions, metadata."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from pydantic.alias_generators import to_camel

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
SHA256_REF = r"^sha256:[0-9a-f]{64}$"
WEIGHTS_URI = r"^(s3|file)://.+$"
# tenant/name:tag — the public model name a client sends.
_NAME_PART = r"[a-z0-9]([-a-z0-9._]{0,61}[a-z0-9])?"
# An adapter's name within its tenant (`lorafleet adapter push --name`): the middle of its
# public model names, a folder in the store and a label value, so it must be all three.
ADAPTER_NAME = rf"^{_NAME_PART}$"
ALIAS_MODEL = rf"^[a-z0-9]([-a-z0-9]{{0,61}}[a-z0-9])?/{_NAME_PART}:{_NAME_PART}$"
MODULE_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
CONDITION_MESSAGE_MAX = 32768  # Condition.message's maxLength (planners cut longer ones)


def immutable(what: str) -> dict[str, Any]:
    """`json_schema_extra` of a field the API server refuses to change (a CEL transition rule);
    `what` finishes the message: what to do instead."""
    return {"x-kubernetes-validations": [{"rule": "self == oldSelf", "message": what}]}


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


def first_error(exc: ValidationError) -> str:
    """The first problem of a refused object as `field.path: what is wrong` (a message)."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    return f"{where}: {err['msg']}" if where else str(err["msg"])


# Upper bounds of size fields, so that none takes a number the API server cannot hold (int64)
# or no disk, adapter or engine has: 2^50 bytes (1 PiB), 2^24 tokens of context.
MAX_BYTES = 2**50
MAX_MODEL_LEN = 2**24


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


class SpecModel(CamelModel):
    """Base of what users write (specs): types as strict as the CRD's.

    The API server refuses `rank: "8"` or `gpuSlots: true`; pydantic's lax mode would turn
    them into 8 and 1, so the operator (the only check in standalone mode and under kmock)
    accepted what a cluster refuses (found by tests/operator/test_cr_validation_properties.py).
    Statuses stay lax: they are read back from JSON, timestamps as strings.
    """

    model_config = ConfigDict(strict=True)


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
        max_length=CONDITION_MESSAGE_MAX,
    )
    last_transition_time: datetime = Field(description="When status last changed (RFC 3339).")
    observed_generation: int | None = Field(
        default=None, ge=0, description="metadata.generation the condition was computed for."
    )


class ObjectMeta(BaseModel):
    """The subset of metadata lorafleet reads; everything else passes through untouched."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(pattern=DNS_SUBDOMAIN, max_length=253)
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    generation: int | None = None
