"""The catalog across pools: which pools a gateway serves, each adapter's rank class and
Ready merged pools, each replica's pool (pure builder and the Kubernetes state)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from lorafleet_core.api.models import MergePhase, MergeStatus
from lorafleet_core.api.names import ANNOTATION_DRAINING_SINCE
from lorafleet_core.storage.replica_endpoints import ReplicaEndpoint, parse_replicas
from lorafleet_core.storage.standalone_state import save_merge_statuses
from lorafleet_gateway.catalog import CatalogHolder, CatalogSnapshot
from lorafleet_gateway.catalog_build import build_snapshot
from lorafleet_gateway.catalog_files import FileCatalog
from lorafleet_gateway.catalog_kube import KubeState
from lorafleet_gateway.pool_router import AdapterPools, MergedTarget
from tests.gateway import manifests as m

SUM = "sha256:" + "a" * 64
HOT_CHECKSUM = m.adapter("acme-hot-v1", "acme")["spec"]["checksum"]
READY_MERGE = {
    "phase": "Ready",
    "adapterId": "acme-hot-v1",
    "adapterChecksum": HOT_CHECKSUM,
    "checksum": SUM,
}


def endpoints(**pools: str | None) -> list[ReplicaEndpoint]:
    return [ReplicaEndpoint(r, f"http://{r}", f"http://{r}", p) for r, p in pools.items()]


def build(
    pools: list[Mapping[str, Any]], replicas: list[ReplicaEndpoint], **kw: Any
) -> CatalogSnapshot:
    return build_snapshot(
        adapters=[
            m.adapter("acme-hot-v1", "acme", rank=8),
            m.adapter("acme-big-v1", "acme", rank=32),
        ],
        aliases=[],
        secrets=[],
        pools=pools,
        replicas=replicas,
        allow_missing_status=True,
        version=1,
        **kw,
    )


FLEET: list[Mapping[str, Any]] = [
    m.pool("default", owners=2, max_rank=16),
    m.pool("rank32", owners=3, max_rank=32),
    m.pool("hot", merged="acme-hot-v1", merge=READY_MERGE),
    m.pool("other-model", base_hash="sha256:" + "c" * 64),
]
REPLICAS = endpoints(
    **{"d-0": None, "d-1": "default", "r32-0": "rank32", "hot-0": "hot", "x-0": "other-model"}
)


def test_every_pool_of_the_home_base_model_serves_each_adapter_in_its_rank_class():
    snap = build(FLEET, REPLICAS, pool="default")
    assert snap.pools_for("acme-hot-v1") == AdapterPools("default", (MergedTarget("hot", SUM),))
    assert snap.pools_for("acme-big-v1") == AdapterPools("rank32")
    # a replica naming no pool is the home pool's; another base model's pool is not served
    assert snap.pool_of == {"d-0": "default", "d-1": "default", "r32-0": "rank32", "hot-0": "hot"}
    assert [r.id for r in snap.replicas] == ["d-0", "d-1", "hot-0", "r32-0"]
    assert snap.owner_count("acme-big-v1") == 3
    assert snap.owner_count("acme-hot-v1") == 2


def test_merged_pool_not_ready_or_for_another_adapter_is_not_a_target():
    for merge in (
        {"phase": "Merging"},
        {"phase": "Failed", "message": "out of memory"},
        {"phase": "Ready", "adapterId": "acme-old-v0", "checksum": SUM},
        None,
    ):
        pools = [*FLEET[:2], m.pool("hot", merged="acme-hot-v1", merge=merge)]
        snap = build(pools, REPLICAS, pool="default")
        assert snap.pools_for("acme-hot-v1") == AdapterPools("default"), merge


def test_a_draining_merged_pool_is_no_target_so_new_requests_go_to_the_shared_pool():
    hot = m.pool("hot", merged="acme-hot-v1", merge=READY_MERGE)
    hot["metadata"].setdefault("annotations", {})[ANNOTATION_DRAINING_SINCE] = (
        "2026-12-01T13:00:00+00:00"
    )
    snap = build([*FLEET[:2], hot], REPLICAS, pool="default")
    assert snap.pools_for("acme-hot-v1") == AdapterPools("default")
    # its replicas stay known (they finish what they hold), they just get no new request
    assert snap.pool_of["hot-0"] == "hot"


def test_pools_setting_serves_only_the_listed_pools():
    snap = build(FLEET, REPLICAS, pool="default", only_pools=["default"])
    assert snap.pools_for("acme-hot-v1") == AdapterPools("default")
    assert set(snap.pool_of) == {"d-0", "d-1"}


def test_single_pool_folder_without_pool_names_keeps_working():
    snap = build([m.pool("demo")], endpoints(**{"replica-0": None, "replica-1": None}))
    assert snap.pool_of == {"replica-0": "demo", "replica-1": "demo"}
    assert snap.pools_for("acme-hot-v1").shared == "demo"


def test_replicas_file_rows_may_name_their_pool():
    rows = parse_replicas(
        {
            "replicas": [
                {"id": "a", "dataUrl": "http://a/"},
                {"id": "b", "dataUrl": "http://b", "pool": "hot"},
            ]
        }
    )
    assert [(r.id, r.pool) for r in rows] == [("a", None), ("b", "hot")]


def test_merged_pools_rows_are_read_with_their_pool():
    doc = {
        "replicas": [{"id": "d-0", "dataUrl": "http://d"}],
        "mergedPools": {
            "hot": {
                "merged": {"adapterId": "acme-hot-v1", "checksum": SUM},
                # a row's own `pool` cannot move a merged replica into another pool
                "replicas": [{"id": "hot-0", "dataUrl": "http://h/", "pool": "default"}],
            }
        },
    }
    rows = parse_replicas(doc)
    assert [(r.id, r.data_url, r.pool) for r in rows] == [
        ("d-0", "http://d", None),
        ("hot-0", "http://h", "hot"),
    ]
    assert parse_replicas({"replicas": doc["replicas"]}) == rows[:1]  # older files unchanged


@pytest.mark.parametrize(
    "bad",
    [
        {"mergedPools": []},
        {"mergedPools": {"hot": 3}},
        {"mergedPools": {"hot": {"replicas": [{}]}}},
    ],
)
def test_malformed_merged_pools_are_refused(bad: dict[str, Any]):
    with pytest.raises(ValueError, match=r"mergedPools|merged pool entry|replica entry"):
        parse_replicas({"replicas": [], **bad})


def test_folder_catalog_serves_a_merged_pool_once_up_stored_its_merge_ready(tmp_path: Path):
    folder = tmp_path / "m"
    m.write(
        folder,
        "all.yaml",
        [m.adapter("acme-hot-v1", "acme"), m.pool("default"), m.pool("hot", merged="acme-hot-v1")],
    )
    (folder / "replicas.json").write_text(
        json.dumps(
            {
                "replicas": [{"id": "d-0", "dataUrl": "http://d"}],
                "mergedPools": {"hot": {"replicas": [{"id": "hot-0", "dataUrl": "http://h"}]}},
            }
        )
    )
    holder = CatalogHolder()
    source = FileCatalog(holder, folder, pool="default")
    source.build()
    assert holder.current.pool_of == {"d-0": "default", "hot-0": "hot"}
    assert holder.current.pools_for("acme-hot-v1") == AdapterPools("default")  # no merge yet

    ready = MergeStatus(
        phase=MergePhase.READY,
        adapter_id="acme-hot-v1",
        adapter_checksum=HOT_CHECKSUM,
        checksum=SUM,
    )
    save_merge_statuses(folder, {"hot": ready})
    assert source.changed()  # the reload loop sees it
    source.build()
    assert holder.current.pools_for("acme-hot-v1") == AdapterPools(
        "default", (MergedTarget("hot", SUM),)
    )
    save_merge_statuses(folder, {})  # a later `up` whose merge did not run: not Ready
    source.build()
    assert holder.current.pools_for("acme-hot-v1") == AdapterPools("default")


def test_a_merge_of_other_content_under_the_adapters_name_is_no_target(tmp_path: Path):
    """The adapter deleted and recreated under its name with other weights while the merged
    pool's stored status is still Ready for the first content: the folder catalog sends the
    adapter to its shared pool (the new weights), never to the old merged weights."""
    folder = tmp_path / "m"
    recreated = m.adapter("acme-hot-v1", "acme")
    recreated["spec"]["checksum"] = m.checksum("other weights")
    m.write(folder, "all.yaml", [recreated, m.pool("default"), m.pool("hot", merged="acme-hot-v1")])
    (folder / "replicas.json").write_text(
        json.dumps(
            {
                "replicas": [{"id": "d-0", "dataUrl": "http://d"}],
                "mergedPools": {"hot": {"replicas": [{"id": "hot-0", "dataUrl": "http://h"}]}},
            }
        )
    )
    stale = MergeStatus(
        phase=MergePhase.READY,
        adapter_id="acme-hot-v1",
        adapter_checksum=HOT_CHECKSUM,
        checksum=SUM,
    )
    save_merge_statuses(folder, {"hot": stale})
    holder = CatalogHolder()
    FileCatalog(holder, folder, pool="default").build()
    assert holder.current.pools_for("acme-hot-v1") == AdapterPools("default")
    # The pool merged the new content: a target again.
    fresh = stale.model_copy(update={"adapter_checksum": recreated["spec"]["checksum"]})
    save_merge_statuses(folder, {"hot": fresh})
    FileCatalog(holder, folder, pool="default").build()
    assert holder.current.pools_for("acme-hot-v1").merged == (MergedTarget("hot", SUM),)


def test_a_ready_merge_that_names_no_adapter_content_is_no_target():
    unknown = {k: v for k, v in READY_MERGE.items() if k != "adapterChecksum"}
    snap = build([m.pool("default"), m.pool("hot", merged="acme-hot-v1", merge=unknown)], [])
    assert snap.pools_for("acme-hot-v1") == AdapterPools("default")


def _pod(name: str, pool: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"lorafleet.dev/pool": pool, "lorafleet.dev/component": "replica"},
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.7",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_kube_state_serves_replicas_of_every_pool_of_the_base_model():
    state = KubeState("default")
    state.replace("adapters", [m.adapter("acme-hot-v1", "acme", status={"phase": "Ready"})])
    state.replace("pools", list(FLEET))
    state.replace(
        "pods", [_pod("default-0", "default"), _pod("hot-0", "hot"), _pod("x-0", "other-model")]
    )
    snap = state.snapshot()
    assert snap.pool_of == {"default-0": "default", "hot-0": "hot"}
    assert snap.pools_for("acme-hot-v1").merged == (MergedTarget("hot", SUM),)
    # the merge fails: the next snapshot routes the adapter to its shared pool again
    failed = m.pool("hot", merged="acme-hot-v1", merge={"phase": "Failed"})
    state.apply("pools", "MODIFIED", failed)
    assert state.snapshot().pools_for("acme-hot-v1") == AdapterPools("default")
