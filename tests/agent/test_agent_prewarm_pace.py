"""The agent's pre-warm pass paces the pulls that evict from its full disk cache
(`lorafleet_core.planning.prewarm.evicting_pull_wait`): real S3 (moto), real disk cache and
verification; no vLLM (a pass over disk-only entries never reaches it)."""

from __future__ import annotations

import asyncio
import time
from itertools import pairwise
from pathlib import Path

import pytest

from lorafleet_agent.disk_cache import DiskCache
from lorafleet_agent.manager import AdapterManager
from lorafleet_agent.metrics import AgentMetrics
from lorafleet_agent.object_store import ObjectStore, ObjectStoreConfig
from lorafleet_agent.prewarm import PrewarmWatcher
from lorafleet_agent.verifier import PoolPolicy
from lorafleet_agent.vllm_client import VllmClient
from lorafleet_core.api.models import ALL_TARGET_MODULES
from lorafleet_core.planning import prewarm
from lorafleet_core.planning.cache_policy import SlotTracker
from lorafleet_core.wire.tiers import Tier
from tests.conftest import unique_id


def test_a_later_pass_spaces_its_evicting_pulls_and_fills_free_room_at_once(
    make_record, demo_assets, s3_server, tmp_path: Path, monkeypatch
):
    monkeypatch.setattr(prewarm, "PREWARM_EVICTING_PULLS_PER_MIN", 120.0)  # 0.5 s apart
    gap = 0.5
    s3 = s3_server
    manager = AdapterManager(
        policy=PoolPolicy(demo_assets.base_model_hash, 64, frozenset(ALL_TARGET_MODULES)),
        slots=SlotTracker(0, 0),  # no RAM slot: every entry is a disk pull
        disk=DiskCache(tmp_path / "cache", 1 << 40),
        store=ObjectStore(
            ObjectStoreConfig(s3.endpoint_url, s3.region, s3.access_key_id, s3.secret_access_key)
        ),
        vllm=VllmClient("http://127.0.0.1:9", 1.0),  # never called: disk-only pulls
        metrics=AgentMetrics(),
    )
    # One demo adapter under four ids: the same size, so each pull evicts exactly one.
    recs = [make_record("falcon", unique_id("pace")) for _ in range(4)]
    starts: list[tuple[float, str]] = []
    ensure_on_disk = manager.ensure_on_disk

    async def recorded(adapter_id: str) -> Tier:
        starts.append((time.monotonic(), adapter_id))
        return await ensure_on_disk(adapter_id)

    monkeypatch.setattr(manager, "ensure_on_disk", recorded)
    watcher = PrewarmWatcher(manager, tmp_path / "annotations", poll_s=1.0)

    async def passes() -> None:
        # First pass: room for everything, so no pull waits.
        await watcher.warm(recs[:2], None)
        assert manager.disk.lru.order() == [r.id for r in recs[:2]]
        # The disk is now full: each newly listed adapter evicts the least recently used one.
        manager.disk.lru.budget = manager.disk.lru.used
        await watcher.warm(recs, recs[:1])

    began = time.monotonic()
    asyncio.run(passes())
    first = [t for t, a in starts if a == recs[1].id]
    assert first[0] - began < gap  # the first pass did not wait
    evicting = [t for t, a in starts if a in (recs[2].id, recs[3].id)]
    assert len(evicting) == 2
    assert evicting[1] - evicting[0] >= gap  # unpaced: back to back (one local fetch apart)
    assert set(manager.disk.lru.order()) == {recs[2].id, recs[3].id}
    assert [b - a for a, b in pairwise(evicting)] == pytest.approx([gap], abs=0.3)
