"""HTTP surface: the public OpenAI-compatible app and the internal metrics/probes app."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from lorafleet_core.apikeys import TenantKeys
from lorafleet_core.names import HEADER_ADAPTER_ID, HEADER_ADAPTER_TIER, HEADER_REPLICA_ID
from lorafleet_gateway.auth import authenticate
from lorafleet_gateway.catalog import CatalogSnapshot
from lorafleet_gateway.errors import APIError, error_response, model_not_found
from lorafleet_gateway.ratelimit import retry_after_headers
from lorafleet_gateway.relay import RelayResult, relay_stream
from lorafleet_gateway.reqlog import log_request
from lorafleet_gateway.router import plan_route
from lorafleet_gateway.runtime import Gateway
from lorafleet_gateway.upstream import Opened
from lorafleet_gateway.validation import parse_request

_log = logging.getLogger("lorafleet.gateway")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing more than `limit` bytes without reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise APIError(413, f"Request body exceeds {limit} bytes.", code="request_too_large")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise APIError(413, f"Request body exceeds {limit} bytes.", code="request_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


class CompletionHandler:
    """One completion request from arrival to its log line."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw

    async def __call__(self, request: Request, kind: str) -> Response:
        gw = self.gw
        t0 = time.perf_counter()
        gw.metrics.in_flight.inc()  # decremented in _finish, which every path reaches once
        snap = gw.holder.current  # this request's catalog version, whatever changes later
        log: dict[str, Any] = {"endpoint": kind, "tenant": None, "model": None}
        tenant = None
        estimate = 0
        try:
            tenant = _auth(snap, request)
            log["tenant"] = tenant.tenant
            req = parse_request(await read_body(request, gw.bounds.max_body_bytes), kind, gw.bounds)
            log["model"] = req.model
            target = snap.resolve(tenant.tenant, req.model)
            if target is None:
                raise model_not_found(req.model)
            record = snap.adapters[target.adapter_id]
            log["adapter_id"] = record.id
            estimate = req.tokens_estimate
            decision = gw.limiter.acquire(tenant.tenant, estimate, gw.limits_for(tenant))
            if not decision.allowed:
                estimate = 0
                gw.metrics.child(gw.metrics.rate_limited, decision.limit).inc()
                raise _rate_limited(decision.limit, decision.retry_after_s, decision.too_large)
            plan = plan_route(
                record.id, gw.tracker.views(), snap.owner_count(record.id), gw.thresholds
            )
            gw.metrics.child(gw.metrics.routing, plan.outcome).inc()
            log["route"] = plan.outcome
            opened = await gw.upstream.open(req, record, plan.candidates, estimate)
        except APIError as exc:
            if tenant is not None and estimate:
                gw.limiter.settle(tenant.tenant, estimate, 0)
            self._finish(log, t0, exc.status, error=exc.code)
            return exc.response()
        except Exception:
            _log.exception("unexpected error in the request path")
            if tenant is not None and estimate:
                gw.limiter.settle(tenant.tenant, estimate, 0)
            self._finish(log, t0, 500, error="internal_error")
            return error_response(500, "The gateway had an internal error.", code="internal_error")
        except BaseException:  # cancelled: the client went away before an answer
            if tenant is not None and estimate:
                gw.limiter.settle(tenant.tenant, estimate, 0)
            self._finish(log, t0, "client_closed")
            raise

        headers = {
            HEADER_ADAPTER_ID: record.id,
            HEADER_ADAPTER_TIER: opened.tier,
            HEADER_REPLICA_ID: opened.replica_id,
        }
        log.update(replica=opened.replica_id, tier=opened.tier, attempts=opened.attempts)
        if opened.chunks is None:  # non-stream, or an error answer
            gw.tracker.end(opened.replica_id, estimate)
            if opened.status == 200:
                self._settle(tenant.tenant, estimate, _json_usage(opened.first), log)
            else:  # the engine refused it (e.g. prompt too long): nothing was generated
                gw.limiter.settle(tenant.tenant, estimate, 0)
            self._finish(log, t0, opened.status)
            media = opened.response.headers.get("content-type", "application/json")
            return Response(opened.first, opened.status, headers=headers, media_type=media)

        # Metrics wait until the stream has ended: nothing more may delay the first byte.
        closer = _StreamCloser(self, opened, tenant.tenant, estimate, log, t0)
        return _RelayResponse(
            relay_stream(opened, req.include_usage, closer.result),
            closer,
            media_type="text/event-stream",
            headers=headers,
        )

    def _settle(
        self, tenant: str, estimate: int, usage: dict[str, Any] | None, log: dict[str, Any]
    ) -> None:
        if usage is None:
            # No usage known (error or aborted stream): keep the estimate charged.
            return
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        log.update(prompt_tokens=prompt, completion_tokens=completion)
        self.gw.limiter.settle(tenant, estimate, prompt + completion)
        self.gw.metrics.child(self.gw.metrics.tokens, "prompt").inc(prompt)
        self.gw.metrics.child(self.gw.metrics.tokens, "completion").inc(completion)

    def _finish(
        self, log: dict[str, Any], t0: float, status: int | str, error: str | None = None
    ) -> None:
        self.gw.metrics.child(self.gw.metrics.requests, log["endpoint"], str(status)).inc()
        self.gw.metrics.in_flight.dec()
        log["status"] = status
        log["duration_ms"] = round((time.perf_counter() - t0) * 1000, 2)
        if error:
            log["error"] = error
        log_request(**log)


