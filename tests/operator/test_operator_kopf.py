"""The kopf operator against kmock (an HTTP Kubernetes API emulator), end to end.

One operator run for the module (kopf starts in ~1 s); each test uses its own object names.
Replica pods are created by the test (kmock has no StatefulSet controller) and point their
`internal` port at real loopback HTTP servers answering /state.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import pytest

from lorafleet_core.api.names import LABEL_POOL
from lorafleet_core.kube.client import FIELD_MANAGER, MERGE_PATCH, STRATEGIC_MERGE_PATCH
from lorafleet_core.planning.adapters import REPLICA_TOKENS_PER_SECOND
from lorafleet_operator.handlers import adapters
from tests.operator.factories import alias_body
from tests.operator.kmock_cluster import eventually
from tests.operator.kopf_fleet import (
    ENV,
    POD_INTERVAL,
    cond,
    make_adapter,
    make_pool,
    owned,
    pod_body,
    status,
)
from tests.operator.kopf_harness import module_fixtures
from tests.operator.state_servers import StateServer

pytestmark = pytest.mark.timeout(180)


cluster, operator = module_fixtures("lf", ENV)


def test_pool_owns_statefulset_service_pdb_with_engine_flags(cluster, operator):
    servers = make_pool(
        cluster,
        "flags",
        0,
        base_hash="sha256:" + "1" * 64,
        engine={"gpuSlots": 32, "hostRamSlots": 128, "maxRank": 64},
    )
    sts = eventually(lambda: cluster.get(cluster.path("statefulsets", "flags", group="apps/v1")))
    args = next(c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")[
        "args"
    ]
    assert args[args.index("--max-loras") + 1] == "32"
    assert args[args.index("--max-cpu-loras") + 1] == "128"
    assert args[args.index("--max-lora-rank") + 1] == "64"
    assert sts["metadata"]["ownerReferences"][0]["kind"] == "ReplicaPool"
    volumes = {v["name"] for v in sts["spec"]["template"]["spec"]["volumes"]}
    assert "podinfo" in volumes
    # The handler creates the three objects in turn: wait for the last ones too.
    svc = eventually(lambda: cluster.get(cluster.path("services", "flags", group="v1")))
    assert svc["spec"]["clusterIP"] == "None"
    pdb = eventually(
        lambda: cluster.get(cluster.path("poddisruptionbudgets", "flags", group="policy/v1"))
    )
    assert pdb["spec"]["maxUnavailable"] == 1
    st = eventually(lambda: status(cluster, "replicapools", "flags").get("selector"))
    assert "lorafleet.dev/pool=flags" in st
    assert servers == []
    # Production's patch types, whatever the emulator does with them: a custom resource's
    # status takes a JSON merge patch (CRDs accept no strategic merge).
    assert cluster.patch_types("/replicapools/flags/status") == {(MERGE_PATCH, FIELD_MANAGER)}


def test_owned_objects_are_merge_patched_whole_when_they_drift(cluster, operator):
    make_pool(cluster, "drift", 0, base_hash="sha256:" + "2" * 64)  # no adapters match it
    path = cluster.path("services", "drift", group="v1")
    eventually(lambda: cluster.get(path))
    eventually(lambda: status(cluster, "replicapools", "drift").get("selector"))
    assert cluster.patch_types("/services/drift") == set()  # created, never patched
    # Someone edits the owned Service; the next reconcile of the pool puts it back with a
    # merge patch of the whole rendered object under the operator's field manager.
    cluster.patch(path, {"spec": {"selector": {LABEL_POOL: "elsewhere"}}})
    cluster.patch(cluster.path("replicapools", "drift"), {"spec": {"ownersPerAdapter": 3}})
    eventually(lambda: cluster.get(path)["spec"]["selector"][LABEL_POOL] == "drift")
    assert (MERGE_PATCH, FIELD_MANAGER) in cluster.patch_types("/services/drift")


def test_adapters_get_conditions_owners_and_pods_get_annotations(cluster, operator):
    servers = make_pool(cluster, "main", 3)
    try:
        make_adapter(cluster, "good-a")
        make_adapter(cluster, "good-b", tenant="globex")
        make_adapter(cluster, "too-big", rank=64)
        make_adapter(cluster, "bad-uri", weightsUri="https://example.com/x")

        st = eventually(
            lambda: (
                status(cluster, "loraadapters", "good-a").get("phase") == "Ready"
                and status(cluster, "loraadapters", "good-a")
            )
        )
        assert len(st["owners"]) == 2
        assert st["ownerCount"] == 2
        assert cond(st, "Validated")["status"] == "True"
        assert cond(st, "Placed")["status"] == "True"
        big = eventually(lambda: status(cluster, "loraadapters", "too-big").get("phase"))
        assert big == "Rejected"
        big_st = status(cluster, "loraadapters", "too-big")
        assert cond(big_st, "Validated")["reason"] == "RankTooHigh"
        assert "maxRank 16" in cond(big_st, "Validated")["message"]
        bad = eventually(lambda: cond(status(cluster, "loraadapters", "bad-uri"), "Validated"))
        assert bad["reason"] == "UnsupportedUriScheme"

        for pod in ["main-0", "main-1", "main-2"]:
            want = {
                a
                for a in ("good-a", "good-b")
                if pod in status(cluster, "loraadapters", a).get("owners", [])
            }
            eventually(functools.partial(lambda p, w: owned(cluster, p) == w, pod, want), what=pod)
        # A pod's annotation takes a strategic merge patch (a built-in kind); statuses merge.
        assert cluster.patch_types("/pods/main-0") == {(STRATEGIC_MERGE_PATCH, FIELD_MANAGER)}
        assert cluster.patch_types("/loraadapters/good-a/status") == {(MERGE_PATCH, FIELD_MANAGER)}
    finally:
        for s in servers:
            s.close()


def test_bulk_create_patches_each_pod_a_handful_of_times(cluster, operator):
    servers = make_pool(cluster, "bulk", 4, base_hash="sha256:" + "d" * 64)
    try:
        eventually(lambda: cluster.writes_by_name("pods").get("bulk-0"), what="first annotation")
        before = cluster.writes_by_name("pods")
        started = time.monotonic()
        for i in range(100):
            make_adapter(cluster, f"bulk-{i:03d}", base_hash="sha256:" + "d" * 64)
        eventually(
            lambda: sum(len(owned(cluster, f"bulk-{i}")) for i in range(4)) == 200,
            within_s=60,
            what="all 100 adapters on 2 pods each",
        )
        elapsed = time.monotonic() - started
        after = cluster.writes_by_name("pods")
        per_pod = [after.get(f"bulk-{i}", 0) - before.get(f"bulk-{i}", 0) for i in range(4)]
        # At most one patch per pod per interval, however many adapters arrive meanwhile
        # (creating them one by one through this emulator takes several seconds).
        assert max(per_pod) <= elapsed / POD_INTERVAL + 2, (per_pod, elapsed)
        assert max(per_pod) <= 15, per_pod
    finally:
        for s in servers:
            s.close()


def test_replica_churn_moves_owners_and_annotations(cluster, operator):
    servers = make_pool(cluster, "churn", 4, base_hash="sha256:" + "e" * 64)
    try:
        for i in range(30):
            make_adapter(cluster, f"churn-{i:02d}", base_hash="sha256:" + "e" * 64)
        eventually(lambda: sum(len(owned(cluster, f"churn-{i}")) for i in range(4)) == 60)
        had = owned(cluster, "churn-1")
        assert had
        cluster.delete(cluster.path("pods", "churn-1", group="v1"))

        def moved() -> bool:
            for a in had:
                owners = status(cluster, "loraadapters", a).get("owners", [])
                if "churn-1" in owners or len(owners) != 2:
                    return False
            return sum(len(owned(cluster, f"churn-{i}")) for i in (0, 2, 3)) == 60

        eventually(moved, what="owners moved off churn-1")
    finally:
        for s in servers:
            s.close()


def test_alias_deploy_refusal_rollback_and_conflict(cluster, operator):
    servers = make_pool(cluster, "alias", 2, base_hash="sha256:" + "f" * 64)
    h = "sha256:" + "f" * 64
    try:
        for n in ("sup-v1", "sup-v2"):
            make_adapter(cluster, n, base_hash=h)
        make_adapter(cluster, "sup-v3-big", base_hash=h, rank=128)
        eventually(lambda: status(cluster, "loraadapters", "sup-v2").get("phase") == "Ready")
        for s in servers:  # the agents hold both versions' verified files
            s.state["disk_adapters"] = ["sup-v1", "sup-v2"]
        body = alias_body("support-prod", "acme/support:prod", "sup-v1")
        del body["metadata"]["namespace"], body["metadata"]["creationTimestamp"]
        cluster.create(cluster.path("adapteraliases"), body)
        path = cluster.path("adapteraliases", "support-prod")
        eventually(
            lambda: status(cluster, "adapteraliases", "support-prod").get("adapter") == "sup-v1"
        )

        cluster.patch(path, {"spec": {"adapter": "sup-v2"}})  # deploy
        st = eventually(
            lambda: (
                (s := status(cluster, "adapteraliases", "support-prod")).get("adapter") == "sup-v2"
                and s
            )
        )
        assert st["previousAdapter"] == "sup-v1"

        cluster.patch(path, {"spec": {"adapter": "sup-v3-big"}})  # a Rejected target
        st = eventually(
            lambda: (
                cond(status(cluster, "adapteraliases", "support-prod"), "Deployed").get("reason")
                == "AdapterNotReady"
                and status(cluster, "adapteraliases", "support-prod")
            )
        )
        assert st["adapter"] == "sup-v2"  # the gateway keeps serving the previous one

        cluster.patch(path, {"spec": {"adapter": "sup-v1"}})  # rollback
        st = eventually(
            lambda: (
                (s := status(cluster, "adapteraliases", "support-prod")).get("adapter") == "sup-v1"
                and s
            )
        )
        assert st["previousAdapter"] == "sup-v2"
        assert [h["adapter"] for h in st["history"]][:3] == ["sup-v1", "sup-v2", "sup-v1"]

        dup = alias_body("support-prod-2", "acme/support:prod", "sup-v2")
        del dup["metadata"]["namespace"], dup["metadata"]["creationTimestamp"]
        cluster.create(cluster.path("adapteraliases"), dup)
        c = eventually(
            lambda: cond(status(cluster, "adapteraliases", "support-prod-2"), "Conflict")
        )
        assert c["status"] == "True"
        assert "support-prod" in c["message"]
        assert status(cluster, "adapteraliases", "support-prod")["adapter"] == "sup-v1"
        cluster.delete(cluster.path("adapteraliases", "support-prod-2"))

        # Deleting an adapter an alias serves is refused: it stays, flagged, until repointed.
        cluster.delete(cluster.path("loraadapters", "sup-v1"))
        blocked = eventually(
            lambda: cond(status(cluster, "loraadapters", "sup-v1"), "DeletionBlocked")
        )
        assert "support-prod" in blocked["message"]
        assert "sup-v1" in owned(cluster, "alias-0") | owned(cluster, "alias-1")
        cluster.patch(path, {"spec": {"adapter": "sup-v2"}})
        eventually(lambda: cluster.get(cluster.path("loraadapters", "sup-v1")) is None, within_s=40)
        assert "sup-v1" not in owned(cluster, "alias-0") | owned(cluster, "alias-1")
    finally:
        for s in servers:
            s.close()


def test_a_weighted_split_passes_the_gate_per_version_and_rolls_back(cluster, operator):
    """spec.split through the running operator: a version takes its share once a replica
    verified it, a Rejected one never does, and removing the entry clears status.split."""
    h = "sha256:" + "d" * 64
    servers = make_pool(cluster, "split", 2, base_hash=h)
    try:
        for n in ("spl-v1", "spl-v2"):
            make_adapter(cluster, n, base_hash=h)
        make_adapter(cluster, "spl-v3-big", base_hash=h, rank=128)
        eventually(lambda: status(cluster, "loraadapters", "spl-v2").get("phase") == "Ready")
        for s in servers:
            s.state["disk_adapters"] = ["spl-v1"]  # v2's files not verified yet
        body = alias_body("split-prod", "acme/split:prod", "spl-v1")
        body["spec"]["split"] = [{"adapter": "spl-v2", "weight": 5}]
        del body["metadata"]["namespace"], body["metadata"]["creationTimestamp"]
        cluster.create(cluster.path("adapteraliases"), body)
        path = cluster.path("adapteraliases", "split-prod")

        def st() -> dict[str, Any]:
            return status(cluster, "adapteraliases", "split-prod")

        waiting = eventually(
            lambda: cond(st(), "Split").get("reason") == "AwaitingReplicas" and st()
        )
        assert waiting["adapter"] == "spl-v1"
        assert "split" not in waiting

        for s in servers:
            s.state["disk_adapters"] = ["spl-v1", "spl-v2"]
        admitted = eventually(lambda: st().get("traffic") == "spl-v1=95,spl-v2=5" and st())
        assert admitted["split"] == [{"adapter": "spl-v2", "weight": 5}]
        assert cond(admitted, "Split")["status"] == "True"

        cluster.patch(
            path,
            {
                "spec": {
                    "split": [
                        {"adapter": "spl-v2", "weight": 50},
                        {"adapter": "spl-v3-big", "weight": 10},
                    ]
                }
            },
        )
        half = eventually(lambda: st().get("traffic") == "spl-v1=50,spl-v2=50" and st())
        refused = cond(half, "Split")
        assert (refused["status"], refused["reason"]) == ("False", "AdapterNotReady")
        assert "spl-v3-big is Rejected" in refused["message"]

        cluster.patch(path, {"spec": {"split": None}})  # roll back: one edit
        done = eventually(
            lambda: "split" not in st() and cond(st(), "Split").get("reason") == "NoSplit" and st()
        )
        assert "traffic" not in done
        assert done["adapter"] == "spl-v1"
    finally:
        for s in servers:
            s.close()


def test_a_deploy_no_replica_verifies_passes_its_deadline_and_completes_later(cluster, operator):
    """With the only replica's /state unreachable nothing verifies the new version: past
    spec.progressDeadlineSeconds Deployed says ProgressDeadlineExceeded (since when, still
    serving the old version) with one Warning Event; a replica that verifies it later still
    completes the deploy."""
    h = "sha256:" + "e" * 64
    (dead,) = make_pool(cluster, "stall", 1, base_hash=h, autoscaling={"pollIntervalSeconds": 0.3})
    dead.close()  # the pod stays Ready; its /state refuses connections
    servers: list[StateServer] = []
    try:
        for n in ("stall-v1", "stall-v2"):
            make_adapter(cluster, n, base_hash=h)
        eventually(lambda: status(cluster, "loraadapters", "stall-v2").get("phase") == "Ready")
        body = alias_body("stall-prod", "acme/stall:prod", "stall-v1")
        del body["metadata"]["namespace"], body["metadata"]["creationTimestamp"]
        cluster.create(cluster.path("adapteraliases"), body)
        path = cluster.path("adapteraliases", "stall-prod")
        eventually(lambda: status(cluster, "adapteraliases", "stall-prod").get("adapter"))

        cluster.patch(path, {"spec": {"adapter": "stall-v2", "progressDeadlineSeconds": 2}})
        waiting = eventually(
            lambda: (
                cond(status(cluster, "adapteraliases", "stall-prod"), "Deployed").get("reason")
                == "AwaitingReplicas"
            )
        )
        assert waiting
        began = status(cluster, "adapteraliases", "stall-prod")["deploying"]["startedAt"]

        def stalled() -> dict[str, Any]:
            st = status(cluster, "adapteraliases", "stall-prod")
            c = cond(st, "Deployed")
            return st if c.get("reason") == "ProgressDeadlineExceeded" else {}

        st = eventually(stalled, what="ProgressDeadlineExceeded")
        deployed = cond(st, "Deployed")
        assert deployed["status"] == "False"
        assert "no replica has verified its files yet after 2 s" in deployed["message"]
        assert began.replace("+00:00", "Z")[:19] in deployed["message"]
        assert deployed["message"].endswith("still serving stall-v1")
        assert st["adapter"] == "stall-v1"
        assert cond(st, "Ready")["status"] == "True"

        def warnings() -> list[str]:
            return [
                e.get("reason", "")
                for e in cluster.items(cluster.path("events", group="v1"))
                if (e.get("involvedObject") or {}).get("name") == "stall-prod"
                and e.get("type") == "Warning"
            ]

        eventually(lambda: "ProgressDeadlineExceeded" in warnings(), what="the Warning Event")

        # A replica that holds the version's verified files joins: the deploy goes through.
        live = StateServer("stall-1")
        servers.append(live)
        live.state["disk_adapters"] = ["stall-v1", "stall-v2"]
        cluster.create(cluster.path("pods", group="v1"), pod_body("stall-1", "stall", live.port))
        st = eventually(
            lambda: (
                (s := status(cluster, "adapteraliases", "stall-prod")).get("adapter") == "stall-v2"
                and s
            ),
            within_s=30,
        )
        assert st["previousAdapter"] == "stall-v1"
        assert "deploying" not in st
        assert cond(st, "Deployed")["status"] == "True"
        assert warnings().count("ProgressDeadlineExceeded") == 1
    finally:
        for s in servers:
            s.close()


def test_autoscaler_follows_scraped_state(cluster, operator):
    servers = make_pool(
        cluster,
        "auto",
        2,
        replicas={"min": 1, "max": 6},
        autoscaling={
            "targetTokensInFlight": 1000,
            "targetQueueDepth": 4,
            "pollIntervalSeconds": 0.3,
            "scaleUpStabilizationSeconds": 0,
            "scaleDownStabilizationSeconds": 2,
        },
    )
    sts_path = cluster.path("statefulsets", "auto", group="apps/v1")
    try:
        for s in servers:
            s.set_load(tokens_in_flight=2000, queue_depth=1)  # 4000 total -> 4 replicas
        eventually(lambda: (cluster.get(sts_path) or {}).get("spec", {}).get("replicas") == 4)
        st = eventually(
            lambda: (
                status(cluster, "replicapools", "auto").get("desiredReplicas") == 4
                and status(cluster, "replicapools", "auto")
            )
        )
        assert st["readyReplicas"] == 2
        assert all(s.hits > 0 for s in servers)
        for s in servers:
            s.set_load(tokens_in_flight=0, queue_depth=9)  # 18 queued -> 5 replicas
        eventually(lambda: cluster.get(sts_path)["spec"]["replicas"] == 5)
        for s in servers:
            s.set_load()
        eventually(lambda: cluster.get(sts_path)["spec"]["replicas"] == 1, within_s=30)

        def reasons() -> set[str]:
            return {
                e.get("reason")
                for e in cluster.items(cluster.path("events", group="v1"))
                if e.get("involvedObject", {}).get("name") == "auto"
            }

        # kopf posts events in the background, after the scale patch: wait for them too.
        eventually(lambda: {"ScaledUp", "ScaledDown"} <= reasons(), what="scale events")
    finally:
        for s in servers:
            s.close()


def test_the_gateway_pools_missing_inside_secret_is_created_with_new_tokens(cluster, operator):
    # The chart renders no Secret (deterministic renders for Argo CD): the operator creates it.
    servers = make_pool(cluster, "gwpool", 0, base_hash="sha256:" + "6" * 64)
    try:
        path = cluster.path("secrets", "gwpool-internal", group="v1")
        secret = eventually(lambda: cluster.get(path), what="the gateway pool's Secret")
        data = secret["stringData"]
        assert set(data) == {"vllm-api-key", "agent-token", "data-token"}
        assert len(set(data.values())) == 3
        assert all(len(v) >= 32 for v in data.values())
        # not the operator's copies, and not owned by the pool: re-creating the pool keeps them
        assert data["agent-token"] != ENV["LORAFLEET_OPERATOR_REPLICA_TOKEN"]
        assert "ownerReferences" not in secret["metadata"]

        def reasons() -> set[str]:
            return {
                e.get("reason")
                for e in cluster.items(cluster.path("events", group="v1"))
                if e.get("involvedObject", {}).get("name") == "gwpool"
            }

        eventually(lambda: "InternalSecretCreated" in reasons(), what="the creation event")
        # another pool a person created brings its own Secret
        assert cluster.get(cluster.path("secrets", "flags-internal", group="v1")) is None
    finally:
        for s in servers:
            s.close()


def test_scraped_adapter_stats_reach_the_status_and_raise_a_hot_adapters_owners(cluster, operator):
    h = "sha256:" + "5" * 64  # its own base model: no other test's pool can take the adapter
    servers = make_pool(
        cluster, "stats", 4, base_hash=h, autoscaling={"enabled": False, "pollIntervalSeconds": 0.3}
    )
    try:
        make_adapter(cluster, "stats-hot", base_hash=h)
        eventually(lambda: status(cluster, "loraadapters", "stats-hot").get("ownerCount") == 2)
        # Two replicas serve it, 2.5 owners' worth in all (an owner carries hot_share of a
        # replica's tokens/s): three owners of the pool's four, below the merge threshold.
        each = 1.25 * REPLICA_TOKENS_PER_SECOND * 0.5
        hot = {"requests": 300, "gpu_hits": 240, "tokens_per_second": each}
        for s in servers[:2]:
            s.set_load(adapters={"stats-hot": hot}, tokens_per_second={"stats-hot": each})
        # A scrape between the two set_load calls sees one replica's figures first; the
        # status follows once both are seen (a 100% move passes the 25% write threshold).
        st = eventually(
            lambda: (
                (s := status(cluster, "loraadapters", "stats-hot")).get("stats", {}).get("replicas")
                == 2
                and s
            )
        )
        assert st["stats"]["requestsPerMinute"] == 600
        assert st["stats"]["tokensPerSecond"] == 2 * each
        assert st["stats"]["gpuHitRate"] == 0.8
        assert st["stats"]["replicas"] == 2
        roles = {p["replica"]: p["role"] for p in st["placements"]}
        assert set(roles.values()) <= {"owner", "spill"}
        assert {r for r, role in roles.items() if role == "owner"} == set(st["owners"])
        eventually(lambda: status(cluster, "loraadapters", "stats-hot").get("ownerCount") == 3)
        # Steady traffic: the figures are not rewritten on every pass (at most once a minute),
        # not even when a busy replica answers one scrape too late to be counted.
        before = cluster.writes_by_name("loraadapters").get("stats-hot", 0)
        servers[0].stall(float(ENV["LORAFLEET_OPERATOR_SCRAPE_TIMEOUT_SECONDS"]) + 0.5)
        eventually(lambda: servers[0].stalled == 1, what="a scrape answered too late")
        hits = [s.hits for s in servers]
        eventually(
            lambda: all(s.hits >= n + 3 for s, n in zip(servers, hits, strict=True)),
            what="more scrapes",
        )
        assert cluster.writes_by_name("loraadapters").get("stats-hot", 0) == before
        assert status(cluster, "loraadapters", "stats-hot")["ownerCount"] == 3
    finally:
        for s in servers:
            s.close()


def test_a_deleted_adapter_is_forgotten_on_every_ready_replica_of_its_pools(cluster, operator):
    """Issue 30: the deletion reaches the agents, so a LoRAAdapter recreated under the name with
    other weights is a new adapter to them. Every ready replica of a shared pool of its base
    model is told, with the agents' credential; a busy one holds the deletion until it forgets;
    a pod not ready and a pool of another base model are not asked."""
    h = "sha256:" + "7" * 64
    servers = make_pool(cluster, "forget", 2, base_hash=h)
    (other,) = make_pool(cluster, "forget-other", 1, base_hash="sha256:" + "8" * 64)
    starting = StateServer("forget-starting")
    cluster.create(
        cluster.path("pods", group="v1"),
        pod_body(starting.replica_id, "forget", starting.port, ready=False),
    )
    try:
        make_adapter(cluster, "fgt-v1", base_hash=h)
        eventually(lambda: status(cluster, "loraadapters", "fgt-v1").get("phase") == "Ready")
        busy, idle = servers
        busy.forget_answers = [(409, "adapter_busy")]  # a request still streams on it
        cluster.delete(cluster.path("loraadapters", "fgt-v1"))
        eventually(lambda: busy.forgets, what="the busy replica to be asked")
        assert cluster.get(cluster.path("loraadapters", "fgt-v1")) is not None  # held
        eventually(lambda: cluster.get(cluster.path("loraadapters", "fgt-v1")) is None, within_s=40)
        told = ("fgt-v1", "Bearer tok-shared")
        assert busy.forgets == [told, told]  # asked again after the busy answer
        assert told in idle.forgets
        assert other.forgets == []
        assert starting.forgets == []
    finally:
        for s in [*servers, other, starting]:
            s.close()


def test_a_deletion_that_gives_up_on_a_replica_says_so_in_a_warning_event(
    cluster, operator, monkeypatch
):
    """A replica that never forgets (busy, unreachable) holds the deletion for a bounded time;
    then the deletion completes, and a Warning Event on the adapter and on the replica's pool
    names the replica and what it does until it restarts (a log line alone went unseen)."""
    monkeypatch.setattr(adapters.FORGET_WAITS, "limit_s", 0.0)  # give up at the first refusal
    h = "sha256:" + "6" * 64
    (busy,) = make_pool(cluster, "giveup", 1, base_hash=h)
    try:
        make_adapter(cluster, "gvp-v1", base_hash=h)
        eventually(lambda: status(cluster, "loraadapters", "gvp-v1").get("phase") == "Ready")
        busy.forget_answers = [(409, "adapter_busy")] * 100  # a request that never ends
        cluster.delete(cluster.path("loraadapters", "gvp-v1"))
        eventually(lambda: cluster.get(cluster.path("loraadapters", "gvp-v1")) is None)

        def warnings(kind: str, name: str) -> list[dict[str, Any]]:
            return [
                e
                for e in cluster.items(cluster.path("events", group="v1"))
                if (e.get("involvedObject") or {}).get("name") == name
                and (e.get("involvedObject") or {}).get("kind") == kind
                and e.get("type") == "Warning"
                and e.get("reason") == "ForgetIncomplete"
            ]

        (on_adapter,) = eventually(lambda: warnings("LoRAAdapter", "gvp-v1"), what="the Event")
        assert "giveup-0 (requests are running on it)" in on_adapter["message"]
        assert "RecordConflict" in on_adapter["message"]
        assert "until they restart" in on_adapter["message"].lower()
        (on_pool,) = eventually(lambda: warnings("ReplicaPool", "giveup"), what="the pool's")
        assert on_pool["message"] == on_adapter["message"]
    finally:
        busy.close()
