"""Every string, list and map of lorafleet's own spec fields has a size bound in the CRD, so a
1 MB value is refused by the API server with a message naming the field, not stored whole
(etcd takes objects up to 1.5 MiB) and handed to the operator, the gateway and every agent.

The core/v1 types inside a pool's `template` and `engine.resources` are Kubernetes' own.
"""

from __future__ import annotations

from typing import Any

import pytest

from lorafleet_core.api.crd_validation import schema_of, validate

from .test_numeric_fields import EXAMPLES, FOREIGN, with_value

MEGABYTE = 1 << 20


def unbounded(node: dict[str, Any], path: tuple[str, ...]) -> list[str]:
    here = ".".join(path)
    kind = node.get("type")
    out = []
    if kind == "string" and not ({"maxLength", "enum"} & set(node) or "sha256" in str(node)):
        out.append(here)
    if kind == "array" and "maxItems" not in node:
        out.append(here)
    for name, sub in node.get("properties", {}).items():
        if name not in FOREIGN:
            out += unbounded(sub, (*path, name))
    if isinstance(node.get("items"), dict):
        out += unbounded(node["items"], (*path, "[]"))
    return out


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_every_string_and_list_of_a_spec_is_bounded(kind):
    """allowedTargetModules had no maxItems."""
    assert unbounded(schema_of(kind)["properties"]["spec"], ("spec",)) == []


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("LoRAAdapter", ("spec", "weightsUri")),
        ("LoRAAdapter", ("spec", "version")),
        ("AdapterAlias", ("spec", "model")),
        ("ReplicaPool", ("spec", "baseModel", "uri")),
        ("ReplicaPool", ("spec", "engine", "image")),
    ],
)
def test_a_megabyte_string_is_refused_naming_the_field(kind, path):
    obj = with_value(kind, path, "s3://x/" + "a" * MEGABYTE)
    errors = validate(schema_of(kind), obj)
    assert any(".".join(path) in e for e in errors), errors[:3]
    model = EXAMPLES[kind][0]
    with pytest.raises(ValueError, match=path[-1]):
        model.model_validate(obj)


def test_a_long_list_of_allowed_modules_is_refused():
    modules = [f"m{i}_proj" for i in range(100)]
    obj = with_value("ReplicaPool", ("spec", "engine", "allowedTargetModules"), modules)
    errors = validate(schema_of("ReplicaPool"), obj)
    assert any("allowedTargetModules" in e for e in errors), errors[:3]
