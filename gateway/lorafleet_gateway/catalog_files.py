"""Catalog from a folder of YAML manifests (standalone mode).

The folder holds what `kubectl apply -f` would take: LoRAAdapter, AdapterAlias, ReplicaPool
and tenant key Secrets (label `lorafleet.dev/api-keys: "true"`, see lorafleet_core.api.apikeys),
read by `lorafleet_core.storage.manifests` (the same reader, with the same rules, as the CLI and the
standalone reconciler use).

Alias status: on a cluster the gateway serves an alias's `status.adapter`, which the operator
advances only to a target that is Ready, so a bad deploy keeps the last good adapter serving.
Standalone mode's reconciler runs the same planner and keeps those statuses in
`<folder>/.lorafleet/alias-status.json` (lorafleet_core.storage.standalone_state); when that file
has an
entry for an alias it is served exactly like a cluster status. An alias with no entry (nobody
reconciles the folder) serves its spec.adapter. A merged pool's `status.merge` likewise comes
from `<folder>/.lorafleet/merge-status.json` (written by `lorafleet up`'s merge step) when the
manifest carries none, so the merged pool serves its adapter once that merge is Ready.

Replica endpoints come from `replicas.yaml` (or `replicas.json`) in the same folder, written by
the standalone supervisor (or the `replicas_file` setting), read by
lorafleet_core.storage.replica_endpoints:

    replicas:
      - id: replica-0
        dataUrl: http://127.0.0.1:8100
        internalUrl: http://127.0.0.1:8101
        pool: default          # optional; default: the gateway's own pool

The folder is re-read when any file's name, size or mtime changes, the status file's included
(checked every `catalog_reload_interval_s`), and the new snapshot is swapped in whole.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lorafleet_core.api.names import API_KEYS_SECRET_LABEL, KIND_ADAPTER, KIND_ALIAS, KIND_POOL
from lorafleet_core.storage.manifests import load_folder, manifest_files
from lorafleet_core.storage.replica_endpoints import (
    ReplicaEndpoint,
    read_replicas,
    replicas_file,
)
from lorafleet_core.storage.standalone_state import (
    alias_status_path,
    load_alias_statuses,
    load_merge_statuses,
    merge_status_path,
)
from lorafleet_gateway.catalog import CatalogHolder, CatalogSource
from lorafleet_gateway.catalog_build import build_snapshot

log = logging.getLogger(__name__)


def read_alias_statuses(folder: Path) -> dict[str, dict[str, Any]]:
    """Alias name -> status (wire form) kept by the standalone reconciler; {} when none.

    Raises ValueError for an unreadable file (see lorafleet_core.storage.standalone_state).
    """
    return {name: st.wire() for name, st in load_alias_statuses(folder).items()}


def with_merge_status(pool: dict[str, Any], merges: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The pool's manifest with the stored merge status as `status.merge` (the manifest's own
    `status.merge`, if any, wins: it is what a user applied)."""
    name = str((pool.get("metadata") or {}).get("name", ""))
    raw = pool.get("status")
    status: dict[str, Any] = dict(raw) if isinstance(raw, Mapping) else {}
    if name not in merges or status.get("merge"):
        return pool
    return {**pool, "status": {**status, "merge": merges[name]}}


class FileCatalog(CatalogSource):
    def __init__(
        self,
        holder: CatalogHolder,
        folder: Path,
        *,
        pool: str | None = None,
        replicas_file: Path | None = None,
        interval_s: float = 1.0,
        pools: tuple[str, ...] = (),
    ) -> None:
        super().__init__(holder)
        self.folder = folder
        self.pool = pool
        self.pools = pools
        self.replicas_file = replicas_file
        self.interval_s = interval_s
        self._fingerprint: tuple[tuple[str, int, int], ...] | None = None
        self._version = 0

    def _replicas_path(self) -> Path | None:
        if self.replicas_file is not None:
            return self.replicas_file
        return replicas_file(self.folder)

    def _fingerprint_now(self) -> tuple[tuple[str, int, int], ...]:
        paths = manifest_files(self.folder)
        rp = self._replicas_path()
        if rp is not None and rp.is_file():
            paths.append(rp)
        # Skipped below while they do not exist.
        paths += [alias_status_path(self.folder), merge_status_path(self.folder)]
        out = []
        for p in paths:
            try:
                st = p.stat()
            except FileNotFoundError:
                continue
            out.append((str(p), st.st_size, st.st_mtime_ns))
        return tuple(out)

    def changed(self) -> bool:
        """Whether the folder differs from the last snapshot built (blocking; run in a thread)."""
        return self._fingerprint_now() != self._fingerprint

    def build(self) -> None:
        """Read the folder and swap in a new snapshot (blocking; run in a thread)."""
        fingerprint = self._fingerprint_now()
        alias_statuses = read_alias_statuses(self.folder)
        merges = {n: st.wire() for n, st in load_merge_statuses(self.folder).items()}
        adapters, aliases, secrets, pools = [], [], [], []
        manifests = load_folder(self.folder)
        for err in manifests.errors:
            log.warning("skipping unreadable manifest %s: %s", err.path, err.message)
        for obj in manifests.objects:
            doc, kind = obj.body, obj.kind
            labels = (doc.get("metadata") or {}).get("labels") or {}
            if kind == KIND_ADAPTER:
                adapters.append(doc)
            elif kind == KIND_ALIAS:
                aliases.append(doc)
            elif kind == KIND_POOL:
                pools.append(with_merge_status(doc, merges))
            elif kind == "Secret" and str(labels.get(API_KEYS_SECRET_LABEL)) == "true":
                secrets.append(doc)
        replicas: list[ReplicaEndpoint] = []
        rp = self._replicas_path()
        if rp is not None:
            replicas = read_replicas(rp)
        self._version += 1
        snapshot = build_snapshot(
            adapters=adapters,
            aliases=aliases,
            secrets=secrets,
            pools=pools,
            pool=self.pool,
            only_pools=self.pools,
            replicas=replicas,
            # Hand-written manifests carry no status: trust them (the agent still verifies
            # every adapter's checksum, base model and shapes before it serves it).
            allow_missing_status=True,
            version=self._version,
            alias_statuses=alias_statuses,
        )
        self.holder.swap(snapshot)
        self._fingerprint = fingerprint
        log.info(
            "catalog v%d: %d aliases, %d adapters, %d tenants, %d replicas",
            snapshot.version,
            len(snapshot.aliases),
            len(snapshot.adapters),
            len(snapshot.tenants),
            len(snapshot.replicas),
        )

    async def load_once(self) -> None:
        await asyncio.to_thread(self.build)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                if await asyncio.to_thread(self.changed):
                    await asyncio.to_thread(self.build)
            except Exception:  # keep serving the last good snapshot
                log.exception("catalog reload failed; keeping the previous snapshot")
