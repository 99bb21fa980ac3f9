"""AdapterAlias: keep the index current; FleetSync plans and writes the status."""

from __future__ import annotations

from typing import Any

import kopf

from lorafleet_core.api.names import GROUP, PLURAL_ALIAS, VERSION
from lorafleet_operator.runtime import runtime


@kopf.index(GROUP, VERSION, PLURAL_ALIAS)
async def alias_index(*, body: kopf.Body, namespace: str | None, **_: Any) -> None:
    """Every non-deletion event, during kopf's initial list too (why: the handlers package)."""
    assert namespace is not None  # lorafleet resources and pods are namespaced
    runtime().fleet(namespace, indexing=True).index.upsert_alias(body)


@kopf.on.event(GROUP, VERSION, PLURAL_ALIAS)
async def alias_event(*, type: str, name: str, namespace: str | None, **_: Any) -> None:
    assert namespace is not None
    fleet = runtime().fleet(namespace)
    if type == "DELETED":
        fleet.index.remove_alias(name)
