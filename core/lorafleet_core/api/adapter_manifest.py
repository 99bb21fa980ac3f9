"""The one LoRAAdapter builder: what `lorafleet adapter push`, the demo and the control API's
registration write."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from lorafleet_core.api import names
from lorafleet_core.api.models import LoRAAdapter


def adapter_object_name(tenant: str, name: str, version: str) -> str:
    raw = f"{tenant}-{name}-{version}".lower()
    cleaned = re.sub(r"[^a-z0-9.-]+", "-", raw).strip("-.")
    return cleaned[:253]


def adapter_manifest(
    *,
    object_name: str,
    tenant: str,
    version: str,
    adapter_name: str | None,
    base_hash: str,
    rank: Any,
    alpha: Any,
    target_modules: Sequence[Any],
    weights_uri: str,
    checksum: str,
    size_bytes: int | None,
) -> dict[str, Any]:
    """The LoRAAdapter object as the API server receives it, not yet validated.

    Values are passed through as given (`Any`): the control API validates the whole object
    against the CRD afterwards, so that every problem is reported and none is coerced away.
    """
    labels = {names.LABEL_TENANT: tenant}
    if adapter_name is not None:
        labels[names.LABEL_ADAPTER_NAME] = adapter_name
    spec: dict[str, Any] = {
        "tenant": tenant,
        "version": version,
        "baseModelHash": base_hash,
        "rank": rank,
        "alpha": alpha,
        "targetModules": list(target_modules),
        "weightsUri": weights_uri,
        "checksum": checksum,
    }
    if size_bytes is not None:
        spec["sizeBytes"] = size_bytes
    return {
        "apiVersion": names.API_VERSION,
        "kind": names.KIND_ADAPTER,
        "metadata": {"name": object_name, "labels": labels},
        "spec": spec,
    }


def build_adapter(
    *,
    object_name: str,
    tenant: str,
    version: str,
    adapter_name: str,
    base_hash: str,
    rank: int,
    alpha: float,
    target_modules: Sequence[str],
    weights_uri: str,
    checksum: str,
    size_bytes: int | None,
) -> LoRAAdapter:
    """`adapter_manifest` as a validated LoRAAdapter; raises ValidationError."""
    return LoRAAdapter.model_validate(
        adapter_manifest(
            object_name=object_name,
            tenant=tenant,
            version=version,
            adapter_name=adapter_name,
            base_hash=base_hash,
            rank=rank,
            alpha=alpha,
            target_modules=target_modules,
            weights_uri=weights_uri,
            checksum=checksum,
            size_bytes=size_bytes,
        )
    )
