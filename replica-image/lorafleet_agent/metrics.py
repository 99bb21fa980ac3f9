"""Prometheus metrics of one agent, in their own registry (several agents may share a process)."""

from __future__ import annotations

import time
from collections import deque

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


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
            "lorafleet_agent_requests",
            "Completion requests, by the tier the adapter was found in",
            ["tier"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "lorafleet_agent_queue_depth", "Requests admitted, not yet streaming", registry=r
        )
        self.running = Gauge(
            "lorafleet_agent_running_requests", "Requests streaming from vLLM", registry=r
        )
        self.tokens_in_flight = Gauge(
            "lorafleet_agent_tokens_in_flight",
            "Estimated prompt + max_tokens of unfinished requests",
            registry=r,
        )
        self.tokens_out = Counter(
            "lorafleet_agent_completion_tokens", "Completion tokens streamed back", registry=r
        )


class RateWindow:
    """Events per minute over a sliding 60 s window."""

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
