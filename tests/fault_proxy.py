"""A loopback TCP proxy that can be cut: what an agent sees when its vLLM dies and comes back.

`cut()` resets every open connection (SO_LINGER 0: an RST, as a killed process's sockets give)
and closes the listening socket, so new connections are refused; `restore()` listens on the same
port again. `slow(bytes_per_s)` throttles what flows back from the engine (a slow link: the
answer then takes seconds to reach the agent, so a cut lands mid-stream however fast the tiny
engine generates). Real sockets end to end: the agent's HTTP client meets a real reset and a
real refusal, with no stand-in for the agent or vLLM. `stall()` is a stopped engine (SIGSTOP):
connections are still accepted, as the kernel does for a stopped process, but nothing is
forwarded either way until `resume()`, not even what a slowed link had read and not yet sent.
Several agents can share one real vLLM while each has its own "engine" that fails alone.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time


class FaultProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._rate: float | None = None  # bytes/s engine -> agent; None: full speed
        self.hung_up = 0  # connections the agent's side closed (its recv saw end of stream)
        self.sent_back = 0  # bytes forwarded engine -> agent so far
        # Per direction (back: engine -> agent), cleared while stalled.
        self._flowing = {False: threading.Event(), True: threading.Event()}
        for event in self._flowing.values():
            event.set()
        self.held: list[bytes] = []  # what a stall is holding back right now
        self._cuts = 0
        self._listener = self._listen(0)
        self.port: int = self._listener.getsockname()[1]
        self._start_accepting()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _listen(self, port: int) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
        return sock

    def _start_accepting(self) -> None:
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by cut()
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b, back in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pump, args=(a, b, back), daemon=True).start()

    def slow(self, bytes_per_s: float | None) -> None:
        """Throttle the engine's answers (None: full speed again)."""
        self._rate = bytes_per_s

    def _pump(self, src: socket.socket, dst: socket.socket, back: bool) -> None:
        cuts = self._cuts
        try:
            while data := src.recv(65536):
                if not self._hold_while_stalled(data, back, cuts):
                    return
                rate = self._rate if back else None
                if not rate:
                    dst.sendall(data)
                    self._count(back, len(data))
                    continue
                # Throttled by what is sent, not by the read: a read issued before slow() (a
                # kept-alive connection's pump waiting in recv) may return a whole answer.
                for i in range(0, len(data), 256):
                    # A stall also holds what was read before it and not yet sent: a slow
                    # link's pump may already hold the rest of an answer the engine finished,
                    # which would otherwise trickle through a stopped engine.
                    stalled = not self._flowing[back].is_set()
                    if stalled and not self._hold_while_stalled(data[i:], back, cuts):
                        return
                    if not self._rate:  # slow(None) meanwhile: the rest at full speed at once
                        dst.sendall(data[i:])
                        break
                    piece = data[i : i + 256]
                    dst.sendall(piece)
                    self._count(back, len(piece))
                    time.sleep(len(piece) / rate)  # the slow link itself, not synchronisation
            if not back:
                with self._lock:
                    self.hung_up += 1
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def _hold_while_stalled(self, data: bytes, back: bool, cuts: int) -> bool:
        """Wait out a stall holding `data` (listed in `held`); False: cut meanwhile, drop it."""
        if self._flowing[back].is_set():
            return True
        with self._lock:
            self.held.append(data)
        self._flowing[back].wait()
        with self._lock:
            self.held.remove(data)
        return self._cuts == cuts  # killed while stopped: what it held is lost with it

    def _count(self, back: bool, size: int) -> None:
        if back:
            with self._lock:
                self.sent_back += size

    def stall(self, *, answers_only: bool = False) -> None:
        """The engine stops (SIGSTOP): accepted, never answered, until `resume()`.
        `answers_only`: what the agent sends still reaches the engine, whose answers are held
        (the engine acted on a call, then stopped before its answer left)."""
        self._flowing[True].clear()
        if not answers_only:
            self._flowing[False].clear()

    def resume(self) -> None:
        for event in self._flowing.values():
            event.set()

    def cut(self) -> None:
        """The engine dies: open connections reset, new ones refused."""
        self._cuts += 1
        self.resume()  # a stalled pump wakes to meet the reset
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (Linux)
        self._listener.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            # shutdown wakes the pump blocked in recv (a bare close from another thread would
            # not, and would defer the reset until it returns); close then aborts with an RST.
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def restore(self) -> None:
        """The engine is back on its port."""
        self._listener = self._listen(self.port)
        self._start_accepting()

    def close(self) -> None:
        self.cut()
