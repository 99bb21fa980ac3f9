"""Registering an adapter version from the design's body, with every reason it would be refused.

The fine-tuning pipeline posts `adapter_id, tenant, version, base_model_hash, rank, alpha,
target_modules, weights_uri, checksum` (and optionally `size_bytes`) to the control API. The
same checks as everywhere else decide, answered at once instead of in a status later:

1. the object name as the API server checks it (a DNS subdomain);
2. the CRD's schema and CEL rules (lorafleet_core.api.crd_validation, what the API server runs);
3. the model's own validators (lorafleet_core.planning.adapters.parse_adapter, what the
   operator runs on whatever slipped past the API server);
4. the pools (planning.adapters.pool_problems): base-model hash, rank, target modules, URI
   scheme. With no pool at all nothing can be said yet and the adapter is accepted (Pending,
   as the operator would leave it).

Versions are immutable: `compare` tells an identical re-registration (idempotent) from a
conflicting one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from lorafleet_core.api import names
from lorafleet_core.api.adapter_manifest import adapter_manifest
from lorafleet_core.api.crd_validation import schema_of, validate
from lorafleet_core.api.models import ADAPTER_NAME, DNS_SUBDOMAIN, LoRAAdapterSpec, ReplicaPool
from lorafleet_core.api.reasons import BASE_MODEL_MISMATCH
from lorafleet_core.planning.adapters import Validation, parse_adapter, parse_pools, pool_problems


class AdapterRegistration(BaseModel):
    """The control API's body for `POST /internal/adapters` (snake_case, as the design names it).

    Types only; every value rule is the CRD's, checked by `problems` so that all of them are
    reported together.
    """

    # Strict as the CRD is: `rank: true` or `"8"` is refused, never coerced to 1 or 8.
    model_config = ConfigDict(extra="forbid", strict=True)

    adapter_id: str = Field(description="LoRAAdapter name: one immutable adapter version.")
    tenant: str = Field(description="Tenant (customer) owning the adapter; a DNS label.")
    version: str = Field(description="Version label, e.g. v3.")
    base_model_hash: str = Field(description="sha256:<hex> of the base model it was trained on.")
    rank: int = Field(description="LoRA rank; must not exceed the pool's maxRank.")
    alpha: float = Field(description="LoRA alpha.")
    target_modules: list[str] = Field(description="Projection modules the adapter modifies.")
    weights_uri: str = Field(description="s3://bucket/prefix/ or file:///path/ of the PEFT files.")
    checksum: str = Field(description="sha256:<hex> over the adapter files.")
    size_bytes: int | None = Field(default=None, description="Total size of the files (optional).")

    name: str | None = Field(
        default=None,
        description="The adapter's name, the middle of its public models (tenant/NAME:tag); "
        "labels the object as `lorafleet adapter push` does, so that `lorafleet canary` and "
        "`kubectl get -l lorafleet.dev/adapter-name=NAME` find it (optional).",
    )

    def manifest(self) -> dict[str, Any]:
        """The LoRAAdapter object this registration creates."""
        return adapter_manifest(
            object_name=self.adapter_id,
            tenant=self.tenant,
            version=self.version,
            adapter_name=self.name,
            base_hash=self.base_model_hash,
            rank=self.rank,
            alpha=self.alpha,
            target_modules=self.target_modules,
            weights_uri=self.weights_uri,
            checksum=self.checksum,
            size_bytes=self.size_bytes,
        )


def problems(body: Mapping[str, Any], pools: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every reason the fleet would refuse the LoRAAdapter `body`; [] when it is acceptable."""
    out: list[str] = []
    meta = body.get("metadata") or {}
    name = str(meta.get("name", ""))
    if len(name) > 253 or not re.fullmatch(DNS_SUBDOMAIN, name):
        out.append(f"adapter_id: {name!r} is not a DNS subdomain (lower-case, digits, '-', '.')")
    adapter_name = (meta.get("labels") or {}).get(names.LABEL_ADAPTER_NAME)
    if adapter_name is not None and not re.fullmatch(ADAPTER_NAME, str(adapter_name)):
        out.append(
            f"name: {adapter_name!r} must be 1-63 lower-case letters, digits, '-', '.' or '_', "
            "starting and ending with a letter or digit (the middle of tenant/NAME:tag)"
        )
    out += validate(schema_of(names.KIND_ADAPTER), dict(body))
    if out:
        return out
    parsed = parse_adapter(body)
    if isinstance(parsed, Validation):
        return [f"{parsed.reason}: {parsed.message}"]
    valid_pools = parse_pools(pools)
    if not valid_pools:
        return []
    by_pool = [pool_problems(parsed.spec, p) for p in sorted(valid_pools, key=_pool_name)]
    if any(not found for found in by_pool):
        return []  # some pool serves it
    # Report the first pool that shares its base model (what to fix there), else the first.
    chosen = next(
        (f for f in by_pool if all(v.reason != BASE_MODEL_MISMATCH for v in f)), by_pool[0]
    )
    return [f"{v.reason}: {v.message}" for v in chosen]


def _pool_name(pool: ReplicaPool) -> str:
    return pool.metadata.name


class Comparison(StrEnum):
    NEW = "new"
    IDENTICAL = "identical"
    CONFLICT = "conflict"


def compare(existing: Mapping[str, Any] | None, body: Mapping[str, Any]) -> Comparison:
    """Whether registering `body` creates, repeats or contradicts the stored version."""
    if existing is None:
        return Comparison.NEW
    try:
        old = LoRAAdapterSpec.model_validate(existing.get("spec") or {})
        new = LoRAAdapterSpec.model_validate(body.get("spec") or {})
    except ValidationError:
        return Comparison.CONFLICT
    return Comparison.IDENTICAL if _same_version(old, new) else Comparison.CONFLICT


def _same_version(old: LoRAAdapterSpec, new: LoRAAdapterSpec) -> bool:
    """Whether a re-registration states the stored version: targetModules is a set (any
    order), and sizeBytes, optional, is compared only when both state it (a retry that
    leaves it out is the same version)."""
    a, b = old.wire(), new.wire()
    for spec in (a, b):
        spec["targetModules"] = sorted(spec.get("targetModules") or [])
    if "sizeBytes" not in a or "sizeBytes" not in b:
        a.pop("sizeBytes", None)
        b.pop("sizeBytes", None)
    return a == b
