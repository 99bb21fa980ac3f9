"""Raw-socket HTTP for the edge tests of the gateway and the control API: what a hostile client
does that an HTTP client library will not (unfinished headers, bodies that never end)."""

from __future__ import annotations

import contextlib
import socket
import threading


def read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes (which must happen). A reset counts as the close: a
    server that answers before reading what was sent closes with unread bytes, which TCP turns
    into a reset."""
    out = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            out += chunk
    return out


def send_until_answered(
    sock: socket.socket, head: bytes, total: int, piece: bytes = b"x" * 65536
) -> tuple[bytes, int]:
    """Send `head`, then `piece` repeatedly up to `total` bytes, while a thread reads the
    answer; stop sending once it begins. Returns (the answer, bytes sent when it began; what
    counts as sent includes the loopback socket buffers, a few MiB)."""
    received: list[bytes] = []
    sent_at_answer: list[int] = []
    answered = threading.Event()
    sent = 0

    def read() -> None:
        first = sock.recv(65536)
        sent_at_answer.append(sent)
        answered.set()
        received.append(first + read_all(sock))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    sock.sendall(head)
    with contextlib.suppress(OSError):  # the server may close first
        while sent < total and not answered.is_set():
            sock.sendall(piece)
            sent += len(piece)
    reader.join(10)
    return received[0], sent_at_answer[0]
