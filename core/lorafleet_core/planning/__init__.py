"""Pure planners of the lorafleet operator: observed objects in, plan dataclasses out.

Nothing in this package talks to Kubernetes, imports kopf, reads the clock or does I/O: every
function takes plain pydantic models from `lorafleet_core.api.models` (or small dataclasses defined
here) plus an explicit `now`, and returns a plan the caller applies. The kopf handlers in
`lorafleet_operator.handlers` apply plans to a cluster; standalone mode (`lorafleet up`) applies
the same plans to YAML manifests in a folder. Entry points: `fleet.plan_fleet` (everything at
once: adapter validation and owners, alias status, pod pre-warm annotations),
`adapters.validate_adapter` / `adapters.plan_owner_count`, `aliases.plan_alias`,
`prewarm.plan_owned_annotations`, `pool.plan_pool_objects` (StatefulSet, Service, PDB) and
`autoscale.recommend` / `autoscale.stabilize`; `conditions.set_condition` keeps Kubernetes
condition semantics (lastTransitionTime moves only when status changes).
"""
