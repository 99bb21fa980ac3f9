"""The one token estimate of a completion request: prompt tokens (estimated) + max_tokens.

Every figure that sizes a request by tokens uses it: the gateway's tokens-per-minute limiter and
its router's tokens in flight, and the agent's tokens in flight (which the autoscaler scales
on). The gateway computes it once per request and passes it to the agent in the
`HEADER_TOKENS_ESTIMATE` header (lorafleet_core.wire.headers), so both count the same number; the
agent falls back to this module only for a request that comes without it.

The rule: the characters of the prompt's text (message contents and the calls in assistant
messages' `tool_calls`, the completion prompt, or a Responses request's instructions and
input; a token id counts as one token), plus the tool definitions (`tools`, `functions`) as
the JSON text the chat template renders into the prompt, divided by
`CHARS_PER_TOKEN`, plus one, plus the request's `max_completion_tokens` / `max_tokens` /
`max_output_tokens`, or `DEFAULT_MAX_TOKENS` when it sets none, once per choice (`n`): the
engine reads the prompt once and generates every choice, which is how its `usage` counts them
too. Without the model's tokenizer ~4 characters a token is the usual figure for English text
with a BPE tokenizer; the gateway reconciles its limiter with the real usage when the answer ends.
"""

from __future__ import annotations

import json
from typing import Any, Final

CHARS_PER_TOKEN: Final = 4
DEFAULT_MAX_TOKENS: Final = 256  # assumed output length when a request sets no max_tokens
# The parameters that bound a request's output, by endpoint: chat and completions take the
# first two, the Responses API the third.
MAX_TOKENS_PARAMS: Final = ("max_completion_tokens", "max_tokens", "max_output_tokens")


def text_chars(value: Any) -> int:
    """Characters of text in a content value: a string, or a list of strings, content parts
    (`{"type": "text", "text": ...}`) or token ids (one token's worth of characters each)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        total = 0
        for part in value:
            if isinstance(part, str):
                total += len(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                total += len(part["text"])
            elif isinstance(part, int) and not isinstance(part, bool):
                total += CHARS_PER_TOKEN
        return total
    return 0


def input_chars(value: Any) -> int:
    """Characters of a Responses API `input`: a string, or a list of items (messages whose
    `content` is a string or content parts; tool calls' `arguments` and tool results' `output`
    are read by the engine too)."""
    if not isinstance(value, list):
        return text_chars(value)
    total = 0
    for item in value:
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += text_chars(item.get("content"))
            for key in ("text", "arguments", "output"):
                if isinstance(item.get(key), str):
                    total += len(item[key])
    return total


def prompt_chars(body: dict[str, Any]) -> int:
    """Characters of prompt text in a chat (`messages`), completion (`prompt`) or Responses
    (`instructions` + `input`) body, tool definitions included (`tool_chars`)."""
    messages = body.get("messages")
    if isinstance(messages, list):
        chars = sum(message_chars(m) for m in messages if isinstance(m, dict))
    elif "input" in body:
        chars = text_chars(body.get("instructions")) + input_chars(body["input"])
    else:
        chars = text_chars(body.get("prompt"))
    return chars + tool_chars(body)


def message_chars(message: dict[str, Any]) -> int:
    """A chat message's content, and the name and arguments of each of its `tool_calls` (an
    assistant turn the engine reads back)."""
    total = text_chars(message.get("content"))
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                total += sum(
                    len(v) for k in ("name", "arguments") if isinstance(v := function.get(k), str)
                )
    return total


def tool_chars(body: dict[str, Any]) -> int:
    """The tool definitions (`tools`; the legacy `functions`) as compact JSON text: chat
    templates render them into the prompt (`tools | tojson` in most), so a request of tiny
    messages and a 100 KB tools array is a 25,000-token prefill, not a 1-token prompt."""
    total = 0
    for key in ("tools", "functions"):
        value = body.get(key)
        if isinstance(value, list) and value:
            total += len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    return total


def prompt_tokens(chars: int) -> int:
    """Estimated prompt tokens for `chars` characters (at least one: the request exists)."""
    return max(chars, 0) // CHARS_PER_TOKEN + 1


def max_tokens(body: dict[str, Any], default: int = DEFAULT_MAX_TOKENS) -> int:
    """The output tokens a request may generate: the largest of max_completion_tokens,
    max_tokens (chat, completions) and max_output_tokens (Responses API) it sets, or the
    default. The largest, because which one binds depends on the endpoint (vLLM's completions
    ignore max_completion_tokens; the gateway reads each endpoint's own): this fallback, used
    without the gateway's figure, must never count a request smaller than it can be."""
    bounds = [
        value
        for key in MAX_TOKENS_PARAMS
        if isinstance(value := body.get(key), int) and not isinstance(value, bool) and value > 0
    ]
    return max(bounds, default=default)


def choices(body: dict[str, Any]) -> int:
    """The choices a request asks for (`n`, default 1)."""
    value = body.get("n")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return 1


def estimate(body: dict[str, Any], default_max_tokens: int = DEFAULT_MAX_TOKENS) -> int:
    """prompt tokens (estimated) + n × max_tokens: the request's size in tokens."""
    return prompt_tokens(prompt_chars(body)) + choices(body) * max_tokens(body, default_max_tokens)


def parse_header(value: str | None) -> int | None:
    """The estimate carried in `HEADER_TOKENS_ESTIMATE`, or None when absent or malformed."""
    if value is None or not (value.isascii() and value.isdigit()) or len(value) > 9:
        return None
    return int(value)
