"""Small builders of lorafleet objects for the operator tests (plain dicts and models)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

from lorafleet_core.api.models import AdapterAlias, LoRAAdapter, ReplicaPool
from lorafleet_core.planning.adapters import parse_adapter
from lorafleet_core.planning.fleet import AdapterEntry, PodView

BASE_HASH = "sha256:" + "b" * 64
OTHER_HASH = "sha256:" + "c" * 64
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


ADAPTER_SOURCE = "s3://adapters/"  # every factory pool's adapterSources; adapters lie under it


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def pool_body(name: str = "pool", base_hash: str = BASE_HASH, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "ReplicaPool",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "baseModel": {"name": "tiny-llama", "hash": base_hash, "uri": "/models/tiny"},
            "adapterSources": [ADAPTER_SOURCE],
        },
    }
    body["spec"].update(spec)
    return body


def pool(name: str = "pool", base_hash: str = BASE_HASH, **spec: Any) -> ReplicaPool:
    return ReplicaPool.model_validate(pool_body(name, base_hash, **spec))


def adapter_body(
    name: str,
    tenant: str = "acme",
    rank: int = 8,
    base_hash: str = BASE_HASH,
    modules: list[str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "tenant": tenant,
        "version": "v1",
        "baseModelHash": base_hash,
        "rank": rank,
        "alpha": 16,
        "targetModules": modules or ["q_proj", "v_proj"],
        "weightsUri": f"{ADAPTER_SOURCE}{tenant}/{name}/",
        "checksum": sha(name),
    }
    spec.update(extra)
    return {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "LoRAAdapter",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": spec,
    }


def adapter(name: str, **kw: Any) -> LoRAAdapter:
    return LoRAAdapter.model_validate(adapter_body(name, **kw))


def entry(name: str, **kw: Any) -> AdapterEntry:
    parsed = parse_adapter(adapter_body(name, **kw))
    assert isinstance(parsed, LoRAAdapter)
    return AdapterEntry(name=name, adapter=parsed)


def alias_body(
    name: str, model: str, target: str, tenant: str = "acme", age_s: int = 0
) -> dict[str, Any]:
    created = (T0 - timedelta(seconds=age_s)).isoformat().replace("+00:00", "Z")
    return {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "AdapterAlias",
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
        "spec": {"model": model, "tenant": tenant, "adapter": target},
    }


def alias(name: str, model: str, target: str, **kw: Any) -> AdapterAlias:
    return AdapterAlias.model_validate(alias_body(name, model, target, **kw))


def pod_views(pool_name: str, n: int, ready: bool = True) -> list[PodView]:
    return [PodView(f"{pool_name}-{i}", pool_name, ready) for i in range(n)]
