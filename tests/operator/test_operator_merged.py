"""A merged ReplicaPool with the kopf operator against kmock: the merge Job, status.merge from
the Job's state and its pod's report, the StatefulSet only once the merge is Ready.

kmock has no Job controller: the test plays it (Job status, the finished pod and its
termination message), as test_operator_kopf plays the StatefulSet controller.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from lorafleet_core.planning.merge_job import merge_job_name
from tests.operator.factories import adapter_body, pool_body, sha
from tests.operator.kmock_cluster import Cluster, eventually
from tests.operator.kopf_harness import module_fixtures

pytestmark = pytest.mark.timeout(180)

ENV = {
    "LORAFLEET_OPERATOR_SYNC_DEBOUNCE_SECONDS": "0.2",
    "LORAFLEET_OPERATOR_SYNC_MAX_DELAY_SECONDS": "1.0",
    "LORAFLEET_OPERATOR_SCRAPE_TIMEOUT_SECONDS": "1",
    "LORAFLEET_OPERATOR_MERGED_STORE_PREFIX": "s3://merged-store/lorafleet-merged",
}
CHECKSUM = "sha256:" + "e" * 64
URI = "s3://merged-store/lorafleet-merged/" + "e" * 64 + "/"
FAST: dict[str, Any] = {"autoscaling": {"pollIntervalSeconds": 0.3}}


cluster, operator = module_fixtures("lf", ENV)


def create(cluster: Cluster, plural: str, body: dict[str, Any]) -> None:
    del body["metadata"]["namespace"]
    cluster.create(cluster.path(plural), body)


def merge_of(cluster: Cluster, pool: str) -> dict[str, Any]:
    obj = cluster.get(cluster.path("replicapools", pool)) or {}
    out: dict[str, Any] = (obj.get("status") or {}).get("merge") or {}
    return out


def ready_of(cluster: Cluster, pool: str) -> dict[str, Any]:
    obj = cluster.get(cluster.path("replicapools", pool)) or {}
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "Ready"), {})


def finish_job(cluster: Cluster, job: str, report: dict[str, Any], ok: bool) -> None:
    """What the Job controller and the kubelet would leave: a terminated pod, the Job status."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{job}-x1", "labels": {"job-name": job}},
        "spec": {"containers": [{"name": "merge", "image": "img"}], "restartPolicy": "Never"},
        "status": {
            "phase": "Succeeded" if ok else "Failed",
            "containerStatuses": [
                {
                    "name": "merge",
                    "state": {
                        "terminated": {"exitCode": 0 if ok else 2, "message": json.dumps(report)}
                    },
                }
            ],
        },
    }
    cluster.create(cluster.path("pods", group="v1"), pod)
    status = (
        {"succeeded": 1}
        if ok
        else {"failed": 3, "conditions": [{"type": "Failed", "status": "True"}]}
    )
    cluster.patch(cluster.path("jobs", job, group="batch/v1"), {"status": status})


def test_merged_pool_runs_the_job_then_serves_the_merged_weights(cluster, operator):
    create(cluster, "loraadapters", adapter_body("hot-v1"))
    create(cluster, "replicapools", pool_body("hot", merged={"adapter": "hot-v1"}, **FAST))
    name = merge_job_name("hot", "hot-v1", sha("hot-v1"))
    job = eventually(lambda: cluster.get(cluster.path("jobs", name, group="batch/v1")))
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--store-prefix") + 1] == ENV["LORAFLEET_OPERATOR_MERGED_STORE_PREFIX"]
    assert job["metadata"]["ownerReferences"][0]["name"] == "hot"
    eventually(lambda: merge_of(cluster, "hot")["phase"] in ("Pending", "Merging"))
    assert ready_of(cluster, "hot").get("status") != "True"
    assert cluster.get(cluster.path("statefulsets", "hot", group="apps/v1")) is None

    cluster.patch(cluster.path("jobs", name, group="batch/v1"), {"status": {"active": 1}})
    eventually(lambda: merge_of(cluster, "hot")["phase"] == "Merging")
    assert ready_of(cluster, "hot")["reason"] == "Merging"

    finish_job(cluster, name, {"adapterId": "hot-v1", "checksum": CHECKSUM, "uri": URI}, ok=True)
    merge = eventually(lambda: (m := merge_of(cluster, "hot"))["phase"] == "Ready" and m)
    assert (merge["checksum"], merge["uri"], merge["adapterId"]) == (CHECKSUM, URI, "hot-v1")
    sts = eventually(lambda: cluster.get(cluster.path("statefulsets", "hot", group="apps/v1")))
    spec = sts["spec"]["template"]["spec"]
    vllm = next(c for c in spec["containers"] if c["name"] == "vllm")
    assert "--enable-lora" not in vllm["args"]
    assert vllm["args"][vllm["args"].index("--served-model-name") + 1] == "hot-v1"
    assert spec["initContainers"][0]["args"][:4] == ["--uri", URI, "--checksum", CHECKSUM]
    # No replica is ready yet (kmock runs no pods): Ready stays False, for that reason now.
    eventually(lambda: ready_of(cluster, "hot")["reason"] == "NoReadyReplicas")


def test_a_failed_merge_job_fails_the_merge_with_its_reason(cluster, operator):
    create(cluster, "loraadapters", adapter_body("bad-v1"))
    create(cluster, "replicapools", pool_body("bad", merged={"adapter": "bad-v1"}, **FAST))
    name = merge_job_name("bad", "bad-v1", sha("bad-v1"))
    eventually(lambda: cluster.get(cluster.path("jobs", name, group="batch/v1")))
    finish_job(
        cluster, name, {"reason": "ChecksumMismatch", "message": "files hash to x"}, ok=False
    )
    merge = eventually(lambda: (m := merge_of(cluster, "bad"))["phase"] == "Failed" and m)
    assert "ChecksumMismatch" in merge["message"]
    assert ready_of(cluster, "bad")["reason"] == "MergeFailed"
    assert cluster.get(cluster.path("statefulsets", "bad", group="apps/v1")) is None


