"""autoMerge in standalone mode: the operator's decisions from the folder, applied to it.

The planning over a real manifests folder (no processes); creating a pool's replica needs vLLM
and is in test_up_auto_merge_e2e.py.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from lorafleet_core.api import reasons as R
from lorafleet_core.api.models import ConditionStatus, MergePhase, MergeStatus, ReplicaPool
from lorafleet_core.api.names import ANNOTATION_DRAINING_SINCE
from lorafleet_core.planning.conditions import find
from lorafleet_core.planning.fleet import FleetParams
from lorafleet_core.planning.merged_lifecycle import auto_created
from lorafleet_core.storage.manifests import load_folder, write_object
from lorafleet_core.wire.replica_state import AdapterActivity, ReplicaState
from lorafleet_standalone.auto_merge import AutoMerge
from lorafleet_standalone.cpu_binding import EngineCores
from lorafleet_standalone.merged import MergedRun, changed_merges, plan_merged_pools
from lorafleet_standalone.planning import Plan, plan
from lorafleet_standalone.processes import ReplicaPlan
from lorafleet_standalone.supervisor import Supervisor
from tests.gateway import manifests as m
from tests.operator.factories import T0

HOT_CHECKSUM = m.adapter("acme-hot-v1", "acme")["spec"]["checksum"]
PARAMS = FleetParams(replica_capacity_tps=10.0)  # threshold MERGE_THRESHOLD_SHARE x 10 tokens/s


def folder(tmp_path: Path, **auto: Any) -> Path:
    shared = m.pool("demo")
    shared["spec"]["autoMerge"] = {"enabled": True, "coolDownSeconds": 60, "drainSeconds": 5}
    shared["spec"]["autoMerge"].update(auto)
    write_object(tmp_path, shared)
    write_object(tmp_path, m.adapter("acme-hot-v1", "acme"))
    return tmp_path


def states(tps: float) -> dict[str, ReplicaState]:
    activity = AdapterActivity(requests=60, gpu_hits=60, tokens_per_second=tps)
    return {
        "demo-0": ReplicaState(
            replica_id="demo-0", adapters={"acme-hot-v1": activity},
            tokens_per_second={"acme-hot-v1": tps},
        )
    }  # fmt: skip


def replan(path: Path, last: Plan | None, tps: float, when: Any) -> Plan:
    return plan(
        load_folder(path),
        ["demo-0"],
        when,
        states=states(tps),
        adapter_statuses=last.adapter_statuses if last else None,
        params=PARAMS,
    )


def test_a_hot_adapter_gets_a_merged_pool_manifest_marked_as_created_by_up(tmp_path: Path):
    path = folder(tmp_path)
    first = replan(path, None, 30.0, T0)
    [body] = first.pools_to_create
    created = ReplicaPool.model_validate(body)
    assert created.metadata.name == "acme-hot-v1-merged"
    assert auto_created(created)  # the same marks as on a cluster
    assert first.merge_events["acme-hot-v1"][0] == R.MERGED_POOL_CREATED
    # written to the folder, the pool is seen on the next pass: not created again
    write_object(path, body)
    again = replan(path, first, 30.0, T0 + timedelta(seconds=10))
    assert again.pools_to_create == []
    c = find(again.adapter_statuses["acme-hot-v1"].conditions, R.MERGED_POOL_RECOMMENDED)
    assert c is not None
    assert (c.status, c.reason) == (ConditionStatus.TRUE, R.MERGED_POOL_EXISTS)


def test_the_recommendation_carries_over_passes_so_the_pool_drains_after_the_cool_down(
    tmp_path: Path,
):
    path = folder(tmp_path)
    p = replan(path, None, 30.0, T0)
    write_object(path, p.pools_to_create[0])
    # traffic stops; the figure is rewritten after a minute: recommendation False
    t1 = T0 + timedelta(minutes=2)
    p = replan(path, p, 0.0, t1)
    c = find(p.adapter_statuses["acme-hot-v1"].conditions, R.MERGED_POOL_RECOMMENDED)
    assert c is not None
    assert c.status == ConditionStatus.FALSE
    assert [x.reason for x in p.pool_changes] == [R.MERGED_POOL_SCALED]  # down to 1
    early = replan(path, p, 0.0, t1 + timedelta(seconds=59))
    assert R.MERGED_POOL_DRAINING not in [x.reason for x in early.pool_changes]
    later = replan(path, p, 0.0, t1 + timedelta(seconds=60))
    assert [x.reason for x in later.pool_changes][-1] == R.MERGED_POOL_DRAINING


def test_drain_goes_into_the_manifest_and_delete_removes_the_pool_and_its_listing(
    tmp_path: Path,
):
    path = folder(tmp_path)
    first = replan(path, None, 30.0, T0)
    pool_file = write_object(path, first.pools_to_create[0])
    status = MergeStatus(
        phase=MergePhase.READY, adapter_id="acme-hot-v1", adapter_checksum=HOT_CHECKSUM
    )
    replica = ReplicaPlan("acme-hot-v1-merged-0", 1, 2, 3, tmp_path / "r")
    runs = [MergedRun("acme-hot-v1-merged", status, [replica])]
    published: list[list[str]] = []
    auto = AutoMerge(
        state_dir=tmp_path / "state",
        manifests_dir=path,
        sup=Supervisor(say=lambda _m: None),
        model_dir=tmp_path / "model",
        token="t",
        stop=lambda: False,
        say=lambda _m: None,
        runs=runs,
        publish=lambda: published.append([r.pool for r in runs]),
        cores=EngineCores((0, 1), expected=1),
    )
    # after the cool-down: draining, written where the gateway's folder catalog reads it
    p = replan(path, first, 0.0, T0 + timedelta(minutes=2))
    p = replan(path, p, 0.0, T0 + timedelta(minutes=4))
    auto.apply(p)
    obj = load_folder(path).find("ReplicaPool", "acme-hot-v1-merged")
    assert obj is not None
    assert ANNOTATION_DRAINING_SINCE in obj.body["metadata"]["annotations"]
    assert published == []  # still listed: its replica finishes what it holds
    # after drainSeconds: gone from the listing and the folder; the shared pool stays
    p = replan(path, p, 0.0, T0 + timedelta(minutes=4, seconds=5))
    assert [x.reason for x in p.pool_changes] == [R.MERGED_POOL_DELETED]
    auto.apply(p)
    assert published == [[]]
    assert not pool_file.exists()
    assert load_folder(path).find("ReplicaPool", "demo") is not None


def merged_folder_with(tmp_path: Path, adapter_checksum: str | None) -> Path:
    """A shared pool, a person's merged pool `hot` of acme-hot-v1, and acme-hot-v1 with
    `adapter_checksum` (None: no such adapter in the folder)."""
    path = tmp_path / "manifests"
    path.mkdir(exist_ok=True)
    write_object(path, m.pool("demo"))
    write_object(path, m.pool("hot", merged="acme-hot-v1"))
    hot = m.adapter("acme-hot-v1", "acme")
    if adapter_checksum is None:
        for f in path.glob("loraadapter-*.yaml"):
            f.unlink()
    else:
        hot["spec"]["checksum"] = adapter_checksum
        write_object(path, hot)
    return path


RUNNING = MergedRun(
    "hot",
    MergeStatus(
        phase=MergePhase.READY,
        adapter_id="acme-hot-v1",
        adapter_checksum=HOT_CHECKSUM,
        checksum="sha256:" + "f" * 64,
    ),
    [],
)


def test_a_merged_pool_whose_adapter_changed_content_is_listed_as_changed(tmp_path: Path):
    """Pure: the running merge is of HOT_CHECKSUM; the folder's acme-hot-v1 now has other
    weights under the same name, then none at all."""
    same = plan_merged_pools(load_folder(merged_folder_with(tmp_path, HOT_CHECKSUM)))
    assert changed_merges([RUNNING], same) == []
    other = m.checksum("other weights")
    recreated = plan_merged_pools(load_folder(merged_folder_with(tmp_path, other)))
    [changed] = changed_merges([RUNNING], recreated)
    assert changed.run is RUNNING
    assert other in changed.why
    assert HOT_CHECKSUM in changed.why
    gone = plan_merged_pools(load_folder(merged_folder_with(tmp_path, None)))
    [changed] = changed_merges([RUNNING], gone)
    assert "cannot be merged now" in changed.why


def test_up_stops_a_merged_pool_whose_adapter_changed_then_merges_the_new_content(
    tmp_path: Path,
):
    """The adapter deleted (then recreated with other weights) while `up` runs: the merged
    pool leaves the listing the gateway reads before anything else, waits while the adapter is
    missing, and is merged again (here the merge fails: no base model, so the shared pool
    keeps serving) once the adapter is back."""
    path = merged_folder_with(tmp_path, None)
    replica = ReplicaPlan("hot-0", 1, 2, 3, tmp_path / "r")
    runs = [MergedRun("hot", RUNNING.status, [replica])]
    published: list[list[str]] = []
    said: list[str] = []
    auto = AutoMerge(
        state_dir=tmp_path / "state",
        manifests_dir=path,
        sup=Supervisor(say=lambda _m: None),
        model_dir=tmp_path / "no-model",
        token="t",
        stop=lambda: False,
        say=said.append,
        runs=runs,
        publish=lambda: published.append([r.pool for r in runs]),
        cores=EngineCores((0, 1), expected=1),
    )
    auto.remerge_changed()
    assert published == [[]]  # the gateway forgets the old merged weights first
    assert auto.stopped == {"hot": 1}
    assert any("stopping its replicas" in s for s in said)
    merged_folder_with(tmp_path, m.checksum("other weights"))
    auto.remerge_changed()
    assert auto.stopped == {}  # one try per change
    assert any("merging acme-hot-v1" in s for s in said)
    assert any("merge failed" in s for s in said)
    assert runs == []
