"""Many slow clients on raw sockets (no client library trickles bytes on purpose).

Three kinds, each client repeating its kind until the phase ends:

  headers  a request line, then one header byte every `trickle_s`, never the blank line: the
           gateway's protocol must answer 408 after `header_timeout_s` (default 10 s);
  body     complete headers with the tenant's key declaring a 1,000-byte body, then one body
           byte every `trickle_s`: the edge must answer 408 after `body_timeout_s` (default
           30 s) (without a key the gateway answers 401 before it reads any body);
  reader   a valid streaming chat completion with the tenant's key, read `read_bytes` every
           `trickle_s` through a small receive buffer, so the gateway's writes back up: it is
           a paying client on a bad link, never cut (no edge timeout applies once the answer
           has started), and must not slow anybody else down.

On a loopback target each client connects from its own address in 127.0.1.0/24, as slow
clients on the internet come from many addresses: the edge charges early failures (the 408s)
to the client address, so slowloris clients sharing the normal traffic's address would get
that address rate limited (429) - a property of the per-address limit, shown separately with
`--slow-same-address`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

MODES = ("headers", "body", "reader")


@dataclass(frozen=True)
class SlowTarget:
    host: str
    port: int
    api_key: str
    model: str  # what readers ask for
    reader_max_tokens: int = 128
    own_addresses: bool = True  # connect from 127.0.1.x (loopback targets only)


@dataclass(slots=True)
class SlowResult:
    mode: str
    client: int
    started_at: float  # seconds since the run's start
    seconds: float
    status: str  # "408", "200", ..., "closed" (no answer), "unfinished", "error"
    bytes_sent: int = 0
    bytes_read: int = 0
    complete: bool = False  # readers: the stream ended with `data: [DONE]`
    error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _status_of(raw: bytes) -> str:
    line = raw.split(b"\r\n", 1)[0]
    parts = line.split(b" ", 2)
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/") and parts[1].isdigit():
        return parts[1].decode()
    return "closed" if not raw else "garbled"


def _source_address(target: SlowTarget, client: int) -> str | None:
    if not target.own_addresses or not target.host.startswith("127."):
        return None
    return f"127.0.1.{client % 250 + 1}"


async def _connect(
    target: SlowTarget, client: int, rcvbuf: int | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if rcvbuf is not None:  # before connect: the window is negotiated in the handshake
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        source = _source_address(target, client)
        if source is not None:
            sock.bind((source, 0))
        sock.setblocking(False)
        await loop.sock_connect(sock, (target.host, target.port))
    except BaseException:
        sock.close()
        raise
    # A small StreamReader limit pauses reading early, so the slow read reaches the socket.
    return await asyncio.open_connection(sock=sock, limit=1024 if rcvbuf else 65536)


async def _trickle(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    res: SlowResult,
    trickle_s: float,
    give_up_s: float,
) -> bytes:
    """Send one byte per `trickle_s` until the server answers or closes; return the answer."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < give_up_s:
        try:
            first = await asyncio.wait_for(reader.read(65536), trickle_s)
        except TimeoutError:
            try:
                writer.write(b"a")
                await writer.drain()
                res.bytes_sent += 1
            except (ConnectionError, OSError):
                break  # closed on us: read what it said
            continue
        if not first:
            return b""
        rest = await asyncio.wait_for(reader.read(), 10.0)
        return first + rest
    with contextlib.suppress(TimeoutError, ConnectionError, OSError):
        return await asyncio.wait_for(reader.read(), 2.0)
    res.status = "unfinished"
    return b""


async def one_slow_request(
    target: SlowTarget,
    mode: str,
    client: int,
    *,
    t0: float,
    trickle_s: float,
    read_bytes: int,
    give_up_s: float,
) -> SlowResult:
    started = time.perf_counter()
    res = SlowResult(mode, client, started - t0, 0.0, "error")
    head = f"POST /v1/chat/completions HTTP/1.1\r\nhost: {target.host}:{target.port}\r\n"
    writer: asyncio.StreamWriter | None = None
    try:
        if mode == "reader":
            reader, writer = await _connect(target, client, rcvbuf=4096)
            body = json.dumps({
                "model": target.model,
                "messages": [{"role": "user", "content": "tell me a long story please"}],
                "max_tokens": target.reader_max_tokens,
                "temperature": 0.0,
                "stream": True,
            }).encode()  # fmt: skip
            request = (
                head + f"authorization: Bearer {target.api_key}\r\n"
                "content-type: application/json\r\n"
                f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
            ).encode() + body
            writer.write(request)
            await writer.drain()
            res.bytes_sent = len(request)
            got = bytearray()
            while chunk := await asyncio.wait_for(reader.read(read_bytes), give_up_s):
                got += chunk
                await asyncio.sleep(trickle_s)  # pacing the reader, not synchronisation
            res.status = _status_of(bytes(got))
            res.bytes_read = len(got)
            res.complete = b"data: [DONE]" in got
        else:
            reader, writer = await _connect(target, client)
            opening = head + ("x-slow: " if mode == "headers" else "")
            if mode == "body":
                # With a valid key: the gateway answers a keyless request 401 before reading
                # its body, so only an authenticated trickle reaches the body timeout.
                opening += (
                    f"authorization: Bearer {target.api_key}\r\n"
                    "content-type: application/json\r\ncontent-length: 1000\r\n\r\n{"
                )
            writer.write(opening.encode())
            await writer.drain()
            res.bytes_sent = len(opening)
            answer = await _trickle(reader, writer, res, trickle_s, give_up_s)
            res.bytes_read = len(answer)
            if res.status != "unfinished":
                res.status = _status_of(answer)
    except (TimeoutError, ConnectionError, OSError) as exc:
        res.status, res.error = "error", f"{type(exc).__name__}: {exc}"[:200]
    finally:
        if writer is not None:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()
    res.seconds = time.perf_counter() - started
    return res


async def run_slow_clients(
    target: SlowTarget,
    n: int,
    *,
    modes: Sequence[str],
    t0: float,
    start_at: float,
    stop_at: float,
    trickle_s: float = 1.0,
    read_bytes: int = 256,
    give_up_s: float = 120.0,
) -> list[SlowResult]:
    """`n` clients (kinds assigned round-robin) from `start_at` to `stop_at` (run seconds)."""
    results: list[SlowResult] = []

    async def client(i: int) -> None:
        mode = modes[i % len(modes)]
        # Stagger the arrivals over a few seconds: a crowd, not one synchronised burst.
        await asyncio.sleep(max(0.0, start_at + 0.05 * i - (time.perf_counter() - t0)))
        while time.perf_counter() - t0 < stop_at:
            results.append(
                await one_slow_request(
                    target, mode, i, t0=t0, trickle_s=trickle_s, read_bytes=read_bytes,
                    give_up_s=give_up_s,
                )
            )  # fmt: skip

    await asyncio.gather(*(client(i) for i in range(n)))
    return results
