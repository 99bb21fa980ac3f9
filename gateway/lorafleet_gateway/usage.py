"""Usage metering: requests and tokens served, per tenant and adapter, for billing.

Three plain Prometheus counters labelled `tenant` and `adapter` (the immutable adapter id):

- `lorafleet_gateway_usage_requests_total`: requests that got an answer from an engine (a
  non-stream 200, or a stream that started, whether it completed, failed or was aborted);
- `lorafleet_gateway_usage_prompt_tokens_total`, `..._completion_tokens_total`: the engine's
  own `usage` of the answer (the gateway always asks for it on streams, see upstream).

Counters add up across gateway pods (`sum by (tenant) (increase(...[24h]))`), and a pod's
restart reads as a counter reset, which `increase()` handles. The label values come from the
catalog only (the authenticated tenant and the adapter its alias resolved to), never from
request text, so the series are bounded by the catalog: at most one per adapter.

A chat or completions stream that ends without its usage event (the client left, the replica
failed mid-stream) is billed by the engine's own continuous usage on the last chunk handed to
the client (relay.UsageFilter): the real prompt, the tokens generated for what was sent. A
Responses stream cut before its terminal event is counted by what was sent: the prompt by the
shared estimate (lorafleet_core.planning.tokens), one completion token per `*.delta` event
(lorafleet_core.wire.openai_stream.is_content_event). The Responses API's
`input_tokens`/`output_tokens` count as prompt/completion (openai_stream.usage_tokens).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter

from lorafleet_core.wire import metric_names

LABELS = ("tenant", "adapter")


class UsageMeter:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = PromCounter(
            metric_names.GATEWAY_USAGE_REQUESTS,
            "Requests answered by an engine, per tenant and adapter",
            LABELS,
            registry=registry,
        )
        self.prompt = PromCounter(
            metric_names.GATEWAY_USAGE_PROMPT_TOKENS,
            "Prompt tokens served (engine usage), per tenant and adapter",
            LABELS,
            registry=registry,
        )
        self.completion = PromCounter(
            metric_names.GATEWAY_USAGE_COMPLETION_TOKENS,
            "Completion tokens served (engine usage; a cut stream: the engine's count of what "
            "was sent), per tenant and adapter",
            LABELS,
            registry=registry,
        )
        # (tenant, adapter) -> the three label children: a label lookup costs more than .inc()
        self._children: dict[tuple[str, str], tuple[Any, Any, Any]] = {}

    def prime(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Export a 0 for every (tenant, adapter) a request may be metered under, before its
        first request: `increase()` takes a series' first sample as its baseline, so a series
        born at 1 would lose that first request from every bill. Called with each catalog
        snapshot; series are never removed (a pair left the catalog keeps its total)."""
        for tenant, adapter in pairs:
            self._series(tenant, adapter)

    def _series(self, tenant: str, adapter: str) -> tuple[Any, Any, Any]:
        key = (tenant, adapter)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = (
                self.requests.labels(tenant, adapter),
                self.prompt.labels(tenant, adapter),
                self.completion.labels(tenant, adapter),
            )
        return found

    def record(self, tenant: str, adapter: str, prompt: int, completion: int) -> None:
        requests, prompt_c, completion_c = self._series(tenant, adapter)
        requests.inc()
        prompt_c.inc(max(prompt, 0))
        completion_c.inc(max(completion, 0))
