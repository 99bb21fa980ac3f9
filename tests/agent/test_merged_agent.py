"""An agent of a merged pool's replica, without vLLM: it refuses to start on merged weights
that do not match their checksum, and holds no adapter but the merged one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from lorafleet_agent.disk_cache import DiskCache
from lorafleet_agent.internal_app import build_internal_app
from lorafleet_agent.internal_auth import InternalAuth
from lorafleet_agent.manager import AdapterManager
from lorafleet_agent.merged_model import MergedModel
from lorafleet_agent.metrics import AgentMetrics
from lorafleet_agent.object_store import ObjectStore, ObjectStoreConfig
from lorafleet_agent.requests_stats import RequestStats
from lorafleet_agent.settings import AgentSettings
from lorafleet_agent.verifier import PoolPolicy, VerificationError
from lorafleet_agent.vllm_client import VllmClient
from lorafleet_core.api import reasons
from lorafleet_core.api.models import ALL_TARGET_MODULES
from lorafleet_core.planning.cache_policy import SlotTracker
from lorafleet_core.storage.merged_weights import merged_checksum
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_core.wire.tiers import Tier
from lorafleet_demo.assets import DemoAssets
from tests.agent_thread import agent_in_thread
from tests.conftest import TEST_DATA_TOKEN, TEST_INTERNAL_TOKEN, free_port


def fake_merged(demo_assets: DemoAssets, dest: Path) -> Path:
    """A model folder (the base model's files stand in for merged weights: same layout)."""
    shutil.copytree(demo_assets.base_model, dest)
    return dest


def test_the_agent_refuses_to_start_on_merged_weights_that_fail_their_checksum(
    demo_assets: DemoAssets, tmp_path: Path
):
    folder = fake_merged(demo_assets, tmp_path / "merged")
    good = merged_checksum(folder)
    (folder / "config.json").write_text((folder / "config.json").read_text() + " ")
    settings = AgentSettings(
        replica_id="m0",
        base_model_hash=demo_assets.base_model_hash,
        vllm_url=f"http://127.0.0.1:{free_port()}",  # never reached: the check comes first
        cache_dir=tmp_path / "cache",
        host="127.0.0.1",
        data_port=0,
        internal_port=0,
        internal_token=TEST_INTERNAL_TOKEN,
        data_token=TEST_DATA_TOKEN,
        merged_adapter_id="acme-v1",
        merged_checksum=good,
        merged_model_dir=folder,
        vllm_start_timeout_s=5,
    )
    with pytest.raises(RuntimeError, match="did not"), agent_in_thread(settings, timeout_s=8):
        pass


def test_merged_settings_go_together():
    with pytest.raises(ValueError, match="go together"):
        AgentSettings(merged_adapter_id="acme-v1")


def manager(tmp_path: Path, merged: MergedModel) -> AdapterManager:
    return AdapterManager(
        policy=PoolPolicy("sha256:" + "b" * 64, 16, frozenset(ALL_TARGET_MODULES)),
        slots=SlotTracker(1, 1),
        disk=DiskCache(tmp_path / "cache", 1 << 20),
        store=ObjectStore(ObjectStoreConfig()),
        vllm=VllmClient("http://127.0.0.1:9", 1.0),
        metrics=AgentMetrics(),
        merged=merged,
    )


def record(adapter_id: str) -> AdapterRecord:
    return AdapterRecord(
        id=adapter_id,
        tenant="acme",
        base_model_hash="sha256:" + "b" * 64,
        rank=8,
        alpha=16,
        target_modules=("q_proj",),
        weights_uri=f"s3://adapters/{adapter_id}/",
        checksum="sha256:" + "c" * 64,
    )


def test_a_merged_replica_admits_its_adapter_only_and_refuses_other_records(tmp_path: Path):
    m = manager(tmp_path, MergedModel("acme-v1", "sha256:" + "d" * 64, tmp_path))
    assert m.admits("acme-v1")
    assert m.tier_of("acme-v1") is Tier.GPU
    assert not m.admits("other-v1")
    with pytest.raises(VerificationError) as exc:
        m.add_record(record("other-v1"))
    assert exc.value.reason == reasons.MERGED_POOL
    assert "acme-v1" in m.failed["other-v1"]
    assert "other-v1" not in m.records
    m.add_record(record("acme-v1"))  # the merged adapter's own record is accepted (a no-op)
    assert m.admits("acme-v1")


def test_a_merged_replica_refuses_to_forget_its_merged_adapter_and_forgets_a_refused_one(
    tmp_path: Path,
):
    """Its weights are the engine's: forgetting cannot drop them (409 merged_adapter); a record
    it refused is forgotten like on any replica."""
    m = manager(tmp_path, MergedModel("acme-v1", "sha256:" + "d" * 64, tmp_path))
    with pytest.raises(VerificationError):
        m.add_record(record("other-v1"))
    auth = InternalAuth(SecretStr("tok"), None, allow_unauthenticated=False)
    app = build_internal_app(m, RequestStats(m.metrics), "r0", auth)
    with TestClient(app) as client:
        url = "/internal/replicas/r0/adapters/{}/forget"
        headers = {"authorization": "Bearer tok"}
        merged = client.post(url.format("acme-v1"), headers=headers)
        assert merged.status_code == 409
        assert merged.json()["error"]["code"] == "merged_adapter"
        assert m.admits("acme-v1")
        assert client.post(url.format("other-v1"), headers=headers).status_code == 200
    assert "other-v1" not in m.failed
