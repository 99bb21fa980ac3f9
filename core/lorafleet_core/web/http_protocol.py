"""uvicorn's httptools protocol with the limits only the HTTP layer can enforce.

Both servers use it: the gateway's public port (lorafleet_gateway.__main__) and both agent
ports (lorafleet_agent.server), each through `hardened_protocol`, which also names how a
refusal is logged (the gateway writes its structured request line).

- Header size: uvicorn's httptools protocol buffers a request line and headers of any size
  (a 64 MiB header was read whole). Here the bytes received while a request's headers are
  incomplete are counted; past `max_header_bytes` the request is answered 431 and the
  connection closed. The parser then holds at most the limit plus one socket read. Headers
  that arrive whole in one read (up to the read size, 256 KiB with uvloop) never cross that
  count, so their parsed size (URL, names, values) is checked again when they are complete,
  before any request starts.
- Trailers (header fields after a chunked body): uvicorn appended each one to the headers of
  the request already running, without any limit (300 MB of them grew the gateway by 300 MB
  in two seconds), so a trailer could also pose as a request
  header (a second `Authorization`). Here trailers are dropped, never seen by the app, and
  counted: past `max_header_bytes` the request is answered 431 and the connection closed.
- Transfer-Encoding: only one `chunked` field (`transfer_coding_refusal`): 501 for any other
  coding, 400 on an HTTP/1.0 request; the parser read `gzip, chunked` as chunked.
- Header timeout: uvicorn times out idle keep-alive connections but not a request whose headers
  never finish, nor a connection that never sends a byte. Here headers must be complete within
  `header_timeout_s` of the connection opening or the request's first byte; otherwise 408 and
  the connection closes.

- Body timeout (`body_timeout_s`, when set): a body must be complete within that long of
  its headers, else 408 and the connection closes. Without it a client trickling its body a
  byte at a time held the connection, and what the body had buffered, for as long as it
  kept sending. The agent's ports set it; the gateway's edge middleware times the body
  itself (from the request start, with its own refusals and failure accounting).

- Write stall: a client that stops reading (a stream it never consumes) would hold its
  connection, the gateway's reservation and the replica's adapter reference for as long as
  TCP keeps the connection open, which with a zero receive window is for ever. When the
  transport's buffer is full (`pause_writing`) and accepts nothing more for
  `write_timeout_s`, the connection is aborted: the request then ends as `client_closed`,
  which releases all it held upstream.

A body the parser refuses after the request started (a malformed chunk size) is answered 400
too, as long as no response has started: the request is marked disconnected first, so the app
sees its client gone and whatever it sends is dropped.

All these answers are OpenAI error bodies. The body's size limit (413) lives in
the servers' own code (the gateway's ASGI edge middleware, the agent's `http_edge`), where
the request is known.

Closing a connection while the client is still sending makes the kernel answer its next
segment with a reset, which discards the refusal before the client reads it. So a connection
closed with request bytes still due (a refused header, an unread body) closes *lingering*, as
nginx does: the answer is flushed and followed by a FIN, whatever else arrives is dropped
unparsed, and the socket is closed `LINGER_S` later (or when the client closes first).
"""

from __future__ import annotations

import asyncio
import json
import logging
from asyncio import TimerHandle
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from lorafleet_core.wire.openai_errors import error_body

_log = logging.getLogger(__name__)

# (status, code) of a request the protocol refused or cut: 408, 431, 400, "client_stalled".
RefusalLog = Callable[[int | str, str], None]


def _log_refusal(status: int | str, code: str) -> None:
    _log.info("refused a request: %s %s", status, code)


LINGER_S = 2.0


class _LingeringTransport:
    """The connection's transport, whose close() lingers while request bytes are still due."""

    def __init__(self, inner: asyncio.Transport, protocol: EdgeHttpToolsProtocol) -> None:
        self._inner = inner
        self._protocol = protocol
        self._lingering = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def is_closing(self) -> bool:
        return self._lingering or self._inner.is_closing()

    def close(self) -> None:
        inner = self._inner
        if self._lingering or inner.is_closing():
            return
        if not (self._protocol.bytes_still_due() and inner.can_write_eof()):
            inner.close()
            return
        self._lingering = True
        self._protocol.discarding = True
        inner.write_eof()  # sent after what is buffered: the client reads the answer, then EOF
        self._protocol.loop.call_later(LINGER_S, inner.close)


class _HeadersTooLarge(Exception):
    """Raised from a parser callback: it stops the parser before a request starts (the
    answer is `send_400_response`'s: 431, or the protocol's `_header_refusal`)."""


def transfer_coding_refusal(
    headers: list[tuple[bytes, bytes]], http_version: str
) -> tuple[int, str, str] | None:
    """Why a request's Transfer-Encoding is refused, if it is: (status, message, code).

    Only a single `Transfer-Encoding: chunked` is read (RFC 9112 6.1). The parser took
    `gzip, chunked`, and `identity` then `chunked` on two lines, as plain chunked: a proxy in
    front that reads such framing otherwise (the last coding that is not chunked, the first
    field of two) would see other requests in the same bytes than the gateway does, which is
    request smuggling. Other codings are 501, as RFC 9112 says; framing an HTTP/1.0 request
    by Transfer-Encoding is faulty there (400)."""
    values = [v for n, v in headers if n.lower() == b"transfer-encoding"]
    if not values:
        return None
    if http_version == "1.0":
        return (400, "HTTP/1.0 requests cannot be chunked.", "invalid_http_request")
    if len(values) > 1 or values[0].strip().lower() != b"chunked":
        return (
            501,
            "Only `Transfer-Encoding: chunked` is supported (one field, no other coding).",
            "unsupported_transfer_encoding",
        )
    return None


