"""The data port: OpenAI completions from the gateway, passed through to vLLM with tier headers.

Admission: `model` must be the id of an adapter whose registry record the agent holds. Nothing
in a request is ever used as a path or URL to load from: an unknown id (a path, a URL, anything)
is answered 404 `adapter_not_registered` and nothing is fetched.

Two request headers from the gateway (lorafleet_core.wire.headers): `HEADER_TOKENS_ESTIMATE`, the
gateway's token estimate, counted as this request's tokens in flight; `HEADER_LOADED_FROM` on a
request retried after the gateway's on-demand load, the tier that load found the adapter in.
The request reports the slower of it and where it found the adapter itself (`x-adapter-tier`).
And `x-request-id` (lorafleet_core.web.request_ids): the request's id, echoed, named in the
agent's error bodies and log lines, and passed to vLLM, which takes it as its request id.
With tracing on (lorafleet_core.web.tracing) a request is a span continuing the gateway's
`traceparent`, with children for the adapter's acquire and the engine call, whose `traceparent`
goes to vLLM (which joins the trace when it exports its own).

Every route but `/healthz` requires the gateway's data credential first (lorafleet_agent.data_auth
says why it is its own token): 401 before the body is read.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind

from lorafleet_agent.engine_waits import EngineHung, EngineWaits
from lorafleet_agent.http_edge import APP_OPTIONS, error_response, install_openai_errors, read_json
from lorafleet_agent.internal_auth import InternalAuth
from lorafleet_agent.manager import AdapterManager, CacheFull, Lease
from lorafleet_agent.object_store import FetchError, StoreUnavailable
from lorafleet_agent.requests_stats import RequestStats, SseTokenCounter, request_tokens
from lorafleet_agent.verifier import VerificationError
from lorafleet_agent.vllm_client import VllmError
from lorafleet_core.web import request_ids, tracing
from lorafleet_core.web.client_gone import ClientDisconnect, unless_client_leaves
from lorafleet_core.wire.error_codes import ErrorCode
from lorafleet_core.wire.headers import (
    HEADER_ADAPTER_ID,
    HEADER_ADAPTER_TIER,
    HEADER_LOADED_FROM,
    HEADER_REPLICA_ID,
    HEADER_TOKENS_ESTIMATE,
)
from lorafleet_core.wire.openai_stream import AnswerUsage, usage_tokens
from lorafleet_core.wire.tiers import parse_tier

log = logging.getLogger("lorafleet.agent.requests")
_tracer = trace.get_tracer("lorafleet_agent")


# Bodies come from the gateway (at most its max_body_bytes, 1 MiB by default, re-encoded as
# ASCII JSON: up to three times that); a bound for everything else.
MAX_BODY_BYTES = 8 * 2**20


def build_data_app(
    manager: AdapterManager,
    stats: RequestStats,
    replica_id: str,
    auth: InternalAuth,
    *,
    waits: EngineWaits | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> FastAPI:
    waits = waits if waits is not None else EngineWaits()
    app = FastAPI(title="lorafleet agent (data)", **APP_OPTIONS)
    app.add_middleware(request_ids.RequestIdMiddleware)
    install_openai_errors(app)

    def unauthorized(request: Request) -> JSONResponse | None:
        if auth.allows(request.headers.get("authorization")):
            return None
        manager.metrics.data_auth_failures.inc()
        client = request.client.host if request.client else "?"
        log.warning("refused %s from %s: no valid data credential", request.url.path[:200], client)
        return error_response(
            401, "a valid data-port credential is required", "unauthorized",
            **{"www-authenticate": "Bearer"},
        )  # fmt: skip

    async def proxy(request: Request, path: str) -> Response:
        """`serve` inside the request's span, which ends with the response, or with the relay
        of a streamed one."""
        span = tracing.start(
            _tracer,
            "POST " + path,
            request.headers,
            attributes={"lorafleet.replica_id": replica_id},
        )
        try:
            with tracing.current(span):
                response = await serve(request, path, span)
        except BaseException:
            span.end()
            raise
        span.set_attribute("http.response.status_code", response.status_code)
        if not isinstance(response, StreamingResponse):  # else the relay ends it
            span.end()
        return response

    async def serve(request: Request, path: str, span: Span) -> Response:
        if (refused := unauthorized(request)) is not None:
            return refused
        body: Any = await read_json(request, max_body_bytes)  # BodyRefused: 413 or 400
        if not isinstance(body, dict) or not isinstance(body.get("model"), str):
            return error_response(400, "`model` (the adapter id) is required", "invalid_request")
        adapter_id: str = body["model"]
        span.set_attribute("lorafleet.adapter_id", adapter_id)
        base = {HEADER_ADAPTER_ID: adapter_id, HEADER_REPLICA_ID: replica_id}
        if not manager.ready:
            return error_response(
                503, "replica is starting: vLLM is not ready", ErrorCode.ENGINE_UNAVAILABLE
            )
        if adapter_id in manager.failed:
            return error_response(
                422, manager.failed[adapter_id], ErrorCode.ADAPTER_REJECTED, **base
            )
        if not manager.admits(adapter_id):
            return error_response(
                404,
                f"adapter {adapter_id!r} is not registered on replica {replica_id}; "
                "post its record to the internal load endpoint first",
                ErrorCode.ADAPTER_NOT_REGISTERED,
                **base,
            )
        tokens = request_tokens(request.headers.get(HEADER_TOKENS_ESTIMATE), body)
        loaded_from = parse_tier(request.headers.get(HEADER_LOADED_FROM))
        stats.admit(tokens)
        started = False
        handed_off = False  # a stream releases the lease and counters itself when it ends
        lease: Lease | None = None
        try:
            try:
                with tracing.span(_tracer, "adapter acquire") as acquiring:
                    lease = await manager.acquire(adapter_id, loaded_from=loaded_from)
                    acquiring.set_attribute("lorafleet.adapter.tier", lease.tier.value)
            except VerificationError as exc:
                return error_response(
                    422,
                    manager.failed.get(adapter_id, str(exc)),
                    ErrorCode.ADAPTER_REJECTED,
                    **base,
                )
            except VllmError as exc:
                if exc.status == 503:  # vLLM went away: nothing started, another replica may
                    return error_response(
                        503, "vLLM is not answering", ErrorCode.ENGINE_UNAVAILABLE, **base
                    )
                return error_response(
                    502,
                    f"could not load adapter {adapter_id}: {exc}",
                    ErrorCode.ADAPTER_LOAD_FAILED,
                    **base,
                )
            except StoreUnavailable as exc:
                return error_response(
                    503,
                    f"adapter {adapter_id} is not cached here and {exc}",
                    ErrorCode.STORE_UNAVAILABLE,
                    **base,
                )
            except FetchError as exc:
                return error_response(
                    502,
                    f"could not load adapter {adapter_id}: {exc}",
                    ErrorCode.ADAPTER_LOAD_FAILED,
                    **base,
                )
            except CacheFull as exc:
                return error_response(503, str(exc), ErrorCode.CACHE_FULL, **base)
            headers = {**base, HEADER_ADAPTER_TIER: lease.tier.value}
            stats.count_request(adapter_id, lease.tier)
            try:
                # Retries once after a resync when vLLM lost the registration (it restarted).
                # A gateway that hangs up meanwhile cancels it: vLLM sees its client leave and
                # stops generating (nothing else here would notice before the answer starts).
                with (
                    waits.on_engine(),  # failed if vLLM stays hung (engine_waits)
                    tracing.span(_tracer, "engine", kind=SpanKind.CLIENT) as engine,
                ):  # to vLLM's answer headers; its traceparent goes with the request
                    resp = await unless_client_leaves(
                        request.receive, manager.open_completion(adapter_id, path, body)
                    )
                    engine.set_attribute("http.response.status_code", resp.status_code)
            except ClientDisconnect:
                return Response(status_code=499)  # nobody is left to read it
            except EngineHung:
                # Nothing of the answer has left: the gateway tries another replica.
                return error_response(
                    503, "vLLM is hung: no answer in time", ErrorCode.ENGINE_UNAVAILABLE, **headers
                )
            except (httpx.HTTPError, VllmError, FetchError, VerificationError, CacheFull):
                # Nothing reached vLLM's engine: 503 lets the gateway try another replica.
                return error_response(
                    503, "vLLM is not answering", ErrorCode.ENGINE_UNAVAILABLE, **headers
                )
            stats.start()
            started = True
            log.info(
                "%s tier=%s vllm_status=%d",
                path,
                lease.tier.value,
                resp.status_code,
                extra={"adapter_id": adapter_id},  # a field of the line (lorafleet_core.logs)
            )
            media = resp.headers.get("content-type", "application/json")
            if resp.status_code == 200 and not body.get("stream"):
                # Relayed as it arrives, its usage read on the way: held whole, 64 answers of
                # 10 MB were 640 MB here. A cut shows as short of the Content-Length.
                if "content-length" in resp.headers and "content-encoding" not in resp.headers:
                    headers["content-length"] = resp.headers["content-length"]
                handed_off = True
                return StreamingResponse(
                    _relay_answer(resp, manager, stats, waits, lease, tokens, span),
                    media_type=media,
                    headers=headers,
                )
            if resp.status_code != 200:  # vLLM's error answer: small, passed on whole
                try:
                    content = await unless_client_leaves(request.receive, resp.aread())
                except ClientDisconnect:
                    return Response(status_code=499)
                finally:
                    await resp.aclose()
                return Response(
                    content, status_code=resp.status_code, media_type=media, headers=headers
                )
            handed_off = True
            return StreamingResponse(
                _relay(resp, manager, stats, waits, lease, tokens, span),
                media_type="text/event-stream",
                headers=headers,
            )
        finally:
            if not handed_off:
                await _settle(manager, stats, lease, tokens, started=started)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await proxy(request, "/v1/chat/completions")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await proxy(request, "/v1/completions")

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        return await proxy(request, "/v1/responses")

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


async def _relay(
    resp: httpx.Response,
    manager: AdapterManager,
    stats: RequestStats,
    waits: EngineWaits,
    lease: Lease,
    tokens: int,
    span: Span,
) -> AsyncIterator[bytes]:
    counter = SseTokenCounter()
    try:
        async for chunk in _engine_chunks(resp, waits):
            stats.count_tokens(lease.adapter_id, counter.feed(chunk))
            yield chunk
    finally:
        try:
            await resp.aclose()
        finally:
            span.end()
            await _settle(manager, stats, lease, tokens, started=True)


async def _relay_answer(
    resp: httpx.Response,
    manager: AdapterManager,
    stats: RequestStats,
    waits: EngineWaits,
    lease: Lease,
    tokens: int,
    span: Span,
) -> AsyncIterator[bytes]:
    """A non-stream answer passed on as it arrives; its completion tokens are counted from
    its usage at the end (AnswerUsage: bounded memory, never a parse of the whole)."""
    reader = AnswerUsage()
    try:
        async for chunk in _engine_chunks(resp, waits):
            reader.feed(chunk)
            yield chunk
        usage = reader.usage()
        if usage is not None:
            stats.count_tokens(lease.adapter_id, usage_tokens(usage)[1])
    finally:
        try:
            await resp.aclose()
        finally:
            span.end()
            await _settle(manager, stats, lease, tokens, started=True)


async def _engine_chunks(resp: httpx.Response, waits: EngineWaits) -> AsyncIterator[bytes]:
    """vLLM's answer as it arrives; each read is a wait on the engine (EngineHung once it has
    been hung too long: the answer is cut, as when vLLM dies)."""
    chunks = resp.aiter_raw()
    while True:
        with waits.on_engine():
            chunk = await anext(chunks, None)
        if chunk is None:
            return
        yield chunk


async def _settle(
    manager: AdapterManager, stats: RequestStats, lease: Lease | None, tokens: int, *, started: bool
) -> None:
    """Give back what one request held: its adapter reference, then its counts.

    The counts are given back even when the release is interrupted: a stream whose client
    left is cancelled, and a second cancellation can land on the release's await (the slot
    condition), which once left a running request and its tokens counted for ever.
    """
    try:
        if lease is not None:
            await manager.release(lease.adapter_id)
    finally:
        stats.finish(tokens, started=started)
