"""Prometheus metrics of the gateway, on a registry per gateway (tests run several).

Per-tenant SLO signals that add up across gateway pods: two counters per tenant,
`lorafleet_gateway_tenant_requests_total` and `lorafleet_gateway_tenant_ttft_over_target_total`
(requests whose time to first token exceeded `ttft_target_s`). Summed over pods,
`increase(over_target) / increase(requests)` is each tenant's fraction over target, and a
tenant's p95 TTFT is above the target exactly when that fraction exceeds 5%. Counters, unlike
per-pod top-N gauges, neither rank per-pod series (a tenant appearing twice, the true worst
missed) nor depend on which pod a tenant's requests landed on.

Bounded: only tenants with a request in the last `window_s` are exported (and remembered); a
tenant idle for longer drops out and, when it comes back, starts a new series from zero, which
`rate()`/`increase()` read as a counter reset. With 5,000 tenants and a 5-minute window this is
the tenants active in the last 5 minutes, not 5,000 series per metric. The full per-request
detail (tenant, model, adapter, replica, tier, TTFT) is in the request log.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client import Counter as PromCounter
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from lorafleet_core.web import exposition
from lorafleet_core.wire import metric_names
from lorafleet_core.wire.tiers import MERGED_TIER, TIER_NAMES
from lorafleet_gateway.usage import UsageMeter

exposition.configure()  # no `_created` series (lorafleet_core.web.exposition)

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
DURATION_TIERS = frozenset((*TIER_NAMES, MERGED_TIER))
# A whole request, refusals (milliseconds) to long streams (minutes).
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


@dataclass(slots=True)
class _TenantCounts:
    requests: int = 0
    over_target: int = 0
    last_seen: float = 0.0


class TenantSLO(Collector):
    """Per-tenant request and over-TTFT-target counters, for tenants active in `window_s`."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.clock = clock
        # Least recently seen first, so forgetting idle tenants stops at the first active one.
        self._tenants: OrderedDict[str, _TenantCounts] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tenants)

    def observe(self, tenant: str, over_target: bool) -> None:
        now = self.clock()
        counts = self._tenants.get(tenant)
        if counts is None:
            counts = self._tenants[tenant] = _TenantCounts()
        else:
            self._tenants.move_to_end(tenant)
        counts.requests += 1
        counts.over_target += over_target
        counts.last_seen = now
        self._forget(now)

    def _forget(self, now: float) -> None:
        while self._tenants:
            tenant, counts = next(iter(self._tenants.items()))
            if now - counts.last_seen <= self.window_s:
                return
            del self._tenants[tenant]

    def counts(self) -> dict[str, tuple[int, int]]:
        """tenant -> (requests, over target), for the tenants still in the window."""
        self._forget(self.clock())
        return {t: (c.requests, c.over_target) for t, c in self._tenants.items()}

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            metric_names.GATEWAY_TENANT_REQUESTS,
            "Streamed requests that got a first token, per tenant active in the window",
            labels=["tenant"],
        )
        over = CounterMetricFamily(
            metric_names.GATEWAY_TENANT_TTFT_OVER_TARGET,
            "Streamed requests whose time to first token exceeded the target, per tenant active "
            "in the window",
            labels=["tenant"],
        )
        for tenant, (n, missed) in sorted(self.counts().items()):
            requests.add_metric([tenant], n)
            over.add_metric([tenant], missed)
        yield requests
        yield over


class AliasChanges:
    """Counts the aliases whose adapter or weighted split differs between one catalog and the
    next (a catalog listener: no I/O). Aliases added or removed are not changes; the first
    catalog is none."""

    def __init__(self, counter: PromCounter) -> None:
        self.counter = counter
        self._previous: dict[str, str] | None = None

    def __call__(self, aliases: Mapping[str, str]) -> None:
        """`aliases`: public model name -> what it answers with (AliasTarget.traffic: the
        adapter id, or the weighted split), of the catalog just installed."""
        previous = self._previous
        if previous is not None:
            changed = sum(1 for m, a in aliases.items() if previous.get(m, a) != a)
            if changed:
                self.counter.inc(changed)
        self._previous = dict(aliases)


class GatewayMetrics:
    def __init__(self, window_s: float = 300.0) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.ttft = Histogram(
            "lorafleet_gateway_ttft_seconds",
            "Time to first token seen by the gateway, by the tier the replica found the adapter "
            "in and whether the request streamed. stream=true: to the stream's first byte; "
            "stream=false: to the replica's answer headers, which vLLM sends once the whole "
            "answer is generated, so it includes the generation (the client's wait for any "
            "token). The TTFT alert and the per-tenant target counters read streams only",
            ["tier", "stream"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.request_duration = Histogram(
            "lorafleet_gateway_request_duration_seconds",
            "Completion requests from arrival to the last byte sent, by endpoint and the tier the "
            "replica found the adapter in (none: refused or failed before a replica answered)",
            ["endpoint", "tier"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.alias_changes = AliasChanges(
            PromCounter(
                "lorafleet_gateway_alias_changes",
                "Aliases that answer with another adapter or another weighted split than in the "
                "previous catalog: a deploy, a rollback or a split change taking effect on this "
                "gateway (the dashboard's annotations)",
                registry=r,
            )
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
            "Routing outcomes: owner_resident, owner, spill, saturated, random, retry, "
            "load_on_demand, merged, merged_fallback",
            ["outcome"],
            registry=r,
        )
        self.merged_fallback = PromCounter(
            "lorafleet_gateway_merged_fallback",
            "Requests for an adapter with a Ready merged pool that the pool did not take, by "
            "merged pool and reason: overloaded (every replica past the merged bounds: the "
            "request spilled to the adapter's shared pool) or unhealthy",
            ["pool", "reason"],
            registry=r,
        )
        self.rate_limited = PromCounter(
            "lorafleet_gateway_rate_limited",
            "Requests refused by a tenant limit: requests (per second), tokens (per minute) "
            "or concurrency (requests running at once)",
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
        self.rate_limit_backend_errors = PromCounter(
            "lorafleet_gateway_rate_limit_backend_errors",
            "Rate-limit calls the shared backend (Redis) could not answer, by operation; each "
            "was decided by the configured failure mode (open: admitted unchecked)",
            ["operation"],
            registry=r,
        )
        self.rate_limit_backend_up = Gauge(
            "lorafleet_gateway_rate_limit_backend_up",
            "1 while the shared rate-limit backend answers (always 1 for the in-memory limiter)",
            registry=r,
        )
        self.rate_limit_backend_up.set(1)
        self.tenants = TenantSLO(window_s)
        r.register(self.tenants)
        self.usage = UsageMeter(r)
        self._children: dict[tuple[object, tuple[str, ...]], Any] = {}

    def duration_tier(self, tier: object) -> str:
        """A bounded `tier` label: the tiers a replica reports, `none` or `unknown`."""
        if tier is None:
            return "none"
        return tier if tier in DURATION_TIERS else "unknown"

    def child(self, metric: PromCounter | Histogram, *labels: str) -> Any:
        """`metric.labels(*labels)`, cached: label lookup costs more than the increment."""
        key = (metric, labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found
