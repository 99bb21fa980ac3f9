"""core/v1 schemas for the CRD fields that embed Kubernetes types (a pool's pod template).

A ReplicaPool carries tolerations, affinity, env, volumes, ... for its replica pods. Declaring
them `x-kubernetes-preserve-unknown-fields` would let a typo (`tolerations[0].efect`) through to
a StatefulSet the API server then prunes silently. Instead the pydantic field names the
Kubernetes field it mirrors (`kube_field("PodSpec", "tolerations")`) and CRD generation inlines
that field's schema from the OpenAPI definitions `kubernetes-validate` ships offline in its
package data, converted to a structural CRD schema:

- `$ref`s are inlined (none of the pod-template types are recursive; a cycle would raise);
- `type: [X, "null"]` becomes X (absent is how Kubernetes spells unset);
- `Quantity` and `IntOrString` become `x-kubernetes-int-or-string` (`anyOf` integer/string),
  quantities with the API server's own syntax pattern, so `"1 GPU"` is refused at apply time;
- `additionalProperties: false` is dropped (the API server prunes), patch-strategy and GVK
  extensions are dropped (they mean nothing in a CRD);
- a map-list key that is neither required nor defaulted becomes required (a structural CRD
  demands it; e.g. an imagePullSecrets entry without a name is useless anyway).

The pinned version is the oldest cluster lorafleet supports; newer clusters accept the same
objects. Only CRD generation imports this (and needs `kubernetes-validate`): the models only
carry the marker.
"""

from __future__ import annotations

import copy
import functools
import json
from importlib import resources
from typing import Any

Schema = dict[str, Any]

KUBE_SCHEMA_VERSION = "1.30.0"
# The marker a pydantic field carries in its json_schema_extra: "PodSpec/tolerations".
KUBE_FIELD = "x-lorafleet-kube-field"

_CORE_V1 = "io.k8s.api.core.v1."
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
# The API server's resource.Quantity syntax (what controller-gen emits for Quantity fields).
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_KEPT = frozenset(
    {
        "description",
        "required",
        "enum",
        "format",
        "default",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
    }
)
_DROPPED = frozenset(
    {
        "additionalProperties",  # handled below
        "x-kubernetes-patch-strategy",
        "x-kubernetes-patch-merge-key",
        "x-kubernetes-group-version-kind",
        "x-kubernetes-unions",
        "uniqueItems",
    }
)


# Per-item string bounds layered on a list field's Kubernetes schema (see kube_field).
ITEM_MAX_LENGTHS = "x-lorafleet-item-max-lengths"


def kube_field(
    kind: str,
    field: str,
    *,
    rules: list[dict[str, str]] | None = None,
    item_max_lengths: dict[str, int] | None = None,
) -> dict[str, Any]:
    """json_schema_extra for a pydantic field that mirrors core/v1 `kind`.`field`.

    `rules`: CEL rules on the field (a model validator's mirror). The API server estimates a
    rule's cost from the bounds of what it reads, and core/v1 leaves most strings unbounded:
    `item_max_lengths` bounds the item properties a rule reads (e.g. a Volume's name, which
    Kubernetes itself limits to 63)."""
    out: dict[str, Any] = {KUBE_FIELD: f"{kind}/{field}"}
    if rules:
        out["x-kubernetes-validations"] = rules
    if item_max_lengths:
        out[ITEM_MAX_LENGTHS] = item_max_lengths
    return out


@functools.lru_cache(maxsize=1)
def _definitions() -> dict[str, Schema]:
    root = resources.files("kubernetes_validate") / "kubernetes-json-schema"
    text = (root / f"v{KUBE_SCHEMA_VERSION}-local" / "_definitions.json").read_text()
    defs: dict[str, Schema] = json.loads(text)["$defs"]
    return defs


def field_schema(ref: str) -> Schema:
    """The structural CRD schema of core/v1 field `ref` ("PodSpec/tolerations")."""
    kind, _, field = ref.partition("/")
    owner = _definitions().get(_CORE_V1 + kind)
    if owner is None or field not in owner.get("properties", {}):
        raise ValueError(f"no core/v1 field {ref!r} in Kubernetes {KUBE_SCHEMA_VERSION}")
    return _convert(owner["properties"][field], (ref,))


def _int_or_string(quantity: bool) -> Schema:
    out: Schema = {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
    }
    if quantity:
        out["pattern"] = QUANTITY_PATTERN
    return out


def _convert(node: Schema, stack: tuple[str, ...]) -> Schema:
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        outer = {k: v for k, v in node.items() if k != "$ref"}
        if name in (_QUANTITY, _INT_OR_STRING):
            return {**_keep(outer), **_int_or_string(name == _QUANTITY)}
        if name in stack:
            raise ValueError(f"recursive Kubernetes type {name} via {' -> '.join(stack)}")
        inner = copy.deepcopy(_definitions()[name])
        # The field's own description says more about this use than the type's docstring.
        return _convert({**inner, **outer}, (*stack, name))
    out = _keep(node)
    kind = node.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1:
            raise ValueError(f"{stack[-1]}: {kind} is not one structural type")
        kind = kinds[0]
    if kind is None:
        raise ValueError(f"{stack[-1]}: a node without a type is not structural")
    out["type"] = kind
    if "properties" in node:
        out["properties"] = {k: _convert(v, stack) for k, v in node["properties"].items()}
    if "items" in node:
        out["items"] = _convert(node["items"], stack)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out["additionalProperties"] = _convert(extra, stack)
    elif extra is True or (kind == "object" and "properties" not in node and extra is None):
        # A free-form object in Kubernetes itself (FieldsV1, RawExtension): nothing to check.
        out["x-kubernetes-preserve-unknown-fields"] = True
    unknown = set(node) - _KEPT - _DROPPED - {"type", "properties", "items", "$ref"}
    if unknown:
        raise ValueError(f"{stack[-1]}: schema keys {sorted(unknown)} have no CRD equivalent")
    if out.get("x-kubernetes-list-type") == "map":
        _require_map_keys(out)
    return out


def _keep(node: Schema) -> Schema:
    return {k: copy.deepcopy(v) for k, v in node.items() if k in _KEPT}


def _require_map_keys(array: Schema) -> None:
    items = array["items"]
    required = list(items.get("required", []))
    for key in array.get("x-kubernetes-list-map-keys", []):
        if key not in required and "default" not in items["properties"].get(key, {}):
            required.append(key)
    items["required"] = required


def structural_field(node: Schema) -> Schema:
    """A pydantic node carrying KUBE_FIELD -> the Kubernetes schema, with the node's own
    description and bounds (maxItems, ...) layered on top."""
    out = field_schema(node[KUBE_FIELD])
    for key in ("description", "maxItems", "maxProperties", "x-kubernetes-validations"):
        if key in node:
            out[key] = copy.deepcopy(node[key])
    for prop, bound in node.get(ITEM_MAX_LENGTHS, {}).items():
        out["items"]["properties"][prop]["maxLength"] = bound
    return out
