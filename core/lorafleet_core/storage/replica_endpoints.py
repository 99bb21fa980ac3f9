"""Where a replica's agent listens, and the standalone replicas file that says so.

The standalone supervisor writes `replicas.yaml` (or `replicas.json`) beside the manifests:

    replicas:
      - id: replica-0
        dataUrl: http://127.0.0.1:8100
        internalUrl: http://127.0.0.1:8101
        pool: default          # optional: the ReplicaPool the replica belongs to
    mergedPools:               # optional: merged pools' replicas, kept apart by pool
      zebra-merged:
        merged: {adapterId: demo-zebra-v1, checksum: "sha256:..."}
        replicas:
          - {id: zebra-merged-0, dataUrl: ..., internalUrl: ...}

A row under `mergedPools.<name>` belongs to pool <name> (a `pool` of its own is ignored), so
it is never taken for a replica of the shared pool. A row without `pool` belongs to the
gateway's own pool (its `pool` setting, or the folder's only ReplicaPool), so a file
written before pools existed means what it always meant.

The gateway's folder catalog (where requests go) and the control API (where load/unload/state
calls are forwarded) read it here, by the same rules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lorafleet_core.storage.manifests import REPLICA_FILES


@dataclass(frozen=True, slots=True)
class ReplicaEndpoint:
    """One replica: its stable id (pod name), the agent's data and internal base URLs, and
    the ReplicaPool it belongs to (None: the gateway's own pool)."""

    id: str
    data_url: str
    internal_url: str
    pool: str | None = None


def parse_replicas(data: Any) -> list[ReplicaEndpoint]:
    """Replica endpoints from the parsed replicas file (`{"replicas": [...]}` or a bare list),
    the merged pools' (`mergedPools`) included, each with its pool."""
    rows = data.get("replicas", []) if isinstance(data, Mapping) else data
    out = _rows(rows, None)
    merged = data.get("mergedPools") if isinstance(data, Mapping) else None
    if merged is None:
        return out
    if not isinstance(merged, Mapping):
        raise ValueError("`mergedPools` must map pool name -> {replicas: [...]}")
    for name, entry in merged.items():
        if not isinstance(entry, Mapping):
            raise ValueError(f"merged pool entry needs `replicas`: {name!r}: {entry!r}")
        out.extend(_rows(entry.get("replicas", []), str(name)))
    return out


def _rows(rows: Any, merged_pool: str | None) -> list[ReplicaEndpoint]:
    if not isinstance(rows, list):
        raise ValueError("replicas file must hold a list under `replicas`")
    out = []
    for row in rows:
        if not isinstance(row, Mapping) or not row.get("id") or not row.get("dataUrl"):
            raise ValueError(f"replica entry needs id and dataUrl: {row!r}")
        data_url = str(row["dataUrl"]).rstrip("/")
        internal = str(row.get("internalUrl") or data_url).rstrip("/")
        pool = merged_pool or row.get("pool")
        out.append(ReplicaEndpoint(str(row["id"]), data_url, internal, str(pool) if pool else None))
    return out


def replicas_file(folder: Path) -> Path | None:
    """The replicas file in a manifests folder, if there is one."""
    for name in REPLICA_FILES:
        if (folder / name).is_file():
            return folder / name
    return None


def read_replicas(path: Path) -> list[ReplicaEndpoint]:
    """The endpoints in a replicas file; raises ValueError (or OSError) when unreadable."""
    text = path.read_text()
    parsed = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    return parse_replicas(parsed)
