"""`lorafleet sim`: a discrete-event digital twin of a lorafleet fleet.

It drives the shipped decision code, never a copy of it: the gateway's router
(`lorafleet_gateway.router.plan_route`, over 1 s-old polled state plus the gateway's own
in-flight counts), rendezvous placement (`lorafleet_core.planning.placement`), the operator's
planners
(`lorafleet_core.planning.adapters.plan_owner_count`, `lorafleet_core.planning.autoscale`) and
the agent's cache policy (`lorafleet_core.planning.cache_policy.CachePolicy`). What it models
itself is
only what the real stack gets from hardware: vLLM's continuous batching with chunked prefill,
adapter load times and object-store bandwidth (`params.py` holds every such number).

Modules: params (the replica and fleet model's numbers), workload (trace or Poisson arrivals,
Zipf or tenant-mix adapters), replica (one vLLM replica + agent; batching: its vLLM's step
loop, mixed in), engine (event loop, gateway), control_plane (the operator's planners and the
autoscaler, mixed into the engine), report (figures, markdown/JSON/PNG), scenarios (named
runs), capacity (search).
"""
