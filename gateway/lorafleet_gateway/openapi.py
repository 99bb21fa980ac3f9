"""The public API as an OpenAPI 3.0 document (`python -m lorafleet_gateway.openapi` prints it).

The public app is plain Starlette (see routes.py: the hot path parses its own body), so this
document is written by hand: the subset of OpenAI's API the gateway serves, with the fields it
checks itself typed strictly and the rest left open (the engine validates those). The fuzz
test (`tests/gateway/test_gateway_edge_fuzz.py`) drives schemathesis over it, authenticated.
"""

from __future__ import annotations

import json
from typing import Any

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": "string", "nullable": True},
                "code": {"type": "string", "nullable": True},
            },
        }
    },
}

_COMMON = {
    "model": {"type": "string", "minLength": 1, "maxLength": 256},
    "max_tokens": {"type": "integer", "minimum": 1, "maximum": 4096},
    "stream": {"type": "boolean"},
    "stream_options": {
        "type": "object",
        "properties": {"include_usage": {"type": "boolean"}},
    },
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "top_p": {"type": "number", "minimum": 0, "maximum": 1},
    "n": {"type": "integer", "enum": [1]},
    "stop": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
    "seed": {"type": "integer"},
    "user": {"type": "string"},
}

_MESSAGE = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"type": "string", "enum": ["system", "user", "assistant"]},
        "content": {"type": "string"},
    },
}


def _errors(*statuses: int) -> dict[str, Any]:
    body = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    return {str(s): {"description": "error", "content": body} for s in statuses}


def _completion_op(summary: str, schema: str) -> dict[str, Any]:
    return {
        "summary": summary,
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
        },
        "responses": {
            "200": {
                "description": "the completion (JSON, or SSE when stream is true)",
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
            **_errors(400, 401, 404, 408, 413, 429, 502, 503, 504),
        },
    }


OPENAPI: dict[str, Any] = {
    "openapi": "3.0.3",
    "info": {"title": "lorafleet gateway (public, OpenAI-compatible)", "version": "v1"},
    "security": [{"bearer": []}],
    "paths": {
        "/v1/chat/completions": {
            "post": _completion_op("Chat completion", "ChatCompletionRequest")
        },
        "/v1/completions": {"post": _completion_op("Text completion", "CompletionRequest")},
        "/v1/responses": {"post": _completion_op("Response (Responses API)", "ResponsesRequest")},
        "/v1/models": {
            "get": {
                "summary": "The caller's models",
                "responses": {
                    "200": {
                        "description": "list",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    **_errors(401, 429),
                },
            }
        },
        "/v1/models/{model}": {
            "get": {
                "summary": "One of the caller's models",
                "parameters": [
                    {"name": "model", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {
                    "200": {
                        "description": "model card",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    **_errors(401, 404, 429),
                },
            }
        },
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Error": _ERROR,
            "ChatCompletionRequest": {
                "type": "object",
                "required": ["model", "messages"],
                "properties": {
                    **_COMMON,
                    "messages": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": 256,
                        "items": _MESSAGE,
                    },
                },
            },
            "ResponsesRequest": {
                "type": "object",
                "required": ["model", "input"],
                "properties": {
                    "model": _COMMON["model"],
                    "stream": _COMMON["stream"],
                    "temperature": _COMMON["temperature"],
                    "top_p": _COMMON["top_p"],
                    "user": _COMMON["user"],
                    "max_output_tokens": {"type": "integer", "minimum": 1, "maximum": 4096},
                    "instructions": {"type": "string"},
                    "store": {"type": "boolean"},
                    "input": {
                        "oneOf": [
                            {"type": "string", "minLength": 1},
                            {"type": "array", "minItems": 1, "maxItems": 256, "items": _MESSAGE},
                        ]
                    },
                },
            },
            "CompletionRequest": {
                "type": "object",
                "required": ["model", "prompt"],
                "properties": {
                    **_COMMON,
                    "prompt": {
                        "oneOf": [
                            {"type": "string"},
                            {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": 1,
                                "items": {"type": "string"},
                            },
                            {"type": "array", "minItems": 1, "items": {"type": "integer"}},
                        ]
                    },
                },
            },
        },
    },
}


if __name__ == "__main__":
    print(json.dumps(OPENAPI, indent=2))
