"""Server-sent events framing: whole events out of bytes that arrive in arbitrary pieces.

One framer for every reader of an OpenAI stream (the gateway's relay, the agent's token
counter). Lines may end in CRLF, LF or CR (the SSE spec allows all three) and a chunk boundary
may fall anywhere, inside a CRLF included: a CR at the end of a chunk is held back until the
next chunk says whether an LF follows it (as httpx's line decoder does). Events come out with
LF line endings, each terminated by one blank line (`b"...\\n\\n"`).
"""

from __future__ import annotations

import json
from typing import Any


class SseFramer:
    """Feed it chunks; it returns the complete events so far and keeps the rest."""

    __slots__ = ("_buf", "_cr")

    def __init__(self) -> None:
        self._buf = b""
        self._cr = False  # the previous chunk ended in CR: it may be the first half of CRLF

    def feed(self, data: bytes) -> list[bytes]:
        """The events completed by `data`, oldest first (possibly none)."""
        if self._cr:
            data = b"\r" + data
            self._cr = False
        if data.endswith(b"\r"):
            data = data[:-1]
            self._cr = True
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + data
        if b"\n\n" not in buf:
            self._buf = buf
            return []
        *events, self._buf = buf.split(b"\n\n")
        return [e.lstrip(b"\n") + b"\n\n" for e in events if e.strip(b"\n")]

    def flush(self) -> bytes | None:
        """At the end of the stream: the last event when it lacked its blank line, else None."""
        rest = self._buf + (b"\n" if self._cr else b"")
        self._buf, self._cr = b"", False
        rest = rest.strip(b"\n")
        return rest + b"\n\n" if rest.strip() else None


def event_data(event: bytes) -> bytes | None:
    """The data of one framed event (its `data:` lines joined by LF), or None when it has none."""
    lines = [line[5:] for line in event.split(b"\n") if line.startswith(b"data:")]
    if not lines:
        return None
    return b"\n".join(line[1:] if line.startswith(b" ") else line for line in lines)


def event_json(event: bytes) -> dict[str, Any] | None:
    """The JSON object an OpenAI stream event carries; None for `[DONE]`, comments, non-JSON."""
    data = event_data(event)
    if data is None or data == b"[DONE]":
        return None
    try:
        obj = json.loads(data)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None
