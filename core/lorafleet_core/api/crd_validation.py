"""Validate a manifest the way the API server would, offline: defaults, schema, then CEL.

Used by the tests (examples and bad manifests) and usable by standalone mode and the CLI, where
no API server checks what a user wrote. Needs `openapi-schema-validator` and `cel-python`
(imported lazily, so importing lorafleet_core never requires them).

What the API server does, and this module mirrors:
1. apply `default`s of absent properties (only inside objects that are present);
2. check the OpenAPI v3.0 schema (types, patterns, bounds, enums, required);
3. evaluate every `x-kubernetes-validations` rule with `self` bound to the value at its node,
   and `oldSelf` to the old value at the same path on update. Rules that mention `oldSelf`
   (transition rules) are skipped on create and where no old value exists.

Messages read like the API server's: `spec.rank: 0 is less than the minimum of 1`,
`spec: spec is immutable: ... (rule: self == oldSelf)`.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from typing import Any

Schema = dict[str, Any]

_MISSING = object()


def schema_of(kind: str) -> Schema:
    """The generated openAPIV3Schema for a kind (LoRAAdapter, AdapterAlias, ReplicaPool)."""
    from lorafleet_core.api.crds import RESOURCES, openapi_schema

    for resource in RESOURCES:
        if resource.kind == kind:
            return openapi_schema(resource.model)
    raise KeyError(f"unknown kind {kind!r}")


def apply_defaults(schema: Schema, obj: Any) -> Any:
    """A copy of `obj` with the schema's defaults filled in, as the API server stores it."""
    obj = copy.deepcopy(obj)
    _fill_defaults(schema, obj)
    return obj


