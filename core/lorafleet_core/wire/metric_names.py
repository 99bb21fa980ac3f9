"""Metric families one process exports and another reads by name.

Most metrics are read only by Prometheus (their names live with their registries, and
tests/docs checks the docs against those). These few are also parsed by another lorafleet
process, so exporter and reader take the name from here: the `lorafleet status` and
`lorafleet usage` commands read the gateway's and the agents' /metrics, and a replica pod's
preStop hook (lorafleet_agent.probe, a separate interpreter) reads its agent's. Names are the
family names; counters' samples end in `_total`.
"""

from typing import Final

# The agent's requests by the tier each found its adapter in (counter, label `tier`).
AGENT_REQUESTS: Final = "lorafleet_agent_requests"
# The agent's requests waiting for and holding the engine (gauges): a draining pod waits for
# both to reach zero.
AGENT_QUEUE_DEPTH: Final = "lorafleet_agent_queue_depth"
AGENT_RUNNING_REQUESTS: Final = "lorafleet_agent_running_requests"

# The gateway's per-tenant TTFT objective over its rolling window (counters, label `tenant`).
GATEWAY_TENANT_REQUESTS: Final = "lorafleet_gateway_tenant_requests"
GATEWAY_TENANT_TTFT_OVER_TARGET: Final = "lorafleet_gateway_tenant_ttft_over_target"

# The gateway's billing counters (labels `tenant`, `adapter`).
GATEWAY_USAGE_REQUESTS: Final = "lorafleet_gateway_usage_requests"
GATEWAY_USAGE_PROMPT_TOKENS: Final = "lorafleet_gateway_usage_prompt_tokens"
GATEWAY_USAGE_COMPLETION_TOKENS: Final = "lorafleet_gateway_usage_completion_tokens"
