"""Running the control API: next to the operator (a task in kopf's event loop) or on its own.

`serve_next_to_operator` is called by the operator's startup handler when `control_port` is
set: the API shares the operator's one logged-in Kubernetes client (lorafleet_operator.kube).
`python -m lorafleet_operator.control` runs it alone; with `control_manifests` set it writes a
standalone folder (what `lorafleet up` starts), else it logs in to the cluster itself the way
the operator does (lorafleet_core.kube.client).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI
from kubernetes_asyncio import client

from lorafleet_operator.control.app import build_control_app
from lorafleet_operator.control.auth import ControlAuth, parse_accounts
from lorafleet_operator.control.edge import control_protocol
from lorafleet_operator.control.store import ControlStore, FolderStore, KubeStore
from lorafleet_operator.settings import OperatorSettings

log = logging.getLogger(__name__)

# Forwarded calls: a load may fetch from the object store and verify before it answers.
FORWARD_TIMEOUT = httpx.Timeout(120.0, connect=5.0)


def build_from_settings(
    settings: OperatorSettings,
    api: Callable[[], Awaitable[client.ApiClient]] | None,
    http: httpx.AsyncClient,
) -> FastAPI:
    """The app for these settings: a folder store when `control_manifests` is set, else the
    cluster through `api`."""
    store: ControlStore
    if settings.control_manifests is not None:
        store = FolderStore(settings.control_manifests, settings.control_replicas_file)
        api = None  # no TokenReview without a cluster
    else:
        if api is None:
            raise ValueError("the control API needs a cluster client or control_manifests")
        store = KubeStore(
            api, settings.control_namespace_name(), default_port=settings.agent_internal_port
        )
    auth = ControlAuth(
        settings.control_token_sha256,
        settings.control_token_sha256_file,
        service_accounts=parse_accounts(settings.control_service_accounts),
        api=api,
    )
    if settings.control_token_sha256 is None and settings.control_token_sha256_file is None:
        log.warning("control API has no admin token configured: only ServiceAccounts can call it")
    return build_control_app(store, auth, http=http, replica_token=settings.replica_token_reader())


def bound_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


class _GuestServer(uvicorn.Server):
    """uvicorn inside someone else's process (kopf's): it must not take over SIGTERM/SIGINT,
    which are kopf's to handle; kopf's cleanup handler stops this server."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ControlServer:
    """uvicorn serving the app on an already bound socket (so port 0 works and is reported)."""

    def __init__(self, app: FastAPI, host: str, port: int, *, guest: bool = True) -> None:
        self.sock = bound_socket(host, port)
        self.port: int = self.sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            log_config=None,  # lines go through lorafleet_core.logs, not uvicorn's handlers
            lifespan="off",
            http=control_protocol(),
        )
        self.server = (_GuestServer if guest else uvicorn.Server)(config)

    async def serve(self) -> None:
        try:
            await self.server.serve(sockets=[self.sock])
        finally:
            self.sock.close()

    def stop(self) -> None:
        self.server.should_exit = True


@contextlib.asynccontextmanager
async def forwarding_client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=FORWARD_TIMEOUT) as http:
        yield http


class OperatorControl:
    """The control API inside the operator process; `start` once, `stop` at cleanup."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self._server: ControlServer | None = None
        self._http: httpx.AsyncClient | None = None
        self.port: int | None = None

    def start(self, settings: OperatorSettings, api: Callable[[], Awaitable[Any]]) -> int:
        self._http = httpx.AsyncClient(timeout=FORWARD_TIMEOUT)
        app = build_from_settings(settings, api, self._http)
        assert settings.control_port is not None
        self._server = ControlServer(app, settings.control_host, settings.control_port)
        self.port = self._server.port
        self._task = asyncio.get_running_loop().create_task(
            self._server.serve(), name="lorafleet-control-api"
        )
        log.info("control API on :%d%s", self.port, "/internal")
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._http is not None:
            await self._http.aclose()
        self._task = self._server = self._http = None


async def run_alone(settings: OperatorSettings) -> None:
    """`python -m lorafleet_operator.control`: serve until stopped."""
    from lorafleet_core.kube.client import load_configuration

    api_client: client.ApiClient | None = None
    api: Callable[[], Awaitable[client.ApiClient]] | None = None
    if settings.control_manifests is None:
        cfg = await load_configuration(
            api_server=settings.api_server,
            token=settings.api_token.get_secret_value() if settings.api_token else None,
            insecure=settings.insecure,
        )
        api_client = client.ApiClient(cfg)
        shared = api_client

        async def get_api() -> client.ApiClient:
            return shared

        api = get_api
    async with forwarding_client() as http:
        app = build_from_settings(settings, api, http)
        port = settings.control_port if settings.control_port is not None else 8102
        server = ControlServer(app, settings.control_host, port, guest=False)
        log.info("lorafleet control API on http://%s:%d", settings.control_host, server.port)
        try:
            await server.serve()
        finally:
            if api_client is not None:
                await api_client.close()