def _fill_defaults(schema: Schema, value: Any) -> None:
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                _fill_defaults(sub, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                if key not in schema.get("properties", {}):
                    _fill_defaults(extra, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _fill_defaults(schema["items"], item)


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<root>"


@functools.lru_cache(maxsize=1)
def _validator_class() -> Any:
    r"""OAS 3.0 validator whose `pattern` follows Go's RE2 as the API server does.

    Python's `$` also matches before a trailing newline, so "acme\n" would pass
    `^[a-z0-9]...$` here while the API server (and pydantic) refuse it; `\Z` is Go's `$`.
    """
    import re

    from jsonschema import ValidationError, validators  # type: ignore[import-untyped]
    from openapi_schema_validator import OAS30Validator

    def pattern(validator: Any, patrn: str, instance: Any, schema: Schema) -> Any:
        go_like = re.sub(r"(?<!\\)\$", r"\\Z", patrn)
        if validator.is_type(instance, "string") and not re.search(go_like, instance):
            yield ValidationError(f"{instance!r} does not match {patrn!r}")

    return validators.extend(OAS30Validator, {"pattern": pattern})


def schema_errors(schema: Schema, obj: Any) -> list[str]:
    """OpenAPI v3.0 schema violations, one message per problem, sorted by path."""
    validator = _validator_class()(schema)
    errors = sorted(validator.iter_errors(obj), key=lambda e: (list(map(str, e.path)), e.message))
    out = [f"{_path(e.path)}: {_bounded(e.message)}" for e in errors]
    _list_type_errors(schema, obj, [], out)
    return out


MAX_MESSAGE = 400  # jsonschema quotes the whole value: a 100k-item list is a 1 MB message


def _bounded(message: str) -> str:
    if len(message) <= MAX_MESSAGE:
        return message
    half = MAX_MESSAGE // 2
    return f"{message[:half]} ... ({len(message) - MAX_MESSAGE} characters) ... {message[-half:]}"


def _list_type_errors(schema: Schema, value: Any, path: list[Any], out: list[str]) -> None:
    """What `x-kubernetes-list-type` adds: sets hold no duplicates, map lists no duplicate keys."""
    if isinstance(value, dict):
        props: dict[str, Schema] = schema.get("properties", {})
        for key, item in value.items():
            if key in props:
                _list_type_errors(props[key], item, [*path, key], out)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        list_type = schema.get("x-kubernetes-list-type")
        keys: list[Any] = []
        if list_type == "set":
            keys = list(value)
        elif list_type == "map":
            keys = [_map_key(schema, v) for v in value if isinstance(v, dict)]
        seen: set[str] = set()  # canonical JSON: keys may be lists or objects (unhashable)
        for i, key in enumerate(keys):
            canonical = json.dumps(key, sort_keys=True, default=repr)
            if canonical in seen:
                out.append(f"{_path([*path, i])}: Duplicate value: {key!r}")
            seen.add(canonical)
        for i, item in enumerate(value):
            _list_type_errors(schema["items"], item, [*path, i], out)


def _substring(text: Any, start: Any, end: Any = None) -> Any:
    """Kubernetes' `string.substring(start[, end])` (cel-go ext.Strings, which the API server
    enables): code-point indices, an error when out of range."""
    from celpy import celtypes

    stop = len(text) if end is None else int(end)
    if not 0 <= int(start) <= stop <= len(text):
        raise ValueError(f"substring({start}, {end}) out of range for a string of {len(text)}")
    return celtypes.StringType(str(text)[int(start) : stop])


def _sum(items: Any) -> Any:
    """Kubernetes' list `sum()` (k8s.io/apiserver/pkg/cel/library/lists.go) over integers."""
    from celpy import celtypes

    return celtypes.IntType(sum(int(i) for i in items))


# The Kubernetes CEL library functions the rules use that cel-python lacks.
K8S_FUNCTIONS: dict[str, Any] = {"substring": _substring, "sum": _sum}


@functools.lru_cache(maxsize=256)
def _program(rule: str) -> Any:
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(rule), functions=K8S_FUNCTIONS)


def _is_transition_rule(rule: str) -> bool:
    return "oldSelf" in rule


def _evaluate(rule: str, value: Any, old: Any) -> tuple[bool, str | None]:
    """(passed, evaluation error or None) for one rule."""
    import celpy

    try:
        activation = {"self": celpy.json_to_cel(value)}
        if old is not _MISSING:
            activation["oldSelf"] = celpy.json_to_cel(old)
    except ValueError as exc:  # an integer beyond CEL's int64: the API server refuses it too
        return False, f"not a CEL value: {exc}"
    try:
        result = _program(rule).evaluate(activation)
    except celpy.CELEvalError as exc:
        return False, str(exc.args[0] if exc.args else exc)
    if isinstance(result, celpy.CELEvalError):
        return False, str(result.args[0] if result.args else result)
    return bool(result), None


def cel_errors(schema: Schema, obj: Any, old: Any = _MISSING) -> list[str]:
    """Messages of the `x-kubernetes-validations` rules that fail for `obj`.

    Pass `old` (the stored object) to check an update; transition rules run only then.
    """
    out: list[str] = []
    _walk_cel(schema, obj, old, [], out)
    return out


def _walk_cel(schema: Schema, value: Any, old: Any, path: list[Any], out: list[str]) -> None:
    for check in schema.get("x-kubernetes-validations", []):
        rule = str(check["rule"])
        if _is_transition_rule(rule) and old is _MISSING:
            continue
        passed, error = _evaluate(rule, value, old)
        if not passed:
            message = check.get("message") or f"failed rule: {rule}"
            detail = f"{message} (rule: {rule})"
            if error is not None:
                detail += f" [evaluation error: {error}]"
            out.append(f"{_path(path)}: {detail}")
    if isinstance(value, dict):
        props: dict[str, Schema] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is None:
                continue
            old_item = old.get(key, _MISSING) if isinstance(old, dict) else _MISSING
            _walk_cel(sub, item, old_item, [*path, key], out)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        items: Schema = schema["items"]
        old_by_key = _correlate(schema, old)
        for i, item in enumerate(value):
            old_item = _MISSING
            if old_by_key is not None and isinstance(item, dict):
                old_item = old_by_key.get(_map_key(schema, item), _MISSING)
            _walk_cel(items, item, old_item, [*path, i], out)


def _map_key(schema: Schema, item: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(item.get(k) for k in schema.get("x-kubernetes-list-map-keys", []))


def _correlate(schema: Schema, old: Any) -> dict[tuple[Any, ...], Any] | None:
    """Old items by map key: only `map` lists correlate items across an update."""
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(old, list):
        return None
    return {_map_key(schema, o): o for o in old if isinstance(o, dict)}


def unknown_fields(schema: Schema, obj: Any, path: list[Any] | None = None) -> list[str]:
    """Fields the schema does not declare, which the API server prunes from what it stores
    (and `kubectl apply`, with its default strict field validation, refuses outright). The
    operator, reading manifests or an emulator that does not prune, refuses them too."""
    path = path or []
    out: list[str] = []
    if isinstance(obj, dict) and not schema.get("x-kubernetes-preserve-unknown-fields"):
        props: dict[str, Schema] = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, value in obj.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if path == [] and key == "metadata":
                continue  # the API server's own; a CRD may only restrict metadata.name
            if sub is None:
                if props and not (path == [] and key in ("apiVersion", "kind")):
                    out.append(f"{_path([*path, key])}: unknown field")
                continue
            out += unknown_fields(sub, value, [*path, key])
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            out += unknown_fields(schema["items"], item, [*path, i])
    return out


INT64_MAX = 2**63 - 1


def json_errors(value: Any, path: list[Any] | None = None) -> list[str]:
    """Numbers the API server never receives as such: NaN and infinities (JSON has none, so
    `kubectl` refuses the YAML's `.nan`), and integers beyond int64 (its decoder reads them as
    floats, which `type: integer` then refuses). YAML read offline carries both."""
    path = path or []
    if isinstance(value, dict):
        return [e for k, v in value.items() for e in json_errors(v, [*path, k])]
    if isinstance(value, list):
        return [e for i, v in enumerate(value) for e in json_errors(v, [*path, i])]
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{_path(path)}: {value} is not a JSON number"]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX:
        return [f"{_path(path)}: {value} is beyond int64: must be of type integer"]
    return []


def validate(schema: Schema, obj: Any, old: Any = None) -> list[str]:
    """Every problem the API server would report for a create (old=None) or an update."""
    if errors := json_errors(obj):
        return errors  # the request never gets as far as the schema
    new = apply_defaults(schema, obj)
    errors = schema_errors(schema, new)
    previous = _MISSING if old is None else apply_defaults(schema, old)
    errors += cel_errors(schema, new, previous)
    return errors
