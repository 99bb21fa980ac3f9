"""Merged pools in standalone mode: planned by the operator's rules, merged as a local step,
served by their own replica (vLLM without LoRA, agent in merged mode), kept apart from the
shared pool's replicas."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from lorafleet_agent.settings import AgentSettings
from lorafleet_core.api import reasons
from lorafleet_core.api.models import ALL_TARGET_MODULES, MergePhase, ReplicaPool
from lorafleet_core.storage.manifests import load_folder, write_object
from lorafleet_core.storage.merged_weights import verify_merged
from lorafleet_core.storage.replica_endpoints import parse_replicas
from lorafleet_demo.assets import DemoAssets
from lorafleet_standalone.merged import (
    MergedRun,
    merge_locally,
    merged_folder,
    plan_merged_pools,
    replicas_file_doc,
)
from lorafleet_standalone.planning import plan
from lorafleet_standalone.processes import ReplicaPlan, agent_process, vllm_process
from tests.operator.factories import T0


def pool(name: str, assets: DemoAssets, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "ReplicaPool",
        "metadata": {"name": name},
        "spec": {
            "baseModel": {
                "name": "demo",
                "hash": assets.base_model_hash,
                "uri": f"file://{assets.base_model}",
            },
            **spec,
        },
    }


def adapter(
    name: str, assets: DemoAssets, base_hash: str | None = None, uri: str | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "lorafleet.dev/v1alpha1",
        "kind": "LoRAAdapter",
        "metadata": {"name": name},
        "spec": {
            "tenant": "acme",
            "version": "v1",
            "baseModelHash": base_hash or assets.base_model_hash,
            "rank": assets.ranks["zebra"],
            "alpha": float(2 * assets.ranks["zebra"]),
            "targetModules": sorted(ALL_TARGET_MODULES),
            "weightsUri": uri or f"file://{assets.adapters['zebra']}/",
            "checksum": assets.checksums["zebra"],
        },
    }


@pytest.fixture
def folder(tmp_path: Path, demo_assets: DemoAssets) -> Path:
    d = tmp_path / "manifests"
    d.mkdir()
    # The shared pool takes adapters from a store laid out <tenant>/<name>/ (adapterSources).
    store = tmp_path / "store"
    (store / "acme").mkdir(parents=True)
    # A copy, not a link: the agent refuses links inside a tenant's folder (object_store).
    shutil.copytree(demo_assets.adapters["zebra"], store / "acme" / "zebra")
    write_object(d, pool("shared", demo_assets, adapterSources=[f"file://{store}"]))
    write_object(d, pool("acme-merged", demo_assets, merged={"adapter": "acme-v1"}))
    write_object(d, adapter("acme-v1", demo_assets, uri=f"file://{store}/acme/zebra/"))
    return d


def replica(tmp_path: Path, rid: str) -> ReplicaPlan:
    return ReplicaPlan(rid, 18000, 18100, 18101, tmp_path / rid, vllm_api_key="k")


def test_the_merged_pool_is_planned_and_the_shared_pool_takes_the_adapters(folder: Path):
    manifests = load_folder(folder)
    (merged,) = plan_merged_pools(manifests)
    assert merged.name == "acme-merged"
    assert merged.record is not None
    assert merged.record.id == "acme-v1"
    shared = plan(manifests, ["shared-0"], T0)
    assert shared.pool_name == "shared"  # never the merged pool
    assert shared.owners["acme-v1"] == ["shared-0"]  # the shared pool still serves it
    assert not [p for p in shared.problems if p.kind == "ReplicaPool"]


def test_a_merged_pool_naming_an_adapter_of_another_base_is_refused(
    folder: Path, demo_assets: DemoAssets
):
    write_object(folder, adapter("acme-v1", demo_assets, base_hash="sha256:" + "7" * 64))
    (merged,) = plan_merged_pools(load_folder(folder))
    assert merged.record is None
    assert merged.problem is not None
    assert reasons.BASE_MODEL_MISMATCH in merged.problem.message
    assert merged.problem.name == "acme-merged"


def test_a_merged_pool_naming_a_missing_adapter_is_refused(folder: Path):
    (folder / "loraadapter-acme-v1.yaml").unlink()
    (merged,) = plan_merged_pools(load_folder(folder))
    assert merged.problem is not None
    assert reasons.MERGED_ADAPTER_NOT_FOUND in merged.problem.message


def test_merged_replica_processes_serve_the_adapter_id_without_lora(
    folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    (merged,) = plan_merged_pools(load_folder(folder))
    spec = merged.pool.spec
    r = replica(tmp_path, "acme-merged-0")
    vllm = vllm_process(r, tmp_path / "m", spec, cpu=True, log_dir=tmp_path)
    assert "--enable-lora" not in vllm.argv
    assert vllm.argv[vllm.argv.index("--served-model-name") + 1] == "acme-v1"
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in vllm.env
    checksum = "sha256:" + "f" * 64
    agent = agent_process(r, spec, tmp_path / "m", merged_checksum=checksum, log_dir=tmp_path)
    for k, v in agent.env.items():
        monkeypatch.setenv(k, v)
    s = AgentSettings()
    assert (s.merged_adapter_id, s.merged_checksum) == ("acme-v1", checksum)
    assert s.merged_model_dir == tmp_path / "m"


def test_the_local_merge_step_produces_verified_weights_once(
    folder: Path, tmp_path: Path, demo_assets: DemoAssets
):
    (merged,) = plan_merged_pools(load_folder(folder))
    state = tmp_path / "state"
    status = merge_locally(merged, demo_assets.base_model, state)
    assert status.phase == MergePhase.READY
    assert status.checksum is not None
    assert status.uri is not None
    assert status.uri.startswith(f"file://{(state / 'merged-store').resolve()}/")
    out = merged_folder(state, status.checksum)
    verify_merged(out, status.checksum)
    stored = Path(status.uri.removeprefix("file://"))
    before = stored.stat().st_mtime_ns
    again = merge_locally(merged, demo_assets.base_model, state)  # the index is reused
    assert again.checksum == status.checksum
    assert stored.stat().st_mtime_ns == before


def test_merged_replicas_are_listed_apart_from_the_shared_ones(tmp_path: Path):
    from lorafleet_core.api.models import MergeStatus

    shared = [replica(tmp_path, "shared-0")]
    status = MergeStatus(
        phase=MergePhase.READY, adapter_id="acme-v1", checksum="sha256:" + "f" * 64
    )
    doc = replicas_file_doc(shared, [MergedRun("acme-merged", status, [replica(tmp_path, "m-0")])])
    # Each merged replica is read with its pool, never as one of the shared pool's.
    assert [(r.id, r.pool) for r in parse_replicas(doc)] == [
        ("shared-0", None),
        ("m-0", "acme-merged"),
    ]
    merged = doc["mergedPools"]["acme-merged"]
    assert merged["merged"]["adapterId"] == "acme-v1"
    assert [r["id"] for r in merged["replicas"]] == ["m-0"]


@pytest.mark.parametrize(
    ("extra", "cpu", "eager"),
    [
        ([], True, True),  # the default on CPU: no torch.compile warm-up at start
        ([], False, False),  # a GPU build keeps vLLM's own default
        (["--no-enforce-eager"], True, False),  # the pool asks for compilation
        (["-O3"], True, False),
        (['--compilation-config={"mode": 3}'], True, False),
        (["--enforce-eager"], True, True),  # named once, not twice
        (["--max-num-seqs", "8"], True, True),  # other flags do not decide it
    ],
)
def test_merged_engine_on_cpu_runs_eager_unless_the_pool_chooses_compilation(
    folder: Path, tmp_path: Path, extra: list[str], cpu: bool, eager: bool
):
    (merged,) = plan_merged_pools(load_folder(folder))
    spec = merged.pool.spec.model_copy(
        update={"engine": merged.pool.spec.engine.model_copy(update={"extra_args": extra})}
    )
    r = replica(tmp_path, "acme-merged-0")
    argv = vllm_process(r, tmp_path / "m", spec, cpu=cpu, log_dir=tmp_path).argv
    assert argv.count("--enforce-eager") == (1 if eager else 0)
    if extra:
        assert argv[-len(extra) :] == extra  # extraArgs still come last


def test_shared_engine_keeps_vllm_default_compilation(folder: Path, tmp_path: Path):
    shared = next(p for p in load_folder(folder).of_kind("ReplicaPool") if p.name == "shared")
    spec = ReplicaPool.model_validate({**shared.body, "status": None}).spec
    argv = vllm_process(
        replica(tmp_path, "shared-0"), tmp_path / "m", spec, cpu=True, log_dir=tmp_path
    ).argv
    assert "--enable-lora" in argv  # vLLM's CPU backend already skips compiling it
    assert "--enforce-eager" not in argv
