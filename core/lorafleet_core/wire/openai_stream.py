"""What one event of an OpenAI stream says: generated text, token usage, the stream's end.

The one reader of stream events for everything that counts tokens as they pass (the gateway's
relay, which meters usage and reconciles the rate limiter; the agent's token counter, which
feeds tokens/s to the autoscaler). Two stream formats reach it:

- chat and completions: `data: {json}` chunks with `choices` (one chunk per generated token per
  choice: a non-empty `delta.content`, `delta.reasoning_content` or `text`, or a piece of a
  tool call), a final usage-only chunk (`"choices": []`,
  when `stream_options.include_usage` is set) and `data: [DONE]`;
- the Responses API: named events (`event: <type>` before the data line, the same type as the
  data's `type`), one `*.delta` event per generated piece of text, tool arguments or
  reasoning, and a terminal `response.completed` / `response.incomplete` / `response.failed`
  whose `response.usage` counts `input_tokens` and `output_tokens`. No `[DONE]`.

The checks are on bytes, not a JSON parse per event: they run on every event of every stream.
Only an event that carries usage is parsed.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

from lorafleet_core.wire.sse import event_data, event_json

# Events that end a Responses stream; `error` is the in-band error event.
RESPONSES_TERMINAL: Final = frozenset(
    {b"response.completed", b"response.incomplete", b"response.failed", b"error"}
)
# A chat/completions chunk generates when it carries text, reasoning or a tool call's pieces
# (a role-only or finish-only chunk does not); an empty string is no token.
_TEXT: Final = (
    b'"content":"',
    b'"content": "',
    b'"text":"',
    b'"text": "',
    b'"reasoning_content":"',
    b'"reasoning_content": "',
    b'"tool_calls":[{',
    b'"tool_calls": [{',
)
_EMPTY_TEXT: Final = (b'"content":""', b'"content": ""', b'"text":""', b'"text": ""')


def event_type(event: bytes) -> bytes | None:
    """The `event:` field of a framed event (the Responses API names every event), or None."""
    if b"event:" not in event:
        return None
    for line in event.split(b"\n"):
        if line.startswith(b"event:"):
            return line[6:].strip()
    return None


def is_usage_only(event: bytes) -> bool:
    """The final chat/completions chunk that carries only usage (an empty choices list)."""
    return b'"choices":[]' in event or b'"choices": []' in event


def is_content_event(event: bytes) -> bool:
    """An event that carries generated tokens: a chat/completions choice whose content or text
    is not empty (not the usage-only chunk, not an empty role/finish chunk), or a Responses
    `*.delta` event."""
    kind = event_type(event)
    if kind is not None:
        return kind.endswith(b".delta")
    if b'"choices"' not in event or is_usage_only(event):
        return False
    if not any(text in event for text in _TEXT):
        return False
    return b'"tool_calls"' in event or not any(empty in event for empty in _EMPTY_TEXT)


def ends_stream(event: bytes) -> bool:
    """`data: [DONE]`, or a terminal Responses event: nothing more is to come."""
    kind = event_type(event)
    if kind is not None:
        return kind in RESPONSES_TERMINAL
    return event_data(event) == b"[DONE]"


def usage_of(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The `usage` object of an answer or stream event: top-level (chat, completions, a
    non-stream Responses answer) or inside `response` (a terminal Responses event)."""
    usage = obj.get("usage")
    if usage is None and isinstance(obj.get("response"), dict):
        usage = obj["response"].get("usage")
    return usage if isinstance(usage, dict) else None


def event_usage(event: bytes) -> dict[str, Any] | None:
    """The usage object an event carries, if any (the only events parsed as JSON)."""
    if b'"usage":{' not in event and b'"usage": {' not in event:
        return None  # fast path: most events carry no usage (or `"usage": null`)
    obj = event_json(event)
    return usage_of(obj) if obj is not None else None


# vLLM writes a chunk's usage after its choices, compactly (pydantic's `model_dump_json`), and
# nothing after it holds an object under that key: the last one is the chunk's own.
_CHUNK_USAGE: Final = b',"usage":{'


def chunk_usage(event: bytes) -> tuple[dict[str, Any], bytes] | None:
    """A chat/completions chunk's own `usage` (continuous usage stats or the final chunk's)
    and the chunk without it, byte for byte as the engine writes a chunk that has none
    (`,"usage":{...}` cut out). None when it carries no usage object. Only the usage object is
    decoded, never the chunk: generated text cannot hold the key (its quotes are escaped)."""
    at = event.rfind(_CHUNK_USAGE)
    if at < 0:
        return None
    start = at + len(_CHUNK_USAGE) - 1
    head = event[start : start + _USAGE_VALUE_BYTES].decode("utf-8", "replace")
    try:
        found, end = _DECODER.raw_decode(head)
    except ValueError:
        return None
    if not isinstance(found, dict) or "prompt_tokens" not in found:
        return None
    return found, event[:at] + event[start + len(head[:end].encode()) :]


