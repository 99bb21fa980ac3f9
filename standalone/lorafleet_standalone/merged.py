"""Merged pools in standalone mode: the merge as a local step, then the pool's own replica.

A merged ReplicaPool in the manifests folder (`spec.merged.adapter`, the same YAML a cluster
takes) is planned by the operator's own rules (lorafleet_core.planning.merge_job.plan_merge:
the adapter must exist and share the pool's base model hash); `lorafleet up` then runs the
merge step (lorafleet_agent.merge_job) on this machine instead of a Job, storing the result
under `<state>/merged-store/<hex>/` (the same content-addressed layout as the object store),
fetches and verifies it as a replica's init container does, and starts the pool's replica:
vLLM on the merged folder without LoRA, served under the adapter's id, and an agent in merged
mode. A merge already done for the same adapter content and base model is reused
(`index.json`, keyed by the adapter's checksum).

The merge is of the adapter's content: status.merge records the adapter's checksum, and while
`up` runs, a merged pool whose adapter changed content (deleted and recreated under the same
name with other weights, or the pool's `spec.merged.adapter` edited) is stopped and merged
again (`changed_merges`, applied by standalone.auto_merge); the gateway sends the adapter to the
shared pool meanwhile, since its catalog takes a merged pool only for the content it merged.

The pure part (`plan_merged_pools`) is separate from the I/O (`merge_locally`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from lorafleet_core.api import names
from lorafleet_core.api.models import LoRAAdapter, MergePhase, MergeStatus, ReplicaPool
from lorafleet_core.planning.adapters import parse_adapter
from lorafleet_core.planning.merge_job import plan_merge
from lorafleet_core.storage.manifests import ManifestSet, atomic_write
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_standalone.planning import Problem
from lorafleet_standalone.processes import ReplicaPlan
from lorafleet_standalone.supervisor import Child

STORE_DIR = "merged-store"
MERGED_DIR = "merged"
INDEX_FILE = "index.json"


@dataclass(frozen=True)
class MergedPoolPlan:
    """One merged pool of the folder: what to merge, or why it cannot be."""

    pool: ReplicaPool
    record: AdapterRecord | None  # None: `problem` says why nothing is merged
    problem: Problem | None = None

    @property
    def name(self) -> str:
        return self.pool.metadata.name


@dataclass(frozen=True)
class MergedRun:
    """A merged pool `lorafleet up` started: its merge, its replicas and their processes."""

    pool: str
    status: MergeStatus
    replicas: list[ReplicaPlan]
    children: list[Child] = field(default_factory=list)


def plan_merged_pools(manifests: ManifestSet) -> list[MergedPoolPlan]:
    """The folder's merged pools, each with the record to merge or the refusal (pure)."""
    adapters: dict[str, LoRAAdapter] = {}
    for obj in manifests.of_kind(names.KIND_ADAPTER):
        parsed = parse_adapter(obj.body)
        if isinstance(parsed, LoRAAdapter):
            adapters.setdefault(obj.name, parsed)
    out = []
    for obj in manifests.of_kind(names.KIND_POOL):
        try:
            pool = ReplicaPool.model_validate({**obj.body, "status": None})
        except ValidationError:
            continue  # reported by planning.plan like any invalid pool
        if pool.spec.merged is None:
            continue
        wanted = pool.spec.merged.adapter
        decision = plan_merge(pool, adapters.get(wanted), None, None)
        if not decision.create_job:
            message = f"{decision.reason}: {decision.status.message}"
            problem = Problem(obj.path.name, names.KIND_POOL, pool.metadata.name, message)
            out.append(MergedPoolPlan(pool, None, problem))
            continue
        out.append(MergedPoolPlan(pool, AdapterRecord.from_spec(wanted, adapters[wanted].spec)))
    return sorted(out, key=lambda p: p.name)


@dataclass(frozen=True)
class ChangedMerge:
    """A running merged pool whose weights are no longer of the adapter its pool names."""

    run: MergedRun
    why: str


def changed_merges(
    runs: Sequence[MergedRun], plans: Sequence[MergedPoolPlan]
) -> list[ChangedMerge]:
    """The running merged pools whose merged weights are not of the adapter the folder names
    now (`plans`: plan_merged_pools of the folder): another adapter, another checksum under the
    same name, or none that can be merged (pure). A pool gone from the folder is not listed
    (autoMerge's delete stops it)."""
    by_name = {p.name: p for p in plans}
    out = []
    for run in runs:
        p = by_name.get(run.pool)
        if p is None:
            continue
        if p.record is None:
            out.append(ChangedMerge(run, f"its adapter cannot be merged now: {p.problem}"))
        elif (p.record.id, p.record.checksum) != (
            run.status.adapter_id,
            run.status.adapter_checksum,
        ):
            why = (
                f"LoRAAdapter {p.record.id} has checksum {p.record.checksum}; the merged weights "
                f"are of {run.status.adapter_id} {run.status.adapter_checksum}"
            )
            out.append(ChangedMerge(run, why))
    return out


