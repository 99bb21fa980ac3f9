"""Process-wide operator state: settings, the logged-in client, one FleetSync per namespace.

Handlers reach shared state through here so a test can run the operator several times in
one process (`reset()` on cleanup).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

import kopf

from lorafleet_core.api.names import API_VERSION, PLURAL_ADAPTER, PLURAL_ALIAS, PLURAL_POOL
from lorafleet_core.planning.fleet import FleetParams
from lorafleet_operator.access_review import AccessReviews
from lorafleet_operator.kube import HOLDER, OperatorStoppingError
from lorafleet_operator.metrics import OperatorMetrics
from lorafleet_operator.settings import OperatorSettings
from lorafleet_operator.sync import FleetSync

if TYPE_CHECKING:
    from lorafleet_operator.control.serve import OperatorControl

log = logging.getLogger(__name__)


class KubeWriter:
    """FleetSync's writer against the Kubernetes API."""

    async def pod_annotation(self, namespace: str, pod: str, value: str) -> None:
        await (await HOLDER.client()).annotate_pod(namespace, pod, value)

    async def adapter_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        await (await HOLDER.client()).patch_status(PLURAL_ADAPTER, namespace, name, status)

    async def alias_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        await (await HOLDER.client()).patch_status(PLURAL_ALIAS, namespace, name, status)

    async def create_pool(self, namespace: str, body: dict[str, Any]) -> None:
        await (await HOLDER.client()).create_custom(PLURAL_POOL, namespace, body)

    async def patch_pool(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        await (await HOLDER.client()).patch_custom(PLURAL_POOL, namespace, name, patch)

    async def delete_pool(self, namespace: str, name: str) -> None:
        await (await HOLDER.client()).delete_custom(PLURAL_POOL, namespace, name)

    async def event(
        self,
        namespace: str,
        kind: str,
        name: str,
        uid: str | None,
        reason: str,
        message: str,
        type_: str = "Normal",
    ) -> None:
        body: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace, "uid": uid or ""},
        }
        kopf.event(kopf.Body(cast(kopf.RawBody, body)), type=type_, reason=reason, message=message)


class Runtime:
    def __init__(self) -> None:
        self.settings = OperatorSettings()
        self.fleets: dict[str, FleetSync] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}  # each namespace's sync loop
        self.crd_check: asyncio.Task[None] | None = None
        self.metrics = OperatorMetrics(lambda: self.fleets)
        self.metrics_server: Any = None
        self.control: OperatorControl | None = None
        self.access = AccessReviews(self.settings.access_review_interval_seconds)
        # (namespace, Secret) -> when the gateway pool's Secret was last made sure of
        # (handlers.internal_secret).
        self.secret_checked: dict[tuple[str, str], float] = {}

    def serve_metrics(self) -> int | None:
        """Start /metrics on settings.metrics_port (a thread); returns the bound port."""
        port = self.settings.metrics_port
        if port is None or self.metrics_server is not None:
            return None
        from prometheus_client import start_http_server

        self.metrics_server, _ = start_http_server(port, registry=self.metrics.registry)
        bound: int = self.metrics_server.server_port
        log.info("operator metrics on :%d/metrics", bound)
        return bound

    def serve_control(self) -> int | None:
        """Start the control API on settings.control_port (in this event loop); the bound port.

        It uses the operator's one logged-in client, so it waits for login like every handler.
        """
        if self.settings.control_port is None or self.control is not None:
            return None
        from lorafleet_operator.control.serve import OperatorControl

        async def api() -> Any:
            return (await HOLDER.client()).api

        self.control = OperatorControl()
        return self.control.start(self.settings, api)

    def check_crds(self) -> None:
        """Compare the installed CRDs with this operator's models, in the background (it waits
        for the login); a failure is logged, never fatal: the operator works without it."""
        from lorafleet_operator.crd_check import check_crds

        async def run() -> None:
            try:
                await check_crds(self.settings.control_namespace_name())
            except OperatorStoppingError:
                return
            except Exception:
                log.warning(
                    "could not compare the installed CRDs with the operator's", exc_info=True
                )

        self.crd_check = asyncio.get_running_loop().create_task(run(), name="lorafleet-crd-check")

    def fleet(self, namespace: str, indexing: bool = False) -> FleetSync:
        """The namespace's FleetSync (created on first use).

        Index handlers (`indexing=True`) feed it during kopf's initial lists. kopf calls every
        other handler only once all indexed kinds are listed in full, so any other caller
        marks the index as listed: only then may the loop plan its first pass (a pass over a
        partial world, adapters without pods or the reverse, would write that world).
        """
        fleet = self._fleet(namespace)
        if not indexing:
            fleet.index.listed.set()
        return fleet

    def _fleet(self, namespace: str) -> FleetSync:
        fleet = self.fleets.get(namespace)
        if fleet is None:
            s = self.settings
            fleet = FleetSync(
                namespace,
                self.metrics.counting(KubeWriter()),
                params=FleetParams(
                    s.replica_tokens_per_second, s.hot_adapter_share, s.merge_threshold_share
                ),
                debounce=s.sync_debounce_seconds,
                max_delay=s.sync_max_delay_seconds,
                pod_interval=s.pod_patch_interval_seconds,
                concurrency=s.write_concurrency,
                default_port=s.agent_internal_port,
                clock=lambda: datetime.now(UTC),
                on_pass=self.metrics.on_pass(namespace),
                wait_for_lists=True,
            )
            self.fleets[namespace] = fleet
            self.tasks[namespace] = asyncio.get_running_loop().create_task(
                fleet.run(), name=f"lorafleet-sync-{namespace}"
            )
        return fleet

    async def close(self) -> None:
        if self.control is not None:
            await self.control.stop()
            self.control = None
        tasks = [*self.tasks.values(), *([self.crd_check] if self.crd_check else [])]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.tasks.clear()
        self.fleets.clear()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
            self.metrics_server.server_close()
            self.metrics_server = None
        await HOLDER.close()


RUNTIME = Runtime()


def reset() -> None:
    """Fresh settings and state for a new operator run in the same process."""
    global RUNTIME
    RUNTIME = Runtime()


def runtime() -> Runtime:
    return RUNTIME
