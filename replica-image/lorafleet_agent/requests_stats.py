"""Load figures of the requests in flight: queue depth, running requests, tokens in flight."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from lorafleet_agent.metrics import AgentMetrics, RateWindow

# Without the model's tokenizer the agent estimates prompt tokens from characters; English text
# with a BPE tokenizer runs about 4 characters a token. The gateway compares replicas with it.
CHARS_PER_TOKEN = 4
DEFAULT_MAX_TOKENS = 16


def estimate_tokens(body: dict[str, Any]) -> int:
    """prompt tokens (estimated) + max_tokens the request may generate."""
    if "messages" in body:
        text = json.dumps(body.get("messages"))
    else:
        text = json.dumps(body.get("prompt", ""))
    limit = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
    try:
        limit_n = int(limit)
    except (TypeError, ValueError):
        limit_n = DEFAULT_MAX_TOKENS
    return len(text) // CHARS_PER_TOKEN + max(limit_n, 0)


class RequestStats:
    def __init__(self, metrics: AgentMetrics) -> None:
        self.metrics = metrics
        self.queued = 0
        self.running = 0
        self.tokens_in_flight = 0
        self.tokens: defaultdict[str, RateWindow] = defaultdict(RateWindow)

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

    def tokens_per_second(self) -> dict[str, float]:
        rates = {a: w.per_min() / 60.0 for a, w in self.tokens.items()}
        return {a: r for a, r in rates.items() if r > 0}

    def _publish(self) -> None:
        self.metrics.queue_depth.set(self.queued)
        self.metrics.running.set(self.running)
        self.metrics.tokens_in_flight.set(self.tokens_in_flight)


class SseTokenCounter:
    """Counts generated tokens in an OpenAI SSE stream as chunks pass through.

    vLLM sends one chunk per generated token; a final usage chunk (stream_options
    include_usage) gives the exact count and then wins.
    """

    def __init__(self) -> None:
        self._buf = b""
        self.chunks = 0
        self.usage: int | None = None

    def feed(self, data: bytes) -> int:
        """Consume bytes; returns tokens newly counted."""
        self._buf += data
        new = 0
        while b"\n\n" in self._buf:
            event, self._buf = self._buf.split(b"\n\n", 1)
            for line in event.splitlines():
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    continue
                try:
                    obj = json.loads(payload)
                except ValueError:
                    continue
                usage = obj.get("usage") or {}
                if usage.get("completion_tokens") is not None:
                    self.usage = int(usage["completion_tokens"])
                for choice in obj.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if choice.get("text") or delta.get("content"):
                        self.chunks += 1
                        new += 1
        return new

    @property
    def total(self) -> int:
        return self.usage if self.usage is not None else self.chunks
