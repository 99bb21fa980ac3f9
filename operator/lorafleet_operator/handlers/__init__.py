"""Thin kopf handlers, one module per resource; importing this package registers them all.

Adapters, aliases, pools and replica pods reach the namespace's FleetSync through `@kopf.index`
handlers, which kopf calls for every listed object before any other handler: kopf holds every
other handler until all indexed kinds' initial lists are in, and the first such call lets the
sync loop plan (runtime.Runtime.fleet). A restarted operator therefore plans its first pass over
the whole namespace, never over the kinds whose watches happened to list first. Deletions come
through `@kopf.on.event` (kopf does not call index handlers for them).
"""

from lorafleet_operator.handlers import (
    adapters,
    aliases,
    autoscaler,
    lifecycle,
    pods,
    pools,
)

__all__ = ["adapters", "aliases", "autoscaler", "lifecycle", "pods", "pools"]
