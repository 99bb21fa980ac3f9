"""Fixtures: stand-in replicas on loopback and a gateway over a manifests folder."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from lorafleet_gateway.__main__ import public_protocol_options
from lorafleet_gateway.catalog import CatalogHolder
from lorafleet_gateway.catalog_files import FileCatalog
from lorafleet_gateway.routes import create_internal_app, create_public_app
from lorafleet_gateway.runtime import Gateway
from lorafleet_gateway.settings import GatewaySettings
from tests.conftest import free_port
from tests.gateway import manifests as m
from tests.gateway.fake_replica import FakeReplica
from tests.gateway.redis_server import RedisServer
from tests.gateway.servers import ServerThread
from tests.waiting import eventually

KEYS = {"acme": "lf-acme-key-0001", "globex": "lf-globex-key-0002"}
MSG_DEFAULT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]


@dataclass
class GatewayEnv:
    folder: Path
    replicas: dict[str, FakeReplica]
    replica_servers: dict[str, ServerThread]
    gw: Gateway
    server: ServerThread
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return self.server.url + "/v1"

    @property
    def internal_url(self) -> str:
        return self.server.url_of(1)

    def client(self, tenant: str = "acme", **kw: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=KEYS[tenant], max_retries=0, **kw)

    def async_client(self, tenant: str = "acme") -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.base_url, api_key=KEYS[tenant], max_retries=0)

    def write_aliases(self, docs: list[dict[str, Any]]) -> None:
        version = self.gw.holder.current.version
        m.write(self.folder, "aliases.yaml", docs)
        eventually(lambda: self.gw.holder.current.version > version, what="catalog reload")


def default_aliases() -> list[dict[str, Any]]:
    return [
        m.alias("acme/support:prod", "acme-support-v1"),
        m.alias("acme/support:canary", "acme-support-v2"),
        m.alias("globex/bot:prod", "globex-bot-v1"),
    ]


def start_env(
    tmp_path: Path, n_replicas: int = 3, registered_everywhere: bool = True, **settings: Any
) -> GatewayEnv:
    adapters = ["acme-support-v1", "acme-support-v2", "globex-bot-v1", "acme-unaliased-v1"]
    replicas = {
        f"replica-{i}": FakeReplica(
            f"replica-{i}", registered=tuple(adapters) if registered_everywhere else ()
        )
        for i in range(n_replicas)
    }
    servers = {rid: ServerThread(r.app()).start() for rid, r in replicas.items()}
    folder = tmp_path / "manifests"
    m.write(folder, "pool.yaml", [m.pool(owners=2)])
    m.write(folder, "keys.yaml", [m.key_secret(t, k) for t, k in KEYS.items()])
    m.write(
        folder,
        "adapters.yaml",
        [
            m.adapter("acme-support-v1", "acme"),
            m.adapter("acme-support-v2", "acme"),
            m.adapter("globex-bot-v1", "globex"),
            m.adapter("acme-unaliased-v1", "acme"),
        ],
    )
    m.write(folder, "aliases.yaml", default_aliases())
    m.write(folder, "replicas.yaml", [m.replicas_doc({r: s.url for r, s in servers.items()})])
    config: dict[str, Any] = {
        "manifests_dir": folder,
        "poll_interval_s": 0.3,
        "catalog_reload_interval_s": 0.05,
        **settings,
    }
    gs = GatewaySettings(**config)
    holder = CatalogHolder()
    source = FileCatalog(holder, folder, pool="default", interval_s=gs.catalog_reload_interval_s)
    gw = Gateway(gs, source)
    server = ServerThread(
        create_public_app(gw), create_internal_app(gw), first_options=public_protocol_options(gs)
    ).start()
    return GatewayEnv(folder, replicas, servers, gw, server)


def stop_env(env: GatewayEnv) -> None:
    env.server.stop()
    for s in env.replica_servers.values():
        if s.thread.is_alive():
            s.stop()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[GatewayEnv]:
    e = start_env(tmp_path)
    try:
        yield e
    finally:
        stop_env(e)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One real redis-server for the session (tests use their own tenants or flush it)."""
    server = RedisServer(free_port(), tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.stop()


def openai_error(resp: httpx.Response, status: int) -> dict[str, object]:
    """The response's OpenAI error body, checked: the status, JSON, exactly the four fields
    (plus the request id)."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    error: dict[str, object] = resp.json()["error"]
    assert set(error) - {"request_id"} == {"message", "type", "param", "code"}
    return error
