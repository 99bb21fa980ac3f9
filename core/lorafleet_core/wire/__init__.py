"""What travels between lorafleet's processes: a replica's `/state` (`replica_state`) and the
one client of its endpoints (`replica_client`), the registry record an agent loads
(`records`), tiers, OpenAI-style error bodies, SSE framing and stream events, strict JSON.

Data models here are pure; only `replica_client` performs I/O (through an httpx client the
caller passes in), so planners may import the rest."""
