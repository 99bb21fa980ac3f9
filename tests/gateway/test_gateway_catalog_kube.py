"""KubeCatalog against kmock (a real HTTP Kubernetes API emulator): list, watch, rebuild."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import kmock
import pytest
from kubernetes_asyncio import client as k8s

from lorafleet_gateway.catalog import CatalogHolder
from lorafleet_gateway.catalog_kube import KubeCatalog
from tests.gateway import manifests as m
from tests.operator.kmock_cluster import Cluster
from tests.waiting import eventually_async

NS = "serving"
VERBS = {"get", "list", "watch", "create", "patch", "update", "delete"}
RESOURCES = {
    "lorafleet.dev/v1alpha1/loraadapters": "LoRAAdapter",
    "lorafleet.dev/v1alpha1/adapteraliases": "AdapterAlias",
    "lorafleet.dev/v1alpha1/replicapools": "ReplicaPool",
    "v1/pods": "Pod",
    "v1/secrets": "Secret",
}
READY = [
    {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
]


class Emulator:
    """kmock in its own thread and event loop."""

    def __init__(self) -> None:
        self.url = ""
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        assert self._ready.wait(20), "kmock did not start"
        self.http = httpx.Client(base_url=self.url, timeout=10)

    async def _main(self) -> None:
        emu = kmock.KubernetesEmulator()
        for key, kind in RESOURCES.items():
            emu.resources[key] = kmock.ResourceInfo(
                kind=kind, namespaced=True, verbs=VERBS, subresources={"status"}
            )
        async with emu, kmock.Server(emu) as server:
            self.url = str(server.url).rstrip("/")
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await self._stop.wait()

    def close(self) -> None:
        self.http.close()
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def path(self, plural: str, name: str | None = None) -> str:
        root = "/api/v1" if plural in ("pods", "secrets") else "/apis/lorafleet.dev/v1alpha1"
        base = f"{root}/namespaces/{NS}/{plural}"
        return f"{base}/{name}" if name else base

    def create(self, plural: str, body: dict[str, Any]) -> None:
        body["metadata"]["namespace"] = NS
        self.http.post(self.path(plural), json=body).raise_for_status()

    def patch(self, plural: str, name: str, body: dict[str, Any]) -> None:
        self.http.patch(
            self.path(plural, name),
            json=body,
            headers={"content-type": "application/merge-patch+json"},
        ).raise_for_status()

    def delete(self, plural: str, name: str) -> None:
        self.http.delete(self.path(plural, name)).raise_for_status()


def replica_pod(name: str, ip: str, pool: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"lorafleet.dev/pool": pool, "lorafleet.dev/component": "replica"},
        },
        "spec": {"containers": [{"name": "agent", "image": "x"}]},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


@pytest.fixture
def emulator() -> Iterator[Emulator]:
    emu = Emulator()
    try:
        yield emu
    finally:
        emu.close()


async def test_kube_catalog_lists_and_follows_watches(emulator: Emulator):
    emulator.create("replicapools", m.pool(owners=3))
    emulator.create("loraadapters", m.adapter("acme-a-v1", "acme", status={"phase": "Ready"}))
    emulator.create(
        "adapteraliases",
        m.alias("acme/a:prod", "acme-a-v1", status={"adapter": "acme-a-v1", "conditions": READY}),
    )
    emulator.create("pods", replica_pod("default-0", "10.0.0.10"))
    emulator.create("pods", replica_pod("other-0", "10.0.0.99", pool="other"))
    emulator.create("secrets", m.key_secret("acme", "lf-acme"))

    api = k8s.ApiClient(k8s.Configuration(host=emulator.url))
    holder = CatalogHolder()
    source = KubeCatalog(holder, namespace=NS, pool="default", api_client=api, debounce_s=0.01)
    await source.load_once()
    snap = holder.current
    assert snap.resolve("acme", "acme/a:prod") is not None
    assert snap.owners_per_adapter == 3
    assert [(r.id, r.data_url) for r in snap.replicas] == [("default-0", "http://10.0.0.10:8100")]
    assert snap.keys.tenant_for("lf-acme") is not None

    task = asyncio.create_task(source.run())
    try:
        # A deploy: a new adapter version, then the operator moves the alias to it.
        emulator.create("loraadapters", m.adapter("acme-a-v2", "acme", status={"phase": "Ready"}))
        emulator.patch(
            "adapteraliases",
            "acme-a-prod",
            {"spec": {"adapter": "acme-a-v2"}, "status": {"adapter": "acme-a-v2"}},
        )
        await eventually_async(
            lambda: (
                (t := holder.current.resolve("acme", "acme/a:prod")) is not None
                and t.adapter_id == "acme-a-v2"
            )
        )
        # A second replica appears, the first goes away.
        emulator.create("pods", replica_pod("default-1", "10.0.0.11"))
        emulator.delete("pods", "default-0")
        await eventually_async(lambda: [r.id for r in holder.current.replicas] == ["default-1"])
        # The key Secret is deleted: the tenant's keys stop working.
        emulator.delete("secrets", "lorafleet-keys-acme")
        await eventually_async(lambda: holder.current.keys.tenant_for("lf-acme") is None)
        assert snap.resolve("acme", "acme/a:prod").adapter_id == "acme-a-v1"  # type: ignore[union-attr]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()


# A watch event reaches the catalog in tens of milliseconds; a re-list waits 1 s after the
# stream ends. A few seconds is ample on a loaded machine and still says "followed".
FOLLOWS_WITHIN_S = 5.0


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """kmock behind the shared harness, which reads `?watch=True` as a watch as the API server
    does (kubernetes_asyncio's spelling; bare kmock answered it with a plain list)."""
    c = Cluster(NS)
    try:
        yield c
    finally:
        c.close()


async def test_a_deploy_reaches_the_catalog_through_the_watch_without_a_re_list(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
):
    """An alias moved after start-up (a deploy, then a rollback) reaches the catalog as a watch
    event: the watch streams stay open, so the gateway never logs a re-list. Before the harness
    read `watch=True` as a watch, every stream ended at once and the catalog only caught up by
    re-listing each kind in a loop."""
    caplog.set_level(logging.INFO, logger="lorafleet.gateway.catalog")
    cluster.create(cluster.path("replicapools"), m.pool(owners=1))
    for version in ("acme-a-v1", "acme-a-v2"):
        cluster.create(
            cluster.path("loraadapters"), m.adapter(version, "acme", status={"phase": "Ready"})
        )
    cluster.create(
        cluster.path("adapteraliases"),
        m.alias("acme/a:prod", "acme-a-v1", status={"adapter": "acme-a-v1", "conditions": READY}),
    )
    api = k8s.ApiClient(k8s.Configuration(host=cluster.url))
    holder = CatalogHolder()
    source = KubeCatalog(holder, namespace=NS, pool="default", api_client=api, debounce_s=0.01)
    await source.load_once()

    def serves() -> str | None:
        target = holder.current.resolve("acme", "acme/a:prod")
        return target.adapter_id if target is not None else None

    async def follows(version: str) -> None:
        await eventually_async(
            lambda: serves() == version,
            within_s=FOLLOWS_WITHIN_S,
            what=f"the catalog to serve {version}",
        )

    assert serves() == "acme-a-v1"
    task = asyncio.create_task(source.run())
    try:
        for version in ("acme-a-v2", "acme-a-v1"):  # a deploy, then a rollback
            await asyncio.to_thread(
                cluster.patch,
                cluster.path("adapteraliases", "acme-a-prod"),
                {"spec": {"adapter": version}, "status": {"adapter": version}},
            )
            await follows(version)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()
    relists = [r.getMessage() for r in caplog.records if "re-listing" in r.getMessage()]
    assert relists == []
