"""Merged pools on a cluster: run the merge Job, then apply the pool's replicas.

A merged pool the operator created (autoMerge) also gets its `<pool>-internal` Secret here
(planning.merged_lifecycle.plan_internal_secret), before its replicas that read it exist (the
gateway pool's own Secret: handlers.internal_secret).

Called by the per-pool loop (handlers.autoscaler, the one writer of ReplicaPool status) on each
tick of a merged pool, and by pool_reconcile on a spec change. The decisions are the pure
planners' (lorafleet_core.planning.merge_job.plan_merge, planning.pool.plan_pool_objects);
this module reads the Job and its pod's report, creates the Job when asked, and applies the
StatefulSet once the merge is Ready (the replicas need the merged weights' URI and checksum).
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import kopf

from lorafleet_core.api import reasons
from lorafleet_core.api.models import MergeStatus, ReplicaPool
from lorafleet_core.kube.client import is_conflict
from lorafleet_core.planning.merge_job import (
    JobObservation,
    MergePlan,
    merge_job_name,
    plan_merge,
    plan_merge_job,
)
from lorafleet_core.planning.merged_lifecycle import auto_created, plan_internal_secret
from lorafleet_core.planning.pool import clamp_replicas, plan_pool_objects, ready_merge
from lorafleet_core.storage.merged_weights import default_store_prefix
from lorafleet_core.web.secret_file import bearer_token_reader
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_operator.kube import HOLDER
from lorafleet_operator.runtime import runtime
from lorafleet_operator.sync import FleetSync

log = logging.getLogger(__name__)


async def merge_tick(
    pool: ReplicaPool, body: kopf.Body, fleet: FleetSync, old: MergeStatus | None
) -> MergePlan:
    """Observe the merge Job, plan status.merge, create the Job when the plan says so."""
    assert pool.spec.merged is not None
    kube = await HOLDER.client()
    namespace, wanted = fleet.namespace, pool.spec.merged.adapter
    entry = fleet.index.adapters.get(wanted)
    adapter = entry.adapter if entry is not None else None
    seen = None
    if adapter is not None:  # the Job of this adapter's content, never one of an earlier one
        job_name = merge_job_name(pool.metadata.name, wanted, adapter.spec.checksum)
        job = await kube.read_owned("Job", namespace, job_name)
        if job is not None:
            seen = JobObservation.of(job, await kube.job_report(namespace, job_name))
    plan = plan_merge(pool, adapter, seen, old)
    if plan.create_job and adapter is not None:
        record = AdapterRecord.from_spec(wanted, adapter.spec)
        prefix = runtime().settings.merged_store_prefix or default_store_prefix(
            adapter.spec.weights_uri
        )
        job_body = plan_merge_job(pool, record, namespace, prefix)
        await kube.apply_owned(namespace, job_body)
        kopf.event(
            body,
            type="Normal",
            reason="MergeStarted",
            message=f"Job {job_body['metadata']['name']} merges {wanted} ({record.checksum}) "
            f"into {pool.spec.base_model.name}",
        )
    if old is None or old.phase != plan.status.phase:
        kind = "Warning" if plan.status.phase == "Failed" else "Normal"
        kopf.event(body, type=kind, reason=f"Merge{plan.status.phase}", message=plan.status.message)
    return plan


# (namespace, pool, uid) whose Secret this process created or found: one create call per
# pool object, not one per tick (the operator has `create` on Secrets, never `get`).
_SECRETS_DONE: set[tuple[str, str, str]] = set()


async def ensure_internal_secret(pool: ReplicaPool, body: kopf.Body, namespace: str) -> None:
    """Create the Secret of a merged pool the operator created, owned by the pool, with a
    Warning Event when it cannot (no agents' data token, or secret mode and no agents' token,
    to copy). The gateway pool's Secret is handlers.internal_secret's; any other pool a person
    created brings its own Secret (docs/reference/operator.md)."""
    uid = str(body.get("metadata", {}).get("uid") or "")
    key = (namespace, pool.metadata.name, uid)
    if not uid or key in _SECRETS_DONE:
        return
    settings = runtime().settings
    if not auto_created(pool):
        return
    token = settings.replica_token_reader()()
    data_token = bearer_token_reader(
        settings.replica_data_token, settings.replica_data_token_file
    )()
    plan = plan_internal_secret(
        pool, uid, settings.replica_internal_auth, token, secrets.token_urlsafe(36), data_token
    )
    if plan.body is None:
        kopf.event(
            body, type="Warning", reason=reasons.INTERNAL_SECRET_MISSING, message=plan.missing or ""
        )
        return
    kube = await HOLDER.client()
    name = plan.body["metadata"]["name"]
    try:
        await kube.create_secret(namespace, plan.body)
        message = f"Secret {name} created for the merged pool's replicas (owned by the pool)"
        kopf.event(body, type="Normal", reason=reasons.INTERNAL_SECRET_CREATED, message=message)
    except Exception as exc:
        if not is_conflict(exc):
            raise
    _SECRETS_DONE.add(key)


async def apply_merged_pool(
    pool: ReplicaPool, namespace: str, merge: MergeStatus | None, current: int | None
) -> dict[str, Any] | None:
    """Apply a merged pool's StatefulSet, Service and PDB once its merge is Ready; None before.

    `current` is the StatefulSet's replica count (the autoscaler's), kept across re-applies.
    """
    ready = ready_merge(pool, merge)
    if ready is None:
        return None
    kube = await HOLDER.client()
    keep = None if current is None or not pool.spec.autoscaling.enabled else current
    replicas = clamp_replicas(pool, keep)
    inside = runtime().settings.inside_auth()
    objects = plan_pool_objects(pool, namespace, replicas, inside, merge=ready)
    done = {
        "statefulset": await kube.apply_owned(namespace, objects.statefulset),
        "service": await kube.apply_owned(namespace, objects.service),
        "pdb": await kube.apply_owned(namespace, objects.pdb),
    }
    if any(v != "unchanged" for v in done.values()):
        log.info("merged ReplicaPool %s serving %s: %s", pool.metadata.name, ready.checksum, done)
    return done
