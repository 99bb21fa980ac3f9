"""Standalone mode: the folder catalog serves the alias status the reconciler keeps.

On a cluster the gateway serves `status.adapter`, which the operator only moves to a Ready
target; in standalone mode the same status lives in `<folder>/.lorafleet/alias-status.json`,
written by the standalone reconciler (its one writer). These tests write that file with the
store's own writer (and run the real reconciler), then ask the gateway over HTTP where a
request went.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import openai
import pytest

from lorafleet_core.api.models import AdapterAliasStatus
from lorafleet_core.storage.standalone_state import alias_status_path, save_alias_statuses
from lorafleet_gateway.catalog import CatalogHolder
from lorafleet_gateway.catalog_files import FileCatalog
from lorafleet_standalone.reconciler import Reconciler
from tests.gateway import manifests as m
from tests.gateway.conftest import MSG_DEFAULT, GatewayEnv
from tests.waiting import eventually, eventually_async

ALIAS = "acme-support-prod"  # metadata.name of acme/support:prod (see manifests.alias)


def served(env: GatewayEnv, model: str = "acme/support:prod") -> str:
    raw = env.client().chat.completions.with_raw_response.create(model=model, messages=MSG_DEFAULT)
    return raw.headers["x-adapter-id"]


def save_statuses(env: GatewayEnv, statuses: dict[str, AdapterAliasStatus]) -> None:
    """Write the status file as the reconciler does and wait for the gateway to pick it up."""
    version = env.gw.holder.current.version
    save_alias_statuses(env.folder, statuses)
    eventually(lambda: env.gw.holder.current.version > version, what="catalog reload")


def test_status_adapter_is_served_over_spec_and_follows_the_file(env: GatewayEnv):
    # The reconciler accepted v1; the alias file now says v2 (say, not Ready yet).
    save_statuses(env, {ALIAS: AdapterAliasStatus(adapter="acme-support-v1")})
    env.write_aliases(
        [
            m.alias("acme/support:prod", "acme-support-v2"),
            m.alias("acme/support:canary", "acme-support-v2"),
        ]
    )
    assert served(env) == "acme-support-v1"
    # An alias without a status entry keeps serving its spec.adapter.
    assert served(env, "acme/support:canary") == "acme-support-v2"

    # The reconciler accepts v2: the next request goes there.
    save_alias_statuses(env.folder, {ALIAS: AdapterAliasStatus(adapter="acme-support-v2")})
    eventually(lambda: served(env) == "acme-support-v2", what="status switch")
    assert env.gw.holder.current.resolve("acme", "acme/support:prod") is not None

    # A status that says the alias is not Ready (e.g. its model is claimed) serves nothing,
    # as on a cluster.
    not_ready = AdapterAliasStatus.model_validate(
        {
            "adapter": "acme-support-v2",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "ModelClaimed",
                    "message": "claimed",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    )
    save_statuses(env, {ALIAS: not_ready})
    with pytest.raises(openai.NotFoundError):
        served(env)


def test_reconciler_refusing_a_rejected_target_keeps_the_last_good_adapter(
    env: GatewayEnv, tmp_path: Path
):
    bad = m.adapter("acme-support-v3", "acme")
    bad["spec"]["baseModelHash"] = "sha256:" + "c" * 64  # not the pool's base model: Rejected
    m.write(env.folder, "adapters-bad.yaml", [bad])
    rec = Reconciler(
        env.folder,
        {r: tmp_path / "ann" / r for r in env.replicas},
        tmp_path / "reconcile.json",
        pool_name="default",
        say=lambda _msg: None,
    )
    first = rec.tick()
    assert first is not None
    assert first.models["acme/support:prod"] == "acme-support-v1"
    assert "acme-support-v3" not in first.records

    env.write_aliases(
        [
            m.alias("acme/support:prod", "acme-support-v3"),
            m.alias("acme/support:canary", "acme-support-v2"),
        ]
    )
    version = env.gw.holder.current.version
    second = rec.tick()  # refuses v3 and records why (Deployed=False) in the status file
    assert second is not None
    assert second.models["acme/support:prod"] == "acme-support-v1"
    assert any("acme-support-v3" in str(p) for p in second.problems)
    stored = json.loads(alias_status_path(env.folder).read_text())
    assert stored[ALIAS]["adapter"] == "acme-support-v1"
    eventually(lambda: env.gw.holder.current.version > version, what="status reload")
    for _ in range(3):
        assert served(env) == "acme-support-v1"
    sent = [req.get("model") for r in env.replicas.values() for req in r.requests]
    assert "acme-support-v3" not in sent
    assert not any(rec.id == "acme-support-v3" for r in env.replicas.values() for rec in r.loads)


def test_only_the_folders_own_files_are_manifests(tmp_path: Path):
    folder = tmp_path / "m"
    m.write(
        folder,
        "all.yaml",
        [m.adapter("acme-a-v1", "acme"), m.alias("acme/a:prod", "acme-a-v1"), m.pool()],
    )
    # kubectl apply -f DIR reads neither subfolders nor (here) hidden files.
    m.write(
        folder / "sub",
        "more.yaml",
        [m.adapter("acme-b-v1", "acme"), m.alias("acme/b:prod", "acme-b-v1")],
    )
    m.write(
        folder,
        ".hidden.yaml",
        [m.adapter("acme-c-v1", "acme"), m.alias("acme/c:prod", "acme-c-v1")],
    )
    holder = CatalogHolder()
    source = FileCatalog(holder, folder, interval_s=0.01)
    asyncio.run(source.load_once())
    assert set(holder.current.aliases) == {"acme/a:prod"}
    assert set(holder.current.adapters) == {"acme-a-v1"}


def test_an_unreadable_status_file_keeps_the_previous_snapshot(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    folder = tmp_path / "m"
    m.write(
        folder,
        "all.yaml",
        [
            m.adapter("acme-a-v1", "acme"),
            m.adapter("acme-a-v2", "acme"),
            m.alias("acme/a:prod", "acme-a-v2"),
        ],
    )
    save_alias_statuses(folder, {"acme-a-prod": AdapterAliasStatus(adapter="acme-a-v1")})
    holder = CatalogHolder()
    source = FileCatalog(holder, folder, interval_s=0.01)

    async def scenario() -> tuple[int, str, str]:
        await source.load_once()
        first = holder.current
        task = asyncio.create_task(source.run())
        try:
            # Half a file (never written by the reconciler, which renames atomically): falling
            # back to spec.adapter could route to a refused target, so nothing changes.
            alias_status_path(folder).write_text('{"acme-a-prod": {"adapter": ')
            await eventually_async(
                lambda: "keeping the previous snapshot" in caplog.text, what="a failed reload"
            )
            during = holder.current
            save_alias_statuses(folder, {"acme-a-prod": AdapterAliasStatus(adapter="acme-a-v2")})
            await eventually_async(lambda: holder.current.version > during.version)
        finally:
            task.cancel()
        assert during is first
        target = holder.current.aliases["acme/a:prod"].adapter_id
        return first.version, first.aliases["acme/a:prod"].adapter_id, target

    version, before, after = asyncio.run(scenario())
    assert (before, after) == ("acme-a-v1", "acme-a-v2")
    assert holder.current.version > version
