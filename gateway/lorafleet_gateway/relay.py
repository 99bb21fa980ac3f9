"""Relaying an opened upstream stream to the client, event by event.

Upstream bytes arrive in arbitrary pieces; they are re-framed on the SSE event boundary
(blank line) so the usage event can be read (rate-limit reconciliation, token metrics) and
dropped when the client did not ask for it. Everything else passes through as received.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from lorafleet_gateway.errors import sse_error_event
from lorafleet_gateway.upstream import Opened, parse_usage

log = logging.getLogger("lorafleet.gateway.relay")


@dataclass(slots=True)
class RelayResult:
    usage: dict[str, Any] | None = None
    error: str | None = None
    finished_at: float = 0.0
    completed: bool = False


def _is_usage_only(event: bytes) -> bool:
    # The final usage chunk has an empty choices list.
    return b'"choices":[]' in event or b'"choices": []' in event


def _frame(buf: bytes, include_usage: bool, result: RelayResult) -> tuple[bytes, bytes]:
    """Split complete events off `buf`; returns (bytes to send, leftover)."""
    if b'"usage"' not in buf:  # fast path: nothing to read or strip
        cut = buf.rfind(b"\n\n")
        if cut < 0:
            return b"", buf
        return buf[: cut + 2], buf[cut + 2 :]
    out = []
    while True:
        cut = buf.find(b"\n\n")
        if cut < 0:
            break
        event, buf = buf[: cut + 2], buf[cut + 2 :]
        usage = parse_usage(event)
        if usage is not None:
            result.usage = usage
            if not include_usage and _is_usage_only(event):
                continue
        out.append(event)
    return b"".join(out), buf


async def relay_stream(
    opened: Opened, include_usage: bool, result: RelayResult
) -> AsyncIterator[bytes]:
    """Yield the client's SSE bytes; fills `result`. Always closes the upstream response."""
    buf = opened.first.replace(b"\r\n", b"\n")
    try:
        data, buf = _frame(buf, include_usage, result)
        if data:
            yield data
        assert opened.chunks is not None
        async for chunk in opened.chunks:
            buf += chunk.replace(b"\r\n", b"\n")
            data, buf = _frame(buf, include_usage, result)
            if data:
                yield data
        if buf.strip():
            yield buf if buf.endswith(b"\n\n") else buf + b"\n\n"
        result.completed = True
    except httpx.HTTPError as exc:
        # Bytes already reached the client: the status line is sent, so the error goes in-band.
        log.warning("replica %s failed mid-stream: %r", opened.replica_id, exc)
        result.error = "upstream_error"
        yield sse_error_event(
            502, "The replica serving this request failed mid-stream.", "upstream_error"
        )
    finally:
        result.finished_at = time.perf_counter()
        await opened.response.aclose()
