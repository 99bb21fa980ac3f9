"""Where the control API reads and writes objects, and finds replicas: a cluster or a folder.

- `KubeStore`: the cluster, through the operator's one kubernetes_asyncio client (the same
  login as kopf's; lorafleet_core.kube.client), in one namespace. Creates are creates (the API
  server refuses a second object of the same name: 409, which is how a racing registration
  loses); an alias change is a JSON merge patch of its spec preconditioned on the
  resourceVersion read (lorafleet_core.storage.swap), as `lorafleet alias set` does.
  Replicas are the pool's replica pods: the pod named by the replica id, its IP and its
  `internal` container port.
- `FolderStore`: a standalone manifests folder (lorafleet_core.storage.manifests, the one reader
  and writer, under its inter-process lock), which a running `lorafleet up` watches; replicas
  come from its replicas file.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from lorafleet_core.api import names
from lorafleet_core.kube.client import MERGE_PATCH, is_conflict, is_not_found, plain
from lorafleet_core.planning.pods import pod_ip, replica_pool
from lorafleet_core.storage.manifests import folder_lock, load_folder
from lorafleet_core.storage.replica_endpoints import read_replicas, replicas_file
from lorafleet_core.storage.standalone_state import with_adapter_verdict, with_alias_status
from lorafleet_core.storage.swap import (
    WriteConflict,
    precondition_patch,
    swap_in_folder,
    swap_in_folder_locked,
)
from lorafleet_operator.fleet_index import internal_port

Obj = dict[str, Any]
Swap = Callable[[Obj, Obj | None], Awaitable[None]]

PLURALS = {
    names.KIND_ADAPTER: names.PLURAL_ADAPTER,
    names.KIND_ALIAS: names.PLURAL_ALIAS,
    names.KIND_POOL: names.PLURAL_POOL,
}


class AlreadyExists(Exception):
    """A create lost to an object of the same name."""


class StoreError(RuntimeError):
    """The store could not be read or written; the message says why."""


class ControlStore(Protocol):
    description: str

    async def get(self, kind: str, name: str) -> Obj | None: ...

    async def list(self, kind: str) -> list[Obj]: ...

    async def create(self, body: Obj) -> None:
        """Create a new object; raises AlreadyExists when the name is taken."""
        ...

    def writing(self) -> contextlib.AbstractAsyncContextManager[Swap]:
        """A read-decide-write of one alias: reads inside it, then the `swap(body, expected)`
        it yields, which writes an alias's spec over `expected` (the object as read; None:
        create it) only if the object is still that version, else raises WriteConflict (read
        again). A folder's holds the folder's inter-process lock throughout."""
        ...

    async def replica_url(self, replica_id: str) -> str | None:
        """The internal base URL of that replica's agent; None when there is no such replica."""
        ...


class FolderStore:
    def __init__(self, folder: Path, replicas: Path | None = None) -> None:
        self.folder = folder
        self._replicas = replicas  # None: the replicas file in the folder
        self.description = f"folder {folder}"
        # One task of this process waits for the folder's lock at a time: each waiter holds a
        # worker thread, and the holder needs one for every read it still has to make.
        self._waiting = asyncio.Lock()

    async def get(self, kind: str, name: str) -> Obj | None:
        found = await asyncio.to_thread(lambda: load_folder(self.folder).find(kind, name))
        if found is None:
            return None
        if kind == names.KIND_ADAPTER:  # the reconciler's verdict stands for its status
            return await asyncio.to_thread(with_adapter_verdict, found.body, self.folder)
        if kind == names.KIND_ALIAS:  # the reconciler keeps alias status beside the folder
            return await asyncio.to_thread(with_alias_status, found.body, self.folder)
        return found.body

    async def list(self, kind: str) -> list[Obj]:
        found = await asyncio.to_thread(lambda: load_folder(self.folder).of_kind(kind))
        return [o.body for o in found]

    async def create(self, body: Obj) -> None:
        try:
            await asyncio.to_thread(swap_in_folder, self.folder, body, None)
        except WriteConflict as exc:
            raise AlreadyExists(str(body["metadata"]["name"])) from exc

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[Swap]:
        async def swap(body: Obj, expected: Obj | None) -> None:
            await asyncio.to_thread(swap_in_folder_locked, self.folder, body, expected)

        await asyncio.to_thread(self.folder.mkdir, parents=True, exist_ok=True)
        with contextlib.ExitStack() as held:
            async with self._waiting:
                await asyncio.to_thread(held.enter_context, folder_lock(self.folder))
            yield swap

    async def replica_url(self, replica_id: str) -> str | None:
        path = self._replicas or replicas_file(self.folder)
        if path is None or not path.is_file():
            return None
        try:
            endpoints = await asyncio.to_thread(read_replicas, path)
        except (OSError, ValueError) as exc:
            raise StoreError(f"cannot read {path}: {exc}") from exc
        return next((e.internal_url for e in endpoints if e.id == replica_id), None)