class _StreamCloser:
    """Everything that must happen exactly once when a stream ends, however it ends.

    Called when the response ends, whatever happened: the body generator may never have
    started (the client left before the first write) and then runs no `finally`; the
    replica's in-flight tokens and connection must not leak.
    """

    def __init__(
        self,
        handler: CompletionHandler,
        opened: Opened,
        tenant: str,
        estimate: int,
        log: dict[str, Any],
        t0: float,
    ) -> None:
        self.handler = handler
        self.opened = opened
        self.tenant = tenant
        self.estimate = estimate
        self.log = log
        self.t0 = t0
        self.result = RelayResult()
        self.closed = False

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        gw, result, opened = self.handler.gw, self.result, self.opened
        ttft = opened.first_at - self.t0
        gw.metrics.child(gw.metrics.ttft, opened.tier).observe(ttft)
        self.log["ttft_ms"] = round(ttft * 1000, 2)
        gw.metrics.tenants.observe(self.tenant, ttft > gw.settings.ttft_target_s)
        gw.tracker.end(opened.replica_id, self.estimate)
        self.handler._settle(self.tenant, self.estimate, result.usage, self.log)
        completion = self.log.get("completion_tokens") or 0
        if result.completed and completion > 1 and result.finished_at:
            gw.metrics.tpot.observe((result.finished_at - opened.first_at) / (completion - 1))
        status: int | str = 200
        if result.error:
            status = "stream_error"
        elif not result.completed:
            status = "client_closed"
        self.handler._finish(self.log, self.t0, status, error=result.error)
        await opened.response.aclose()


class _RelayResponse(StreamingResponse):
    def __init__(self, content: AsyncIterator[bytes], closer: _StreamCloser, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.closer = closer

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.closer.close()


def _auth(snap: CatalogSnapshot, request: Request) -> TenantKeys:
    return authenticate(snap.keys, request.headers.get("authorization"))


def _json_usage(body: bytes) -> dict[str, Any] | None:
    try:
        usage = json.loads(body).get("usage")
    except (ValueError, AttributeError):
        return None
    return usage if isinstance(usage, dict) else None


def _rate_limited(limit: str, retry_after_s: float, too_large: bool) -> APIError:
    if too_large:
        message = "Request too large: its estimated tokens exceed your tokens-per-minute limit."
    else:
        what = "requests per second" if limit == "requests" else "tokens per minute"
        message = (
            f"Rate limit reached for {what}. Please try again in {retry_after_s * 1000:.0f}ms."
        )
    return APIError(
        429, message, code="rate_limit_exceeded", headers=retry_after_headers(retry_after_s)
    )


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

    handler = CompletionHandler(gw)

    async def api_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, APIError)
        return exc.response()

    async def http_error(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        code = "unknown_url" if exc.status_code == 404 else None
        return error_response(exc.status_code, str(exc.detail), code=code)

    async def chat_completions(request: Request) -> Response:
        return await handler(request, "chat")

    async def completions(request: Request) -> Response:
        return await handler(request, "completion")

    async def list_models(request: Request) -> Response:
        snap = gw.holder.current
        tenant = _auth(snap, request)
        data = [_model_card(m, tenant.tenant) for m in snap.models_of(tenant.tenant)]
        return JSONResponse({"object": "list", "data": data})

    async def get_model(request: Request) -> Response:
        model = request.path_params["model"]
        snap = gw.holder.current
        tenant = _auth(snap, request)
        if snap.resolve(tenant.tenant, model) is None:
            raise model_not_found(model)
        return JSONResponse(_model_card(model, tenant.tenant))

    # Plain Starlette, not FastAPI: the request path is hot and parses its own body; the
    # dependency machinery and extra middleware would add to every first token.
    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", get_model, methods=["GET"]),
        ],
        exception_handlers={APIError: api_error, StarletteHTTPException: http_error},
        lifespan=lifespan,
    )


def _model_card(model: str, tenant: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": 0, "owned_by": tenant}


def create_internal_app(gw: Gateway) -> FastAPI:
    """Metrics and probes, served on the internal port only."""
    app = FastAPI(title="lorafleet gateway (internal)", docs_url=None, redoc_url=None)

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
        }
        return JSONResponse(body, status_code=200 if gw.ready else 503)

    return app
