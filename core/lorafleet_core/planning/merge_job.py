"""Merged pools: the merge Job and status.merge (pure; the operator and standalone mode apply).

A merged ReplicaPool (`spec.merged.adapter`) serves one adapter merged into the base weights.
Before a replica can start, the merge step (lorafleet_agent.merge_job) must have produced
the merged weights and their checksum. On a cluster it runs as a Kubernetes Job in the pool's
replica image (torch, transformers and peft are there; the control-plane image has none),
with the pool's template (service account, env, volumes, node selection) so it reaches the
same object store and base model the replicas do.

`plan_merge` is the state machine of status.merge, one tick at a time:

    adapter missing                  -> Pending  (MergedAdapterNotFound; no Job)
    adapter's base hash != the pool's -> Failed  (BaseModelMismatch; no Job: it never could)
    Ready for this adapter's content -> Ready    (kept even after the Job's TTL removed it)
    no Job yet                       -> Pending  (create the Job)
    Job running                      -> Merging
    Job succeeded with a result      -> Ready    (checksum, uri from the Job's report)
    Job failed                       -> Failed   (reason and message from the Job's report)

A Failed merge whose Job is gone (its TTL passed) is tried again, so a fixed object store or
base model recovers without anyone deleting objects by hand.

The merge is of the adapter's content, not its name: status.merge records the adapter's
checksum, and Ready holds only while the LoRAAdapter of that name still has it. One deleted and
recreated under the same name with other weights is merged again (Pending, a new Job), so the
pool never serves the old weights under the new adapter's name; the Job's name carries the
checksum too, so a finished Job of the old content is never read as the new one's result.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from lorafleet_core.api import reasons
from lorafleet_core.api.models import LoRAAdapter, MergePhase, MergeStatus, ReplicaPool
from lorafleet_core.api.names import LABEL_COMPONENT, LABEL_POOL
from lorafleet_core.planning import replica_pod
from lorafleet_core.planning.base_model import base_model_source
from lorafleet_core.planning.pool import pool_refs
from lorafleet_core.wire.records import AdapterRecord

COMPONENT_MERGE = "merge"
WORK_DIR = "/var/cache/lorafleet/merge"
# Keep a finished Job (and its pod's report) an hour for `kubectl logs`; status.merge keeps
# the result after that.
JOB_TTL_S = 3600
JOB_BACKOFF_LIMIT = 2


def merge_job_name(pool_name: str, adapter_id: str, adapter_checksum: str) -> str:
    """`<pool>-merge-<8 hex of the adapter id and checksum>`, at most 63 characters (it
    becomes a label): one Job per content merged, never one shared by two contents of a name."""
    digest = hashlib.sha256(f"{adapter_id}\n{adapter_checksum}".encode()).hexdigest()[:8]
    return f"{pool_name[: 63 - len('-merge-') - 8]}-merge-{digest}"


@dataclass(frozen=True)
class JobObservation:
    """What the operator read of the merge Job: its counts and the pod's termination report."""

    active: int = 0
    succeeded: int = 0
    failed: bool = False  # the Job's Failed condition is True (backoff limit reached)
    report: str | None = None  # the merge container's termination message (one JSON line)

    @classmethod
    def of(cls, job: dict[str, Any], report: str | None) -> JobObservation:
        status = job.get("status") or {}
        failed = any(
            c.get("type") == "Failed" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        return cls(
            active=int(status.get("active") or 0),
            succeeded=int(status.get("succeeded") or 0),
            failed=failed,
            report=report,
        )


@dataclass(frozen=True)
class MergePlan:
    status: MergeStatus
    reason: str | None  # the pool's Ready condition reason while the merge is not Ready
    create_job: bool = False


def _status(
    phase: MergePhase, adapter_id: str, message: str, generation: int | None, **extra: Any
) -> MergeStatus:
    return MergeStatus(
        phase=phase,
        adapter_id=adapter_id,
        message=message,
        observed_generation=generation,
        **extra,
    )


def _report(text: str | None) -> dict[str, Any]:
    try:
        data = json.loads(text or "")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def plan_merge(
    pool: ReplicaPool,
    adapter: LoRAAdapter | None,
    job: JobObservation | None,
    old: MergeStatus | None,
) -> MergePlan:
    """status.merge for this tick and whether the merge Job must be created."""
    assert pool.spec.merged is not None, "plan_merge is for merged pools"
    wanted = pool.spec.merged.adapter
    gen = pool.metadata.generation
    if adapter is None:
        message = f"LoRAAdapter {wanted} not found in this namespace; waiting for it"
        return MergePlan(
            _status(MergePhase.PENDING, wanted, message, gen), reasons.MERGED_ADAPTER_NOT_FOUND
        )
    if adapter.spec.base_model_hash != pool.spec.base_model.hash:
        message = (
            f"LoRAAdapter {wanted} was trained on base model {adapter.spec.base_model_hash}; "
            f"this pool serves {pool.spec.base_model.hash}: merge an adapter of this base model"
        )
        return MergePlan(
            _status(MergePhase.FAILED, wanted, message, gen), reasons.BASE_MODEL_MISMATCH
        )
    content = adapter.spec.checksum
    job_name = merge_job_name(pool.metadata.name, wanted, content)
    ours = old is not None and old.adapter_id == wanted and old.adapter_checksum == content
    if ours and old is not None and old.phase == MergePhase.READY:
        return MergePlan(old.model_copy(update={"observed_generation": gen}), None)
    if job is None:
        if ours and old is not None and old.phase == MergePhase.FAILED:
            message = f"retrying the merge (Job {job_name}) after: {old.message}"
        elif old is not None and old.phase == MergePhase.READY and old.adapter_id == wanted:
            message = (
                f"LoRAAdapter {wanted} now has checksum {content}; the merged weights are of "
                f"{old.adapter_checksum or 'an unrecorded checksum'}: merging it again "
                f"(Job {job_name}), the shared pool serves it meanwhile"
            )
        else:
            message = f"creating merge Job {job_name}"
        return MergePlan(
            _status(MergePhase.PENDING, wanted, message, gen, adapter_checksum=content),
            reasons.MERGE_PENDING,
            True,
        )
    report = _report(job.report)
    merged_from = report.get("adapterChecksum")
    if job.succeeded and merged_from not in (None, content):
        message = (
            f"Job {job_name} merged an adapter of checksum {merged_from}, not {content}: "
            "refusing its result"
        )
        return MergePlan(
            _status(MergePhase.FAILED, wanted, message, gen, adapter_checksum=content),
            reasons.MERGE_FAILED,
        )
    if job.succeeded and report.get("checksum") and report.get("uri"):
        message = f"merged by Job {job_name} ({report.get('sizeBytes', '?')} bytes)"
        return MergePlan(
            _status(
                MergePhase.READY,
                wanted,
                message,
                gen,
                adapter_checksum=content,
                checksum=report["checksum"],
                uri=report["uri"],
            ),
            None,
        )
    if job.failed or job.succeeded:  # a success without a readable report is a failure too
        why = report.get("message") or "the merge Job failed without a report (see its logs)"
        message = f"Job {job_name}: {report.get('reason', reasons.MERGE_FAILED)}: {why}"
        return MergePlan(
            _status(MergePhase.FAILED, wanted, message, gen, adapter_checksum=content),
            reasons.MERGE_FAILED,
        )
    return MergePlan(
        _status(
            MergePhase.MERGING, wanted, f"Job {job_name} is merging", gen, adapter_checksum=content
        ),
        reasons.MERGING,
    )


def job_labels(pool_name: str) -> dict[str, str]:
    return {LABEL_POOL: pool_name, LABEL_COMPONENT: COMPONENT_MERGE}


def plan_merge_job(
    pool: ReplicaPool, record: AdapterRecord, namespace: str, store_prefix: str
) -> dict[str, Any]:
    """The batch/v1 Job that merges `record` into the pool's base model and stores the result.

    The record is the registry's (the LoRAAdapter the pool names), passed as an argument: the
    Job fetches only what it names and verifies it like a replica does.
    """
    name = merge_job_name(pool.metadata.name, record.id, record.checksum)
    t = pool.spec.template
    engine = pool.spec.engine
    # A merge needs memory for the base model in its dtype, no GPU: the engine's resources
    # without the GPU limit.
    resources = {
        k: {r: q for r, q in v.items() if r != engine.gpu_resource}
        for k, v in engine.resources.items()
    }
    container = {
        "name": "merge",
        "image": engine.image,
        "command": [replica_pod.PYTHON, "-m", "lorafleet_agent.merge_job"],
        "args": [
            "--record",
            record.model_dump_json(exclude_none=True),
            "--base-model",
            # A local folder by its path (read where it is, not copied), else the uri.
            base_model_source(pool.spec.base_model.uri).location,
            "--base-model-hash",
            pool.spec.base_model.hash,
            "--store-prefix",
            store_prefix,
            "--work-dir",
            WORK_DIR,
        ],
        # Read-only root: Hugging Face libraries keep their caches on the work volume.
        "env": replica_pod.merged_env([{"name": "HF_HOME", "value": f"{WORK_DIR}/hf"}], pool),
        "resources": resources,
        "securityContext": replica_pod.container_security(read_only_root=True),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "work", "mountPath": WORK_DIR},
            {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 (read-only root: a scratch dir)
            *t.volume_mounts,
        ],
    }
    if t.env_from:
        container["envFrom"] = list(t.env_from)
    labels = job_labels(pool.metadata.name)
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if refs := pool_refs(pool):
        meta["ownerReferences"] = refs
    pod_fields = {k: v for k, v in replica_pod.template_pod_fields(pool).items() if v is not None}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": JOB_BACKOFF_LIMIT,
            "ttlSecondsAfterFinished": JOB_TTL_S,
            "template": {
                "metadata": {"labels": replica_pod.merged_labels(labels, t.metadata.labels)},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container],
                    **pod_fields,
                    "securityContext": replica_pod.pod_security(pool),
                    "volumes": [
                        {"name": "work", "emptyDir": {}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
                        *t.volumes,
                    ],
                },
            },
        },
    }
