"""HTTP headers lorafleet's processes set for one another and for the clients that read them.

The gateway and the agent both write and read these, as do the load tester and the canary:
one spelling here, so a rename is one edit and a typo is an import error.
"""

from typing import Final

# Response headers the gateway and the agent set on every completion: which adapter version
# answered, where the replica found it (`lorafleet_core.wire.tiers`), and which replica.
HEADER_ADAPTER_ID: Final = "x-adapter-id"
HEADER_ADAPTER_TIER: Final = "x-adapter-tier"
HEADER_REPLICA_ID: Final = "x-replica-id"

# Request headers the gateway sets on the data request it sends to a replica's agent.
# The gateway's token estimate of the request (lorafleet_core.planning.tokens): the agent counts
# the same figure in its tokens in flight, so the autoscaler and the gateway's limiter agree.
HEADER_TOKENS_ESTIMATE: Final = "x-lorafleet-tokens-estimate"
# On a request retried after an on-demand load: the tier the load call found the adapter in
# (its answer's `from`). The agent reports the slower of it and where the retried request found
# the adapter, so the tier is a property of each request, not of the adapter.
HEADER_LOADED_FROM: Final = "x-lorafleet-loaded-from"

# One request's id, from the client (or made by the gateway) through the agent to vLLM, which
# takes it as its own request id (lorafleet_core.web.request_ids).
HEADER_REQUEST_ID: Final = "x-request-id"
