"""The operator's writes to the Kubernetes API, on kubernetes_asyncio (lorafleet_core.kube.client).

kopf watches and patches the objects it handles through its own API access; `Kube` writes
everything else: pods' owned-adapters annotation, the status of every lorafleet resource, the
StatefulSet / Service / PodDisruptionBudget a pool owns, a merged pool's merge Job (and the
report its pod leaves), the StatefulSet's replica count, the SubjectAccessReviews of pools'
ServiceAccounts and Events about the CRDs (read at start: lorafleet_operator.crd_check).
The patch strategy of each write is the one a real API server wants (see kube_client); every
write names the operator's field manager, so `kubectl get -o yaml --show-managed-fields` says
who wrote what.
`ClientHolder` keeps the one logged-in client, built from the credentials the login handler
loaded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client

from lorafleet_core.api.names import ANNOTATION_OWNED_ADAPTERS, GROUP, VERSION
from lorafleet_core.kube.client import (
    FIELD_MANAGER,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    is_not_found,
    plain,
)


@dataclass(frozen=True)
class OwnedKind:
    """The typed calls for one built-in kind a pool owns."""

    read: Callable[..., Awaitable[Any]]
    create: Callable[..., Awaitable[Any]]
    patch: Callable[..., Awaitable[Any]]


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.authorization = client.AuthorizationV1Api(api)
        self.extensions = client.ApiextensionsV1Api(api)
        policy = client.PolicyV1Api(api)
        batch = client.BatchV1Api(api)
        self._owned = {
            # A merged pool's merge Job (lorafleet_core.planning.merge_job).
            "Job": OwnedKind(
                batch.read_namespaced_job,
                batch.create_namespaced_job,
                batch.patch_namespaced_job,
            ),
            "StatefulSet": OwnedKind(
                self.apps.read_namespaced_stateful_set,
                self.apps.create_namespaced_stateful_set,
                self.apps.patch_namespaced_stateful_set,
            ),
            "Service": OwnedKind(
                self.core.read_namespaced_service,
                self.core.create_namespaced_service,
                self.core.patch_namespaced_service,
            ),
            "PodDisruptionBudget": OwnedKind(
                policy.read_namespaced_pod_disruption_budget,
                policy.create_namespaced_pod_disruption_budget,
                policy.patch_namespaced_pod_disruption_budget,
            ),
        }

    async def aclose(self) -> None:
        await self.api.close()

    # --- lorafleet resources (custom objects): JSON merge patch -----------------------------

    async def patch_status(
        self, plural: str, namespace: str, name: str, status: dict[str, Any]
    ) -> None:
        await self.custom.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            namespace,
            plural,
            name,
            {"status": status},
            field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH,
        )

    async def create_custom(self, plural: str, namespace: str, body: dict[str, Any]) -> None:
        """Create a lorafleet object (a merged ReplicaPool the operator decided on)."""
        await self.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, body, field_manager=FIELD_MANAGER
        )

    async def patch_custom(
        self, plural: str, namespace: str, name: str, patch: dict[str, Any]
    ) -> None:
        """Merge-patch a lorafleet object (a merged pool the operator created: scale, drain)."""
        await self.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            plural,
            name,
            patch,
            field_manager=FIELD_MANAGER,
            _content_type=MERGE_PATCH,
        )

    async def delete_custom(self, plural: str, namespace: str, name: str) -> None:
        """Delete a lorafleet object; what it owns goes by garbage collection (background)."""
        await self.custom.delete_namespaced_custom_object(
            GROUP, VERSION, namespace, plural, name, propagation_policy="Background"
        )

    async def create_secret(self, namespace: str, body: dict[str, Any]) -> None:
        """Create a Secret (a merged pool's inside Secret); the operator never reads one."""
        await self.core.create_namespaced_secret(namespace, body, field_manager=FIELD_MANAGER)

    async def review_access(self, body: dict[str, Any]) -> bool:
        """Whether the API server allows what a SubjectAccessReview asks (the server stores
        none: the answer is the review's status)."""
        resp = await self.authorization.create_subject_access_review(body, _preload_content=False)
        async with resp:
            answer = json.loads(await resp.read())
        return bool((answer.get("status") or {}).get("allowed"))

    async def post_event(
        self, namespace: str, involved: dict[str, Any], type_: str, reason: str, message: str
    ) -> None:
        """An Event about an object kopf does not handle (a cluster-scoped CRD), in `namespace`."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": "lorafleet-", "namespace": namespace},
            "involvedObject": involved,
            "type": type_,
            "reason": reason,
            "message": message,
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await self.core.create_namespaced_event(namespace, body, field_manager=FIELD_MANAGER)

    # --- built-in objects the operator touches: strategic merge patch -----------------------

    async def annotate_pod(self, namespace: str, pod: str, value: str) -> None:
        body = {"metadata": {"annotations": {ANNOTATION_OWNED_ADAPTERS: value}}}
        await self.core.patch_namespaced_pod(
            pod, namespace, body, field_manager=FIELD_MANAGER, _content_type=STRATEGIC_MERGE_PATCH
        )

    async def scale_statefulset(self, namespace: str, name: str, replicas: int) -> None:
        body = {"spec": {"replicas": replicas}}
        await self.apps.patch_namespaced_stateful_set(
            name, namespace, body, field_manager=FIELD_MANAGER, _content_type=STRATEGIC_MERGE_PATCH
        )

    async def job_report(self, namespace: str, job: str) -> str | None:
        """The termination message of a finished pod of the Job (the merge step's report)."""
        # Raw JSON, not the typed V1PodList: only the status is read, and the typed model
        # refuses pods it considers incomplete.
        resp = await self.core.list_namespaced_pod(
            namespace, label_selector=f"job-name={job}", _preload_content=False
        )
        async with resp:
            pods = json.loads(await resp.read())
        for pod in pods.get("items", []):
            if (pod.get("metadata", {}).get("labels") or {}).get("job-name") != job:
                continue
            for cs in (pod.get("status") or {}).get("containerStatuses") or []:
                message = ((cs.get("state") or {}).get("terminated") or {}).get("message")
                if message:
                    return str(message)
        return None

    # --- built-in objects a pool owns whole: create, else merge-patch the whole object --------

    async def read_owned(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return plain(self.api, await self._owned[kind].read(name, namespace))
        except Exception as exc:
            if is_not_found(exc):
                return None
            raise

    async def apply_owned(self, namespace: str, body: dict[str, Any]) -> str:
        """Create the object, or merge-patch all of it when it exists and differs (lists
        replaced, nulls removed: see kube_client). Returns what it did."""
        kind, name = str(body["kind"]), str(body["metadata"]["name"])
        calls = self._owned[kind]
        current = await self.read_owned(kind, namespace, name)
        if current is None:
            await calls.create(namespace, body, field_manager=FIELD_MANAGER)
            return "created"
        if _contains(current, body):
            return "unchanged"  # no write: re-reconciling an unchanged pool costs reads only
        await calls.patch(
            name, namespace, body, field_manager=FIELD_MANAGER, _content_type=MERGE_PATCH
        )
        return "patched"


def _contains(current: Any, wanted: Any) -> bool:
    """Whether `current` already holds everything in `wanted` (defaults may add more)."""
    if isinstance(wanted, dict):
        return isinstance(current, dict) and all(
            _contains(current.get(k), v) for k, v in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(current, list)
            and len(current) == len(wanted)
            and all(_contains(c, w) for c, w in zip(current, wanted, strict=True))
        )
    return bool(current == wanted)


class OperatorStoppingError(RuntimeError):
    """Raised to API callers once the operator has begun to stop."""


class ClientHolder:
    """The logged-in client, shared by all handlers; set by the login handler."""

    def __init__(self) -> None:
        self._config: client.Configuration | None = None
        self._client: Kube | None = None
        self._retired: list[Kube] = []  # replaced on re-login; closed at shutdown, not mid-call
        self._ready = asyncio.Event()
        self._closed = False

    def set(self, cfg: client.Configuration) -> None:
        # Re-login (credentials refreshed): the next use builds a client with the new ones.
        if self._client is not None:
            self._retired.append(self._client)
        self._client = None
        self._config = cfg
        if self._closed:  # a new operator run in the same process
            self._closed = False
            self._ready = asyncio.Event()
        self._ready.set()

    @property
    def closed(self) -> bool:
        return self._closed

    async def client(self) -> Kube:
        if self._closed:
            raise OperatorStoppingError("the operator is stopping; no more API calls")
        await self._ready.wait()
        if self._closed:
            raise OperatorStoppingError("the operator is stopping; no more API calls")
        if self._client is None:
            assert self._config is not None
            self._client = Kube(client.ApiClient(self._config))
        return self._client

    async def close(self) -> None:
        """Forget the session (operator stopping); a later run logs in afresh."""
        for kube in [*self._retired, *([self._client] if self._client else [])]:
            await kube.aclose()
        self._client, self._retired = None, []
        self._config = None
        self._closed = True
        self._ready.set()  # wake waiters: they see _closed and stop


HOLDER = ClientHolder()
