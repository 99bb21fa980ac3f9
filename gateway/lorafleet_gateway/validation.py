"""Request validation: what the gateway must check before it spends anything on a request.

Only the fields the gateway relies on are checked strictly (model, stream, stream_options,
max_tokens, messages/prompt shape and size); everything else is passed to the engine, which
validates it and answers 400 in the same OpenAI format. Parsing is plain `json.loads` on
purpose: a pydantic model per request would cost more than the rest of the gateway's logic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from lorafleet_core.tokens import DEFAULT_MAX_TOKENS, prompt_tokens, text_chars
from lorafleet_gateway.errors import APIError


@dataclass(frozen=True, slots=True)
class Bounds:
    max_body_bytes: int = 1_048_576
    max_tokens_limit: int = 4096
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    max_messages: int = 256


@dataclass(slots=True)
class CompletionRequest:
    kind: str  # "chat" | "completion"
    body: dict[str, Any]
    model: str
    stream: bool
    include_usage: bool
    max_tokens: int  # requested, or the default assumed for the estimate
    prompt_tokens_estimate: int

    @property
    def tokens_estimate(self) -> int:
        """The request's size (lorafleet_core.tokens); the agent is told the same figure."""
        return self.prompt_tokens_estimate + self.max_tokens


def _bad(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def _check_messages(messages: Any, bounds: Bounds) -> int:
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty array.", "messages")
    if len(messages) > bounds.max_messages:
        raise _bad(f"'messages' has more than {bounds.max_messages} items.", "messages")
    chars = 0
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise _bad(f"'messages[{i}]' must be an object with a string 'role'.", "messages")
        content = msg.get("content")
        if content is not None and not isinstance(content, str | list):
            raise _bad(f"'messages[{i}].content' must be a string or an array.", "messages")
        chars += text_chars(content)
    return chars


def _check_prompt(prompt: Any) -> int:
    if isinstance(prompt, str) or (
        isinstance(prompt, list)
        and prompt
        and (
            all(isinstance(p, str) for p in prompt)
            or all(isinstance(p, int) and not isinstance(p, bool) for p in prompt)
        )
    ):
        return text_chars(prompt)
    raise _bad("'prompt' must be a string, an array of strings or an array of tokens.", "prompt")


def parse_request(raw: bytes, kind: str, bounds: Bounds) -> CompletionRequest:
    """Parse and check a completion body; raises APIError (400/413) with OpenAI wording."""
    if len(raw) > bounds.max_body_bytes:
        raise APIError(
            413, f"Request body exceeds {bounds.max_body_bytes} bytes.", code="request_too_large"
        )
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise _bad(
            "We could not parse the JSON body of your request. (HINT: This likely means you "
            "aren't using your HTTP library correctly.)",
            code="invalid_json",
        ) from None
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.", code="invalid_json")

    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("you must provide a model parameter", "model", "missing_required_parameter")

    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("'stream' must be a boolean.", "stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise _bad("'stream_options' must be an object.", "stream_options")
        if not stream:
            raise _bad("'stream_options' is only allowed when 'stream' is true.", "stream_options")
        include_usage = options.get("include_usage") is True

    max_tokens = bounds.default_max_tokens
    for param in ("max_tokens", "max_completion_tokens"):
        value = body.get(param)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise _bad(f"'{param}' must be an integer.", param)
        if not 1 <= value <= bounds.max_tokens_limit:
            raise _bad(f"'{param}' must be between 1 and {bounds.max_tokens_limit}.", param)
        max_tokens = value

    n = body.get("n", 1)
    if n is not None and n != 1:
        raise _bad("Only n=1 is supported.", "n")

    if kind == "chat":
        chars = _check_messages(body.get("messages"), bounds)
    else:
        chars = _check_prompt(body.get("prompt"))
    return CompletionRequest(
        kind=kind,
        body=body,
        model=model,
        stream=stream,
        include_usage=include_usage,
        max_tokens=max_tokens,
        prompt_tokens_estimate=prompt_tokens(chars),
    )
