"""Auto-merge with the kopf operator against kmock, end to end: a hot adapter gets
MergedPoolRecommended and a merged pool with its Secret; the pool drains and is deleted when
the traffic stays low, or when its adapter is deleted.

One operator run for the module, as in test_operator_kopf."""

from __future__ import annotations

import pytest

from tests.operator.factories import pool_body
from tests.operator.kmock_cluster import Cluster, eventually
from tests.operator.kopf_fleet import ENV, cond, make_adapter, make_pool, status
from tests.operator.kopf_harness import module_fixtures

pytestmark = pytest.mark.timeout(180)

cluster, operator = module_fixtures("lf", ENV)


def test_hot_adapter_gets_merged_pool_recommended_event_and_an_auto_merged_pool(cluster, operator):
    h = "sha256:" + "9" * 64  # its own base model: no other test's pool can take the adapter
    servers = make_pool(
        cluster,
        "merge",
        2,
        base_hash=h,
        autoscaling={"enabled": False, "pollIntervalSeconds": 0.3},
        autoMerge={"enabled": True, "maxPools": 1},
    )
    try:
        make_adapter(cluster, "merge-hot", base_hash=h)
        eventually(
            lambda: status(cluster, "loraadapters", "merge-hot").get("phase") == "Ready",
            within_s=60,
        )
        # 2,500 tokens/s on each: more than one replica's 2,000 even if a pass sees one only
        # (the status figure is then rewritten at most once a minute)
        hot = {"requests": 300, "gpu_hits": 300, "tokens_per_second": 2500.0}
        for s in servers:
            s.set_load(adapters={"merge-hot": hot}, tokens_per_second={"merge-hot": 2500.0})
        created = eventually(
            lambda: cluster.get(cluster.path("replicapools", "merge-hot-merged")),
            what="the merged pool",
            within_s=60,  # stats land after a scrape pass; the whole suite loads the machine
        )
        assert created["spec"]["merged"] == {"adapter": "merge-hot"}
        assert created["spec"]["baseModel"]["hash"] == h
        assert created["metadata"]["labels"]["lorafleet.dev/merged-from"] == "merge"
        adapter_obj = cluster.get(cluster.path("loraadapters", "merge-hot"))
        [ref] = created["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == (
            "LoRAAdapter",
            "merge-hot",
            adapter_obj["metadata"]["uid"],
        )
        # the condition names the pool once the operator has seen it
        c = eventually(
            lambda: (
                (
                    x := cond(status(cluster, "loraadapters", "merge-hot"), "MergedPoolRecommended")
                ).get("reason")
                == "MergedPoolExists"
                and x
            ),
            what="MergedPoolExists",
            within_s=60,
        )
        assert c["status"] == "True"
        assert "merge-hot-merged" in c["message"]

        def events() -> list[str]:
            return [
                e.get("message", "")
                for e in cluster.items(cluster.path("events", group="v1"))
                if e.get("involvedObject", {}).get("name") == "merge-hot"
                and e.get("reason") == "MergedPoolRecommended"
            ]

        msgs = eventually(
            lambda: len(events()) >= 2 and events(), what="recommendation events", within_s=60
        )
        assert any(m.startswith("MergedPoolCreated:") for m in msgs)
        assert len(cluster.items(cluster.path("replicapools"))) == len(
            {p["metadata"]["name"] for p in cluster.items(cluster.path("replicapools"))}
        )
    finally:
        for s in servers:
            s.close()


def _events_on(cluster: Cluster, name: str, reason: str) -> list[str]:
    return [
        e.get("message", "")
        for e in cluster.items(cluster.path("events", group="v1"))
        if e.get("involvedObject", {}).get("name") == name and e.get("reason") == reason
    ]


