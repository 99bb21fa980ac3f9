"""lorafleet operator: the kopf handlers that apply the shared planners to a cluster.

Importing this package has no side effects. The handlers register with kopf only when
`lorafleet_operator.handlers` is imported, which the entry point (`run_operator`) does
explicitly; `kopf run --module lorafleet_operator.handlers` works the same way. The pure
planners live in `lorafleet_core.planning`, which standalone mode imports without kopf.
"""
