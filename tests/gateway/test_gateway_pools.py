"""Routing across pools over real HTTP: stand-in replicas of a shared pool and of a merged pool.

The gateway serves both pools of the base model from one manifests folder. The merged pool's
stand-in reports `merged` in its /state like a merged replica; the gateway sends the hot
adapter there once the pool's merge is Ready, to the shared pool before that, after the merge
failed, and when the merged replica stops answering. (tests/gateway/test_gateway_pools_vllm.py
does the same with real agents in front of real vLLM.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lorafleet_gateway.catalog import CatalogHolder
from lorafleet_gateway.catalog_files import FileCatalog
from lorafleet_gateway.routes import create_internal_app, create_public_app
from lorafleet_gateway.runtime import Gateway
from lorafleet_gateway.settings import GatewaySettings
from tests.gateway import manifests as m
from tests.gateway.conftest import KEYS, MSG_DEFAULT, GatewayEnv, stop_env
from tests.gateway.fake_replica import FakeReplica
from tests.gateway.servers import ServerThread
from tests.scrape import Scrape
from tests.waiting import eventually

HOT = "acme-support-v1"
SUM = m.checksum("merged-weights")
SHARED = ("default-0", "default-1")
READY = {"phase": "Ready", "adapterId": HOT, "adapterChecksum": m.checksum(HOT), "checksum": SUM}


def merged_pool(merge: dict[str, Any] | None) -> dict[str, Any]:
    return m.pool("acme-hot", merged=HOT, merge=merge)


@pytest.fixture
def pools_env(tmp_path: Path) -> Iterator[GatewayEnv]:
    replicas = {rid: FakeReplica(rid, registered=(HOT, "globex-bot-v1")) for rid in SHARED}
    hot = FakeReplica("acme-hot-0", registered=(HOT,))
    hot.merged = {"adapter_id": HOT, "checksum": SUM}
    replicas["acme-hot-0"] = hot
    servers = {rid: ServerThread(r.app()).start() for rid, r in replicas.items()}
    folder = tmp_path / "manifests"
    m.write(folder, "pools.yaml", [m.pool("default"), merged_pool({"phase": "Merging"})])
    m.write(folder, "keys.yaml", [m.key_secret(t, k) for t, k in KEYS.items()])
    m.write(folder, "adapters.yaml", [m.adapter(HOT, "acme"), m.adapter("globex-bot-v1", "globex")])
    m.write(
        folder,
        "aliases.yaml",
        [m.alias("acme/support:prod", HOT), m.alias("globex/bot:prod", "globex-bot-v1")],
    )
    m.write(
        folder,
        "replicas.yaml",
        # the shared pool's rows name no pool (a file written before pools); the merged one does
        [m.replicas_doc({r: s.url for r, s in servers.items()}, {"acme-hot-0": "acme-hot"})],
    )
    gs = GatewaySettings(manifests_dir=folder, poll_interval_s=0.2, catalog_reload_interval_s=0.05)
    gw = Gateway(gs, FileCatalog(CatalogHolder(), folder, pool="default", interval_s=0.05))
    server = ServerThread(create_public_app(gw), create_internal_app(gw)).start()
    env = GatewayEnv(folder, replicas, servers, gw, server)
    try:
        yield env
    finally:
        stop_env(env)


def _served(
    env: GatewayEnv, model: str = "acme/support:prod", tenant: str = "acme"
) -> tuple[str, str]:
    raw = env.client(tenant).chat.completions.with_raw_response.create(
        model=model, messages=MSG_DEFAULT
    )
    return raw.headers["x-replica-id"], raw.headers["x-adapter-tier"]


def _set_merge(env: GatewayEnv, merge: dict[str, Any]) -> None:
    version = env.gw.holder.current.version
    m.write(env.folder, "pools.yaml", [m.pool("default"), merged_pool(merge)])
    eventually(lambda: env.gw.holder.current.version > version, what="catalog reload")


def test_hot_adapter_moves_to_the_merged_pool_when_ready_and_back_when_it_fails(
    pools_env: GatewayEnv,
):
    env = pools_env
    eventually(lambda: len(env.gw.tracker.views()) == 3, what="all replicas polled")
    # Merging: the shared pool serves, nothing is refused.
    before = {_served(env) for _ in range(4)}
    assert {rid for rid, _ in before} <= set(SHARED)
    assert all(tier != "merged" for _, tier in before)

    _set_merge(env, READY)
    assert {_served(env) for _ in range(4)} == {("acme-hot-0", "merged")}
    # other adapters never reach the merged pool
    assert {_served(env, "globex/bot:prod", "globex")[0] for _ in range(4)} <= set(SHARED)

    _set_merge(env, {"phase": "Failed", "adapterId": HOT, "message": "merge job failed"})
    after = {_served(env) for _ in range(4)}
    assert {rid for rid, _ in after} <= set(SHARED)


def test_merged_replica_down_or_serving_other_weights_falls_back_to_shared(
    pools_env: GatewayEnv,
):
    env = pools_env
    _set_merge(env, READY)
    eventually(lambda: _served(env)[0] == "acme-hot-0", what="merged pool serving")
    hot = env.replicas["acme-hot-0"]
    # the replica now reports other merged weights: never a candidate for this adapter
    hot.merged = {"adapter_id": HOT, "checksum": m.checksum("stale-weights")}
    eventually(lambda: _served(env)[0] in SHARED, what="stale merged replica left out")
    hot.merged = {"adapter_id": HOT, "checksum": SUM}
    eventually(lambda: _served(env)[0] == "acme-hot-0", what="merged replica back")
    env.replica_servers["acme-hot-0"].stop()  # the merged pool's only replica dies
    assert all(_served(env)[0] in SHARED for _ in range(5))


def _fallbacks(env: GatewayEnv, reason: str) -> float:
    return Scrape.of(f"{env.internal_url}/metrics").value(
        "lorafleet_gateway_merged_fallback_total", pool="acme-hot", reason=reason
    )


def test_full_merged_replica_spills_to_the_shared_pool_and_counts_it(pools_env: GatewayEnv):
    env = pools_env
    _set_merge(env, READY)
    eventually(lambda: _served(env)[0] == "acme-hot-0", what="merged pool serving")
    hot = env.replicas["acme-hot-0"]
    hot.queue_depth = env.gw.thresholds.merged_max_queue_depth + 1  # a surge: it queues
    eventually(lambda: _served(env)[0] in SHARED, what="overflow spilled to the shared pool")
    spilled = _fallbacks(env, "overloaded")
    assert spilled >= 1
    rid, tier = _served(env)
    assert rid in SHARED
    assert tier != "merged"
    assert _fallbacks(env, "overloaded") == spilled + 1
    hot.queue_depth = 0
    eventually(lambda: _served(env)[0] == "acme-hot-0", what="merged replica takes it again")
    assert _fallbacks(env, "unhealthy") == 0
