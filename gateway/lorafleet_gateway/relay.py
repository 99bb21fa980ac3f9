"""Relaying an opened upstream stream to the client, event by event.

Upstream bytes arrive in arbitrary pieces; the shared SSE framer (lorafleet_core.wire.sse) cuts them
on event boundaries and lorafleet_core.wire.openai_stream reads each (chat/completions chunks and
Responses API events alike), so the usage event can be read (rate-limit reconciliation, token
metrics) and dropped when the client did not ask for it. Everything else passes through unchanged
(line endings normalised to LF). The relay only moves bytes and records what it saw in a
`RelayResult`; the request handler (lorafleet_gateway.routes) does the bookkeeping once the
response has ended. A non-stream answer longer than the gateway holds (upstream's
`answer_buffer_bytes`) is relayed as it arrives too (`AnswerRelay`), its usage read on the way,
to the end even when the client leaves early.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from lorafleet_core.wire.openai_stream import (
    AnswerUsage,
    choice_index,
    chunk_usage,
    ends_stream,
    event_type,
    event_usage,
    is_content_event,
    is_usage_only,
)
from lorafleet_core.wire.sse import SseFramer
from lorafleet_gateway.errors import sse_error_event
from lorafleet_gateway.replica_errors import drop_connection
from lorafleet_gateway.upstream import Opened

log = logging.getLogger(__name__)
_DECODER = json.JSONDecoder()


@dataclass(slots=True)
class RelayResult:
    usage: dict[str, Any] | None = None  # the engine's usage of the whole answer
    # What the engine reported for the events handed to the client (continuous usage
    # stats): the bill of a stream that ended before its usage event.
    delivered: dict[str, int] | None = None
    error: str | None = None
    finished_at: float = 0.0
    completed: bool = False
    content_events: int = 0  # events relayed that carry generated text (usage.py)


def count_content_events(events: list[bytes]) -> int:
    """Events that carry generated text (lorafleet_core.wire.openai_stream.is_content_event)."""
    return sum(1 for event in events if is_content_event(event))


class UsageFilter:
    """What of a stream reaches the client, and what the engine counted for it.

    The gateway asks the engine for usage on every chunk (upstream.upstream_body), so the
    bill of a stream cut anywhere is the engine's own count up to the last chunk the client
    was handed. The client sees exactly the bytes the engine would have sent for its own
    `stream_options`: per-chunk usage only if it asked for continuous usage stats, the final
    usage-only chunk only if it asked for usage. vLLM also writes its `system_fingerprint` on
    a choice's last chunk only when no usage chunk follows; for a client that asked for no
    usage, that last chunk (and what follows it) waits for the usage chunk, whose
    fingerprint it then carries. Responses API events pass unchanged (their terminal event
    carries the usage).
    """

    __slots__ = ("_held", "_pending", "continuous", "include_usage", "n", "result")

    def __init__(self, result: RelayResult, include_usage: bool, continuous: bool, n: int) -> None:
        self.result = result
        self.include_usage = include_usage
        self.continuous = include_usage and continuous
        self.n = max(n, 1)
        # (event, its usage) waiting for the usage chunk's fingerprint; None: none held
        self._held: list[tuple[bytes, dict[str, Any] | None]] | None = None
        # The engine's counts up to the last event selected: prompt per prompt, completion
        # per choice (vLLM counts each choice's tokens on its own chunks).
        self._pending: tuple[dict[int, int], dict[int, int]] = ({}, {})

    def select(self, events: list[bytes]) -> bytes:
        """The bytes to send for `events`."""
        if not events:
            return b""
        self.result.content_events += count_content_events(events)
        out: list[bytes] = []
        for event in events:
            self._take(event, out)
        return b"".join(out)

    def sent(self) -> None:
        """What `select` returned last has been handed to the client: it is billed."""
        prompts, choices = self._pending
        if prompts or choices:
            self.result.delivered = {
                "prompt_tokens": sum(prompts.values()),
                "completion_tokens": sum(choices.values()),
            }

    def _take(self, event: bytes, out: list[bytes]) -> None:
        if event_type(event) is not None:  # Responses API: usage in the terminal event only
            usage = event_usage(event)
            if usage is not None:
                self.result.usage = usage
            out.append(event)
            return
        split = chunk_usage(event)
        if is_usage_only(event):  # the final usage chunk (in any JSON spacing)
            final = split[0] if split is not None else event_usage(event)
            if final is not None:
                self.result.usage = final
                if self._held is not None:
                    self._release(out, fingerprint(event))
                if self.include_usage:
                    out.append(event)
                return
        usage = split[0] if split is not None else None
        if self._held is not None:
            self._held.append((event, usage))
            if ends_stream(event):  # no usage chunk came (an error event instead)
                self._release(out, None)
            return
        if not self.include_usage and split is not None and b'"finish_reason":"' in event:
            self._held = [(event, usage)]  # a choice's last chunk: wait for the fingerprint
            return
        self._emit(event, usage, out, None)

    def _release(self, out: list[bytes], fingerprint: bytes | None) -> None:
        held, self._held = self._held or [], None
        for event, usage in held:
            self._emit(event, usage, out, fingerprint)

    def _emit(
        self,
        event: bytes,
        usage: dict[str, Any] | None,
        out: list[bytes],
        fingerprint: bytes | None,
    ) -> None:
        if usage is not None:
            index = choice_index(event)
            prompts, choices = self._pending
            prompts[index // self.n] = _count(usage.get("prompt_tokens"))
            choices[index] = _count(usage.get("completion_tokens"))
            if not self.continuous:
                split = chunk_usage(event)
                assert split is not None
                event = split[1]
                if fingerprint is not None and b'"finish_reason":"' in event:
                    end = event.rindex(b"}")
                    event = event[:end] + b',"system_fingerprint":' + fingerprint + event[end:]
        out.append(event)


def fingerprint(event: bytes) -> bytes | None:
    """The raw JSON string of a chunk's `system_fingerprint`, as the engine wrote it."""
    key = b',"system_fingerprint":"'
    at = event.find(key)
    if at < 0:
        return None
    text = event[at + len(key) - 1 :].decode("utf-8", "replace")
    try:
        value, end = _DECODER.raw_decode(text)
    except ValueError:
        return None
    return text[:end].encode() if isinstance(value, str) else None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


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