def test_an_adapter_of_another_base_model_is_refused_without_a_job(cluster, operator):
    create(cluster, "loraadapters", adapter_body("other-v1", base_hash="sha256:" + "9" * 64))
    create(cluster, "replicapools", pool_body("other", merged={"adapter": "other-v1"}, **FAST))
    eventually(lambda: merge_of(cluster, "other")["phase"] == "Failed")
    ready = ready_of(cluster, "other")
    assert ready["reason"] == "BaseModelMismatch"
    assert "sha256:" + "9" * 64 in ready["message"]
    assert (
        cluster.get(
            cluster.path(
                "jobs", merge_job_name("other", "other-v1", sha("other-v1")), group="batch/v1"
            )
        )
        is None
    )


def adapter_condition(cluster: Cluster, name: str, type_: str) -> dict[str, Any]:
    obj = cluster.get(cluster.path("loraadapters", name)) or {}
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == type_), {})


def test_deleting_an_adapter_a_merged_pool_serves_waits_until_no_pool_lists_it(cluster, operator):
    create(cluster, "loraadapters", adapter_body("keep-v1"))
    create(cluster, "replicapools", pool_body("keep", merged={"adapter": "keep-v1"}, **FAST))
    eventually(lambda: merge_of(cluster, "keep").get("phase") in ("Pending", "Merging"))
    cluster.delete(cluster.path("loraadapters", "keep-v1"))
    blocked = eventually(
        lambda: (c := adapter_condition(cluster, "keep-v1", "DeletionBlocked")) and c,
        what="DeletionBlocked",
    )
    assert (blocked["status"], blocked["reason"]) == ("True", "InUseByMergedPool")
    assert "ReplicaPool keep serves it merged" in blocked["message"]
    held = cluster.get(cluster.path("loraadapters", "keep-v1"))
    assert held is not None
    assert held["metadata"].get("deletionTimestamp")  # asked to go, held by the finalizer
    # A person's pool is never drained or deleted for it; once they delete it, the adapter goes.
    assert "lorafleet.dev/draining-since" not in (
        (cluster.get(cluster.path("replicapools", "keep")) or {})["metadata"].get("annotations")
        or {}
    )
    cluster.delete(cluster.path("replicapools", "keep"))
    eventually(
        lambda: cluster.get(cluster.path("loraadapters", "keep-v1")) is None,
        what="the adapter's deletion",
        within_s=40,
    )


def test_an_adapter_recreated_with_other_weights_is_merged_again_before_it_is_served(
    cluster, operator
):
    """A LoRAAdapter deleted past its finalizer and recreated under the same name with other
    weights: status.merge leaves Ready at once (the gateway sends the adapter to the shared
    pool), a new Job merges the new content, and the replicas roll over to its weights; the
    old merge's Job and weights are never taken for the new adapter's."""
    create(cluster, "loraadapters", adapter_body("swap-v1"))
    create(cluster, "replicapools", pool_body("swap", merged={"adapter": "swap-v1"}, **FAST))
    first = merge_job_name("swap", "swap-v1", sha("swap-v1"))
    eventually(lambda: cluster.get(cluster.path("jobs", first, group="batch/v1")))
    finish_job(cluster, first, {"checksum": CHECKSUM, "uri": URI}, ok=True)
    merge = eventually(lambda: (m := merge_of(cluster, "swap"))["phase"] == "Ready" and m)
    assert merge["adapterChecksum"] == sha("swap-v1")

    path = cluster.path("loraadapters", "swap-v1")
    cluster.delete(path)
    eventually(lambda: adapter_condition(cluster, "swap-v1", "DeletionBlocked"))
    cluster.patch(path, {"metadata": {"finalizers": []}})
    eventually(lambda: cluster.get(path) is None)
    other = sha("other weights")
    create(cluster, "loraadapters", adapter_body("swap-v1", checksum=other))

    merge = eventually(
        lambda: (m := merge_of(cluster, "swap")).get("adapterChecksum") == other and m,
        what="status.merge of the recreated adapter's content",
    )
    assert merge["phase"] in ("Pending", "Merging")
    assert "checksum" not in merge  # the old merged weights are not named for the new adapter
    assert ready_of(cluster, "swap")["reason"] in ("MergePending", "Merging")
    second = merge_job_name("swap", "swap-v1", other)
    assert second != first
    job = eventually(lambda: cluster.get(cluster.path("jobs", second, group="batch/v1")))
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert json.loads(args[args.index("--record") + 1])["checksum"] == other

    new_sum, new_uri = "sha256:" + "4" * 64, "s3://merged-store/lorafleet-merged/" + "4" * 64 + "/"
    finish_job(cluster, second, {"checksum": new_sum, "uri": new_uri}, ok=True)
    merge = eventually(lambda: (m := merge_of(cluster, "swap"))["phase"] == "Ready" and m)
    assert (merge["adapterChecksum"], merge["checksum"]) == (other, new_sum)
    eventually(
        lambda: (
            (sts := cluster.get(cluster.path("statefulsets", "swap", group="apps/v1")))
            and sts["spec"]["template"]["spec"]["initContainers"][0]["args"][:4]
            == ["--uri", new_uri, "--checksum", new_sum]
        ),
        what="the replicas rolled over to the new merged weights",
    )
