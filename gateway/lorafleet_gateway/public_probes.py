"""Keyless health paths on the public port, for load balancers in front of the gateway.

- `GET /healthz`: this process can answer API requests (its catalog is loaded). A load balancer
  (and the pod's readinessProbe in the chart) keeps sending traffic while it is 200, so with no
  healthy replica a client still gets lorafleet's OpenAI-style 503, not the ingress's own page.
- `GET /readyz`: ready to route: catalog loaded and at least one healthy replica.

Both say only yes or no: no version, no replica count, no tenant (the internal port's /readyz
has the detail). Anyone on the internet may call them, so they read two booleans and nothing
else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lorafleet_gateway.errors import error_response

if TYPE_CHECKING:
    from lorafleet_gateway.runtime import Gateway


def probe_routes(gw: Gateway) -> list[Route]:
    async def healthz(_request: Request) -> Response:
        if gw.holder.loaded:
            return JSONResponse({"status": "ok"})
        return error_response(503, "The gateway is starting.", code="not_ready")

    async def readyz(_request: Request) -> Response:
        if gw.ready:
            return JSONResponse({"status": "ready"})
        return error_response(503, "No replica is ready to serve.", code="not_ready")

    return [Route("/healthz", healthz, methods=["GET"]), Route("/readyz", readyz, methods=["GET"])]
