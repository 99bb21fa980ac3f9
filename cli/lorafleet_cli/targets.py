"""Where CLI commands read and write lorafleet objects: one interface, two backends.

- `FolderTarget`: a standalone manifests folder (YAML files named `<kind>-<name>.yaml`); a
  running `lorafleet up` watches it, so writing a file deploys. Alias status (the rollback
  target) is written by `lorafleet up`'s reconciler to `<folder>/.lorafleet/alias-status.json`
  (lorafleet_core.storage.standalone_state); the CLI only reads it.
- `ClusterTarget`: a Kubernetes cluster through kubernetes_asyncio and a kubeconfig (the
  client every component uses, lorafleet_core.kube.client), writing with create, or a patch
  when the object exists; the operator keeps alias status there.

An alias's spec is written with `swap` (compare-and-swap, lorafleet_core.storage.swap): only
over the version read, so a deploy racing another (the control API, a second CLI) never
overwrites it unseen.

Commands take a `Target` and never care which one it is.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import os
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from kubernetes_asyncio.client import ApiClient, Configuration, CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from lorafleet_cli.exit_codes import UsageError
from lorafleet_core.api import names
from lorafleet_core.api.models import AdapterAliasStatus
from lorafleet_core.kube.client import (
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    KubeConfigError,
    is_conflict,
    is_not_found,
    kubeconfig_namespace,
    load_configuration,
    plain,
)
from lorafleet_core.storage.manifests import folder_lock, load_folder, write_object
from lorafleet_core.storage.standalone_state import load_alias_statuses, with_adapter_verdict
from lorafleet_core.storage.swap import WriteConflict, precondition_patch, swap_in_folder_locked

T = TypeVar("T")
# Writes an alias over the object as read (None: creates it); returns where it went.
Swap = Callable[[dict[str, Any], dict[str, Any] | None], str]
DEFAULT_STATE_DIR = ".lorafleet"

# kind -> plural of lorafleet's custom resources.
CUSTOM_KINDS = {
    names.KIND_ADAPTER: names.PLURAL_ADAPTER,
    names.KIND_ALIAS: names.PLURAL_ALIAS,
    names.KIND_POOL: names.PLURAL_POOL,
}


class TargetError(RuntimeError):
    """The target could not be read or written; the message says why."""


class Target(Protocol):
    description: str

    def get(self, kind: str, name: str) -> dict[str, Any] | None: ...

    def list(self, kind: str) -> list[dict[str, Any]]: ...

    def apply(self, body: dict[str, Any]) -> str:
        """Create or update an object; returns where it went (a path or a cluster ref)."""
        ...

    def writing(self) -> contextlib.AbstractContextManager[Swap]:
        """A read-decide-write of one alias: reads inside it, then the `swap(body, expected)`
        it yields, which writes an alias's spec over `expected` (the object as read; None:
        create it) only if the object is still that version, else raises WriteConflict (read
        again); returns where it went. A folder's holds the folder's inter-process lock
        throughout."""
        ...

    def alias_status(self, name: str) -> AdapterAliasStatus | None: ...


class FolderTarget:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.description = f"folder {folder}"

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        found = load_folder(self.folder).find(kind, name)
        if found is None:
            return None
        if kind == names.KIND_ADAPTER:  # the reconciler's verdict stands for its status
            return with_adapter_verdict(found.body, self.folder)
        return found.body

    def list(self, kind: str) -> list[dict[str, Any]]:
        return [o.body for o in load_folder(self.folder).of_kind(kind)]

    def apply(self, body: dict[str, Any]) -> str:
        self.folder.mkdir(parents=True, exist_ok=True)
        return str(write_object(self.folder, body))

    @contextlib.contextmanager
    def writing(self) -> Iterator[Swap]:
        def swap(body: dict[str, Any], expected: dict[str, Any] | None) -> str:
            return str(swap_in_folder_locked(self.folder, body, expected))

        self.folder.mkdir(parents=True, exist_ok=True)
        with folder_lock(self.folder):
            yield swap

    def alias_status(self, name: str) -> AdapterAliasStatus | None:
        """What the reconciler recorded; None before `lorafleet up` has seen the alias."""
        try:
            return load_alias_statuses(self.folder).get(name)
        except ValueError as exc:
            raise TargetError(str(exc)) from exc


@dataclass(frozen=True)
class ApplyRequest:
    """A write the cluster backend sends (pure, so tests can check it)."""

    group: str  # "" for core objects
    version: str
    plural: str
    namespace: str
    name: str
    body: dict[str, Any]


def apply_request(body: dict[str, Any], namespace: str) -> ApplyRequest:
    kind = str(body.get("kind"))
    api_version = str(body.get("apiVersion", ""))
    group, _, version = api_version.rpartition("/")
    if kind in CUSTOM_KINDS:
        plural = CUSTOM_KINDS[kind]
        if group != names.GROUP:
            raise TargetError(f"{kind} must have apiVersion {names.API_VERSION}")
    elif kind == "Secret" and api_version == "v1":
        plural = "secrets"
    else:
        raise TargetError(f"the CLI does not write {kind} objects")
    meta = dict(body.get("metadata") or {})
    meta["namespace"] = namespace
    return ApplyRequest(
        group=group,
        version=version,
        plural=plural,
        namespace=namespace,
        name=str(meta["name"]),
        body={**body, "metadata": meta},
    )


class ClusterTarget:
    """A cluster via kubeconfig (tests run it against kmock, the Kubernetes API emulator).

    kubernetes_asyncio, like the operator and the gateway (lorafleet_core.kube.client); the CLI
    is synchronous, so the target runs the client on a private event loop of its own.
    """

    def __init__(self, namespace: str, configuration: Configuration) -> None:
        self.namespace = namespace
        self.description = f"cluster namespace {namespace}"
        self._loop = asyncio.new_event_loop()
        self._api: ApiClient = self._run(self._connect(configuration))
        self._custom = CustomObjectsApi(self._api)
        self._core = CoreV1Api(self._api)
        atexit.register(self.close)

    @staticmethod
    async def _connect(configuration: Configuration) -> ApiClient:
        return ApiClient(configuration)  # its HTTP session belongs to the target's loop

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run_until_complete(coro)

    def close(self) -> None:
        if not self._loop.is_closed():
            self._run(self._api.close())
            self._loop.close()

    @classmethod
    def from_kubeconfig(
        cls, kubeconfig: str | None, context: str | None, namespace: str | None
    ) -> ClusterTarget:
        loop = asyncio.new_event_loop()
        try:
            configuration = loop.run_until_complete(
                load_configuration(kubeconfig=kubeconfig, context=context, kubeconfig_first=True)
            )
        except KubeConfigError as exc:
            raise TargetError(f"cannot load kubeconfig: {exc}") from exc
        finally:
            loop.close()
        return cls(namespace or kubeconfig_namespace(kubeconfig, context), configuration)

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        try:
            if kind == "Secret":
                obj = self._run(self._core.read_namespaced_secret(name, self.namespace))
                return plain(self._api, obj)
            return dict(
                self._run(
                    self._custom.get_namespaced_custom_object(
                        names.GROUP, names.VERSION, self.namespace, CUSTOM_KINDS[kind], name
                    )
                )
            )
        except ApiException as exc:
            if is_not_found(exc):
                return None
            raise TargetError(f"reading {kind}/{name}: {exc}") from exc

    def list(self, kind: str) -> list[dict[str, Any]]:
        if kind == "Secret":  # the only Secrets the CLI reads: tenants' key hashes
            try:
                found = self._run(
                    self._core.list_namespaced_secret(
                        self.namespace, label_selector=f"{names.API_KEYS_SECRET_LABEL}=true"
                    )
                )
            except ApiException as exc:
                raise TargetError(f"listing key Secrets: {exc}") from exc
            items = plain(self._api, found).get("items", [])
            return [dict(i) for i in items]
        try:
            out = self._run(
                self._custom.list_namespaced_custom_object(
                    names.GROUP, names.VERSION, self.namespace, CUSTOM_KINDS[kind]
                )
            )
        except ApiException as exc:
            raise TargetError(f"listing {kind}: {exc}") from exc
        return [dict(i) for i in out.get("items", [])]

    def apply(self, body: dict[str, Any]) -> str:
        """Create the object, or patch it when it exists (what `kubectl apply` does for the
        fields we write): JSON merge patch for lorafleet's custom resources (the only kind they
        accept besides JSON patch), strategic merge for a Secret, as kubectl does."""
        req = apply_request(body, self.namespace)
        where = f"{req.plural}/{req.name} in namespace {req.namespace}"
        try:
            if req.plural == "secrets":
                self._run(self._core.create_namespaced_secret(req.namespace, req.body))
            else:
                self._create_custom(req)
            return where
        except ApiException as exc:
            if not is_conflict(exc):
                raise TargetError(f"creating {body.get('kind')}/{req.name}: {exc}") from exc
        try:
            if req.plural == "secrets":
                self._run(
                    self._core.patch_namespaced_secret(
                        req.name, req.namespace, req.body, _content_type=STRATEGIC_MERGE_PATCH
                    )
                )
            else:
                self._merge_patch_custom(req, req.body)
        except ApiException as exc:
            raise TargetError(f"updating {body.get('kind')}/{req.name}: {exc}") from exc
        return where

    @contextlib.contextmanager
    def writing(self) -> Iterator[Swap]:
        yield self.swap  # the resourceVersion precondition guards what was read

    def swap(self, body: dict[str, Any], expected: dict[str, Any] | None) -> str:
        req = apply_request(body, self.namespace)
        where = f"{req.plural}/{req.name} in namespace {req.namespace}"
        try:
            if expected is None:
                self._create_custom(req)
            else:
                self._merge_patch_custom(req, precondition_patch(req.body, expected))
        except ApiException as exc:
            # 409: taken, or changed since read; 404: deleted since read. Read it again.
            if is_conflict(exc) or (expected is not None and is_not_found(exc)):
                raise WriteConflict(f"{where}: {exc.status} {exc.reason}") from exc
            raise TargetError(f"writing {body.get('kind')}/{req.name}: {exc}") from exc
        return where

    def _create_custom(self, req: ApplyRequest) -> None:
        self._run(
            self._custom.create_namespaced_custom_object(
                req.group, req.version, req.namespace, req.plural, req.body
            )
        )

    def _merge_patch_custom(self, req: ApplyRequest, patch: dict[str, Any]) -> None:
        self._run(
            self._custom.patch_namespaced_custom_object(
                req.group,
                req.version,
                req.namespace,
                req.plural,
                req.name,
                patch,
                _content_type=MERGE_PATCH,
            )
        )

    def alias_status(self, name: str) -> AdapterAliasStatus | None:
        obj = self.get(names.KIND_ALIAS, name)
        if obj is None:
            return None
        return AdapterAliasStatus.model_validate(obj.get("status") or {})


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("target (a standalone manifests folder or a cluster)")
    g.add_argument(
        "--manifests",
        type=Path,
        default=None,
        help="standalone manifests folder (default: <state-dir>/manifests when it exists, "
        "else the cluster from your kubeconfig); env LORAFLEET_MANIFESTS",
    )
    g.add_argument(
        "--state-dir",
        type=Path,
        default=Path(os.environ.get("LORAFLEET_STATE_DIR", DEFAULT_STATE_DIR)),
        help="standalone state folder (default: .lorafleet)",
    )
    g.add_argument("--cluster", action="store_true", help="use the cluster even if a folder exists")
    g.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG)")
    g.add_argument("--context", default=None, help="kubeconfig context")
    g.add_argument("-n", "--namespace", default=None, help="namespace (default: the context's)")


def target_from_args(args: argparse.Namespace) -> Target:
    """The folder named (--manifests, LORAFLEET_MANIFESTS), else the cluster when a cluster
    flag is given (--cluster, --kubeconfig, --context, -n), else the state folder's manifests
    when they exist, else the cluster. A cluster flag beside a named folder is refused: which
    one a write should go to cannot be guessed."""
    cluster_flags = [
        flag
        for flag, value in (
            ("--kubeconfig", args.kubeconfig),
            ("--context", args.context),
            ("--namespace", args.namespace),
        )
        if value
    ]
    if not args.cluster:
        env_folder = os.environ.get("LORAFLEET_MANIFESTS")
        folder = args.manifests or (Path(env_folder) if env_folder else None)
        if folder is not None and cluster_flags:
            raise UsageError(
                f"{', '.join(cluster_flags)} names a cluster but the manifests folder {folder} "
                "is named too (--manifests or LORAFLEET_MANIFESTS): drop one, or add --cluster"
            )
        if folder is None and not cluster_flags and (args.state_dir / "manifests").is_dir():
            folder = args.state_dir / "manifests"
        if folder is not None:
            return FolderTarget(Path(folder))
    return ClusterTarget.from_kubeconfig(args.kubeconfig, args.context, args.namespace)
