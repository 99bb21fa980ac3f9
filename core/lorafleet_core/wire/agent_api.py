"""Where a replica's agent serves its internal API, and who may call its mutating endpoints.

The agent serves these routes on its internal port; the control API serves the same paths on
its own port and forwards them to the named replica's agent; the one client
(lorafleet_core.wire.replica_client) builds its URLs from them. The route templates are what
both FastAPI apps register, so a path changed here changes every side at once.
"""

from typing import Final

# A replica's state (lorafleet_core.wire.replica_state): read-only, no credential.
STATE_ROUTE: Final = "/internal/replicas/{replica_id}/state"
# Post a registry record (`{"record": AdapterRecord, "gpu": bool}`) so the replica can serve the
# adapter; the answer says its tier now and where the load found it (`from`).
LOAD_ROUTE: Final = "/internal/replicas/{replica_id}/adapters/{adapter_id}/load"
# Drop the adapter from the replica's GPU and RAM slots (refused while requests run on it).
UNLOAD_ROUTE: Final = "/internal/replicas/{replica_id}/adapters/{adapter_id}/unload"
# The adapter is gone from the registry (its LoRAAdapter was deleted): drop its registration,
# disk copy, record and any refusal, so a later record under the id is taken as new (refused
# while requests run on it). Sent by the operator when a LoRAAdapter is deleted and by the
# standalone runner; the control API does not forward it.
FORGET_ROUTE: Final = "/internal/replicas/{replica_id}/adapters/{adapter_id}/forget"
# The agent's metrics and vLLM's `vllm:` families (lorafleet_agent.engine_metrics), read-only.
METRICS_ROUTE: Final = "/metrics"
# The agent's own metrics without asking vLLM: the preStop drain hook polls its busy gauges
# while the engine may be too busy to answer a scrape in time.
AGENT_ONLY_METRICS: Final = METRICS_ROUTE + "?engine=false"

# The audience of the projected ServiceAccount tokens the gateway and the operator present to
# the agents under `internalAuth: tokenReview`; an agent accepts no token issued for another
# (a token minted for the API server or another service cannot load an adapter). The chart's
# `internalAuth.audience` default is the same (tests/api/test_wire_contract.py).
INTERNAL_AUDIENCE: Final = "lorafleet-agent"


def _base(internal_url: str) -> str:
    return internal_url.rstrip("/")


def state_url(internal_url: str, replica_id: str) -> str:
    """Where a replica serves its state, from its internal base URL (`http://host:port`)."""
    return _base(internal_url) + STATE_ROUTE.format(replica_id=replica_id)


def load_url(internal_url: str, replica_id: str, adapter_id: str) -> str:
    """The replica's load endpoint for one adapter."""
    return _base(internal_url) + LOAD_ROUTE.format(replica_id=replica_id, adapter_id=adapter_id)


def unload_url(internal_url: str, replica_id: str, adapter_id: str) -> str:
    """The replica's unload endpoint for one adapter."""
    return _base(internal_url) + UNLOAD_ROUTE.format(replica_id=replica_id, adapter_id=adapter_id)


def forget_url(internal_url: str, replica_id: str, adapter_id: str) -> str:
    """The replica's forget endpoint for one adapter."""
    return _base(internal_url) + FORGET_ROUTE.format(replica_id=replica_id, adapter_id=adapter_id)
