"""AdapterAlias: keep the index current; FleetSync plans and writes the status."""

from __future__ import annotations

from typing import Any

import kopf

from lorafleet_core.names import GROUP, PLURAL_ALIAS, VERSION
from lorafleet_operator.runtime import runtime


@kopf.on.event(GROUP, VERSION, PLURAL_ALIAS)
async def alias_event(
    *, type: str, body: kopf.Body, name: str, namespace: str | None, **_: Any
) -> None:
    assert namespace is not None  # lorafleet resources and pods are namespaced
    fleet = runtime().fleet(namespace)
    if type == "DELETED":
        fleet.remove_alias(name)
    else:
        fleet.upsert_alias(body)
