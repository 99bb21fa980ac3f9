"""Catalog from Kubernetes: watches on LoRAAdapters, AdapterAliases, the ReplicaPools, their
replica pods and the tenant key Secrets (kubernetes_asyncio; no kopf in the data path).

`KubeState` is the pure part: it applies watch events to an in-memory copy of each kind and
builds snapshots (tested with plain dicts). `KubeCatalog` lists, then watches each kind from the
list's resourceVersion, re-listing on 410 Gone or a dropped stream, and rebuilds the snapshot
(debounced, in a thread: 5,000 adapters take a moment to validate) after changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from lorafleet_core.api.names import (
    API_KEYS_SECRET_LABEL,
    GROUP,
    LABEL_COMPONENT,
    LABEL_POOL,
    PLURAL_ADAPTER,
    PLURAL_ALIAS,
    PLURAL_POOL,
    VERSION,
)
from lorafleet_core.planning.pods import COMPONENT_REPLICA, pod_ip, replica_pool, serving
from lorafleet_gateway.catalog import (
    CatalogHolder,
    CatalogSnapshot,
    CatalogSource,
    ReplicaEndpoint,
)
from lorafleet_gateway.catalog_build import build_snapshot

log = logging.getLogger(__name__)

KINDS = ("adapters", "aliases", "pools", "pods", "secrets")
Obj = Mapping[str, Any]


def pod_endpoint(pod: Obj, data_port: int, internal_port: int) -> ReplicaEndpoint | None:
    """A serving pod (lorafleet_core.planning.pods.serving) -> its endpoints (id = pod name)."""
    meta = pod.get("metadata") or {}
    ip = pod_ip(pod)
    if ip is None or not serving(pod):
        return None
    host = f"[{ip}]" if ":" in ip else ip
    return ReplicaEndpoint(
        str(meta["name"]),
        f"http://{host}:{data_port}",
        f"http://{host}:{internal_port}",
        replica_pool(pod),
    )


class KubeState:
    """The watched objects of each kind by name; pure."""

    def __init__(
        self,
        pool: str,
        data_port: int = 8100,
        internal_port: int = 8101,
        pools: Sequence[str] = (),
    ) -> None:
        self.pool = pool
        self.pools = tuple(pools)
        self.data_port = data_port
        self.internal_port = internal_port
        self.objects: dict[str, dict[str, Obj]] = {k: {} for k in KINDS}
        self.version = 0

    def wanted(self, kind: str, obj: Obj) -> bool:
        """The server filters by label selector too; checked again so a pod that is no replica
        or an unlabelled Secret can never enter the catalog, whatever the API server did (a
        replica of a pool this gateway does not serve is dropped when the snapshot is built)."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if kind == "pods":
            return replica_pool(obj) is not None
        if kind == "secrets":
            return str(labels.get(API_KEYS_SECRET_LABEL)) == "true"
        return True

    def replace(self, kind: str, items: list[Obj]) -> None:
        """A fresh list of `kind` (initial list or re-list)."""
        self.objects[kind] = {str(o["metadata"]["name"]): o for o in items if self.wanted(kind, o)}

    def apply(self, kind: str, event_type: str, obj: Obj) -> None:
        name = str((obj.get("metadata") or {}).get("name", ""))
        if event_type == "DELETED" or not self.wanted(kind, obj):
            self.objects[kind].pop(name, None)
        elif event_type in ("ADDED", "MODIFIED"):
            self.objects[kind][name] = obj

    def snapshot_builder(self) -> Callable[[], CatalogSnapshot]:
        """Copy the current objects (on the event loop) into a builder safe to run in a thread."""
        self.version += 1
        replicas = [
            ep
            for pod in self.objects["pods"].values()
            if (ep := pod_endpoint(pod, self.data_port, self.internal_port)) is not None
        ]
        adapters = list(self.objects["adapters"].values())
        aliases = list(self.objects["aliases"].values())
        secrets = list(self.objects["secrets"].values())
        pools = list(self.objects["pools"].values())
        version = self.version

        def build() -> CatalogSnapshot:
            return build_snapshot(
                adapters=adapters,
                aliases=aliases,
                secrets=secrets,
                pools=pools,
                pool=self.pool,
                only_pools=self.pools,
                replicas=replicas,
                # In a cluster only what the operator marked Ready serves.
                allow_missing_status=False,
                version=version,
            )

        return build

    def snapshot(self) -> CatalogSnapshot:
        return self.snapshot_builder()()


