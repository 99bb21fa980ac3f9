"""Wiring: build the agent's parts from settings and serve both ports in one event loop."""

from __future__ import annotations

import asyncio
import logging
import threading

import uvicorn

from lorafleet_agent.conflict_events import ConflictEvents
from lorafleet_agent.data_app import build_data_app
from lorafleet_agent.data_auth import build_data_auth
from lorafleet_agent.disk_cache import DiskCache
from lorafleet_agent.engine_waits import EngineWaits
from lorafleet_agent.engine_watch import EngineWatch
from lorafleet_agent.internal_app import build_internal_app
from lorafleet_agent.internal_auth import build_internal_auth
from lorafleet_agent.kube import AgentKube
from lorafleet_agent.manager import AdapterManager
from lorafleet_agent.merged_model import MergedModel
from lorafleet_agent.metrics import AgentMetrics
from lorafleet_agent.object_store import ObjectStore, ObjectStoreConfig
from lorafleet_agent.prewarm import PrewarmWatcher
from lorafleet_agent.requests_stats import RequestStats
from lorafleet_agent.settings import AgentSettings
from lorafleet_agent.verifier import PoolPolicy
from lorafleet_agent.vllm_client import VllmClient
from lorafleet_core.planning.cache_policy import SlotTracker
from lorafleet_core.storage.adapter_files import BaseModelDims
from lorafleet_core.web.http_protocol import hardened_protocol

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 32_768  # the gateway's and the operator's headers are a few hundred bytes


