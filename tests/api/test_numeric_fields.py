"""Every number in a lorafleet spec, NaN, infinite, negative, huge: the model and the CRD (its
schema as the API server applies it) both refuse, with a message naming the field.

The core/v1 types inside a pool's `template` and `engine.resources` are Kubernetes' own schemas
and are left out.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from lorafleet_core.api.crd_validation import INT64_MAX, schema_of, validate
from lorafleet_core.api.models import AdapterAlias, LoRAAdapter, ReplicaPool

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = {
    "ReplicaPool": (ReplicaPool, REPO / "examples" / "replicapool.yaml"),
    "LoRAAdapter": (LoRAAdapter, REPO / "examples" / "loraadapter-acme-support-v1.yaml"),
    "AdapterAlias": (AdapterAlias, REPO / "examples" / "adapteralias.yaml"),
}
FOREIGN = ("template", "resources")  # Kubernetes' own types


Field = tuple[tuple[str, ...], Any]


def numeric_fields(node: dict[str, Any], path: tuple[str, ...]) -> list[Field]:
    if node.get("type") in ("integer", "number"):
        return [(path, node)]
    return [
        found
        for name, sub in node.get("properties", {}).items()
        if name not in FOREIGN
        for found in numeric_fields(sub, (*path, name))
    ]


def cases() -> list[Any]:
    out = []
    for kind in EXAMPLES:
        spec = schema_of(kind)["properties"]["spec"]
        for path, node in numeric_fields(spec, ("spec",)):
            out.append(pytest.param(kind, path, node, id=f"{kind}.{'.'.join(path)}"))
    return out


def with_value(kind: str, path: tuple[str, ...], value: Any) -> dict[str, Any]:
    obj: dict[str, Any] = copy.deepcopy(yaml.safe_load(EXAMPLES[kind][1].read_text()))
    target = obj
    for key in path[:-1]:
        target = target.setdefault(key, {})
    target[path[-1]] = value
    return obj


def model_error(model: type[BaseModel], obj: dict[str, Any]) -> str | None:
    try:
        model.model_validate(obj)
    except ValidationError as exc:
        return str(exc)
    return None


def test_every_kind_has_numeric_fields_under_test():
    kinds = {c.values[0] for c in cases()}
    assert kinds == {"ReplicaPool", "LoRAAdapter", "AdapterAlias"}


@pytest.mark.parametrize(("kind", "path", "node"), cases())
def test_every_numeric_spec_field_is_bounded_below_int64(kind, path, node):
    """Without a maximum the model took 10^30 (and a cluster anything up to 9.2e18: a
    --max-model-len no engine starts with, a disk budget no disk has)."""
    assert "minimum" in node, path
    assert "maximum" in node, path
    assert node["maximum"] <= INT64_MAX, path


@pytest.mark.parametrize(("kind", "path", "node"), cases())
def test_nan_infinite_negative_and_huge_are_refused_by_model_and_crd(kind, path, node):
    model = EXAMPLES[kind][0]
    schema = schema_of(kind)
    field = path[-1]
    for value in (math.nan, math.inf, -math.inf, -1, 2**63, node["maximum"] * 2 + 1):
        obj = with_value(kind, path, value)
        message = model_error(model, obj)
        assert message is not None, (path, value)
        assert field in message, message
        crd = validate(schema, obj)
        assert crd, (path, value)
        assert any(".".join(path) in e for e in crd), crd
    # The bounds themselves are values both take (replicas.min <= replicas.max: both set).
    for value in (node["maximum"], node["minimum"] + (1 if node.get("exclusiveMinimum") else 0)):
        obj = with_value(kind, path, value)
        if path[-2] == "replicas" and field in ("min", "max"):
            obj["spec"]["replicas"] = {"min": value, "max": max(value, 1)}
        assert model_error(model, obj) is None, (path, value)
        assert validate(schema, obj) == [], (path, value)