def _index_key(record: AdapterRecord, base_hash: str) -> str:
    # The merge is a function of the adapter's bytes and the base model's.
    return f"{record.checksum}+{base_hash}"


def merge_locally(plan: MergedPoolPlan, base_model_dir: Path, state_dir: Path) -> MergeStatus:
    """Run the merge step here (or reuse an earlier result); returns the Ready status.

    Raises lorafleet_agent.merge_job.MergeError (refused: reason and message) or the store's
    FetchError; the merged folder is `merged_folder(state_dir, status.checksum)`.
    """
    from lorafleet_agent.merge_job import run_merge
    from lorafleet_agent.merged_model import ensure_merged
    from lorafleet_agent.object_store import ObjectStore, ObjectStoreConfig
    from lorafleet_agent.settings import AgentSettings

    assert plan.record is not None
    s = AgentSettings()  # the object store settings agents use (LORAFLEET_AGENT_S3_*)
    store = ObjectStore(
        ObjectStoreConfig(
            s.s3_endpoint_url, s.s3_region, s.s3_access_key_id, s.s3_secret_access_key
        )
    )
    base_hash = plan.pool.spec.base_model.hash
    index_path = state_dir / MERGED_DIR / INDEX_FILE
    index: dict[str, dict[str, str]] = (
        json.loads(index_path.read_text()) if index_path.is_file() else {}
    )
    key = _index_key(plan.record, base_hash)
    done = index.get(key)
    if done is None:
        result = run_merge(
            plan.record,
            base_model=str(base_model_dir),
            pool_base_hash=base_hash,
            store_prefix=f"file://{(state_dir / STORE_DIR).resolve()}",
            store=store,
            work_dir=state_dir / MERGED_DIR / "work",
        )
        done = {"checksum": result.checksum, "uri": result.uri}
        index[key] = done
        index_path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(index_path, json.dumps(index, indent=2, sort_keys=True) + "\n")
    ensure_merged(store, done["uri"], done["checksum"], merged_folder(state_dir, done["checksum"]))
    return MergeStatus(
        phase=MergePhase.READY,
        adapter_id=plan.record.id,
        adapter_checksum=plan.record.checksum,
        checksum=done["checksum"],
        uri=done["uri"],
        message="merged locally by `lorafleet up`",
    )


def merged_folder(state_dir: Path, checksum: str) -> Path:
    """Where the merged pool's replicas read the verified merged weights."""
    return state_dir / MERGED_DIR / checksum.removeprefix("sha256:")


def replicas_file_doc(replicas: list[ReplicaPlan], merged: list[MergedRun]) -> dict[str, Any]:
    """The replicas file: the shared pool's replicas, and each merged pool's under its name
    (`mergedPools`, which readers of `replicas` alone ignore: a merged replica serves only
    its adapter, so it must never be taken for a shared one)."""

    def rows(rs: list[ReplicaPlan]) -> list[dict[str, str]]:
        return [{"id": r.id, "dataUrl": r.data_url, "internalUrl": r.internal_url} for r in rs]

    doc: dict[str, Any] = {"replicas": rows(replicas)}
    if merged:
        doc["mergedPools"] = {
            m.pool: {
                "merged": {"adapterId": m.status.adapter_id, "checksum": m.status.checksum},
                "replicas": rows(m.replicas),
            }
            for m in merged
        }
    return doc


def up_rows(merged: list[MergedRun]) -> list[dict[str, Any]]:
    """up.json's `mergedPools`: each merged pool with its adapter, checksum and replicas (what
    `lorafleet status` lists and probes)."""
    return [
        {
            "pool": m.pool,
            "adapter": m.status.adapter_id,
            "checksum": m.status.checksum,
            "replicas": [up_replica_row(r) for r in m.replicas],
        }
        for m in merged
    ]


def up_replica_row(r: ReplicaPlan) -> dict[str, str]:
    """One replica in up.json (shared or merged): where `lorafleet status` asks it."""
    return {"id": r.id, "dataUrl": r.data_url, "internalUrl": r.internal_url, "vllmUrl": r.vllm_url}
