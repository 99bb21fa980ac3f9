"""Generate `crds/*.yaml` (apiextensions.k8s.io/v1) from the pydantic models.

    python -m lorafleet_core.api.crds [--out crds] [--check]
    lorafleet crds [--out crds]

Kubernetes wants a *structural* OpenAPI v3.0 schema, which is stricter than the JSON Schema
pydantic emits. The conversion below:

- inlines every `$ref` (the API server resolves none); a field's own description wins over
  the referenced class docstring;
- turns `anyOf [X, {type: null}]` (pydantic's `X | None`) into X: an absent field is how
  Kubernetes spells "unset", and null values are pruned, so `nullable` is only emitted where a
  model asks for it (`json_schema_extra={"nullable": True}`);
- drops `title`s and `additionalProperties: false` (unknown fields are pruned instead), turns
  `additionalProperties: true` into `x-kubernetes-preserve-unknown-fields`, JSON Schema 2020's
  numeric `exclusiveMinimum: n` into OAS 3.0's `minimum: n, exclusiveMinimum: true`, and
  `const` into a one-value `enum`;
- keeps descriptions (so `kubectl explain` is useful), patterns, bounds, defaults, formats and
  every `x-kubernetes-*` extension (list types, CEL validations). Defaults made by a
  `default_factory` (lists, nested objects) are not in the schema, so the API server stores
  only what the user wrote; the models fill them in when a component reads the object;
- inlines Kubernetes' own schema for fields that mirror a core/v1 Pod field (the replica pod
  template: tolerations, affinity, env, volumes, ...; see `kube_schemas`);
- refuses (ValueError) anything it cannot express structurally, instead of writing a CRD the
  API server would reject at install time.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from lorafleet_core.api import kube_schemas, names
from lorafleet_core.api.crd_resources import RESOURCES, PrinterColumn, ResourceKind

Schema = dict[str, Any]

# The JSONSchemaProps fields the generator may emit; anything else is a bug caught at generation.
_ALLOWED_KEYS = frozenset(
    {
        "type",
        "description",
        "properties",
        "required",
        "items",
        "additionalProperties",
        "enum",
        "default",
        "format",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "nullable",
        "x-kubernetes-validations",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
        "x-kubernetes-embedded-resource",
    }
)
# Keys that only matter to pydantic's JSON Schema and have no meaning in a CRD.
_DROPPED_KEYS = frozenset({"title", "examples", "$defs", "readOnly", "writeOnly", "deprecated"})

_RULES = "x-kubernetes-validations"
_INT_OR_STRING = "x-kubernetes-int-or-string"
_API_VERSION_DESCRIPTION = (
    "APIVersion defines the versioned schema of this representation of an object. "
    "Servers should convert recognized schemas to the latest internal value, and may reject "
    "unrecognized values."
)
_KIND_DESCRIPTION = (
    "Kind is a string value representing the REST resource this object represents. In CamelCase."
)
_METADATA_DESCRIPTION = "Standard object metadata."

__all__ = ["RESOURCES", "PrinterColumn", "ResourceKind", "crd_manifest", "generate", "render"]


# ---------------------------------------------------------------------------------------------
# JSON Schema (pydantic) -> structural OpenAPI v3.0 (Kubernetes)


def _merge(inner: Schema, outer: Schema) -> Schema:
    """`inner` (a class's schema) under `outer` (the field's keys): the field's keys win, except
    that CEL rules from both places all apply."""
    merged = {**inner, **outer}
    rules = [*inner.get(_RULES, []), *outer.get(_RULES, [])]
    if rules:
        merged[_RULES] = rules
    return merged


def _resolve(node: Schema, defs: dict[str, Schema]) -> Schema:
    """Replace `$ref` / single-branch `allOf` / `anyOf [X, null]` by X, keeping outer keys."""
    while True:
        if node.get(_INT_OR_STRING):
            return node  # its anyOf integer/string is the structural form itself
        if "$ref" in node:
            ref = node["$ref"]
            prefix = "#/$defs/"
            if not ref.startswith(prefix) or ref[len(prefix) :] not in defs:
                raise ValueError(f"unresolvable $ref {ref!r}")
            outer = {k: v for k, v in node.items() if k != "$ref"}
            node = _merge(copy.deepcopy(defs[ref[len(prefix) :]]), outer)
            continue
        for key in ("anyOf", "oneOf", "allOf"):
            if key in node:
                branches = [b for b in node[key] if b != {"type": "null"}]
                if len(branches) != 1:
                    raise ValueError(
                        f"{key} with {len(branches)} non-null branches is not structural; "
                        "use one type per field"
                    )
                outer = {k: v for k, v in node.items() if k != key}
                if outer.get("default", ...) is None:
                    del outer["default"]
                node = _merge(branches[0], outer)
                break
        else:
            return node


def _structural(node: Schema, defs: dict[str, Schema], path: str) -> Schema:
    node = _resolve(node, defs)
    if kube_schemas.KUBE_FIELD in node:
        # A field that mirrors a core/v1 Pod field takes Kubernetes' own schema.
        return kube_schemas.structural_field(node)
    out: Schema = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "default" and value is None:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        elif key == "properties":
            out[key] = {
                name: _structural(sub, defs, f"{path}.{name}") for name, sub in value.items()
            }
        elif key == "items":
            out[key] = _structural(value, defs, f"{path}[]")
        elif key == "additionalProperties":
            if value is False:
                continue  # extra="forbid": the API server prunes unknown fields instead.
            if value is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
            else:
                out[key] = _structural(value, defs, f"{path}{{}}")
        elif key in _ALLOWED_KEYS or (key == "anyOf" and node.get(_INT_OR_STRING)):
            out[key] = copy.deepcopy(value)
        else:
            raise ValueError(f"{path}: schema keyword {key!r} has no CRD equivalent")
    if "type" not in out and not out.get(_INT_OR_STRING):
        raise ValueError(f"{path}: every node of a structural schema needs a type")
    if out.get("x-kubernetes-preserve-unknown-fields") and out["type"] == "object":
        out.pop("additionalProperties", None)  # preserve-unknown-fields already says it all.
    return out


def openapi_schema(model: type[BaseModel]) -> Schema:
    """The structural openAPIV3Schema of a whole resource (apiVersion, kind, metadata, ...)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs: dict[str, Schema] = raw.get("$defs", {})
    schema = _structural(raw, defs, "")
    props = schema["properties"]
    # The API server owns these three; restricting metadata beyond name is not allowed.
    props["apiVersion"] = {"type": "string", "description": _API_VERSION_DESCRIPTION}
    props["kind"] = {"type": "string", "description": _KIND_DESCRIPTION}
    props["metadata"] = {"type": "object", "description": _METADATA_DESCRIPTION}
    if name_schema := getattr(model, "metadata_name_schema", None):
        props["metadata"]["properties"] = {"name": {"type": "string", **name_schema}}
    schema["required"] = [r for r in schema.get("required", []) if r not in ("metadata",)]
    return schema