def test_auto_merged_pool_gets_its_secret_then_drains_and_is_deleted_when_traffic_stays_low(
    cluster, operator
):
    h = "sha256:" + "8" * 64  # its own base model
    servers = make_pool(
        cluster,
        "life",
        2,
        base_hash=h,
        autoscaling={"enabled": False, "pollIntervalSeconds": 0.3},
        autoMerge={"enabled": True, "maxPools": 2, "coolDownSeconds": 1, "drainSeconds": 4},
    )
    try:
        make_adapter(cluster, "life-hot", base_hash=h)
        make_adapter(cluster, "life-warm", base_hash=h)
        # life-warm has a merged pool a person created: the operator must never delete it
        mine = pool_body("life-warm-mine", base_hash=h, merged={"adapter": "life-warm"})
        del mine["metadata"]["namespace"]
        cluster.create(cluster.path("replicapools"), mine)
        for a in ("life-hot", "life-warm"):
            eventually(lambda a=a: status(cluster, "loraadapters", a)["phase"] == "Ready")
        hot = {"requests": 300, "gpu_hits": 300, "tokens_per_second": 2500.0}
        for srv in servers:
            srv.set_load(
                adapters={"life-hot": hot, "life-warm": hot},
                tokens_per_second={"life-hot": 2500.0, "life-warm": 2500.0},
            )
        merged = eventually(
            lambda: cluster.get(cluster.path("replicapools", "life-hot-merged")), within_s=60
        )
        # its inside Secret: the callers' agent token, a vLLM key of its own, owned by the pool
        secret = eventually(
            lambda: cluster.get(cluster.path("secrets", "life-hot-merged-internal", group="v1")),
            within_s=30,
        )
        data = secret["stringData"]
        assert data["agent-token"] == "tok-shared"
        assert data["data-token"] == "data-tok-shared"
        assert len(data["vllm-api-key"]) >= 32
        assert data["vllm-api-key"] != data["agent-token"]
        [ref] = secret["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["uid"]) == (
            "ReplicaPool",
            "life-hot-merged",
            merged["metadata"]["uid"],
        )
        assert cluster.get(cluster.path("secrets", "life-warm-mine-internal", group="v1")) is None
        for a in ("life-hot", "life-warm"):
            eventually(
                lambda a=a: (
                    cond(status(cluster, "loraadapters", a), "MergedPoolRecommended")["reason"]
                    == "MergedPoolExists"
                ),
                within_s=60,
            )

        # Traffic stops. The status figures are rewritten at most once a minute: back-date
        # the last write (as if it were a minute old) so the operator writes the idle figure.
        for srv in servers:
            srv.set_load(adapters={}, tokens_per_second={})
        old = "2020-01-01T00:00:00Z"
        for a in ("life-hot", "life-warm"):
            cluster.patch(
                cluster.path("loraadapters", a) + "/status",
                {"status": {"stats": {"updatedAt": old}}},
            )
        drained = eventually(
            lambda: (
                (p := cluster.get(cluster.path("replicapools", "life-hot-merged")))["metadata"][
                    "annotations"
                ]["lorafleet.dev/draining-since"]
                and p
            ),
            what="the drain",
            within_s=60,
        )
        assert drained["spec"]["merged"] == {"adapter": "life-hot"}
        eventually(
            lambda: cluster.get(cluster.path("replicapools", "life-hot-merged")) is None,
            what="the deletion",
            within_s=60,
        )
        for reason in ("MergedPoolDraining", "MergedPoolDeleted"):
            # a handler retried on a loaded node may post its Event twice (kubectl shows it
            # once, with a count): each must name the pool
            msgs = eventually(lambda r=reason: _events_on(cluster, "life-hot", r), within_s=30)
            assert all("life-hot-merged" in m for m in msgs), msgs
        # the adapter's status pass may run after the deletion: wait for its condition
        c = eventually(
            lambda: (
                (x := cond(status(cluster, "loraadapters", "life-hot"), "MergedPoolRecommended"))[
                    "reason"
                ]
                == "WithinReplicaCapacity"
                and x
            ),
            within_s=30,
        )
        assert c["status"] == "False"
        # the person's pool: the same low traffic, never drained or deleted
        c = eventually(
            lambda: (
                (x := cond(status(cluster, "loraadapters", "life-warm"), "MergedPoolRecommended"))[
                    "status"
                ]
                == "False"
                and x
            )
        )
        kept = cluster.get(cluster.path("replicapools", "life-warm-mine"))
        assert kept is not None
        assert "lorafleet.dev/draining-since" not in (kept["metadata"].get("annotations") or {})
        assert _events_on(cluster, "life-warm-mine", "MergedPoolDraining") == []
    finally:
        for srv in servers:
            srv.close()


def test_deleting_the_adapter_of_an_auto_merged_pool_drains_and_deletes_the_pool_first(
    cluster, operator
):
    h = "sha256:" + "7" * 64  # its own base model
    servers = make_pool(
        cluster,
        "gone",
        2,
        base_hash=h,
        autoscaling={"enabled": False, "pollIntervalSeconds": 0.3},
        autoMerge={"enabled": True, "maxPools": 1, "coolDownSeconds": 600, "drainSeconds": 3},
    )
    try:
        make_adapter(cluster, "gone-hot", base_hash=h)
        eventually(lambda: status(cluster, "loraadapters", "gone-hot").get("phase") == "Ready")
        hot = {"requests": 300, "gpu_hits": 300, "tokens_per_second": 2500.0}
        for srv in servers:  # and it stays hot: only the deletion drains its pool
            srv.set_load(adapters={"gone-hot": hot}, tokens_per_second={"gone-hot": 2500.0})
        eventually(
            lambda: cluster.get(cluster.path("replicapools", "gone-hot-merged")), within_s=60
        )
        cluster.delete(cluster.path("loraadapters", "gone-hot"))
        blocked = eventually(
            lambda: (
                (c := cond(status(cluster, "loraadapters", "gone-hot"), "DeletionBlocked")) and c
            ),
            within_s=30,
        )
        assert blocked["reason"] == "InUseByMergedPool"
        assert "gone-hot-merged" in blocked["message"]
        [msg] = eventually(lambda: _events_on(cluster, "gone-hot", "MergedPoolDraining"))
        assert "gone-hot is being deleted" in msg
        eventually(
            lambda: cluster.get(cluster.path("replicapools", "gone-hot-merged")) is None,
            what="the merged pool's deletion",
            within_s=60,
        )
        eventually(
            lambda: cluster.get(cluster.path("loraadapters", "gone-hot")) is None,
            what="the adapter's deletion, after its pool",
            within_s=40,
        )
    finally:
        for srv in servers:
            srv.close()
