"""The fleet most vLLM tests stand up: real agents on the session's one vLLM (CPU), a manifests
folder naming their adapters, keys and aliases, a replicas.yaml listing the agents, and
optionally the gateway in-process in front of them.

No new vLLM starts: every agent is an in-process agent (`agent_in_thread`) on the session's
server, with adapters in the session's moto S3, so a stack costs seconds.

    with vllm_stack(vllm_server, s3_server, demo_assets, tmp) as stack:
        agent = stack.agent("r0")
        stack.write_manifests("acme", KEY, records, {"acme/bot:prod": record.id})
        stack.write_replicas([stack.row("r0")])
        gw, server = stack.gateway(poll_interval_s=0.3)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lorafleet_core.wire.records import AdapterRecord
from lorafleet_demo.assets import DemoAssets
from lorafleet_gateway.__main__ import public_protocol_options
from lorafleet_gateway.catalog import CatalogHolder
from lorafleet_gateway.catalog_files import FileCatalog
from lorafleet_gateway.routes import create_internal_app, create_public_app
from lorafleet_gateway.runtime import Gateway
from lorafleet_gateway.settings import GatewaySettings
from tests.agent_thread import RunningAgent, agent_in_thread
from tests.conftest import (
    TEST_DATA_TOKEN,
    TEST_INTERNAL_TOKEN,
    S3Server,
    VllmServer,
    session_agent_settings,
)
from tests.gateway import manifests as m
from tests.gateway.servers import ServerThread


@dataclass
class VllmStack:
    """Builds one stack inside `exits` (everything started is stopped when it closes)."""

    exits: contextlib.ExitStack
    vllm: VllmServer
    s3: S3Server
    assets: DemoAssets
    tmp: Path
    agents: dict[str, RunningAgent] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        """The manifests folder the gateway reads."""
        return self.tmp / "manifests"

    def agent(self, replica_id: str, **overrides: Any) -> RunningAgent:
        """An agent on the session's vLLM (or `vllm_url=` a proxy in front of it), its disk
        cache its own; it keeps the adapters other tests registered on the shared engine."""
        settings = session_agent_settings(
            self.vllm,
            self.s3,
            self.assets,
            self.tmp / f"cache-{replica_id}",
            **({"replica_id": replica_id, "unload_unknown_on_start": False} | overrides),
        )
        running = self.exits.enter_context(agent_in_thread(settings))
        self.agents[replica_id] = running
        return running

    def write_manifests(
        self,
        tenant: str,
        key: str,
        records: Iterable[AdapterRecord],
        aliases: Mapping[str, str],
        **limits: Any,
    ) -> None:
        """The tenant's keys, adapters and aliases (manifests.write_fleet)."""
        m.write_fleet(self.folder, tenant, key, records, aliases, **limits)

    def write_aliases(self, aliases: Mapping[str, str]) -> None:
        m.write(self.folder, "aliases.yaml", [m.alias(k, v) for k, v in aliases.items()])

    def row(self, replica_id: str, **extra: Any) -> dict[str, Any]:
        """The replicas.yaml row of one agent; `extra` adds or replaces fields (pool, ...)."""
        a = self.agents[replica_id]
        return {"id": replica_id, "dataUrl": a.data_url, "internalUrl": a.internal_url} | extra

    def write_replicas(self, rows: Sequence[dict[str, Any]] | None = None) -> None:
        """replicas.yaml: `rows`, or every agent started so far."""
        rows = [self.row(rid) for rid in self.agents] if rows is None else rows
        m.write(self.folder, "replicas.yaml", [{"replicas": list(rows)}])

    def gateway(
        self,
        *,
        pool: str | None = None,
        edge_protocol: bool = False,
        **settings: Any,
    ) -> tuple[Gateway, ServerThread]:
        """The gateway in-process on the folder (public and internal port), reloading the
        catalog every 0.1 s; `pool` is the catalog's own pool, `settings` GatewaySettings.
        `edge_protocol`: the public port with the process's own protocol options (header and
        body timeouts), as `python -m lorafleet_gateway` serves it."""
        gs = GatewaySettings(
            manifests_dir=self.folder,
            replica_token=TEST_INTERNAL_TOKEN,
            replica_data_token=TEST_DATA_TOKEN,
            **settings,
        )
        gw = Gateway(gs, FileCatalog(CatalogHolder(), self.folder, pool=pool, interval_s=0.1))
        options = public_protocol_options(gs) if edge_protocol else None
        server = self.exits.enter_context(
            ServerThread(create_public_app(gw), create_internal_app(gw), first_options=options)
        )
        return gw, server


@contextlib.contextmanager
def vllm_stack(
    vllm: VllmServer, s3: S3Server, assets: DemoAssets, tmp: Path
) -> Iterator[VllmStack]:
    """A stack in `tmp`; whatever it started stops when the block ends."""
    with contextlib.ExitStack() as exits:
        yield VllmStack(exits, vllm, s3, assets, tmp)
