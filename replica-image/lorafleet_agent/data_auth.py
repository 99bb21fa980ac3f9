"""The credential the data port requires: only the gateway may run completions on a replica.

The data port serves any registered adapter by its id. Without a credential any pod that
reaches it could use any tenant's adapter, skipping the gateway's API keys, tenant isolation
and rate limits; the NetworkPolicy narrows who reaches it, this decides who is served.

A separate token from the internal one (`DATA_TOKEN`, the pool Secret's `data-token`), always a
shared secret compared in constant time, because:

- the internal port's cluster mode (`tokenReview`) asks the Kubernetes API server, failing
  closed. On the internal port that stops on-demand loads while the API server is away; on the
  data port it would stop all serving. The data path depends on no control plane;
- neither port accepts the other's token: a leaked internal token (the operator's control
  API holds one to forward load and unload) serves no completion, and a leaked data token
  posts no record;
- each can be rotated alone (a file-mounted token is re-read when it changes).

The gateway sends it as `Authorization: Bearer <token>` on every data request; a missing or
wrong one is answered 401 `unauthorized` (OpenAI error body) before the body is read.
`/healthz` stays open for the kubelet's probes.
"""

from __future__ import annotations

from lorafleet_agent.internal_auth import InternalAuth
from lorafleet_agent.settings import AgentSettings


def build_data_auth(s: AgentSettings) -> InternalAuth:
    return InternalAuth(
        s.data_token,
        s.data_token_file,
        allow_unauthenticated=s.allow_unauthenticated_data,
        setting="DATA",
    )
