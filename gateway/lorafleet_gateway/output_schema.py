"""Structured-output schemas the engine cannot compile, refused before they reach it.

vLLM compiles a JSON schema given in `response_format` (chat/completions), `text.format`
(Responses) or its own `structured_outputs` into a grammar. A schema whose `$ref` chain comes
back to itself without ever reaching a real schema (`{"$ref": "#"}`, or `a -> b -> a` in
`$defs`) makes the grammar compiler fail, and vLLM answers 500; so does `structured_outputs`
that is not an object. Both are the client's mistake, so the gateway answers 400 naming the
parameter instead of a 502 that blames the replica. Recursion *through* a schema (a linked
list's `next: {"$ref": "#"}`, a tree in `$defs`) compiles, and is passed on.

Size is bounded too: a 5,000-entry `structured_outputs.choice` list (540 KB) took vLLM
80-200 s to compile, and every other request on the replica waited 2-8 s meanwhile
(measured on the CPU stack). Choice lists, regexes and grammars past the bounds below are
refused with 400 `invalid_request`.

So are JSON schemas, through every door that reaches the compiler (`response_format`,
`structured_outputs.json` as an object or as JSON text, `structured_outputs.structural_tag`,
Responses `text.format`, and the `parameters` of `tools`, which `tool_choice` "required" or a
named function compiles): a `response_format` schema with a 5,000-value enum (540 KB)
took vLLM 79 s to compile, 5,000 optional properties (179 KB) 14 s, a 100 KB `pattern` 4.8 s
while a concurrent plain request waited 3 s; schemas of 32 KiB compiled in 0.3-0.9 s. A
schema is measured as its compact JSON text, descriptions included (they are rarely more
than a fraction of it).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote

from lorafleet_core.wire.strict_json import StrictJsonError, loads_strict
from lorafleet_gateway.errors import APIError

_MAX_CHAIN = 64  # a longer $ref chain is refused as well: nothing legitimate needs one
MAX_CHOICES = 256  # labels of a classifier; more is a grammar no replica should compile
MAX_CONSTRAINT_CHARS = 32_768  # a choice list's total, a regex or a grammar
MAX_SCHEMA_CHARS = 32_768  # one JSON schema (or all of a request's tool parameters), compact
_MAX_TEXT_DEPTH = 64  # a schema sent as JSON text: the body's own depth bound


def _bad(message: str, param: str) -> APIError:
    return APIError(400, message, param=param, code="invalid_schema")


def _resolve(root: Any, ref: str) -> Any:
    """The node a local `$ref` (`#`, `#/a/b`, with ~0/~1 escapes) points at; None if absent
    or not local (remote refs are the engine's to refuse)."""
    if not ref.startswith("#"):
        return None
    node = root
    pointer = unquote(ref[1:])
    if not pointer:
        return node
    if not pointer.startswith("/"):
        return None
    for raw in pointer[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _check_ref_chains(schema: Any, param: str) -> None:
    """Every `$ref` chain must end at a schema that is not itself only a reference back."""
    stack: list[Any] = [schema]
    while stack:  # iterative: the body's depth is bounded, but recursion is not needed
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        stack.extend(v for k, v in node.items() if k != "$ref")
        seen: list[int] = []
        current: Any = node
        while isinstance(current, dict) and isinstance(current.get("$ref"), str):
            if id(current) in seen or len(seen) >= _MAX_CHAIN:
                raise _bad(
                    f"The JSON schema in '{param}' has a $ref chain that refers back to "
                    f"itself ({current['$ref']}) without reaching a schema; the engine "
                    "cannot compile it. Recursion inside properties or items is fine.",
                    param,
                )
            seen.append(id(current))
            current = _resolve(schema, current["$ref"])


def _schema_chars(schema: Any) -> int:
    if isinstance(schema, str):
        return len(schema)
    return len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False))


def _check_schema_size(schema: Any, param: str, what: str = "The JSON schema") -> None:
    if schema is None:
        return
    size = _schema_chars(schema)
    if size > MAX_SCHEMA_CHARS:
        raise APIError(
            400,
            f"{what} in '{param}' is {size} characters of JSON; at most {MAX_SCHEMA_CHARS} "
            "are compiled (a larger one holds up the replica's other requests).",
            param=param,
            code="invalid_request",
        )


def _check_tools(tools: Any) -> None:
    """All of a request's tool parameter schemas together (the grammar of a forced call
    holds every tool)."""
    if not isinstance(tools, list):
        return  # validation (Responses) or the engine answers the shape
    schemas = []
    for tool in tools:
        spec = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(spec, dict) and spec.get("parameters") is not None:
            schemas.append(spec["parameters"])
    _check_schema_size(schemas or None, "tools", "The tools' parameter schemas")


def check_output_constraints(body: dict[str, Any], kind: str) -> None:
    """Raise a 400 for a structured-output request the engine would answer with a 500, or
    could not compile in reasonable time."""
    _check_tools(body.get("tools"))
    if kind == "responses":
        text = body.get("text")
        fmt = text.get("format") if isinstance(text, dict) else None
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            _check_schema_size(fmt.get("schema"), "text.format.schema")
            _check_ref_chains(fmt.get("schema"), "text.format.schema")
        return
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        if response_format.get("type") == "json_schema":
            spec = response_format.get("json_schema")
            if isinstance(spec, dict):
                param = "response_format.json_schema.schema"
                _check_schema_size(spec.get("schema"), param)
                _check_ref_chains(spec.get("schema"), param)
        elif response_format.get("type") == "structural_tag":  # schemas inside structures
            _check_schema_size(response_format, "response_format", "The structural tag")
    if "structured_outputs" in body and body["structured_outputs"] is not None:
        outputs = body["structured_outputs"]
        if not isinstance(outputs, dict):
            raise _bad("'structured_outputs' must be an object.", "structured_outputs")
        schema = outputs.get("json")
        _check_schema_size(schema, "structured_outputs.json")
        if isinstance(schema, str):  # vLLM also takes the schema as JSON text
            try:  # strict: JSON text nested 10,000 deep would be a RecursionError downstream
                schema = loads_strict(schema.encode(), _MAX_TEXT_DEPTH)
            except StrictJsonError as exc:
                param = "structured_outputs.json"
                raise _bad(f"'{param}': {exc.message}", param) from None
        if isinstance(schema, dict):
            _check_ref_chains(schema, "structured_outputs.json")
        tag = outputs.get("structural_tag")
        _check_schema_size(tag, "structured_outputs.structural_tag", "The structural tag")
        _check_sizes(outputs)


def _check_sizes(outputs: dict[str, Any]) -> None:
    choice = outputs.get("choice")
    if isinstance(choice, list):
        total = sum(len(c) for c in choice if isinstance(c, str))
        if len(choice) > MAX_CHOICES or total > MAX_CONSTRAINT_CHARS:
            raise APIError(
                400,
                f"'structured_outputs.choice' is limited to {MAX_CHOICES} entries and "
                f"{MAX_CONSTRAINT_CHARS} characters in all (got {len(choice)}, {total}).",
                param="structured_outputs.choice",
                code="invalid_request",
            )
    for key in ("regex", "grammar"):
        value = outputs.get(key)
        if isinstance(value, str) and len(value) > MAX_CONSTRAINT_CHARS:
            raise APIError(
                400,
                f"'structured_outputs.{key}' is limited to {MAX_CONSTRAINT_CHARS} characters "
                f"(got {len(value)}).",
                param=f"structured_outputs.{key}",
                code="invalid_request",
            )