def choice_index(event: bytes) -> int:
    """The index of a chat/completions chunk's choice (vLLM streams one choice per chunk)."""
    at = event.find(b'"choices":[{"index":')
    if at < 0:
        return 0
    digits = event[at + 20 : at + 32]
    end = 0
    while end < len(digits) and digits[end : end + 1].isdigit():
        end += 1
    return int(digits[:end]) if end else 0


# A non-stream answer larger than this is not parsed whole for its usage (answer_usage).
WHOLE_PARSE_BYTES: Final = 256 * 1024
_USAGE_KEY: Final = b'"usage":'
_USAGE_VALUE_BYTES: Final = 4096  # a usage object is a few hundred bytes; more is not one
_DECODER = json.JSONDecoder()


class AnswerUsage:
    """The `usage` of a non-stream answer read as it passes, in bounded memory.

    The one reader of a non-stream answer's usage (chat, completions, Responses), for the
    gateway and the agent, which relay a large answer as it arrives instead of holding it
    (64 concurrent 10 MB answers were 640 MB in each, docs/reference/gateway.md). An answer up to
    `WHOLE_PARSE_BYTES` is kept and parsed whole. Past that it is not parsed at all (a full
    parse of a 10 MB answer blocked the event loop for 238 ms): every `"usage":` key whose
    value is an object with token counts is decoded from the few KiB after it, and the last
    one wins (vLLM writes `usage` after the choices; a Responses answer writes its `tools`
    echo between them, so a fixed tail would not do). Generated text cannot hold the key
    (its quotes are escaped); a logprobs entry for the token `usage` has a number there and
    is skipped without a decode. Memory: one chunk plus `_USAGE_VALUE_BYTES`.
    """

    __slots__ = ("_carry", "_found", "_whole", "size")

    def __init__(self) -> None:
        self._whole: bytearray | None = bytearray()  # None once past WHOLE_PARSE_BYTES
        self._carry = b""  # the end of the last chunk: a key cut in two, a value not all here
        self._found: dict[str, Any] | None = None
        self.size = 0  # bytes fed

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self._whole is not None:
            self._whole += chunk
            if len(self._whole) <= WHOLE_PARSE_BYTES:
                return
            chunk, self._whole = bytes(self._whole), None
        self._scan(self._carry + chunk, final=False)

    def usage(self) -> dict[str, Any] | None:
        """The answer's usage once it has all been fed (None: it had none, or not JSON)."""
        if self._whole is not None:
            try:
                obj = json.loads(self._whole)
            except ValueError:
                return None
            return usage_of(obj) if isinstance(obj, dict) else None
        self._scan(self._carry, final=True)
        self._carry = b""
        return self._found

    def _scan(self, data: bytes, *, final: bool) -> None:
        at = data.find(_USAGE_KEY)
        while at >= 0:
            if not final and len(data) - at - len(_USAGE_KEY) < _USAGE_VALUE_BYTES:
                self._carry = data[at:]  # decoded once more of the answer has come
                return
            found = _usage_at(data, at)
            if found is not None:
                self._found = found
            at = data.find(_USAGE_KEY, at + 1)
        self._carry = data[-(len(_USAGE_KEY) - 1) :]  # a key cut across two chunks


def _usage_at(data: bytes, at: int) -> dict[str, Any] | None:
    """The usage object whose `"usage":` key starts at `at`, if its value is one."""
    value = data[at + len(_USAGE_KEY) : at + len(_USAGE_KEY) + _USAGE_VALUE_BYTES].lstrip()
    if value[:1] != b"{":  # a number (a logprob of the token `usage`), null: no decode
        return None
    try:
        found, _ = _DECODER.raw_decode(value.decode("utf-8", "replace"))
    except ValueError:
        return None
    if isinstance(found, dict) and ("prompt_tokens" in found or "input_tokens" in found):
        return found
    return None


def answer_usage(body: bytes) -> dict[str, Any] | None:
    """The `usage` object of a whole non-stream answer: what `AnswerUsage` reads, found by
    searching a large body backwards (no copy of it, and the usage is near its end)."""
    if len(body) <= WHOLE_PARSE_BYTES:
        reader = AnswerUsage()
        reader.feed(body)
        return reader.usage()
    end = len(body)
    while (at := body.rfind(_USAGE_KEY, 0, end)) >= 0:
        if (found := _usage_at(body, at)) is not None:
            return found
        end = at
    return None


def usage_tokens(usage: dict[str, Any]) -> tuple[int, int]:
    """(prompt, completion) tokens of a usage object, in either vocabulary: chat/completions'
    `prompt_tokens`/`completion_tokens` or the Responses API's `input_tokens`/`output_tokens`
    (missing or malformed figures count 0)."""
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens"))
    return _count(prompt), _count(completion)


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return 0  # a replica's JSON is parsed leniently: NaN must not reach int()
    return max(int(value), 0)