class Agent:
    """One replica's agent: the adapter manager, the two apps and the pre-warm watcher."""

    def __init__(self, settings: AgentSettings) -> None:
        self.settings = s = settings
        dims = BaseModelDims.from_model_dir(s.base_model_dir) if s.base_model_dir else None
        self.metrics = AgentMetrics()
        # The pod's own Kubernetes client: only a cluster agent ever opens it.
        self.kube = AgentKube(s.kube_api_server)
        auth = build_internal_auth(s, self.kube.api)
        data_auth = build_data_auth(s)
        key = s.vllm_api_key.get_secret_value() if s.vllm_api_key is not None else None
        self.vllm = VllmClient(s.vllm_url, s.request_timeout_s, api_key=key)
        self.manager = AdapterManager(
            policy=PoolPolicy(
                base_model_hash=s.base_model_hash,
                max_rank=s.max_rank,
                allowed_target_modules=frozenset(s.allowed_target_modules),
                dims=dims,
            ),
            slots=SlotTracker(s.gpu_slots, s.cpu_slots),
            disk=DiskCache(s.cache_dir, s.cache_bytes),
            store=ObjectStore(
                ObjectStoreConfig(
                    endpoint_url=s.s3_endpoint_url,
                    region=s.s3_region,
                    access_key_id=s.s3_access_key_id,
                    secret_access_key=s.s3_secret_access_key,
                )
            ),
            vllm=self.vllm,
            metrics=self.metrics,
            merged=_merged_model(s),
        )
        self.events = (
            ConflictEvents(
                self.kube.api,
                namespace=s.pod_namespace,
                replica_id=s.replica_id,
                pod_uid=s.pod_uid,
                interval_s=s.kube_event_interval_s,
            )
            if s.kube_events
            else None
        )
        if self.events is not None:
            self.manager.on_conflict = self.events.report
        self.metrics.residency.follow(
            self.manager.resident, self.manager.slots, info=s.residency_info
        )
        self.stats = RequestStats(self.metrics, s.activity_window_s)
        self.engine_waits = EngineWaits()  # requests waiting on vLLM (failed if it stays hung)
        self.data_app = build_data_app(
            self.manager, self.stats, s.replica_id, data_auth, waits=self.engine_waits
        )
        self.watcher = (
            PrewarmWatcher(
                self.manager, s.owned_adapters_file, s.prewarm_poll_s, s.prewarm_ready_timeout_s
            )
            # A merged replica serves its one merged adapter, which is never placed on it as
            # an owned adapter: pre-warming would only report it `warming` until the timeout,
            # keeping the gateway's merged route off it.
            if s.owned_adapters_file and s.merged_adapter_id is None
            else None
        )
        watcher = self.watcher
        self.internal_app = build_internal_app(
            self.manager,
            self.stats,
            s.replica_id,
            auth,
            warming=(lambda: watcher.warming) if watcher is not None else None,
        )
        self.engine_watch = EngineWatch(
            self.manager,
            s.engine_check_s,
            waits=self.engine_waits,
            hung_fail_s=s.engine_hung_fail_s,
        )
        self._servers: list[uvicorn.Server] = []
        self._tasks: list[asyncio.Task[None]] = []
        self.ready = threading.Event()  # set when requests can be served (tests wait on it)
        self.data_port = s.data_port
        self.internal_port = s.internal_port

    async def serve(self, started: threading.Event | None = None) -> None:
        """Run until `stop()`; ports 0 pick free ports (read data_port/internal_port after)."""
        s = self.settings
        # Header size and time, body time, stalled readers: lorafleet_core.web.http_protocol
        # (uvicorn's own protocol waits for headers and bodies for ever, buffers headers at
        # any size).
        http = hardened_protocol(
            MAX_HEADER_BYTES, s.header_timeout_s, s.write_timeout_s, body_timeout_s=s.body_timeout_s
        )
        self._servers = [
            uvicorn.Server(
                # log_config None: uvicorn's own would add handlers beside lorafleet_core.logs
                uvicorn.Config(
                    app, host=s.host, port=port, log_level="warning", http=http, log_config=None
                )
            )
            for app, port in ((self.data_app, s.data_port), (self.internal_app, s.internal_port))
        ]
        tasks = [asyncio.create_task(srv.serve()) for srv in self._servers]
        init = asyncio.create_task(self._initialise())
        while not self.serving:
            if any(t.done() for t in tasks):
                break  # a port was taken: surface the error below
            await asyncio.sleep(0.02)
        if self.serving:
            self.data_port, self.internal_port = (_bound_port(srv) for srv in self._servers)
            log.info("agent %s: data port %d, internal port %d", s.replica_id, *self.ports)
        if started is not None:
            started.set()
        try:
            await asyncio.gather(*tasks)
        finally:
            init.cancel()
            for task in self._tasks:
                task.cancel()
            await self.vllm.aclose()
            await self.kube.aclose()

    async def _initialise(self) -> None:
        """Serve probes at once; take over vLLM and start pre-warming once it is up."""
        try:
            await self.manager.start(
                self.settings.unload_unknown_on_start, self.settings.vllm_start_timeout_s
            )
        except Exception:
            log.exception("agent could not take over vLLM; stopping")
            self.stop()
            raise
        self._tasks.append(asyncio.create_task(self.engine_watch.run(), name="engine-watch"))
        if self.watcher is not None:
            self._tasks.append(asyncio.create_task(self.watcher.run(), name="prewarm"))
        self.ready.set()

    @property
    def serving(self) -> bool:
        """Whether both ports accept connections (`serve` has bound them)."""
        return bool(self._servers) and all(srv.started for srv in self._servers)

    @property
    def ports(self) -> tuple[int, int]:
        return self.data_port, self.internal_port

    def stop(self) -> None:
        for srv in self._servers:
            srv.should_exit = True


def _merged_model(s: AgentSettings) -> MergedModel | None:
    """A merged pool's replica (AgentSettings checks the three settings come together)."""
    if s.merged_adapter_id is None or s.merged_checksum is None or s.merged_model_dir is None:
        return None
    return MergedModel(s.merged_adapter_id, s.merged_checksum, s.merged_model_dir)


def _bound_port(server: uvicorn.Server) -> int:
    port: int = server.servers[0].sockets[0].getsockname()[1]
    return port