def crd_manifest(resource: ResourceKind) -> Schema:
    """The CustomResourceDefinition object for one kind."""
    subresources: Schema = {"status": {}}
    if resource.scale is not None:
        subresources["scale"] = dict(resource.scale)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": resource.crd_name,
            "labels": {"app.kubernetes.io/part-of": "lorafleet"},
        },
        "spec": {
            "group": names.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": resource.kind,
                "listKind": f"{resource.kind}List",
                "plural": resource.plural,
                "singular": resource.kind.lower(),
                "shortNames": list(resource.short_names),
                "categories": [names.CATEGORY],
            },
            "versions": [
                {
                    "name": names.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": openapi_schema(resource.model)},
                    "subresources": subresources,
                    "additionalPrinterColumns": [c.manifest() for c in resource.columns],
                }
            ],
        },
    }


_HEADER = (
    "# Generated by `lorafleet crds` (lorafleet_core.api.crds) from lorafleet_core.api.models.\n"
    "# Do not edit: change the models and regenerate; a test fails when this file drifts.\n"
)


class _Dumper(yaml.SafeDumper):
    """SafeDumper writing multi-line strings (class docstrings) as readable `|` blocks."""


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_presenter)


def render(resource: ResourceKind) -> str:
    """The YAML text of one CRD file, byte-for-byte deterministic."""
    body = yaml.dump(
        crd_manifest(resource),
        Dumper=_Dumper,
        sort_keys=True,
        width=100,
        default_flow_style=False,
    )
    return _HEADER + "---\n" + body


def generate() -> dict[str, str]:
    """File name -> YAML text for every CRD."""
    return {r.file_name: render(r) for r in RESOURCES}


def write_crds(out_dir: str | Path) -> list[Path]:
    """Write every CRD into `out_dir` (created if missing); returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for file_name, text in generate().items():
        path = out / file_name
        path.write_text(text)
        written.append(path)
    return written


def stale_files(out_dir: str | Path) -> list[str]:
    """Names of CRD files in `out_dir` that are missing or differ from what the models give."""
    out = Path(out_dir)
    return [
        name
        for name, text in generate().items()
        if not (out / name).is_file() or (out / name).read_text() != text
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lorafleet_core.api.crds", description=__doc__)
    parser.add_argument("--out", default="crds", help="output folder (default: crds)")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when files are stale"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.out)
        for name in stale:
            print(f"stale: {Path(args.out) / name} (run `lorafleet crds`)", file=sys.stderr)
        return 1 if stale else 0
    for path in write_crds(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
