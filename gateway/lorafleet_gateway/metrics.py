"""Prometheus metrics of the gateway, on a registry per gateway (tests run several).

Per-tenant signals without per-tenant series: with 5,000 tenants a `tenant` label on every
metric would multiply each metric by 5,000. Instead the gateway counts, per tenant and in
memory (bounded by the tenants in the catalog), requests and requests whose TTFT missed the
target over a rolling window, and exports only the top N tenants of each as gauges
(`lorafleet_gateway_tenant_ttft_misses` / `lorafleet_gateway_tenant_requests`, at most
2 * N series). "Which tenants are suffering right now" is answered from Prometheus; the full
per-request detail (tenant, model, adapter, replica, tier, TTFT) is in the request log.
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client import Counter as PromCounter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


class TenantWindow(Collector):
    """Per-tenant request and TTFT-miss counts over a rolling window (two half-windows)."""

    def __init__(
        self, top_n: int, window_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.top_n = top_n
        self.half = window_s / 2
        self.clock = clock
        self._started = clock()
        self._requests: tuple[Counter[str], Counter[str]] = (Counter(), Counter())
        self._misses: tuple[Counter[str], Counter[str]] = (Counter(), Counter())

    def _rotate(self) -> None:
        now = self.clock()
        if now - self._started >= self.half:
            # Drop the older half; the window covers between one and two halves.
            skipped = now - self._started >= 2 * self.half
            old_r = Counter() if skipped else self._requests[1]
            old_m = Counter() if skipped else self._misses[1]
            self._requests = (old_r, Counter())
            self._misses = (old_m, Counter())
            self._started = now

    def observe(self, tenant: str, missed_target: bool) -> None:
        self._rotate()
        self._requests[1][tenant] += 1
        if missed_target:
            self._misses[1][tenant] += 1

    def top(self, which: str) -> list[tuple[str, int]]:
        self._rotate()
        pair = self._misses if which == "misses" else self._requests
        total = pair[0] + pair[1]
        return heapq.nlargest(self.top_n, total.items(), key=lambda kv: (kv[1], kv[0]))

    def collect(self) -> Iterator[Metric]:
        misses = GaugeMetricFamily(
            "lorafleet_gateway_tenant_ttft_misses",
            "Requests over the TTFT target in the rolling window, top-N tenants only",
            labels=["tenant"],
        )
        for tenant, n in self.top("misses"):
            misses.add_metric([tenant], n)
        requests = GaugeMetricFamily(
            "lorafleet_gateway_tenant_requests",
            "Requests in the rolling window, top-N tenants only",
            labels=["tenant"],
        )
        for tenant, n in self.top("requests"):
            requests.add_metric([tenant], n)
        yield misses
        yield requests


class GatewayMetrics:
    def __init__(self, top_n: int = 20, window_s: float = 300.0) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.ttft = Histogram(
            "lorafleet_gateway_ttft_seconds",
            "Time to first token seen by the gateway, by the tier the replica found the adapter in",
            ["tier"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.tpot = Histogram(
            "lorafleet_gateway_time_per_output_token_seconds",
            "Time per output token after the first",
            buckets=TPOT_BUCKETS,
            registry=r,
        )
        self.requests = PromCounter(
            "lorafleet_gateway_requests",
            "Completion requests by endpoint and HTTP status",
            ["endpoint", "status"],
            registry=r,
        )
        self.routing = PromCounter(
            "lorafleet_gateway_routing",
            "Routing outcomes: owner_resident, owner, spill, saturated, retry, load_on_demand",
            ["outcome"],
            registry=r,
        )
        self.rate_limited = PromCounter(
            "lorafleet_gateway_rate_limited",
            "Requests refused by a tenant rate limit",
            ["limit"],
            registry=r,
        )
        self.tokens = PromCounter("lorafleet_gateway_tokens", "Tokens served", ["kind"], registry=r)
        self.healthy_replicas = Gauge(
            "lorafleet_gateway_healthy_replicas", "Replicas in the candidate set", registry=r
        )
        self.catalog_version = Gauge(
            "lorafleet_gateway_catalog_version", "Version of the catalog snapshot", registry=r
        )
        self.aliases = Gauge("lorafleet_gateway_aliases", "Servable aliases", registry=r)
        self.in_flight = Gauge(
            "lorafleet_gateway_requests_in_flight", "Requests being served", registry=r
        )
        self.tenants = TenantWindow(top_n, window_s)
        r.register(self.tenants)
        self._children: dict[tuple[object, tuple[str, ...]], Any] = {}

    def child(self, metric: PromCounter | Histogram, *labels: str) -> Any:
        """`metric.labels(*labels)`, cached: label lookup costs more than the increment."""
        key = (metric, labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found
