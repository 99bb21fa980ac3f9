"""Whether an installed CRD is older than the models: the fields its schema lacks (pure).

Helm never upgrades `crds/`, so after `helm upgrade` alone the cluster may hold the previous
release's CRDs: the API server then prunes every field they do not declare, and what the
operator writes there (status fields, conditions' new parts) is silently lost. The operator
compares each installed CRD with the one its own models give (lorafleet_core.api.crds) at start
and says which fields are missing (lorafleet_operator.crd_check).
"""

from __future__ import annotations

from typing import Any

from lorafleet_core.api import names
from lorafleet_core.api.crd_resources import ResourceKind
from lorafleet_core.api.crds import openapi_schema

Schema = dict[str, Any]


def missing_fields(wanted: Schema, installed: Schema, path: str = "") -> list[str]:
    """Paths (`spec.template.securityMode`, `status.conditions[].reason`) that `wanted`
    declares and `installed` does not; nothing below a node that keeps unknown fields."""
    if installed.get("x-kubernetes-preserve-unknown-fields"):
        return []
    out: list[str] = []
    have = installed.get("properties") or {}
    for key, sub in (wanted.get("properties") or {}).items():
        here = f"{path}.{key}" if path else key
        if key not in have:
            out.append(here)
        else:
            out += missing_fields(sub, have[key], here)
    for key, mark in (("items", "[]"), ("additionalProperties", "{}")):
        sub, got = wanted.get(key), installed.get(key)
        if isinstance(sub, dict) and isinstance(got, dict):
            out += missing_fields(sub, got, path + mark)
    return out


def outdated_fields(resource: ResourceKind, crd: Schema) -> list[str]:
    """What the installed `crd` lacks of `resource`'s schema (empty: it is current or newer)."""
    version = next(
        (
            v
            for v in (crd.get("spec") or {}).get("versions") or []
            if v.get("name") == names.VERSION
        ),
        None,
    )
    if version is None:
        return [f"version {names.VERSION}"]
    installed = ((version.get("schema") or {}).get("openAPIV3Schema")) or {}
    return missing_fields(openapi_schema(resource.model), installed)
