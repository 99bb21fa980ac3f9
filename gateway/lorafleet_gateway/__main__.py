"""`python -m lorafleet_gateway`: the public API and the internal port in one process."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn

from lorafleet_core.web import tracing
from lorafleet_core.web.http_protocol import hardened_protocol
from lorafleet_gateway.reqlog import configure_logging, log_request
from lorafleet_gateway.routes import create_internal_app, create_public_app
from lorafleet_gateway.runtime import Gateway
from lorafleet_gateway.settings import GatewaySettings, settings_from_env


def public_protocol_options(settings: GatewaySettings) -> dict[str, Any]:
    """uvicorn options of the public port: header size, header and write time limits
    (lorafleet_core.web.http_protocol, refusals in the request log), and
    whose forwarded headers are believed (`forwarded_allow_ips`; by default nobody's)."""
    trusted = settings.forwarded_allow_ips
    options: dict[str, Any] = {
        "http": hardened_protocol(
            settings.max_header_bytes,
            settings.header_timeout_s,
            settings.write_timeout_s,
            log_refusal=_log_refusal,
        ),
        "timeout_keep_alive": settings.keep_alive_timeout_s,
        "ws": "none",  # the OpenAI API has no WebSocket route: refuse upgrades outright
        # The early-failure limit charges the client address: it may come from X-Forwarded-For
        # only when the peer is a configured proxy (an ingress), never by default.
        "proxy_headers": trusted is not None,
    }
    if trusted is not None:
        options["forwarded_allow_ips"] = trusted
    return options


def _log_refusal(status: int | str, code: str) -> None:
    log_request(endpoint="other", status=status, error=code)


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signals to `serve` and says when it listens.

    Each uvicorn server takes SIGTERM for itself; with two in one process the internal one
    (installed last) would stop first, so probes and metrics would vanish while the public
    port still drains, and the public one would only hear of the signal afterwards.
    """

    def __init__(self, config: uvicorn.Config, on_listening: Callable[[], None] | None = None):
        super().__init__(config)
        self._on_listening = on_listening

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)  # runs the lifespan, then binds
        if self.started and self._on_listening is not None:
            self._on_listening()


async def serve(settings: GatewaySettings) -> None:
    """Both ports until SIGTERM/SIGINT, then drain: the public port stops accepting, running
    requests get `drain_timeout_s` to finish (then they are cut), /readyz answers 503 on both
    ports meanwhile; the internal port (metrics, probes) closes last. A second signal quits
    at once."""
    gw = Gateway(settings)
    gw.public_port_open = False  # until the public socket is bound (see Gateway.ready)

    def listening() -> None:
        gw.public_port_open = True

    public = _Server(
        uvicorn.Config(
            create_public_app(gw),
            host=settings.host,
            port=settings.port,
            log_level="warning",
            access_log=False,  # one structured line per request comes from the gateway itself
            log_config=None,  # uvicorn's dictConfig would close the gateway's log handler
            timeout_graceful_shutdown=settings.drain_timeout_s,
            **public_protocol_options(settings),
        ),
        on_listening=listening,
    )
    internal = _Server(
        uvicorn.Config(
            create_internal_app(gw),
            host=settings.host,
            port=settings.internal_port,
            log_level="warning",
            access_log=False,
            log_config=None,
            lifespan="off",
        )
    )

    def stop() -> None:
        if gw.draining:
            public.force_exit = True
        gw.draining = True
        public.should_exit = True

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    internal_task = asyncio.create_task(internal.serve(), name="internal-port")
    try:
        await public.serve()
    finally:
        internal.should_exit = True
        await internal_task


def main() -> None:
    configure_logging()  # first: a setting that fails to parse is a line of the log too
    settings = settings_from_env()
    configure_logging(settings.log_level)
    tracing.setup("lorafleet-gateway")  # only with an OTLP endpoint in the OTEL_* variables
    # uvloop when installed (as uvicorn.run would pick it): it roughly halves the event loop's
    # per-request cost, most of what a proxy spends.
    try:
        import uvloop

        loop_factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        loop_factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve(settings))


if __name__ == "__main__":
    main()