async def relay_stream(opened: Opened, usage: UsageFilter) -> AsyncIterator[bytes]:
    """Yield the client's SSE bytes; fills `result`. The caller closes the upstream response.

    Only well-formed events are passed on: a malformed event, a stream cut inside an event and
    one that ends without `data: [DONE]` end the client's stream with an error event instead
    (never half an event, never a silently shortened answer).
    """
    assert opened.chunks is not None
    result = usage.result
    framer = SseFramer()
    done = False
    try:
        events, done = _checked(framer.feed(opened.first), done)
        data = usage.select(events)
        if data:
            yield data
            usage.sent()
        # Complete as soon as `[DONE]` is handed over, not when the replica's response ends:
        # the `openai` client hangs up on reading `[DONE]`, and a replica that ends its
        # chunked body a moment later (a busy machine) must not turn a delivered answer into
        # `client_closed`.
        result.completed = done
        async for chunk in opened.chunks:
            if done:
                continue  # read to the end (the connection stays reusable), relay nothing
            events, done = _checked(framer.feed(chunk), done)
            data = usage.select(events)
            if data:
                yield data
                usage.sent()
            result.completed = done
        if not done:
            rest = framer.flush()
            if rest is None:
                raise _BadStream("stream ended before its last event")
            if rest.strip() != b"data: [DONE]":  # the last event lacked its blank line
                raise _BadStream("stream ended inside an event")
            yield usage.select([rest])  # with any chunk still held
            usage.sent()
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


# How long a long non-stream answer is still read after its client left, for the usage at its
# end: vLLM writes a non-stream answer only once it is whole, so the rest is a transfer on the
# cluster network, not generation.
DRAIN_AFTER_CLIENT_LEFT_S = 10.0


class AnswerRelay:
    """A non-stream answer longer than the gateway holds, relayed as it arrives.

    The replica's answer is read by a task of its own, one chunk ahead of the client (bounded
    memory): a client that leaves mid-answer ends `chunks`, not the read, so `finish` still
    reads the usage at the answer's end and the answer is billed what the engine counted, not
    nothing. A replica failing inside it makes `chunks` raise AnswerCut once what arrived has
    been sent.
    """

    def __init__(self, opened: Opened, result: RelayResult) -> None:
        assert opened.chunks is not None
        self._opened = opened
        self._rest = opened.chunks
        self._result = result
        self._reader = AnswerUsage()
        self._reader.feed(opened.first)
        self._handed: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=1)  # None: the end
        self._client_gone = False
        self._error: httpx.HTTPError | None = None
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for chunk in self._rest:
                self._reader.feed(chunk)
                if not self._client_gone:
                    await self._handed.put(chunk)
            self._result.usage = self._reader.usage()
        except httpx.HTTPError as exc:
            self._error = exc
        finally:
            if not self._client_gone:
                await self._handed.put(None)

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            yield self._opened.first
            while (chunk := await self._handed.get()) is not None:
                yield chunk
            if self._error is not None:
                log.warning("replica %s failed inside a %d-byte answer: %r",
                            self._opened.replica_id, self._reader.size, self._error)  # fmt: skip
                self._result.error = "upstream_error"
                await drop_connection(self._opened.response)
                raise AnswerCut(str(self._error)) from self._error
            self._result.completed = True
        finally:
            self._result.finished_at = time.perf_counter()

    async def finish(self, drain_s: float = DRAIN_AFTER_CLIENT_LEFT_S) -> None:
        """Once the response has ended, however: let the read reach the answer's end (its
        usage) for at most `drain_s`, then stop it."""
        self._client_gone = True
        while not self._handed.empty():  # a read waiting to hand a chunk over goes on
            self._handed.get_nowait()
        try:
            await asyncio.wait_for(self._task, drain_s)  # cancelled past it, or with us
        except TimeoutError:
            log.info("replica %s: stopped reading an answer its client left (%d bytes read)",
                     self._opened.replica_id, self._reader.size)  # fmt: skip
