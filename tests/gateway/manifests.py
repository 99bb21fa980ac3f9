"""Manifest dicts for gateway tests (the same shapes `kubectl apply -f` takes)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from lorafleet_core.api.apikeys import TenantKeys, hash_key
from lorafleet_core.wire.records import AdapterRecord

BASE_HASH = "sha256:" + "b" * 64


ADAPTER_SOURCE = "file:///adapters/"  # every pool's adapterSources; adapter() lies under it


def checksum(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def adapter(
    name: str, tenant: str, *, status: dict[str, Any] | None = None, rank: int = 8
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "LoRAAdapter",
        "metadata": {"name": name},
        "spec": {
            "tenant": tenant,
            "version": "v1",
            "baseModelHash": BASE_HASH,
            "rank": rank,
            "alpha": 16,
            "targetModules": ["q_proj", "v_proj"],
            "weightsUri": f"{ADAPTER_SOURCE}{tenant}/{name}/",
            "checksum": checksum(name),
        },
    }
    if status is not None:
        obj["status"] = status
    return obj


def adapter_from_record(record: AdapterRecord, tenant: str) -> dict[str, Any]:
    """A LoRAAdapter manifest for a real adapter's registry record (files in moto S3)."""
    return {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "LoRAAdapter",
        "metadata": {"name": record.id},
        "spec": {
            "tenant": tenant,
            "version": "v1",
            "baseModelHash": record.base_model_hash,
            "rank": record.rank,
            "alpha": record.alpha,
            "targetModules": list(record.target_modules),
            "weightsUri": record.weights_uri,
            "checksum": record.checksum,
        },
    }


def alias(model: str, adapter_name: str, *, status: dict[str, Any] | None = None) -> dict[str, Any]:
    tenant = model.split("/", 1)[0]
    obj: dict[str, Any] = {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "AdapterAlias",
        "metadata": {"name": model.replace("/", "-").replace(":", "-")},
        "spec": {"model": model, "tenant": tenant, "adapter": adapter_name},
    }
    if status is not None:
        obj["status"] = status
    return obj


def pool(
    name: str = "default",
    owners: int = 2,
    *,
    max_rank: int | None = None,
    merged: str | None = None,
    merge: dict[str, Any] | None = None,
    base_hash: str = BASE_HASH,
) -> dict[str, Any]:
    """A ReplicaPool; `merged` names the adapter of a merged pool, `merge` its status.merge."""
    spec: dict[str, Any] = {
        "baseModel": {"name": "tiny", "hash": base_hash, "uri": "file:///model"},
        "ownersPerAdapter": owners,
        "adapterSources": [ADAPTER_SOURCE],
    }
    if max_rank is not None:
        spec["engine"] = {"maxRank": max_rank}
    if merged is not None:
        spec["merged"] = {"adapter": merged}
    obj: dict[str, Any] = {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "ReplicaPool",
        "metadata": {"name": name},
        "spec": spec,
    }
    if merge is not None:
        obj["status"] = {"merge": merge}
    return obj


def key_secret(tenant: str, key: str, **limits: Any) -> dict[str, Any]:
    return TenantKeys(tenant=tenant, key_hashes=(hash_key(key),), **limits).to_secret()


def write(folder: Path, name: str, docs: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    tmp.replace(path)  # atomic: the gateway never reads half a file
    return path


def write_fleet(
    folder: Path,
    tenant: str,
    key: str,
    records: Iterable[AdapterRecord],
    aliases: Mapping[str, str],
    **limits: Any,
) -> None:
    """One tenant's fleet: keys.yaml (`key`, with `limits`), adapters.yaml (a LoRAAdapter per
    real adapter's record) and aliases.yaml (model -> adapter id)."""
    write(folder, "keys.yaml", [key_secret(tenant, key, **limits)])
    write(folder, "adapters.yaml", [adapter_from_record(r, tenant) for r in records])
    write(folder, "aliases.yaml", [alias(k, v) for k, v in aliases.items()])


def replicas_doc(endpoints: dict[str, str], pools: dict[str, str] | None = None) -> dict[str, Any]:
    """The standalone replicas file; `pools` (replica id -> pool) adds each row's pool."""
    rows: list[dict[str, Any]] = []
    for rid, url in sorted(endpoints.items()):
        row: dict[str, Any] = {"id": rid, "dataUrl": url, "internalUrl": url}
        if pools and rid in pools:
            row["pool"] = pools[rid]
        rows.append(row)
    return {"replicas": rows}