class EdgeHttpToolsProtocol(HttpToolsProtocol):
    max_header_bytes = 32_768
    header_timeout_s = 10.0
    write_timeout_s = 60.0
    body_timeout_s: float | None = None
    log_refusal: RefusalLog = staticmethod(_log_refusal)

    discarding = False
    _headers_too_large = False
    _header_refusal: tuple[int, str, str] | None = None
    _write_timer: TimerHandle | None = None
    _header_bytes = 0
    _trailer_bytes = 0
    _reading_headers = True
    _header_timer: TimerHandle | None = None
    _body_timer: TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(cast(asyncio.Transport, _LingeringTransport(transport, self)))
        self._start_header_clock()

    def bytes_still_due(self) -> bool:
        """Whether the client may still be sending this request (headers or body)."""
        return self._reading_headers or (self.cycle is not None and self.cycle.more_body)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_clock()
        self._stop_body_clock()
        self._stop_write_clock()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.write_timeout_s, self._write_stalled)

    def resume_writing(self) -> None:
        self._stop_write_clock()
        super().resume_writing()

    def _stop_write_clock(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_stalled(self) -> None:
        self._write_timer = None
        self.log_refusal("client_stalled", "write_timeout")
        self.transport.abort()  # nothing more can reach the client: drop, do not flush

    def data_received(self, data: bytes) -> None:
        if self.discarding:
            return  # answered and closing: the rest of the request is never parsed
        super().data_received(data)
        if self._reading_headers and not self.transport.is_closing():
            self._header_bytes += len(data)
            if self._header_bytes > self.max_header_bytes:
                self._refuse_too_large()

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._reading_headers:
            super().on_header(name, value)
            return
        # A trailer: the request (and its headers, which the app may read at any time) has
        # started. Nothing here uses trailers: they are dropped, and bounded like headers.
        self._trailer_bytes += len(name) + len(value) + 4
        if self._trailer_bytes > self.max_header_bytes:
            self._headers_too_large = True
            raise _HeadersTooLarge  # httptools stops and re-raises: send_400_response runs

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._start_header_clock()

    def on_headers_complete(self) -> None:
        # ": " and CRLF per header, the request line's method and version: close enough to
        # the bytes on the wire for a limit that is a bound, not a measure.
        size = len(self.url) + sum(len(n) + len(v) + 4 for n, v in self.headers) + 16
        if size > self.max_header_bytes:
            self._headers_too_large = True
            raise _HeadersTooLarge  # httptools stops and re-raises: send_400_response runs
        self._header_refusal = transfer_coding_refusal(self.headers, self.parser.get_http_version())
        if self._header_refusal is not None:
            raise _HeadersTooLarge
        self._stop_header_clock()
        super().on_headers_complete()
        if self.body_timeout_s is not None:  # stopped by on_message_complete
            self._body_timer = self.loop.call_later(self.body_timeout_s, self._body_timeout)

    def on_message_complete(self) -> None:
        self._stop_body_clock()
        super().on_message_complete()

    def _stop_body_clock(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timeout(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        if cycle is None or not cycle.more_body or self.transport.is_closing():
            return
        if cycle.response_complete:  # answered without its body (a 401): just close
            self.transport.close()
            return
        self._refuse(
            408,
            f"The request body was not received within {self.body_timeout_s:g} s.",
            "request_timeout",
        )

    def send_400_response(self, msg: str) -> None:
        # uvicorn's answer to bytes that are not HTTP is text/plain; ours is OpenAI's shape.
        if self._headers_too_large:
            self._refuse_too_large()
        elif self._header_refusal is not None:
            self._refuse(*self._header_refusal)
        else:
            self._refuse(400, "The request is not valid HTTP/1.1.", "invalid_http_request")

    def _refuse_too_large(self) -> None:
        self._refuse(
            431,
            f"The request line and headers exceed {self.max_header_bytes} bytes.",
            "request_header_fields_too_large",
        )

    def _start_header_clock(self) -> None:
        self._reading_headers = True
        self._header_bytes = 0
        self._trailer_bytes = 0
        if self._header_timer is not None:
            self._header_timer.cancel()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_timeout)

    def _stop_header_clock(self) -> None:
        self._reading_headers = False
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self._reading_headers and not self.transport.is_closing():
            self._refuse(
                408,
                f"The request headers were not received within {self.header_timeout_s:g} s.",
                "request_timeout",
            )

    def _refuse(self, status: int, message: str, code: str) -> None:
        if self._header_timer is not None:  # the headers stay "due": the close lingers
            self._header_timer.cancel()
            self._header_timer = None
        self.log_refusal(status, code)
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if cycle.response_started:
                self.transport.close()  # a response is being written: cutting it is all we can do
                return
            # The request started but its body is broken: the app hears its client left (and
            # anything it still sends is dropped), the client hears why.
            cycle.disconnected = True
            cycle.message_event.set()
        body = json.dumps(error_body(status, message, code=code)).encode()
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(body)}\r\n"
            "connection: close\r\n\r\n"
        ).encode()
        self.transport.write(head + body)
        self.transport.close()


def hardened_protocol(
    max_header_bytes: int,
    header_timeout_s: float,
    write_timeout_s: float,
    log_refusal: RefusalLog = _log_refusal,
    *,
    body_timeout_s: float | None = None,
) -> type[asyncio.Protocol]:
    """The protocol class to pass as uvicorn's `http=`, with these limits."""
    limits = {
        "max_header_bytes": max_header_bytes,
        "header_timeout_s": header_timeout_s,
        "write_timeout_s": write_timeout_s,
        "body_timeout_s": body_timeout_s,
        "log_refusal": staticmethod(log_refusal),
    }
    return type("ConfiguredEdgeProtocol", (EdgeHttpToolsProtocol,), limits)
