"""HTTP surface: the public OpenAI-compatible app and the internal metrics/probes app."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from lorafleet_core.web.request_ids import RequestIdMiddleware
from lorafleet_gateway.completion_endpoint import CompletionEndpoint, authenticate_request
from lorafleet_gateway.edge import EdgeMiddleware, edge_limits
from lorafleet_gateway.errors import APIError, http_error_response, model_not_found
from lorafleet_gateway.public_probes import probe_routes
from lorafleet_gateway.runtime import Gateway


def create_public_app(gw: Gateway, *, manage_lifecycle: bool = True) -> Starlette:
    """The OpenAI-compatible API. With `manage_lifecycle`, the app starts and stops `gw`."""

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncGenerator[None]:
        if manage_lifecycle:
            await gw.start()
        try:
            yield
        finally:
            if manage_lifecycle:
                await gw.stop()

    async def api_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, APIError)
        return exc.response()

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return http_error_response(request, exc)

    async def list_models(request: Request) -> Response:
        snap = gw.holder.current
        tenant = authenticate_request(snap, request)
        data = [_model_card(m, tenant.tenant) for m in snap.models_of(tenant.tenant)]
        return JSONResponse({"object": "list", "data": data})

    async def stored_response(request: Request) -> Response:
        # Retrieving, cancelling or deleting a stored response: nothing is ever stored (the
        # next request may go to another replica), so say so rather than a bare 404.
        authenticate_request(gw.holder.current, request)
        raise APIError(
            404,
            "Responses are not stored by this gateway (store is ignored), so they cannot be "
            "retrieved, cancelled or deleted: keep the output of POST /v1/responses.",
            code="response_not_stored",
        )

    async def get_model(request: Request) -> Response:
        model = request.path_params["model"]
        snap = gw.holder.current
        tenant = authenticate_request(snap, request)
        if snap.resolve(tenant.tenant, model) is None:
            raise model_not_found(model)
        return JSONResponse(_model_card(model, tenant.tenant))

    # Plain Starlette, not FastAPI: the request path is hot and parses its own body; the
    # dependency machinery would add to every first token. The one middleware is pure ASGI.
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", CompletionEndpoint(gw, "chat"), methods=["POST"]),
            Route("/v1/completions", CompletionEndpoint(gw, "completion"), methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/responses", CompletionEndpoint(gw, "responses"), methods=["POST"]),
            Route("/v1/responses/{rest:path}", stored_response, methods=["GET", "POST", "DELETE"]),
            Route("/v1/models/{model:path}", get_model, methods=["GET"]),
            *probe_routes(gw),
        ],
        exception_handlers={APIError: api_error, StarletteHTTPException: http_error},
        # Body size and time, unhandled errors, early-failure limits: see edge.py.
        middleware=[
            Middleware(RequestIdMiddleware),  # first: the edge's refusals carry the id too
            Middleware(
                EdgeMiddleware,
                limits=edge_limits(gw.settings),
                metrics=gw.metrics,
                known_key=lambda token: gw.holder.current.keys.tenant_for(token) is not None,
                bodies=gw.bodies,
            ),
        ],
        lifespan=lifespan,
    )
    # A path with a trailing slash is an unknown URL (404), as at OpenAI. Starlette's default
    # answered it 307 with an empty body, before any key check, pointing at whatever host the
    # request's Host header named.
    app.router.redirect_slashes = False
    return app


def _model_card(model: str, tenant: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": 0, "owned_by": tenant}


def create_internal_app(gw: Gateway) -> FastAPI:
    """Metrics and probes, served on the internal port only (errors in OpenAI's shape too,
    no OpenAPI schema)."""
    app = FastAPI(
        title="lorafleet gateway (internal)",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        redirect_slashes=False,
    )

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        return http_error_response(request, exc)

    app.add_exception_handler(StarletteHTTPException, http_error)

    @app.get("/metrics")
    async def metrics() -> Response:
        snap = gw.holder.current
        gw.metrics.healthy_replicas.set(len(gw.tracker.healthy_ids()))
        gw.metrics.catalog_version.set(snap.version)
        gw.metrics.aliases.set(len(snap.aliases))
        return Response(generate_latest(gw.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> Response:
        return JSONResponse({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        snap = gw.holder.current
        body = {
            "catalog_loaded": gw.holder.loaded,
            "catalog_version": snap.version,
            "healthy_replicas": len(gw.tracker.healthy_ids()),
            "draining": gw.draining,
        }
        return JSONResponse(body, status_code=200 if gw.ready else 503)

    return app
