"""The shared core of lorafleet: every component (operator, gateway, agent, CLI) imports it.

It holds what more than one component needs, each concept once: the custom-resource models and
generated CRDs (`models`, `crds`), names and header keys (`names`), placement by rendezvous
hashing (`placement`), the pure planners (`planning`), adapter records and files (`records`,
`adapter_files`), the replica `/state` contract (`replica_state`) and its one client
(`replica_client`, over the caller's httpx client), the token estimate of a request (`tokens`),
SSE framing (`sse`), tiers and OpenAI error bodies. Importing it has no side effects and needs
neither kopf nor a cluster; the only I/O is reading local adapter files and `replica_client`'s
GET through a client the caller passes in.
"""
