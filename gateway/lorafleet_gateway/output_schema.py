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
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from lorafleet_gateway.errors import APIError

_MAX_CHAIN = 64  # a longer $ref chain is refused as well: nothing legitimate needs one
MAX_CHOICES = 256  # labels of a classifier; more is a grammar no replica should compile
MAX_CONSTRAINT_CHARS = 32_768  # a choice list's total, a regex or a grammar


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


def check_output_constraints(body: dict[str, Any], kind: str) -> None:
    """Raise a 400 for a structured-output request the engine would answer with a 500."""
    if kind == "responses":
        text = body.get("text")
        fmt = text.get("format") if isinstance(text, dict) else None
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
            _check_ref_chains(fmt.get("schema"), "text.format.schema")
        return
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema")
        if isinstance(spec, dict):
            _check_ref_chains(spec.get("schema"), "response_format.json_schema.schema")
    if "structured_outputs" in body and body["structured_outputs"] is not None:
        outputs = body["structured_outputs"]
        if not isinstance(outputs, dict):
            raise _bad("'structured_outputs' must be an object.", "structured_outputs")
        if isinstance(outputs.get("json"), dict):
            _check_ref_chains(outputs["json"], "structured_outputs.json")
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
