"""Standalone reconciler over a manifests folder, with the operator's real planners."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from lorafleet_core.api.names import ANNOTATION_OWNED_ADAPTERS
from lorafleet_core.planning.placement import owners
from lorafleet_core.storage.manifests import write_object
from lorafleet_core.storage.standalone_state import load_alias_statuses
from lorafleet_core.wire.records import decode_owned, parse_downward_annotations
from lorafleet_core.wire.replica_state import ReplicaState
from lorafleet_standalone.local_replicas import forget_on_replicas
from lorafleet_standalone.planning import Plan
from lorafleet_standalone.processes import ReplicaPlan
from lorafleet_standalone.reconciler import Reconciler
from tests.manifest_folder import adapter_manifest, alias_manifest, pool_hash
from tests.operator.state_servers import StateServer

REPLICAS = ["main-0", "main-1", "main-2"]


def _setup(folder: Path, tmp_path: Path) -> tuple[str, dict[str, Path], Reconciler, list[str]]:
    h = pool_hash(folder)
    for n in ("acme-a-v1", "acme-a-v2", "acme-b-v1"):
        write_object(folder, adapter_manifest(n, "acme", h))
    write_object(folder, alias_manifest("acme-a-prod", "acme/a:prod", "acme-a-v1"))
    files = {r: tmp_path / "replicas" / r / "annotations" for r in REPLICAS}
    messages: list[str] = []
    rec = Reconciler(
        folder, files, tmp_path / "reconcile.json", pool_name=None, say=messages.append
    )
    return h, files, rec, messages


def _holding(
    plan: Plan | None, failing: tuple[str, ...] = (), pulling: tuple[str, ...] = ()
) -> dict[str, ReplicaState]:
    """What the replicas would report as agents: each holds the verified files of what it
    owns on disk, except the adapters in `failing` (it refused their files) and in `pulling`
    (not fetched yet)."""
    assert plan is not None
    states = {}
    for r in REPLICAS:
        owned = [a for a, o in plan.owners.items() if r in o]
        states[r] = ReplicaState(
            replica_id=r,
            disk_adapters=[a for a in owned if a not in failing + pulling],
            failed_adapters={a: "ChecksumMismatch: files differ" for a in owned if a in failing},
        )
    return states


def _owned(path: Path) -> list[str]:
    value = parse_downward_annotations(path.read_text())[ANNOTATION_OWNED_ADAPTERS]
    return sorted(r.id for r in decode_owned(value))


def test_owners_are_written_to_each_replicas_annotation_file(folder, tmp_path):
    _, files, rec, _ = _setup(folder, tmp_path)
    plan = rec.tick()
    assert plan is not None
    assert plan.problems == []
    for adapter in ("acme-a-v1", "acme-a-v2", "acme-b-v1"):
        expected = owners(adapter, REPLICAS, 2)
        assert plan.owners[adapter] == expected
        for r in REPLICAS:
            assert (adapter in _owned(files[r])) == (r in expected)
    assert rec.tick() is None  # nothing changed, nothing done
    status = json.loads((tmp_path / "reconcile.json").read_text())
    assert status["models"] == {"acme/a:prod": "acme-a-v1"}
    assert status["adapters"]["acme-b-v1"]["owners"] == owners("acme-b-v1", REPLICAS, 2)
    assert status["adapters"]["acme-b-v1"]["phase"] == "Ready"


def test_bad_manifests_are_reported_and_nothing_else_stops(folder, tmp_path):
    h, files, rec, messages = _setup(folder, tmp_path)
    rec.tick()
    write_object(folder, adapter_manifest("acme-big-v1", "acme", h, rank=64))
    write_object(folder, adapter_manifest("acme-alien-v1", "acme", "sha256:" + "c" * 64))
    (folder / "typo.yaml").write_text("kind: [")
    plan = rec.tick()
    assert plan is not None
    texts = [str(p) for p in plan.problems]
    assert any(
        "loraadapter-acme-big-v1.yaml: LoRAAdapter/acme-big-v1: rejected (RankTooHigh): rank 64 "
        "exceeds ReplicaPool main maxRank 8" in t
        for t in texts
    ), texts
    assert any("acme-alien-v1" in t and "BaseModelMismatch" in t for t in texts), texts
    assert any(t.startswith("typo.yaml: manifest: cannot parse") for t in texts), texts
    # Reported once on the console and in the status file.
    assert sum("manifest problem" in m and "RankTooHigh" in m for m in messages) == 1
    problems = json.loads((tmp_path / "reconcile.json").read_text())["problems"]
    assert {p["name"] for p in problems} >= {"acme-big-v1", "acme-alien-v1"}
    # Everything else is still placed and served; the bad ones are on no replica.
    assert set(plan.records) == {"acme-a-v1", "acme-a-v2", "acme-b-v1"}
    all_owned = {a for r in REPLICAS for a in _owned(files[r])}
    assert all_owned == {"acme-a-v1", "acme-a-v2", "acme-b-v1"}
    assert plan.models == {"acme/a:prod": "acme-a-v1"}

    # Fixing the folder clears the problem.
    (folder / "typo.yaml").unlink()
    (folder / "loraadapter-acme-big-v1.yaml").unlink()
    rec.tick()
    assert any(m.startswith("resolved: loraadapter-acme-big-v1.yaml") for m in messages)


def test_alias_edit_records_history_and_a_bad_target_keeps_serving(folder, tmp_path):
    _, _, rec, _ = _setup(folder, tmp_path)
    rec.tick()
    write_object(folder, alias_manifest("acme-a-prod", "acme/a:prod", "acme-a-v2"))
    plan = rec.tick(_holding(rec.last))
    assert plan is not None
    assert plan.models == {"acme/a:prod": "acme-a-v2"}
    st = load_alias_statuses(folder)["acme-a-prod"]
    assert (st.adapter, st.previous_adapter) == ("acme-a-v2", "acme-a-v1")

    # Pointing at an adapter that does not exist is refused; the last good one keeps serving.
    write_object(folder, alias_manifest("acme-a-prod", "acme/a:prod", "acme-a-v9"))
    plan = rec.tick()
    assert plan is not None
    assert plan.models == {"acme/a:prod": "acme-a-v2"}
    assert any("AdapterNotFound" in str(p) for p in plan.problems)


def test_a_deploy_waits_until_a_replica_verified_the_target(folder, tmp_path):
    _, _, rec, _ = _setup(folder, tmp_path)
    rec.tick()
    write_object(folder, alias_manifest("acme-a-prod", "acme/a:prod", "acme-a-v2"))
    plan = rec.tick(_holding(rec.last, pulling=("acme-a-v2",)))
    assert plan is not None
    assert plan.models == {"acme/a:prod": "acme-a-v1"}  # still the previous version
    deployed = next(
        c for c in plan.alias_statuses["acme-a-prod"].conditions if c.type == "Deployed"
    )
    assert (deployed.status, deployed.reason) == ("False", "AwaitingReplicas")
    assert rec.awaiting_replicas  # `up` polls the replicas every second meanwhile
    plan = rec.tick(_holding(rec.last))  # a replica holds v2's verified files now
    assert plan is not None
    assert plan.models == {"acme/a:prod": "acme-a-v2"}
    assert not rec.awaiting_replicas


def test_a_deploy_no_replica_verifies_is_reported_stalled_at_its_deadline(folder, tmp_path):
    """As on a cluster: past spec.progressDeadlineSeconds the deploy says
    ProgressDeadlineExceeded (on the console too), the previous version keeps serving, and the
    deploy completes once a replica verifies the version."""
    _, files, _, _ = _setup(folder, tmp_path)
    now = [datetime(2026, 12, 1, 9, 0, tzinfo=UTC)]
    messages: list[str] = []
    rec = Reconciler(folder, files, tmp_path / "r.json", say=messages.append, clock=lambda: now[0])
    rec.tick()
    body = alias_manifest("acme-a-prod", "acme/a:prod", "acme-a-v2")
    body["spec"]["progressDeadlineSeconds"] = 30
    write_object(folder, body)
    pulling = _holding(rec.last, pulling=("acme-a-v2",))
    plan = rec.tick(pulling)
    assert plan is not None
    deploying = plan.alias_statuses["acme-a-prod"].deploying
    assert deploying is not None
    assert deploying.started_at == now[0]
    now[0] += timedelta(seconds=30)
    plan = rec.tick(pulling)
    assert plan is not None
    assert plan.models == {"acme/a:prod": "acme-a-v1"}
    deployed = next(
        c for c in plan.alias_statuses["acme-a-prod"].conditions if c.type == "Deployed"
    )
    assert deployed.reason == "ProgressDeadlineExceeded"
    assert "began 2026-12-01T09:00:00Z" in deployed.message
    assert any("ProgressDeadlineExceeded" in m for m in messages), messages
    stored = load_alias_statuses(folder)["acme-a-prod"]  # kept for `alias get` and restarts
    assert stored.deploying == deploying
    assert rec.awaiting_replicas  # still polled every second: it may complete yet
    plan = rec.tick(_holding(rec.last))
    assert plan is not None
    assert plan.models == {"acme/a:prod": "acme-a-v2"}
    assert load_alias_statuses(folder)["acme-a-prod"].deploying is None


def test_the_replicas_verdicts_outlive_a_folder_change_and_the_bad_version_never_serves(
    folder, tmp_path
):
    """Every owner refuses v2's files (a checksum mismatch); a manifest change between two
    polls of the replicas plans with their last verdicts, not with none."""
    h, _, rec, _ = _setup(folder, tmp_path)
    rec.tick()
    write_object(folder, alias_manifest("acme-a-prod", "acme/a:prod", "acme-a-v2"))
    plan = rec.tick(_holding(rec.last, failing=("acme-a-v2",)))
    assert plan is not None
    assert plan.adapter_statuses["acme-a-v2"].phase == "Failed"
    assert plan.models == {"acme/a:prod": "acme-a-v1"}
    write_object(folder, adapter_manifest("acme-c-v1", "acme", h))  # an unrelated change
    plan = rec.tick()  # no poll of the replicas this time
    assert plan is not None
    assert plan.adapter_statuses["acme-a-v2"].phase == "Failed"
    assert plan.models == {"acme/a:prod": "acme-a-v1"}
    texts = [str(p) for p in plan.problems]
    assert any("acme-a-prod" in t and "is Failed" in t for t in texts), texts


def test_no_pool_is_a_problem_not_a_crash(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    write_object(folder, adapter_manifest("acme-a-v1", "acme", "sha256:" + "a" * 64))
    rec = Reconciler(folder, {"r-0": tmp_path / "ann"}, tmp_path / "s.json", say=lambda _m: None)
    plan = rec.tick()
    assert plan is not None
    assert plan.records == {}
    texts = [str(p) for p in plan.problems]
    assert "ReplicaPool: no ReplicaPool found" in texts, texts
    assert any("not served yet (NoMatchingPool)" in t for t in texts), texts
    assert _owned(tmp_path / "ann") == []


def test_alias_whose_adapter_manifest_is_removed_is_reported_and_not_served(folder, tmp_path):
    _, _, rec, _ = _setup(folder, tmp_path)
    plan = rec.tick()
    assert plan is not None
    assert plan.models == {"acme/a:prod": "acme-a-v1"}
    (folder / "loraadapter-acme-a-v1.yaml").unlink()
    plan = rec.tick()
    assert plan is not None
    assert plan.models == {}
    st = load_alias_statuses(folder)["acme-a-prod"]
    ready = next(c for c in st.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("False", "AdapterNotFound")
    texts = [str(p) for p in plan.problems]
    assert any("acme-a-prod" in t and "AdapterNotFound" in t for t in texts), texts


def test_corrupt_alias_status_file_is_moved_aside_reported_once_and_rewritten(folder, tmp_path):
    _, _, rec, messages = _setup(folder, tmp_path)
    rec.tick()
    write_object(folder, alias_manifest("acme-a-prod", "acme/a:prod", "acme-a-v2"))
    rec.tick(_holding(rec.last))
    path = folder / ".lorafleet" / "alias-status.json"
    path.write_text('{"acme-a-prod": {"adapter": ')  # cut off mid-write
    # A fresh reconciler (a restarted `lorafleet up`) and a running one both recover.
    fresh = Reconciler(folder, rec.annotation_files, tmp_path / "r2.json", say=messages.append)
    for r in (rec, fresh):
        path.write_text('{"acme-a-prod": {"adapter": ')
        plan = r.reconcile()
        assert plan.models == {"acme/a:prod": "acme-a-v2"}
        assert load_alias_statuses(folder)["acme-a-prod"].adapter == "acme-a-v2"
    # The running one kept its rollback target from its last plan.
    assert load_alias_statuses(folder)["acme-a-prod"].adapter == "acme-a-v2"
    aside = sorted(p.name for p in path.parent.iterdir() if ".corrupt-" in p.name)
    assert len(aside) == 2, aside  # both corrupt copies kept
    assert sum("unreadable" in m for m in messages) == 2, messages


def test_an_adapter_edited_in_place_is_reported_and_keeps_its_first_spec(folder, tmp_path):
    """A new checksum under the same name and version: refused as a cluster would."""
    h, files, rec, _ = _setup(folder, tmp_path)
    rec.tick()
    first = _records(files["main-0"]) | _records(files["main-1"]) | _records(files["main-2"])
    edited = adapter_manifest("acme-a-v1", "acme", h)
    edited["spec"]["checksum"] = "sha256:" + "e" * 64
    write_object(folder, edited)
    plan = rec.tick()
    assert plan is not None
    texts = [str(p) for p in plan.problems]
    assert any("acme-a-v1" in t and "spec changed in place" in t for t in texts), texts
    assert plan.records["acme-a-v1"].checksum == first["acme-a-v1"]
    now = _records(files["main-0"]) | _records(files["main-1"]) | _records(files["main-2"])
    assert now == first  # no replica is handed a second record for the id
    assert plan.models == {"acme/a:prod": "acme-a-v1"}
    # Deleting the file and publishing it again is a new object: accepted.
    (folder / "loraadapter-acme-a-v1.yaml").unlink()
    rec.tick()
    write_object(folder, edited)
    plan = rec.tick()
    assert plan is not None
    assert plan.records["acme-a-v1"].checksum == "sha256:" + "e" * 64


def _records(path: Path) -> dict[str, str]:
    value = parse_downward_annotations(path.read_text())[ANNOTATION_OWNED_ADAPTERS]
    return {r.id: r.checksum for r in decode_owned(value)}


def test_a_removed_adapter_is_forgotten_on_every_local_agent(folder, tmp_path):
    """Issue 30 under `lorafleet up`: a manifest removed is held in `removed` until the runner
    has had every local agent forget it (real loopback replicas answering as agents do); a busy
    one keeps it for the next poll, a down one holds nothing to forget."""
    _, _, rec, _ = _setup(folder, tmp_path)
    rec.tick()
    assert rec.removed == set()
    (folder / "loraadapter-acme-b-v1.yaml").unlink()
    rec.tick()
    assert rec.removed == {"acme-b-v1"}
    idle, busy, down = (StateServer(r) for r in REPLICAS)
    down.close()
    busy.forget_answers = [(409, "adapter_busy")]
    replicas = [
        ReplicaPlan(s.replica_id, 0, 0, s.port, tmp_path / s.replica_id) for s in (idle, busy, down)
    ]
    try:
        rec.forgotten(forget_on_replicas(replicas, rec.removed, "tok"))
        assert rec.removed == {"acme-b-v1"}  # the busy replica still holds it
        rec.forgotten(forget_on_replicas(replicas, rec.removed, "tok"))
    finally:
        idle.close()
        busy.close()
    assert rec.removed == set()
    told = ("acme-b-v1", "Bearer tok")
    assert idle.forgets == [told, told]
    assert busy.forgets == [told, told]


def test_a_removed_adapter_added_back_before_it_was_forgotten_is_not_forgotten(folder, tmp_path):
    h, _, rec, _ = _setup(folder, tmp_path)
    rec.tick()
    (folder / "loraadapter-acme-b-v1.yaml").unlink()
    rec.tick()
    assert rec.removed == {"acme-b-v1"}
    write_object(folder, adapter_manifest("acme-b-v1", "acme", h))
    rec.tick()
    assert rec.removed == set()