class KubeCatalog(CatalogSource):
    def __init__(
        self,
        holder: CatalogHolder,
        *,
        namespace: str,
        pool: str,
        data_port: int = 8100,
        internal_port: int = 8101,
        api_client: Any = None,
        debounce_s: float = 0.05,
        pools: Sequence[str] = (),
    ) -> None:
        super().__init__(holder)
        self.namespace = namespace
        self.state = KubeState(pool, data_port, internal_port, pools)
        self.debounce_s = debounce_s
        self._api = api_client
        self._dirty = asyncio.Event()
        self._resource_version: dict[str, str] = {}

    async def _client(self) -> Any:
        if self._api is None:
            from kubernetes_asyncio import client

            from lorafleet_core.kube.client import load_configuration

            # In-cluster, else the kubeconfig: the same loading as the operator and the CLI.
            self._api = client.ApiClient(await load_configuration())
        return self._api

    async def _listers(self) -> dict[str, Callable[..., Awaitable[Any]]]:
        from kubernetes_asyncio import client

        api = await self._client()
        custom = client.CustomObjectsApi(api)
        core = client.CoreV1Api(api)
        ns = self.namespace

        def crd(plural: str, **extra: Any) -> Callable[..., Awaitable[Any]]:
            def call(**kw: Any) -> Any:
                return custom.list_namespaced_custom_object(
                    GROUP, VERSION, ns, plural, **extra, **kw
                )

            return call

        def core_list(fn: Any, selector: str) -> Callable[..., Awaitable[Any]]:
            def call(**kw: Any) -> Any:
                return fn(ns, label_selector=selector, **kw)

            return call

        return {
            "adapters": crd(PLURAL_ADAPTER),
            "aliases": crd(PLURAL_ALIAS),
            # Every pool and replica pod of the namespace: which of them serve is decided per
            # snapshot (catalog_pools), as pools of the same base model come and go.
            "pools": crd(PLURAL_POOL),
            "pods": core_list(
                core.list_namespaced_pod, f"{LABEL_POOL},{LABEL_COMPONENT}={COMPONENT_REPLICA}"
            ),
            "secrets": core_list(core.list_namespaced_secret, f"{API_KEYS_SECRET_LABEL}=true"),
        }

    def _plain(self, obj: Any) -> dict[str, Any]:
        """Typed client objects (pods, secrets) -> the JSON dict the API server sent."""
        from lorafleet_core.kube.client import plain

        return plain(self._api, obj)

    async def _list(self, kind: str, lister: Callable[..., Awaitable[Any]]) -> None:
        result = self._plain(await lister())
        self.state.replace(kind, [self._plain(i) for i in result.get("items") or ()])
        rv = (result.get("metadata") or {}).get("resourceVersion")
        if rv:
            self._resource_version[kind] = str(rv)
        else:
            self._resource_version.pop(kind, None)

    async def load_once(self) -> None:
        listers = await self._listers()
        for kind, lister in listers.items():
            await self._list(kind, lister)
        self.holder.swap(await asyncio.to_thread(self.state.snapshot_builder()))

    async def _watch(self, kind: str, lister: Callable[..., Awaitable[Any]]) -> None:
        from kubernetes_asyncio import watch
        from kubernetes_asyncio.client.exceptions import ApiException

        while True:
            try:
                w = watch.Watch()
                async with w.stream(
                    lister,
                    resource_version=self._resource_version.get(kind),
                    timeout_seconds=300,
                    allow_watch_bookmarks=True,
                ) as stream:
                    async for event in stream:
                        etype = event.get("type")
                        obj = self._plain(event.get("raw_object") or event.get("object"))
                        rv = (obj.get("metadata") or {}).get("resourceVersion")
                        if rv:
                            self._resource_version[kind] = str(rv)
                        if etype == "BOOKMARK":
                            continue
                        if etype == "ERROR":
                            raise ApiException(status=obj.get("code", 500))
                        self.state.apply(kind, str(etype), obj)
                        self._dirty.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # 410 Gone, dropped stream, API restart: re-list
                log.warning("watch of %s ended (%r); re-listing", kind, exc)
                await asyncio.sleep(1.0)
                with contextlib.suppress(Exception):
                    await self._list(kind, lister)
                    self._dirty.set()

    async def _rebuild_loop(self) -> None:
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self.debounce_s)  # coalesce a burst of events into one build
            self._dirty.clear()
            try:
                self.holder.swap(await asyncio.to_thread(self.state.snapshot_builder()))
            except Exception:
                log.exception("catalog rebuild failed; keeping the previous snapshot")

    async def run(self) -> None:
        listers = await self._listers()
        tasks = [asyncio.create_task(self._watch(k, f)) for k, f in listers.items()]
        tasks.append(asyncio.create_task(self._rebuild_loop()))
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
