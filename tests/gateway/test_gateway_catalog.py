"""Catalog: snapshot building from manifests, the folder source, and Kubernetes state (dicts)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from lorafleet_core.storage.replica_endpoints import parse_replicas
from lorafleet_gateway.catalog import CatalogHolder, CatalogSnapshot
from lorafleet_gateway.catalog_build import build_snapshot
from lorafleet_gateway.catalog_files import FileCatalog
from lorafleet_gateway.catalog_kube import KubeState, pod_endpoint
from tests.gateway import manifests as m
from tests.waiting import eventually_async

READY_ADAPTER = {"phase": "Ready", "ownerCount": 3}
READY_ALIAS = {
    "adapter": "acme-a-v1",
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Ok",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ],
}


def build(adapters, aliases, *, allow=True, secrets=(), pool=None) -> CatalogSnapshot:
    return build_snapshot(
        adapters=adapters,
        aliases=aliases,
        secrets=secrets,
        pools=[pool] if pool is not None else [],
        replicas=[],
        allow_missing_status=allow,
        version=1,
    )


def test_status_gates_serving():
    adapters = [
        m.adapter("acme-a-v1", "acme", status=READY_ADAPTER),
        m.adapter("acme-a-v2", "acme", status={"phase": "Rejected"}),
        m.adapter("acme-a-v3", "acme"),
    ]
    aliases = [
        m.alias("acme/a:prod", "acme-a-v1", status=READY_ALIAS),
        m.alias("acme/a:bad", "acme-a-v2"),
        m.alias("acme/a:nostatus", "acme-a-v3"),
    ]
    strict = build(adapters, aliases, allow=False)
    assert set(strict.aliases) == {"acme/a:prod"}
    assert strict.owner_count("acme-a-v1") == 3
    lenient = build(adapters, aliases, allow=True)
    assert set(lenient.aliases) == {"acme/a:prod", "acme/a:nostatus"}
    assert "acme-a-v2" not in lenient.adapters


def test_status_adapter_wins_until_operator_marks_deploy():
    adapters = [
        m.adapter("acme-a-v1", "acme", status=READY_ADAPTER),
        m.adapter("acme-a-v2", "acme", status=READY_ADAPTER),
    ]
    alias = m.alias("acme/a:prod", "acme-a-v2", status=READY_ALIAS)  # spec moved, status not yet
    assert build(adapters, [alias], allow=False).aliases["acme/a:prod"].adapter_id == "acme-a-v1"
    not_ready = m.alias(
        "acme/a:prod",
        "acme-a-v1",
        status={
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "TargetMissing",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        },
    )
    assert build(adapters, [not_ready]).aliases == {}


def test_cross_tenant_alias_never_serves_and_invalid_objects_are_skipped():
    adapters = [
        m.adapter("globex-b-v1", "globex"),
        {"kind": "LoRAAdapter", "metadata": {"name": "broken"}, "spec": {"tenant": "acme"}},
    ]
    sneaky = m.alias("acme/steal:prod", "globex-b-v1")
    bad_model = m.alias("acme/x:prod", "globex-b-v1")
    bad_model["spec"]["model"] = "globex/x:prod"  # model outside its tenant: invalid spec
    snap = build(adapters, [sneaky, bad_model])
    assert snap.aliases == {}
    assert set(snap.adapters) == {"globex-b-v1"}


def test_resolve_is_per_tenant_and_pool_default_owners():
    snap = build(
        [m.adapter("acme-a-v1", "acme")],
        [m.alias("acme/a:prod", "acme-a-v1")],
        pool=m.pool(owners=3),
        secrets=[m.key_secret("acme", "k1"), m.key_secret("acme", "k2")],
    )
    assert snap.resolve("acme", "acme/a:prod") is not None
    assert snap.resolve("globex", "acme/a:prod") is None
    assert snap.models_of("acme") == ["acme/a:prod"]
    assert snap.models_of("globex") == []
    assert snap.owner_count("acme-a-v1") == 3
    assert len(snap.tenants["acme"].key_hashes) == 2  # two Secrets: keys merged
    assert snap.keys.tenant_for("k2") is not None


def test_file_catalog_reads_folder_and_reloads(tmp_path: Path):
    folder = tmp_path / "m"
    m.write(
        folder,
        "all.yaml",
        [
            m.adapter("acme-a-v1", "acme"),
            m.alias("acme/a:prod", "acme-a-v1"),
            m.key_secret("acme", "k"),
            m.pool(),
        ],
    )
    (folder / "list.json").write_text(
        json.dumps(
            {
                "kind": "List",
                "items": [m.adapter("acme-b-v1", "acme"), m.alias("acme/b:prod", "acme-b-v1")],
            }
        )
    )
    (folder / "junk.yaml").write_text(":\n  - [unbalanced")
    (folder / "replicas.json").write_text(
        json.dumps({"replicas": [{"id": "r0", "dataUrl": "http://127.0.0.1:1/"}]})
    )
    # A Secret without the api-keys label is not a key Secret.
    plain = m.key_secret("globex", "g")
    plain["metadata"]["labels"] = {}
    m.write(folder, "plain.yaml", [plain])
    holder = CatalogHolder()
    source = FileCatalog(holder, folder, interval_s=0.01)
    asyncio.run(source.load_once())
    snap = holder.current
    assert set(snap.aliases) == {"acme/a:prod", "acme/b:prod"}
    assert set(snap.tenants) == {"acme"}
    assert [(r.id, r.data_url, r.internal_url) for r in snap.replicas] == [
        ("r0", "http://127.0.0.1:1", "http://127.0.0.1:1")
    ]

    async def follow() -> None:
        task = asyncio.create_task(source.run())
        m.write(folder, "all.yaml", [m.adapter("acme-a-v1", "acme"), m.key_secret("acme", "k")])
        try:
            await eventually_async(lambda: holder.current.version > snap.version, what="reload")
        finally:
            task.cancel()

    asyncio.run(follow())
    assert set(holder.current.aliases) == {"acme/b:prod"}
    assert snap.aliases.keys() == {"acme/a:prod", "acme/b:prod"}  # old snapshot untouched


def test_parse_replicas_rejects_garbage():
    assert (
        parse_replicas([{"id": "a", "dataUrl": "http://x", "internalUrl": "http://y"}])[
            0
        ].internal_url
        == "http://y"
    )
    for bad in ({"replicas": "x"}, [{"id": "a"}], [3]):
        try:
            parse_replicas(bad)
        except ValueError:
            continue
        raise AssertionError(f"accepted {bad!r}")


def pod(
    name: str,
    ip: str | None = "10.0.0.1",
    ready: str = "True",
    phase: str = "Running",
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {"lorafleet.dev/pool": "default", "lorafleet.dev/component": "replica"},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "status": {"phase": phase, "podIP": ip, "conditions": [{"type": "Ready", "status": ready}]},
    }


def test_pod_endpoint():
    ep = pod_endpoint(pod("default-0"), 8100, 8101)
    assert ep is not None
    assert (ep.id, ep.data_url, ep.internal_url) == (
        "default-0",
        "http://10.0.0.1:8100",
        "http://10.0.0.1:8101",
    )
    v6 = pod_endpoint(pod("p", ip="fd00::1"), 1, 2)
    assert v6 is not None
    assert v6.data_url == "http://[fd00::1]:1"
    for bad in (
        pod("p", ip=None),
        pod("p", ready="False"),
        pod("p", phase="Pending"),
        pod("p", deleting=True),
    ):
        assert pod_endpoint(bad, 8100, 8101) is None


def test_kube_state_events_build_snapshots():
    state = KubeState("default")
    state.replace("adapters", [m.adapter("acme-a-v1", "acme", status=READY_ADAPTER)])
    state.replace("aliases", [m.alias("acme/a:prod", "acme-a-v1", status=READY_ALIAS)])
    state.replace("pools", [m.pool(owners=2)])
    state.replace("pods", [pod("default-0"), pod("default-1", ready="False")])
    state.replace("secrets", [m.key_secret("acme", "k")])
    s1 = state.snapshot()
    assert set(s1.aliases) == {"acme/a:prod"}
    assert [r.id for r in s1.replicas] == ["default-0"]
    state.apply("pods", "MODIFIED", pod("default-1"))
    state.apply("aliases", "DELETED", m.alias("acme/a:prod", "acme-a-v1"))
    # Without status (operator has not processed it) a new alias does not serve in a cluster.
    state.apply("aliases", "ADDED", m.alias("acme/new:prod", "acme-a-v1"))
    # A pod of another pool and an unlabelled Secret never enter, even if the server sent them.
    stranger = pod("other-0")
    stranger["metadata"]["labels"]["lorafleet.dev/pool"] = "other"
    state.apply("pods", "ADDED", stranger)
    unlabelled = m.key_secret("globex", "g")
    unlabelled["metadata"]["labels"] = {}
    state.apply("secrets", "ADDED", unlabelled)
    s2 = state.snapshot()
    assert "globex" not in s2.tenants
    assert s2.version > s1.version
    assert s2.aliases == {}
    assert [r.id for r in s2.replicas] == ["default-0", "default-1"]