class KubeStore:
    def __init__(
        self,
        api: Callable[[], Awaitable[client.ApiClient]],
        namespace: str,
        *,
        default_port: int = 8101,
    ) -> None:
        self._api = api
        self.namespace = namespace
        self.default_port = default_port
        self.description = f"namespace {namespace}"

    async def _custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(await self._api())

    async def get(self, kind: str, name: str) -> Obj | None:
        custom = await self._custom()
        try:
            found = await custom.get_namespaced_custom_object(
                names.GROUP, names.VERSION, self.namespace, PLURALS[kind], name
            )
        except ApiException as exc:
            if is_not_found(exc):
                return None
            raise StoreError(f"reading {kind}/{name}: {exc.status} {exc.reason}") from exc
        return dict(found)

    async def list(self, kind: str) -> list[Obj]:
        custom = await self._custom()
        try:
            found = await custom.list_namespaced_custom_object(
                names.GROUP, names.VERSION, self.namespace, PLURALS[kind]
            )
        except ApiException as exc:
            raise StoreError(f"listing {kind}: {exc.status} {exc.reason}") from exc
        return [dict(i) for i in found.get("items", [])]

    async def create(self, body: Obj) -> None:
        custom = await self._custom()
        body = {**body, "metadata": {**body["metadata"], "namespace": self.namespace}}
        try:
            await custom.create_namespaced_custom_object(
                names.GROUP, names.VERSION, self.namespace, PLURALS[str(body["kind"])], body
            )
        except ApiException as exc:
            if is_conflict(exc):
                raise AlreadyExists(str(body["metadata"]["name"])) from exc
            raise StoreError(f"creating {body['kind']}: {exc.status} {exc.reason}") from exc

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[Swap]:
        yield self.swap  # the resourceVersion precondition guards what was read

    async def swap(self, body: Obj, expected: Obj | None) -> None:
        if expected is None:
            try:
                await self.create(body)
            except AlreadyExists as exc:
                raise WriteConflict(str(exc)) from exc
            return
        custom = await self._custom()
        name = str(body["metadata"]["name"])
        try:
            await custom.patch_namespaced_custom_object(
                names.GROUP,
                names.VERSION,
                self.namespace,
                PLURALS[str(body["kind"])],
                name,
                precondition_patch(body, expected),
                _content_type=MERGE_PATCH,
            )
        except ApiException as exc:
            if is_conflict(exc) or is_not_found(exc):  # changed, or deleted, since it was read
                raise WriteConflict(f"{body['kind']}/{name}: {exc.status} {exc.reason}") from exc
            raise StoreError(f"updating {body['kind']}/{name}: {exc.status} {exc.reason}") from exc

    async def replica_url(self, replica_id: str) -> str | None:
        api = await self._api()
        try:
            pod = plain(
                api, await client.CoreV1Api(api).read_namespaced_pod(replica_id, self.namespace)
            )
        except ApiException as exc:
            if is_not_found(exc):
                return None
            raise StoreError(f"reading pod {replica_id}: {exc.status} {exc.reason}") from exc
        ip = pod_ip(pod)
        if replica_pool(pod) is None or ip is None:
            return None  # not a replica pod, or not scheduled yet
        return f"http://{ip}:{internal_port(pod, self.default_port)}"
