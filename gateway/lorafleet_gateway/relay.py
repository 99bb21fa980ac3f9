"""Relaying an opened upstream stream to the client, event by event.

Upstream bytes arrive in arbitrary pieces; the shared SSE framer (lorafleet_core.wire.sse) cuts them
on event boundaries and lorafleet_core.wire.openai_stream reads each (chat/completions chunks and
Responses API events alike), so the usage event can be read (rate-limit reconciliation, token
metrics) and dropped when the client did not ask for it. Everything else passes through unchanged
(line endings normalised to LF). The relay only moves bytes and records what it saw in a
`RelayResult`; the request handler (lorafleet_gateway.routes) does the bookkeeping once the
response has ended. A non-stream answer longer than the gateway holds (upstream's
`answer_buffer_bytes`) is relayed as it arrives too (`relay_answer`), its usage read on the way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from lorafleet_core.wire.openai_stream import (
    AnswerUsage,
    ends_stream,
    event_usage,
    is_content_event,
    is_usage_only,
)
from lorafleet_core.wire.sse import SseFramer
from lorafleet_gateway.errors import sse_error_event
from lorafleet_gateway.replica_errors import drop_connection
from lorafleet_gateway.upstream import Opened

log = logging.getLogger("lorafleet.gateway.relay")


@dataclass(slots=True)
class RelayResult:
    usage: dict[str, Any] | None = None
    error: str | None = None
    finished_at: float = 0.0
    completed: bool = False
    content_events: int = 0  # events relayed that carry generated text (usage.py)


def count_content_events(events: list[bytes]) -> int:
    """Events that carry generated text (lorafleet_core.wire.openai_stream.is_content_event)."""
    return sum(1 for event in events if is_content_event(event))


def _select(events: list[bytes], include_usage: bool, result: RelayResult) -> bytes:
    """The bytes to send for `events`; records the usage event's figures."""
    if not events:
        return b""
    result.content_events += count_content_events(events)
    out = b"".join(events)
    if b'"usage"' not in out:  # fast path: nothing to read or strip
        return out
    kept = []
    for event in events:
        usage = event_usage(event)
        if usage is not None:
            result.usage = usage
            if not include_usage and is_usage_only(event):
                continue
        kept.append(event)
    return b"".join(kept)


class _BadStream(Exception):
    """The replica's stream is not well-formed SSE, or ended before its last event."""


def _checked(events: list[bytes], done: bool) -> tuple[list[bytes], bool]:
    """`events` if a client can parse every one, and whether the stream's last event
    (`[DONE]`, or a terminal Responses event) has been seen; else _BadStream. Each must be
    UTF-8 and each line a `data:` line holding a JSON object or `[DONE]`, an `event:` name
    (Responses API) or a comment: a cheap shape check, not a JSON parse per event."""
    for event in events:
        try:
            event.decode()
        except UnicodeDecodeError:
            raise _BadStream("not UTF-8") from None
        for line in event.split(b"\n"):
            if not line or line.startswith((b":", b"event:")):
                continue
            payload = line[5:].strip() if line.startswith(b"data:") else b""
            if payload != b"[DONE]" and not (payload.startswith(b"{") and payload.endswith(b"}")):
                raise _BadStream("malformed event")
        done = done or ends_stream(event)
    return events, done


async def relay_stream(
    opened: Opened, include_usage: bool, result: RelayResult
) -> AsyncIterator[bytes]:
    """Yield the client's SSE bytes; fills `result`. The caller closes the upstream response.

    Only well-formed events are passed on: a malformed event, a stream cut inside an event and
    one that ends without `data: [DONE]` end the client's stream with an error event instead
    (never half an event, never a silently shortened answer).
    """
    assert opened.chunks is not None
    framer = SseFramer()
    done = False
    try:
        events, done = _checked(framer.feed(opened.first), done)
        data = _select(events, include_usage, result)
        if data:
            yield data
        # Complete as soon as `[DONE]` is handed over, not when the replica's response ends:
        # the `openai` client hangs up on reading `[DONE]`, and a replica that ends its
        # chunked body a moment later (a busy machine) must not turn a delivered answer into
        # `client_closed`.
        result.completed = done
        async for chunk in opened.chunks:
            if done:
                continue  # read to the end (the connection stays reusable), relay nothing
            events, done = _checked(framer.feed(chunk), done)
            data = _select(events, include_usage, result)
            if data:
                yield data
            result.completed = done
        if not done:
            rest = framer.flush()
            if rest is None:
                raise _BadStream("stream ended before its last event")
            if rest.strip() != b"data: [DONE]":  # the last event lacked its blank line
                raise _BadStream("stream ended inside an event")
            yield rest
            result.completed = True
    except (httpx.HTTPError, _BadStream) as exc:
        if isinstance(exc, _BadStream):  # a replica that garbles its stream: not its socket
            await drop_connection(opened.response)
        if result.completed:  # after [DONE]: the client has its whole answer
            log.info("replica %s failed after [DONE]: %r", opened.replica_id, exc)
            return
        # Bytes already reached the client: the status line is sent, so the error goes in-band.
        log.warning("replica %s failed mid-stream: %r", opened.replica_id, exc)
        result.error = "upstream_error"
        yield sse_error_event(
            502, "The replica serving this request failed mid-stream.", "upstream_error"
        )
    finally:
        result.finished_at = time.perf_counter()


class AnswerCut(Exception):
    """A non-stream answer broke off after part of it reached the client: its connection is
    closed short of the answer's length (nothing else can tell it a JSON body is incomplete)."""


async def relay_answer(opened: Opened, result: RelayResult) -> AsyncIterator[bytes]:
    """Yield a long non-stream answer as it arrives; its usage goes into `result` (read by
    AnswerUsage in bounded memory, never the whole answer held). A replica failing inside it
    raises AnswerCut once what arrived has been sent."""
    assert opened.chunks is not None
    reader = AnswerUsage()
    reader.feed(opened.first)
    try:
        yield opened.first
        async for chunk in opened.chunks:
            reader.feed(chunk)
            yield chunk
    except httpx.HTTPError as exc:
        log.warning("replica %s failed inside a %d-byte answer: %r", opened.replica_id,
                    reader.size, exc)  # fmt: skip
        result.error = "upstream_error"
        await drop_connection(opened.response)
        raise AnswerCut(str(exc)) from exc
    finally:
        result.finished_at = time.perf_counter()
    result.usage = reader.usage()
    result.completed = True
