"""Merged pools, pure planning: the merge Job, status.merge's transitions, the pool's Ready
condition and the replicas of a merged pool (merged weights, LoRA disabled)."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from lorafleet_core.api import reasons
from lorafleet_core.api.models import ConditionStatus, MergePhase, MergeStatus, ReplicaPoolStatus
from lorafleet_core.planning.adapters import validate_adapter
from lorafleet_core.planning.conditions import find
from lorafleet_core.planning.merge_job import (
    JobObservation,
    merge_job_name,
    plan_merge,
    plan_merge_job,
)
from lorafleet_core.planning.pool import merged_model_dir, plan_pool_objects, ready_merge
from lorafleet_core.planning.pool_status import PoolObservation, plan_pool_status
from lorafleet_core.wire.records import AdapterRecord
from tests.operator.factories import OTHER_HASH, T0, adapter, pool

CHECKSUM = "sha256:" + "d" * 64
URI = "s3://adapters/lorafleet-merged/" + "d" * 64 + "/"
REPORT = json.dumps({"adapterId": "acme-v1", "checksum": CHECKSUM, "uri": URI, "sizeBytes": 9})
MERGED = pool("acme-merged", merged={"adapter": "acme-v1"})
ADAPTER = adapter("acme-v1")
READY = MergeStatus(
    phase=MergePhase.READY,
    adapter_id="acme-v1",
    adapter_checksum=ADAPTER.spec.checksum,
    checksum=CHECKSUM,
    uri=URI,
)


def containers(objects: Any) -> dict[str, dict[str, Any]]:
    spec = objects.statefulset["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*(spec.get("initContainers") or []), *spec["containers"]]}


# --- status.merge transitions --------------------------------------------------------------


def test_a_missing_adapter_leaves_the_merge_pending_without_a_job():
    plan = plan_merge(MERGED, None, None, None)
    assert plan.status.phase == MergePhase.PENDING
    assert plan.reason == reasons.MERGED_ADAPTER_NOT_FOUND
    assert not plan.create_job


def test_an_adapter_of_another_base_model_is_refused_with_reason_and_message():
    plan = plan_merge(MERGED, adapter("acme-v1", base_hash=OTHER_HASH), None, None)
    assert plan.status.phase == MergePhase.FAILED
    assert plan.reason == reasons.BASE_MODEL_MISMATCH
    assert OTHER_HASH in plan.status.message
    assert MERGED.spec.base_model.hash in plan.status.message
    assert not plan.create_job


def test_merge_goes_pending_merging_ready_as_the_job_runs():
    pending = plan_merge(MERGED, ADAPTER, None, None)
    assert (pending.status.phase, pending.create_job) == (MergePhase.PENDING, True)
    merging = plan_merge(MERGED, ADAPTER, JobObservation(active=1), pending.status)
    assert (merging.status.phase, merging.create_job) == (MergePhase.MERGING, False)
    assert merging.reason == reasons.MERGING
    done = plan_merge(MERGED, ADAPTER, JobObservation(succeeded=1, report=REPORT), merging.status)
    assert done.status.phase == MergePhase.READY
    assert (done.status.checksum, done.status.uri) == (CHECKSUM, URI)
    assert done.reason is None
    # The Job's TTL removes it; the merge stays Ready and nothing is created again.
    after = plan_merge(MERGED, ADAPTER, None, done.status)
    assert after.status.phase == MergePhase.READY
    assert not after.create_job


def test_a_failed_job_fails_the_merge_with_its_reported_reason():
    report = json.dumps({"reason": "ChecksumMismatch", "message": "files hash to sha256:00"})
    plan = plan_merge(MERGED, ADAPTER, JobObservation(failed=True, report=report), None)
    assert plan.status.phase == MergePhase.FAILED
    assert plan.reason == reasons.MERGE_FAILED
    assert "ChecksumMismatch" in plan.status.message
    assert "files hash to" in plan.status.message
    # Once the failed Job is gone, the merge is tried again.
    retry = plan_merge(MERGED, ADAPTER, None, plan.status)
    assert (retry.status.phase, retry.create_job) == (MergePhase.PENDING, True)
    assert "retrying" in retry.status.message


def test_a_success_without_a_readable_report_is_a_failure_not_ready():
    plan = plan_merge(MERGED, ADAPTER, JobObservation(succeeded=1, report="oops"), None)
    assert plan.status.phase == MergePhase.FAILED


def test_changing_the_merged_adapter_merges_again():
    v2 = pool("acme-merged", merged={"adapter": "acme-v2"})
    plan = plan_merge(v2, adapter("acme-v2"), None, READY)
    assert (plan.status.phase, plan.status.adapter_id, plan.create_job) == (
        MergePhase.PENDING,
        "acme-v2",
        True,
    )


def test_an_adapter_recreated_with_other_weights_is_merged_again_by_another_job():
    """Ready is for the adapter's content: the same name with another checksum (deleted and
    recreated with other weights) leaves Ready at once and merges the new content in a Job of
    its own, whose result is Ready for the new checksum only."""
    recreated = adapter("acme-v1", checksum="sha256:" + "7" * 64)
    plan = plan_merge(MERGED, recreated, None, READY)
    assert (plan.status.phase, plan.reason, plan.create_job) == (
        MergePhase.PENDING,
        reasons.MERGE_PENDING,
        True,
    )
    assert plan.status.adapter_checksum == "sha256:" + "7" * 64
    assert plan.status.checksum is None  # the old merged weights are not named any more
    assert "sha256:" + "7" * 64 in plan.status.message
    old_job = merge_job_name("acme-merged", "acme-v1", ADAPTER.spec.checksum)
    new_job = merge_job_name("acme-merged", "acme-v1", recreated.spec.checksum)
    assert old_job != new_job
    record = AdapterRecord.from_spec("acme-v1", recreated.spec)
    assert plan_merge_job(MERGED, record, "ns", "s3://m")["metadata"]["name"] == new_job
    # Not Ready for the old content's replicas: no StatefulSet is planned from this status.
    assert ready_merge(MERGED, plan.status) is None
    report = json.dumps({"adapterChecksum": "sha256:" + "7" * 64, "checksum": CHECKSUM, "uri": URI})
    done = plan_merge(MERGED, recreated, JobObservation(succeeded=1, report=report), plan.status)
    assert (done.status.phase, done.status.adapter_checksum) == (
        MergePhase.READY,
        "sha256:" + "7" * 64,
    )
    # The first content back under the name: merged again too, never the Ready of another.
    assert plan_merge(MERGED, ADAPTER, None, done.status).create_job


def test_a_status_without_the_adapters_checksum_is_not_ready_for_it():
    """A Ready merge that does not say which content it merged is merged again."""
    unknown = READY.model_copy(update={"adapter_checksum": None})
    plan = plan_merge(MERGED, ADAPTER, None, unknown)
    assert (plan.status.phase, plan.create_job) == (MergePhase.PENDING, True)


def test_a_job_report_of_other_content_is_refused():
    report = json.dumps({"adapterChecksum": "sha256:" + "7" * 64, "checksum": CHECKSUM, "uri": URI})
    plan = plan_merge(MERGED, ADAPTER, JobObservation(succeeded=1, report=report), None)
    assert (plan.status.phase, plan.reason) == (MergePhase.FAILED, reasons.MERGE_FAILED)
    assert "refusing its result" in plan.status.message


def test_the_job_observation_reads_the_jobs_failed_condition():
    job = {"status": {"failed": 3, "conditions": [{"type": "Failed", "status": "True"}]}}
    assert JobObservation.of(job, None).failed
    assert not JobObservation.of({"status": {"active": 1}}, None).failed


# --- the pool's Ready condition -------------------------------------------------------------


@pytest.mark.parametrize(
    ("job", "old", "reason"),
    [
        (None, None, reasons.MERGE_PENDING),
        (JobObservation(active=1), None, reasons.MERGING),
        (JobObservation(failed=True), None, reasons.MERGE_FAILED),
    ],
)
def test_a_merged_pool_is_not_ready_until_its_merge_is(job, old, reason):
    plan = plan_merge(MERGED, ADAPTER, job, old)
    # Even with ready pods (an old merge's replicas), the pool waits for this merge.
    seen = PoolObservation(pods=2, ready=2, merge=plan)
    status = plan_pool_status("acme-merged", ReplicaPoolStatus(), MERGED, seen, T0)
    ready = find(status.conditions, reasons.READY)
    assert ready is not None
    assert (ready.status, ready.reason) == (ConditionStatus.FALSE, reason)
    assert status.merge == plan.status


def test_a_merged_pool_is_ready_when_the_merge_is_and_a_replica_serves_it():
    plan = plan_merge(MERGED, ADAPTER, None, READY)
    none_ready = plan_pool_status(
        "acme-merged", ReplicaPoolStatus(), MERGED, PoolObservation(pods=1, merge=plan), T0
    )
    cond = find(none_ready.conditions, reasons.READY)
    assert cond is not None
    assert (cond.status, cond.reason) == (ConditionStatus.FALSE, reasons.NO_READY_REPLICAS)
    serving = plan_pool_status(
        "acme-merged", ReplicaPoolStatus(), MERGED, PoolObservation(1, 1, merge=plan), T0
    )
    cond = find(serving.conditions, reasons.READY)
    assert cond is not None
    assert cond.status == ConditionStatus.TRUE
    assert "acme-v1" in cond.message
    assert CHECKSUM in cond.message


def test_a_shared_pool_has_no_merge_status():
    status = plan_pool_status("p", ReplicaPoolStatus(), pool("p"), PoolObservation(1, 1), T0)
    assert status.merge is None


def test_adapters_are_never_placed_on_a_merged_pool():
    v = validate_adapter(ADAPTER.spec, [MERGED, pool("shared")])
    assert (v.ok, v.pool) == (True, "shared")
    alone = validate_adapter(ADAPTER.spec, [MERGED])
    assert (alone.ok, alone.reason) == (False, reasons.NO_MATCHING_POOL)


# --- the Job ---------------------------------------------------------------------------------


def job() -> dict[str, Any]:
    record = AdapterRecord.from_spec("acme-v1", ADAPTER.spec)
    return plan_merge_job(MERGED, record, "ns", "s3://adapters/lorafleet-merged")


def test_the_merge_job_passes_the_kubernetes_schema():
    kubernetes_validate.validate(job(), "1.30", strict=True)


def test_the_merge_job_runs_the_merge_module_with_the_registry_record():
    spec = job()["spec"]
    c = spec["template"]["spec"]["containers"][0]
    assert c["image"] == MERGED.spec.engine.image  # the replica image: torch and peft
    assert c["command"] == ["python3", "-m", "lorafleet_agent.merge_job"]
    args = dict(zip(c["args"][::2], c["args"][1::2], strict=True))
    record = AdapterRecord.model_validate_json(args["--record"])
    assert record == AdapterRecord.from_spec("acme-v1", ADAPTER.spec)
    assert args["--base-model-hash"] == MERGED.spec.base_model.hash
    assert args["--store-prefix"] == "s3://adapters/lorafleet-merged"
    assert "nvidia.com/gpu" not in c["resources"].get("limits", {})  # a merge needs no GPU
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert job()["metadata"]["name"] == merge_job_name(
        "acme-merged", "acme-v1", ADAPTER.spec.checksum
    )


def test_job_names_fit_a_label_and_differ_per_adapter():
    long = "p" * 63
    assert len(merge_job_name(long, "a", CHECKSUM)) <= 63
    assert merge_job_name("p", "a", CHECKSUM) != merge_job_name("p", "b", CHECKSUM)


def test_the_merge_job_module_exists_in_the_replica_image_sources():
    from tests.images.test_dockerfiles import module_file

    assert module_file("lorafleet_agent.merge_job").is_file()
    assert module_file("lorafleet_agent.merged_model").is_file()


# --- replicas of a merged pool ---------------------------------------------------------------


def test_a_merged_pool_has_no_statefulset_before_its_merge_is_ready():
    with pytest.raises(ValueError, match="no Ready merge"):
        plan_pool_objects(MERGED, "ns", 1, merge=None)


def test_merged_replicas_serve_the_merged_weights_under_the_adapter_id_without_lora():
    c = containers(plan_pool_objects(MERGED, "ns", 2, merge=READY))
    args = c["vllm"]["args"]
    assert "--enable-lora" not in args
    assert "--max-loras" not in args
    assert args[args.index("--model") + 1] == merged_model_dir(CHECKSUM)
    assert args[args.index("--served-model-name") + 1] == "acme-v1"
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in {e["name"] for e in c["vllm"]["env"]}
    fetch = c["fetch-merged"]
    assert fetch["command"][-1] == "lorafleet_agent.merged_model"
    assert fetch["args"] == [
        "--uri",
        URI,
        "--checksum",
        CHECKSUM,
        "--dest",
        merged_model_dir(CHECKSUM),
    ]


def test_merged_replica_manifests_pass_the_kubernetes_schema():
    kubernetes_validate.validate(
        plan_pool_objects(MERGED, "ns", 2, merge=READY).statefulset, "1.30", strict=True
    )


def test_the_merged_agent_env_is_what_the_agent_settings_read(monkeypatch):
    from lorafleet_agent.settings import AgentSettings

    agent = containers(plan_pool_objects(MERGED, "ns", 2, merge=READY))["agent"]
    for e in agent["env"]:
        monkeypatch.setenv(e["name"], e.get("value", "acme-merged-0"))
    s = AgentSettings()
    assert (s.merged_adapter_id, s.merged_checksum) == ("acme-v1", CHECKSUM)
    assert str(s.merged_model_dir) == merged_model_dir(CHECKSUM)
