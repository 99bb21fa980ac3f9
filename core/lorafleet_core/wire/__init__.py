"""What travels between lorafleet's processes: the agent's internal API (`agent_api`: its paths
and the token audience its callers present) and the one client of it (`replica_client`: state,
load, unload), a replica's `/state` (`replica_state`), the registry record an agent loads
(`records`), HTTP headers (`headers`), the error codes an agent answers (`error_codes`), tiers,
OpenAI-style error bodies, SSE framing and stream events, strict JSON.

Everything here is pure data and string building; only `replica_client` performs I/O (through
an httpx client the caller passes in), so planners may import the rest."""
