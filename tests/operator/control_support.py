"""Shared pieces of the control API tests: a registration body, the admin token, the server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from lorafleet_operator.control.app import build_control_app
from lorafleet_operator.control.auth import ControlAuth, token_sha256
from lorafleet_operator.control.edge import control_protocol
from lorafleet_operator.control.store import ControlStore
from tests.gateway.servers import ServerThread
from tests.operator.factories import BASE_HASH, sha

ADMIN_TOKEN = "admin-token-for-tests"
AGENT_TOKEN = "agent-token-for-tests"
AUTH = {"authorization": f"Bearer {ADMIN_TOKEN}"}


def registration(adapter_id: str, **over: Any) -> dict[str, Any]:
    """The design's body for POST /internal/adapters."""
    body: dict[str, Any] = {
        "adapter_id": adapter_id,
        "tenant": "acme",
        "version": "v1",
        "base_model_hash": BASE_HASH,
        "rank": 8,
        "alpha": 16,
        "target_modules": ["q_proj", "v_proj"],
        "checksum": sha(adapter_id),
    }
    body.update(over)
    # Under the tenant's folder of the factory pools' adapterSources.
    body.setdefault("weights_uri", f"s3://adapters/{body['tenant']}/{adapter_id}/")
    return body


def control_server(
    store: ControlStore,
    *,
    auth: ControlAuth | None = None,
    replica_token: str | None = None,
    timeout_s: float | None = None,
) -> ServerThread:
    """The control app on a real loopback port (not started), behind the control API's HTTP
    protocol (`timeout_s`: its header and body timeouts, when not the shipped ones)."""
    app = build_control_app(
        store,
        auth or ControlAuth(token_sha256(ADMIN_TOKEN), None),
        http=httpx.AsyncClient(timeout=10),
        replica_token=lambda: replica_token,
    )
    http = control_protocol() if timeout_s is None else control_protocol(timeout_s, timeout_s)
    return ServerThread(app, first_options={"http": http})


def reasons_of(resp: httpx.Response) -> list[str]:
    error: dict[str, Any] = resp.json()["error"]
    out: list[str] = error["reasons"]
    return out


Check = Callable[[], Any]
