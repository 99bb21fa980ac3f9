"""A small async Kubernetes API client on httpx, using the credentials kopf logged in with.

One client for the objects kopf does not patch for us (pods' annotations, other objects'
status, the StatefulSet/Service/PDB a pool owns). It counts its writes by kind, which the
benchmark and the tests read to check batching.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import kopf

from lorafleet_core.names import API_VERSION

MERGE_PATCH = "application/merge-patch+json"

# Writes by kind since the process started (or the last `WRITES.clear()`), for metrics/tests.
WRITES: Counter[str] = Counter()


def collection_path(api_version: str, plural: str, namespace: str | None) -> str:
    root = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    return f"{root}/namespaces/{namespace}/{plural}" if namespace else f"{root}/{plural}"


def object_path(api_version: str, plural: str, namespace: str | None, name: str) -> str:
    return f"{collection_path(api_version, plural, namespace)}/{name}"


def lorafleet_path(plural: str, namespace: str, name: str, status: bool = False) -> str:
    path = object_path(API_VERSION, plural, namespace, name)
    return f"{path}/status" if status else path


class KubeClient:
    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    @classmethod
    def from_connection(cls, info: kopf.ConnectionInfo) -> KubeClient:
        headers: dict[str, str] = {}
        if info.token:
            headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
        verify: ssl.SSLContext | bool = True
        if info.insecure:
            verify = False
        elif info.ca_path or info.ca_data:
            verify = ssl.create_default_context(
                cafile=info.ca_path,
                cadata=_text(info.ca_data) if info.ca_data else None,
            )
        if isinstance(verify, ssl.SSLContext):
            _load_client_cert(verify, info)
        auth = None
        if info.username and info.password:
            auth = httpx.BasicAuth(info.username, info.password)
        http = httpx.AsyncClient(
            base_url=info.server, headers=headers, verify=verify, auth=auth, timeout=30.0
        )
        return cls(http)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def get(self, path: str) -> dict[str, Any] | None:
        resp = await self.http.get(path)
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        body: dict[str, Any] = resp.json()
        return body

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        WRITES[f"create {body.get('kind', path)}"] += 1
        resp = await self.http.post(path, json=body)
        resp.raise_for_status()
        out: dict[str, Any] = resp.json()
        return out

    async def merge_patch(self, path: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        WRITES[f"patch {what}"] += 1
        resp = await self.http.patch(path, json=body, headers={"Content-Type": MERGE_PATCH})
        resp.raise_for_status()
        out: dict[str, Any] = resp.json()
        return out

    async def apply(self, collection: str, body: dict[str, Any]) -> str:
        """Create the object, or merge-patch it when it exists and differs. Returns what it did.

        Merge patch (not server-side apply) because it is what every API server and the
        emulator used in tests understand; the operator is the only writer of these objects.
        """
        name = body["metadata"]["name"]
        current = await self.get(f"{collection}/{name}")
        if current is None:
            await self.create(collection, body)
            return "created"
        if _contains(current, body):
            return "unchanged"
        await self.merge_patch(f"{collection}/{name}", body, body.get("kind", "object"))
        return "patched"


def _contains(current: Any, wanted: Any) -> bool:
    """Whether `current` already holds everything in `wanted` (defaults may add more)."""
    if isinstance(wanted, dict):
        return isinstance(current, dict) and all(
            _contains(current.get(k), v) for k, v in wanted.items()
        )
    return bool(current == wanted)


def _text(data: str | bytes) -> str:
    return data.decode() if isinstance(data, bytes) else data


def _load_client_cert(ctx: ssl.SSLContext, info: kopf.ConnectionInfo) -> None:
    cert, key = info.certificate_path, info.private_key_path
    if info.certificate_data and info.private_key_data:
        # ssl wants files; kubeconfigs often embed the data. Private temp files, removed at once.
        folder = Path(tempfile.mkdtemp(prefix="lorafleet-"))
        cert_file, key_file = folder / "tls.crt", folder / "tls.key"
        cert_file.write_text(_text(info.certificate_data))
        key_file.write_text(_text(info.private_key_data))
        try:
            ctx.load_cert_chain(str(cert_file), str(key_file))
        finally:
            for f in (cert_file, key_file):
                f.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                folder.rmdir()
        return
    if cert:
        ctx.load_cert_chain(cert, key)


class OperatorStoppingError(RuntimeError):
    """Raised to API callers once the operator has begun to stop."""


class ClientHolder:
    """The logged-in client, shared by all handlers; set by the login handler."""

    def __init__(self) -> None:
        self._info: kopf.ConnectionInfo | None = None
        self._client: KubeClient | None = None
        self._ready = asyncio.Event()
        self._closed = False

    def set(self, info: kopf.ConnectionInfo) -> None:
        if self._info is not None and self._info.server == info.server and self._client:
            # Re-login (credentials refreshed): rebuild lazily on the next use.
            self._client = None
        self._info = info
        if self._closed:  # a new operator run in the same process
            self._closed = False
            self._ready = asyncio.Event()
        self._ready.set()

    @property
    def closed(self) -> bool:
        return self._closed

    async def client(self) -> KubeClient:
        if self._closed:
            raise OperatorStoppingError("the operator is stopping; no more API calls")
        await self._ready.wait()
        if self._closed:
            raise OperatorStoppingError("the operator is stopping; no more API calls")
        if self._client is None:
            assert self._info is not None
            self._client = KubeClient.from_connection(self._info)
        return self._client

    async def close(self) -> None:
        """Forget the session (operator stopping); a later run logs in afresh."""
        if self._client is not None:
            await self._client.aclose()
        self._client = None
        self._info = None
        self._closed = True
        self._ready.set()  # wake waiters: they see _closed and stop


HOLDER = ClientHolder()
