"""Run ASGI apps on real loopback sockets in a background thread (one event loop per thread)."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import uvicorn

from tests.waiting import eventually


def bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


class ServerThread:
    """Serves each app on its own 127.0.0.1 port, all in one thread and one event loop.

    Only the first app's lifespan runs (the others are views on the same state).
    """

    def __init__(self, *apps: Any, first_options: dict[str, Any] | None = None) -> None:
        """`first_options`: extra uvicorn options of the first app (the gateway's protocol)."""
        self.sockets = [bound_socket() for _ in apps]
        self.ports = [s.getsockname()[1] for s in self.sockets]
        self.servers = [
            uvicorn.Server(
                uvicorn.Config(
                    app,
                    log_level="warning",
                    access_log=False,
                    lifespan="on" if i == 0 else "off",
                    timeout_graceful_shutdown=2,
                    **(first_options or {} if i == 0 else {}),
                )
            )
            for i, app in enumerate(apps)
        ]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports[0]}"

    def url_of(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i]}"

    def _run(self) -> None:
        async def main() -> None:
            self.loop = asyncio.get_running_loop()
            await asyncio.gather(
                *(
                    srv.serve(sockets=[sock])
                    for srv, sock in zip(self.servers, self.sockets, strict=True)
                )
            )

        asyncio.run(main())

    def start(self, timeout: float = 30.0) -> ServerThread:
        self.thread.start()
        eventually(
            lambda: all(s.started for s in self.servers),
            within_s=timeout,
            interval_s=0.02,
            what="servers to start",
            abort=lambda: None if self.thread.is_alive() else "server thread died during start-up",
        )
        return self

    def stop(self) -> None:
        for s in self.servers:
            s.should_exit = True
        self.thread.join(timeout=15)
        for sock in self.sockets:
            sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
