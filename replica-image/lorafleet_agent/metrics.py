"""Prometheus metrics of one agent, in their own registry (several agents may share a process)."""

from __future__ import annotations

import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from lorafleet_agent.residency_metrics import ResidencyCollector
from lorafleet_core.web import exposition
from lorafleet_core.wire import metric_names

exposition.configure()  # no `_created` series (lorafleet_core.web.exposition)


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.loads = Counter(
            "lorafleet_agent_adapter_loads",
            "Adapter loads into vLLM, by the tier the adapter came from",
            ["source_tier"],
            registry=r,
        )
        self.load_seconds = Histogram(
            "lorafleet_agent_adapter_load_seconds",
            "Time to make an adapter servable, by source tier",
            ["source_tier"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.evictions = Counter(
            "lorafleet_agent_adapter_evictions",
            "Adapters evicted, by the tier they were evicted from",
            ["tier"],
            registry=r,
        )
        self.rejections = Counter(
            "lorafleet_agent_adapter_rejections",
            "Adapters refused by verification, by reason",
            ["reason"],
            registry=r,
        )
        self.requests = Counter(
            metric_names.AGENT_REQUESTS,
            "Completion requests, by the tier the adapter was found in",
            ["tier"],
            registry=r,
        )
        self.queue_depth = Gauge(
            metric_names.AGENT_QUEUE_DEPTH, "Requests admitted, not yet streaming", registry=r
        )
        self.running = Gauge(
            metric_names.AGENT_RUNNING_REQUESTS, "Requests streaming from vLLM", registry=r
        )
        self.tokens_in_flight = Gauge(
            "lorafleet_agent_tokens_in_flight",
            "Estimated prompt + max_tokens of unfinished requests",
            registry=r,
        )
        self.tokens_out = Counter(
            "lorafleet_agent_completion_tokens", "Completion tokens streamed back", registry=r
        )
        # Reliability and security: each of these going up is worth a look.
        self.record_conflicts = Counter(
            "lorafleet_agent_record_conflicts",
            "Second, different records refused for an adapter id the agent already held",
            registry=r,
        )
        self.forgets = Counter(
            "lorafleet_agent_adapter_forgets",
            "Adapters whose record the agent dropped because they were deleted from the registry",
            registry=r,
        )
        self.disk_copies_discarded = Counter(
            "lorafleet_agent_disk_copies_discarded",
            "Disk copies that failed re-verification before registration, by reason",
            ["reason"],
            registry=r,
        )
        self.disk_write_failures = Counter(
            "lorafleet_agent_disk_write_failures",
            "Adapter downloads the cache volume refused (full, read-only, over quota)",
            registry=r,
        )
        self.engine_resyncs = Counter(
            "lorafleet_agent_engine_resyncs",
            "Times vLLM had lost registrations (it restarted) and the agent re-registered them",
            registry=r,
        )
        self.unknown_model_retries = Counter(
            "lorafleet_agent_unknown_model_retries",
            "Completions vLLM answered 'model does not exist' for, retried after a resync",
            registry=r,
        )
        self.hung_engine_failed_requests = Counter(
            "lorafleet_agent_hung_engine_failed_requests",
            "Requests failed because vLLM stayed hung past ENGINE_HUNG_FAIL_S",
            registry=r,
        )
        self.engine_up = Gauge(
            "lorafleet_agent_engine_up", "1 while vLLM answers its health check", registry=r
        )
        self.internal_auth_failures = Counter(
            "lorafleet_agent_internal_auth_failures",
            "Internal-port calls refused for a missing or wrong credential",
            registry=r,
        )
        self.data_auth_failures = Counter(
            "lorafleet_agent_data_auth_failures",
            "Data-port requests refused for a missing or wrong credential",
            registry=r,
        )
        # Read from the manager at scrape time (lorafleet_agent.residency_metrics).
        self.residency = ResidencyCollector()
        r.register(self.residency)


class RateWindow:
    """Events per minute over a sliding window (a minute unless told)."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._times: deque[float] = deque()

    def add(self, n: int = 1, now: float | None = None) -> None:
        t = time.monotonic() if now is None else now
        self._times.extend([t] * n)

    def per_min(self, now: float | None = None) -> float:
        t = time.monotonic() if now is None else now
        while self._times and self._times[0] < t - self.window_s:
            self._times.popleft()
        return len(self._times) * 60.0 / self.window_s
