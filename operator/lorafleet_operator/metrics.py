"""Prometheus metrics of the operator, served on their own port (`metrics_port`, 9090 in the chart).

What an SRE asks of a controller: is it reconciling (pass duration, failed passes), is it writing
(status and annotation writes by kind, failed writes), and what does it see (adapters by phase,
aliases whose last deploy is refused). Writes are counted by `CountingWriter`, a wrapper around
the real writer, and passes by `on_pass`; gauges are read from each namespace's FleetSync at
scrape time. So the sync loop carries no counters of its own.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lorafleet_core.api.models import AdapterPhase
from lorafleet_core.api.reasons import DEPLOYED
from lorafleet_core.version import version
from lorafleet_core.web import exposition
from lorafleet_operator.sync import FleetSync, Writer

exposition.configure()  # no `_created` series (lorafleet_core.web.exposition)

# A pass plans the namespace in a thread and writes the diff: ~10 ms idle, ~1 s for 5,000
# adapters on a slow core, longer while the API server throttles writes.
PASS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
PHASES = tuple(p.value for p in AdapterPhase)


class FleetCollector(Collector):
    """Gauges read from the FleetSyncs (one per namespace) at scrape time."""

    def __init__(self, fleets: Callable[[], Mapping[str, FleetSync]]) -> None:
        self.fleets = fleets

    def collect(self) -> Iterator[Metric]:
        adapters = GaugeMetricFamily(
            "lorafleet_operator_adapters",
            "LoRAAdapters by status.phase (Pending includes adapters not yet validated)",
            labels=["namespace", "phase"],
        )
        aliases = GaugeMetricFamily(
            "lorafleet_operator_aliases", "AdapterAliases", labels=["namespace"]
        )
        refused = GaugeMetricFamily(
            "lorafleet_operator_aliases_deploy_refused",
            "AdapterAliases whose Deployed condition is False: spec.adapter is not served",
            labels=["namespace"],
        )
        # The scrape runs in the metrics server's thread while the event loop updates the
        # index: list() copies a dict in one step under the GIL, iterating it live could fail.
        for ns, fleet in sorted(self.fleets().items(), key=lambda kv: kv[0]):
            adapter_entries = list(fleet.index.adapters.values())
            alias_objects = list(fleet.index.aliases.values())
            phases = Tally(
                (e.status.phase if e.status and e.status.phase else AdapterPhase.PENDING).value
                for e in adapter_entries
            )
            for phase in PHASES:
                adapters.add_metric([ns, phase], phases.get(phase, 0))
            aliases.add_metric([ns], len(alias_objects))
            refused.add_metric(
                [ns],
                sum(
                    1
                    for a in alias_objects
                    if a.status is not None
                    and any(c.type == DEPLOYED and c.status == "False" for c in a.status.conditions)
                ),
            )
        yield from (adapters, aliases, refused)


class OperatorMetrics:
    """The operator's registry: passes and writes observed as they happen, the rest collected."""

    def __init__(self, fleets: Callable[[], Mapping[str, FleetSync]]) -> None:
        self.registry = CollectorRegistry()
        self.pass_seconds = Histogram(
            "lorafleet_operator_sync_pass_seconds",
            "Duration of one sync pass (plan the namespace, write the diff)",
            ["namespace", "result"],
            buckets=PASS_BUCKETS,
            registry=self.registry,
        )
        self.passes = Counter(
            "lorafleet_operator_sync_passes",
            "Sync passes finished",
            ["namespace"],
            registry=self.registry,
        )
        self.writes = Counter(
            "lorafleet_operator_writes",
            "Writes of derived state by target: pod annotations, adapter and alias status",
            ["namespace", "kind"],
            registry=self.registry,
        )
        self.write_failures = Counter(
            "lorafleet_operator_write_failures",
            "Writes the API server refused or that failed (retried on the next pass)",
            ["namespace"],
            registry=self.registry,
        )
        self.registry.register(FleetCollector(fleets))
        # Always present, even before any namespace has objects: the absent-target alert's
        # signal that the operator is scraped at all.
        self.build_info = Gauge(
            "lorafleet_operator_build_info",
            "1 while the operator runs; the version label says which",
            ["version"],
            registry=self.registry,
        )
        self.build_info.labels(version()).set(1)

    def on_pass(self, namespace: str) -> Callable[[float, bool], None]:
        """The callback one FleetSync calls after each pass."""
        # Export zeros from the start, so rate() and the alerts see the series before the
        # first failure rather than a series that appears out of nowhere.
        self.passes.labels(namespace)
        self.write_failures.labels(namespace)

        def observe(seconds: float, ok: bool) -> None:
            self.pass_seconds.labels(namespace, "ok" if ok else "error").observe(seconds)
            self.passes.labels(namespace).inc()

        return observe

    def counting(self, writer: Writer) -> CountingWriter:
        """`writer` with every write counted by target kind, and failures counted."""
        return CountingWriter(writer, self)


class CountingWriter:
    """A Writer that counts each write (by target) and each failed write, then delegates."""

    def __init__(self, inner: Writer, metrics: OperatorMetrics) -> None:
        self.inner = inner
        self.metrics = metrics

    async def _counted(self, namespace: str, kind: str, write: Awaitable[None]) -> None:
        try:
            await write
        except Exception:
            self.metrics.write_failures.labels(namespace).inc()
            raise
        self.metrics.writes.labels(namespace, kind).inc()

    async def pod_annotation(self, namespace: str, pod: str, value: str) -> None:
        await self._counted(namespace, "pod", self.inner.pod_annotation(namespace, pod, value))

    async def adapter_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        await self._counted(
            namespace, "adapter", self.inner.adapter_status(namespace, name, status)
        )

    async def alias_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        await self._counted(namespace, "alias", self.inner.alias_status(namespace, name, status))

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
        await self.inner.event(namespace, kind, name, uid, reason, message, type_)

    async def create_pool(self, namespace: str, body: dict[str, Any]) -> None:
        await self._counted(namespace, "pool", self.inner.create_pool(namespace, body))

    async def patch_pool(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        await self._counted(namespace, "pool", self.inner.patch_pool(namespace, name, patch))

    async def delete_pool(self, namespace: str, name: str) -> None:
        await self._counted(namespace, "pool", self.inner.delete_pool(namespace, name))
