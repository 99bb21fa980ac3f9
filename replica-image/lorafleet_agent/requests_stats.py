"""Load figures of the requests in flight: queue depth, running requests, tokens in flight."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from lorafleet_agent.metrics import AgentMetrics, RateWindow
from lorafleet_core.planning.tokens import estimate, parse_header
from lorafleet_core.wire.openai_stream import event_usage, is_content_event, usage_tokens
from lorafleet_core.wire.replica_state import AdapterActivity
from lorafleet_core.wire.sse import SseFramer
from lorafleet_core.wire.tiers import Tier


def request_tokens(header: str | None, body: dict[str, Any]) -> int:
    """The request's tokens in flight: the gateway's estimate when it sent one (so the agent,
    the gateway's router and limiter and the autoscaler count the same figure), else the same
    shared estimate computed here (a request sent to the agent directly)."""
    passed = parse_header(header)
    return passed if passed is not None else estimate(body)


class RequestStats:
    def __init__(self, metrics: AgentMetrics, window_s: float = 60.0) -> None:
        self.metrics = metrics
        self.queued = 0
        self.running = 0
        self.tokens_in_flight = 0

        def window() -> RateWindow:
            return RateWindow(window_s)

        self.tokens: defaultdict[str, RateWindow] = defaultdict(window)
        self.requests: defaultdict[str, RateWindow] = defaultdict(window)
        self.gpu_hits: defaultdict[str, RateWindow] = defaultdict(window)

    def admit(self, tokens: int) -> None:
        self.queued += 1
        self.tokens_in_flight += tokens
        self._publish()

    def start(self) -> None:
        self.queued -= 1
        self.running += 1
        self._publish()

    def finish(self, tokens: int, *, started: bool) -> None:
        if started:
            self.running -= 1
        else:
            self.queued -= 1
        self.tokens_in_flight -= tokens
        self._publish()

    def count_tokens(self, adapter_id: str, n: int) -> None:
        if n > 0:
            self.tokens[adapter_id].add(n)
            self.metrics.tokens_out.inc(n)

    def count_request(self, adapter_id: str, tier: Tier) -> None:
        """One request served from `tier` (where the agent found the adapter for it)."""
        self.requests[adapter_id].add()
        if tier is Tier.GPU:
            self.gpu_hits[adapter_id].add()

    def adapter_activity(self) -> dict[str, AdapterActivity]:
        """Adapters active in the last window: requests, GPU hits, tokens/s (ReplicaState)."""
        tps = self.tokens_per_second()
        out: dict[str, AdapterActivity] = {}
        for aid in sorted(set(self.requests) | set(tps)):
            window = self.requests.get(aid)
            requests = round(window.per_min()) if window is not None else 0
            hits = self.gpu_hits.get(aid)
            gpu = round(hits.per_min()) if hits is not None else 0
            if requests or tps.get(aid):
                out[aid] = AdapterActivity(
                    requests=requests, gpu_hits=gpu, tokens_per_second=tps.get(aid, 0.0)
                )
            elif window is not None:  # idle for a whole window: forget it (bounded state)
                self.requests.pop(aid, None)
                self.gpu_hits.pop(aid, None)
        return out

    def tokens_per_second(self) -> dict[str, float]:
        rates = {a: w.per_min() / 60.0 for a, w in self.tokens.items()}
        return {a: r for a, r in rates.items() if r > 0}

    def _publish(self) -> None:
        self.metrics.queue_depth.set(self.queued)
        self.metrics.running.set(self.running)
        self.metrics.tokens_in_flight.set(self.tokens_in_flight)


class SseTokenCounter:
    """Counts generated tokens in an OpenAI stream (chat, completions or Responses) as chunks
    pass through: one per content event (lorafleet_core.wire.openai_stream), until the usage the
    stream ends with gives the exact count and wins."""

    def __init__(self) -> None:
        self._framer = SseFramer()
        self.chunks = 0
        self.usage: int | None = None

    def feed(self, data: bytes) -> int:
        """Consume bytes; returns tokens newly counted."""
        new = 0
        for event in self._framer.feed(data):
            usage = event_usage(event)
            if usage is not None:
                self.usage = usage_tokens(usage)[1]
            if is_content_event(event):
                self.chunks += 1
                new += 1
        return new

    @property
    def total(self) -> int:
        return self.usage if self.usage is not None else self.chunks
