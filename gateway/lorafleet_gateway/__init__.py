"""lorafleet gateway: OpenAI-compatible API, auth, aliases, rate limits, adapter-affinity routing.

See docs/reference/gateway.md. Entry point: `python -m lorafleet_gateway`.
"""
