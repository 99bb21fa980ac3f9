"""One completion route's ASGI app: a request from arrival to its log line (chat,
completions and responses; the apps are lorafleet_gateway.routes)."""

from __future__ import annotations

import logging
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from lorafleet_core import logs
from lorafleet_core.api.apikeys import TenantKeys
from lorafleet_core.planning.traffic_split import user_of
from lorafleet_core.web import tracing
from lorafleet_core.web.client_gone import unless_client_leaves
from lorafleet_core.wire.headers import HEADER_ADAPTER_ID, HEADER_ADAPTER_TIER, HEADER_REPLICA_ID
from lorafleet_core.wire.openai_stream import answer_usage, usage_tokens
from lorafleet_core.wire.tiers import MERGED_TIER
from lorafleet_gateway.auth import authenticate, single_authorization
from lorafleet_gateway.catalog import CatalogSnapshot
from lorafleet_gateway.concurrency import ConcurrencyLimited
from lorafleet_gateway.errors import APIError, error_response, model_not_found
from lorafleet_gateway.pool_router import plan_pool_route
from lorafleet_gateway.relay import (
    AnswerCut,
    AnswerRelay,
    RelayResult,
    UsageFilter,
    relay_stream,
)
from lorafleet_gateway.reqlog import log_request
from lorafleet_gateway.reservation import RateLimited, Reservation
from lorafleet_gateway.runtime import Gateway
from lorafleet_gateway.upstream import PATHS, Opened
from lorafleet_gateway.validation import CompletionRequest, check_body_headers, parse_request

_log = logging.getLogger(__name__)
_tracer = trace.get_tracer("lorafleet_gateway")

# The GenAI semantic conventions' operation of each endpoint (a Responses request is a chat).
GEN_AI_OPERATION = {"chat": "chat", "completion": "text_completion", "responses": "chat"}
# What the request span says at its end, from its log line: never the key, never the prompt.
_SPAN_ATTRIBUTES = {
    "model": "gen_ai.request.model",  # the alias the client sent
    "adapter_id": "gen_ai.response.model",  # the immutable adapter that served it
    "prompt_tokens": "gen_ai.usage.input_tokens",
    "completion_tokens": "gen_ai.usage.output_tokens",
    "tenant": "lorafleet.tenant",
    "route": "lorafleet.route",
    "replica": "lorafleet.replica_id",
    "tier": "lorafleet.adapter.tier",
    "attempts": "lorafleet.attempts",
}

# The parameter that bounds a request's output, by endpoint (set when a request has none).
OUTPUT_BOUND = {"chat": "max_tokens", "completion": "max_tokens", "responses": "max_output_tokens"}


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


class CompletionEndpoint:
    """ASGI app of one completion route: one request from arrival to its log line.

    The order is the request's: authenticate, parse, resolve the alias, reserve its tokens
    (`Reservation`, released once however the request ends), route, `upstream.open` (one
    `try_replica` per candidate), answer or relay the stream, and only then the metrics and the
    log line (nothing more may delay the first byte). The response is sent inside the
    reservation, so a stream holds its tokens until its last byte or the client leaving.
    """

    def __init__(self, gw: Gateway, kind: str) -> None:
        self.gw = gw
        self.kind = kind

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gw = self.gw
        out = _Outcome(self.kind)
        # The request's span, a child of the client's `traceparent` when it sent one; ended in
        # _finish, after the last byte of a relayed stream.
        out.span = tracing.start(
            _tracer,
            "POST " + PATHS[self.kind],
            Headers(scope=scope),
            attributes={"gen_ai.operation.name": GEN_AI_OPERATION[self.kind]},
        )
        gw.metrics.in_flight.inc()  # decremented in _finish, which every path reaches once
        watched = _WatchedSend(send)
        try:
            with tracing.current(out.span):
                await self._serve(Request(scope, receive), out, scope, receive, watched)
        except APIError as exc:
            if isinstance(exc, RateLimited | ConcurrencyLimited):
                gw.metrics.child(gw.metrics.rate_limited, exc.limit).inc()
            if watched.started:  # cannot happen today: every APIError precedes the answer
                raise
            out.status, out.error = exc.status, exc.code
            await exc.response()(scope, receive, send)
        except ClientDisconnect:  # left before its answer started (unless_client_leaves)
            out.status = "client_closed"
        except Exception as exc:
            if not watched.started:
                _log.exception("unexpected error in the request path")
                out.status, out.error = 500, "internal_error"
                response = error_response(
                    500, "The gateway had an internal error.", code="internal_error"
                )
                await response(scope, receive, send)
            elif not isinstance(exc, OSError | ClientDisconnect):
                _log.exception("unexpected error while answering")
        except BaseException:  # cancelled: the client went away before an answer
            if out.status is None:
                out.status = "client_closed"
            raise
        finally:
            self._finish(out)

    async def _serve(
        self, request: Request, out: _Outcome, scope: Scope, receive: Receive, send: Send
    ) -> None:
        gw = self.gw
        snap = gw.holder.current  # this request's catalog version, whatever changes later
        with tracing.span(_tracer, "auth"):
            tenant = authenticate_request(snap, request)  # its errors name no key
        out.log["tenant"] = tenant.tenant
        logs.bind(tenant=tenant.tenant)  # every line logged for this request names them
        check_body_headers(request.headers)  # 415 for a body that is not plain JSON
        body = await read_body(request, gw.bounds.max_body_bytes)
        req = parse_request(body, self.kind, gw.bounds)
        out.log["model"] = req.model
        cap = snap.max_tokens_cap(gw.bounds.max_tokens_limit)
        if req.max_tokens_param is not None and req.max_tokens > cap:  # the pool's context
            param = req.max_tokens_param
            raise APIError(400, f"'{param}' must be between 1 and {cap}.", param=param)
        if req.max_tokens_param is None and cap < (snap.max_model_len or 0):
            # Unbounded, vLLM generates up to the model's whole context (ignore_eos or
            # min_tokens see that it does), past the cap an explicit bound is held to. vLLM
            # clamps a bound to what the context leaves; within the limit there is no gap.
            req.body[OUTPUT_BOUND[self.kind]] = cap
        target = snap.resolve(tenant.tenant, req.model)
        if target is None:
            raise model_not_found(req.model)
        # One version per request (a weighted alias splits by user, else at random); the
        # answer's model, x-adapter-id, usage and the log name the version that served it.
        record = snap.adapters[target.version_for(user_of(req.body))]
        out.log["adapter_id"] = record.id
        logs.bind(adapter_id=record.id)
        limits = gw.limits_for(tenant)
        async with Reservation(
            gw.limiter,
            gw.tracker,
            tenant.tenant,
            req.tokens_estimate,
            limits,
            concurrency=gw.concurrency,
            max_concurrent=gw.max_concurrent_for(tenant),
        ) as held:
            with tracing.span(_tracer, "route") as span:
                plan = plan_pool_route(
                    record.id,
                    snap.pools_for(record.id),
                    gw.tracker.views(),
                    snap.pool_of,
                    snap.owner_count(record.id),
                    gw.thresholds,
                )
                span.set_attribute("lorafleet.route", plan.outcome)
                span.set_attribute("lorafleet.route.candidates", plan.candidates)
                if plan.fallback is not None:
                    span.set_attribute("lorafleet.route.merged_fallback", plan.fallback)
            gw.metrics.child(gw.metrics.routing, plan.outcome).inc()
            out.log["route"] = plan.outcome
            if plan.fallback is not None:  # a Ready merged pool could not take it
                gw.metrics.child(gw.metrics.routing, "merged_fallback").inc()
                left = plan.left_pool or ""
                gw.metrics.child(gw.metrics.merged_fallback, left, plan.fallback).inc()
                out.log["merged_fallback"] = plan.fallback
            # Until the answer starts nothing else would notice the client leave: the wait for
            # the first byte (a whole non-stream answer), spills included, ends with it.
            opened = await unless_client_leaves(
                receive,
                gw.upstream.open(req, record, plan.candidates, held, no_load=plan.merged),
            )
            if opened.replica_id in plan.merged:
                opened.tier = MERGED_TIER  # served by the adapter's merged weights
            out.log["pool"] = snap.pool_of.get(opened.replica_id)
            logs.bind(replica=opened.replica_id)
            try:
                await self._answer(opened, record.id, req, held, out, scope, receive, send)
            finally:
                await opened.response.aclose()

    async def _answer(
        self,
        opened: Opened,
        adapter_id: str,
        req: CompletionRequest,
        held: Reservation,
        out: _Outcome,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        headers = {
            HEADER_ADAPTER_ID: adapter_id,
            HEADER_ADAPTER_TIER: opened.tier,
            HEADER_REPLICA_ID: opened.replica_id,
        }
        out.log.update(replica=opened.replica_id, tier=opened.tier, attempts=opened.attempts)
        if opened.loaded_on_demand:
            out.log["loaded_on_demand"] = True
        if not req.stream and opened.status == 200:
            self._first_byte(opened, out)
        if opened.chunks is None:  # non-stream, or an error answer
            if opened.status == 200:
                held.answered()
                usage = answer_usage(opened.first)
                self._charge(held, usage, out)
                prompt, completion = usage_tokens(usage or {})
                self.gw.metrics.usage.record(held.tenant, adapter_id, prompt, completion)
            # else the engine refused it (e.g. prompt too long): nothing generated, no charge
            out.status = opened.status
            media = opened.response.headers.get("content-type", "application/json")
            response = Response(opened.first, opened.status, headers=headers, media_type=media)
            await response(scope, receive, send)
            return
        held.answered()
        if not req.stream:  # a non-stream answer longer than the gateway holds
            await self._relay_answer(
                opened, adapter_id, req, held, out, headers, scope, receive, send
            )
            return
        result = RelayResult()
        meter = UsageFilter(result, req.include_usage, req.continuous_usage, req.n)
        stream = StreamingResponse(
            relay_stream(opened, meter),
            media_type="text/event-stream",
            headers=headers,
        )
        try:
            await stream(scope, receive, send)
        finally:
            self._stream_ended(opened, held, result, out)
            self._meter_relayed(held, adapter_id, req, result)

    async def _relay_answer(
        self,
        opened: Opened,
        adapter_id: str,
        req: CompletionRequest,
        held: Reservation,
        out: _Outcome,
        headers: dict[str, str],
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        """Relay it as it arrives, then account for it as a held answer is (its usage)."""
        upstream = opened.response.headers
        if "content-length" in upstream and "content-encoding" not in upstream:
            headers["content-length"] = upstream["content-length"]  # a cut shows as short
        result = RelayResult()
        relay = AnswerRelay(opened, result)
        response = StreamingResponse(
            relay.chunks(),
            headers=headers,
            media_type=upstream.get("content-type", "application/json"),
        )
        try:
            await response(scope, receive, send)
        except AnswerCut:
            pass  # logged by the relay; the client's connection ends short of the answer
        finally:
            await relay.finish()  # a client that left early: the rest read for its usage
            # Cut before its usage: the prompt estimate, no completion (a relayed answer has
            # no content events to count).
            self._charge(held, result.usage, out)
            _relay_outcome(result, out)
            self._meter_relayed(held, adapter_id, req, result)

    def _first_byte(self, opened: Opened, out: _Outcome) -> None:
        """A non-stream answer's time to first token: to the replica's answer headers, the
        first thing the gateway sees of it. vLLM sends them once the whole answer is
        generated, so this is the client's wait for any token at all, generation included
        (docs/reference/metrics.md). Not counted in the per-tenant TTFT target, which a
        non-stream answer of a few hundred tokens misses by design."""
        ttft = opened.headers_at - out.t0
        self.gw.metrics.child(self.gw.metrics.ttft, opened.tier, "false").observe(ttft)
        out.log["ttft_ms"] = round(ttft * 1000, 2)

    def _stream_ended(
        self, opened: Opened, held: Reservation, result: RelayResult, out: _Outcome
    ) -> None:
        gw = self.gw
        ttft = opened.first_at - out.t0
        gw.metrics.child(gw.metrics.ttft, opened.tier, "true").observe(ttft)
        out.log["ttft_ms"] = round(ttft * 1000, 2)
        # Streams only: a non-stream answer's first token waits for its last (see _first_byte).
        gw.metrics.tenants.observe(held.tenant, ttft > gw.settings.ttft_target_s)
        self._charge(held, result.usage or result.delivered, out)
        completion = out.log.get("completion_tokens") or 0
        if result.completed and completion > 1 and result.finished_at:
            gw.metrics.tpot.observe((result.finished_at - opened.first_at) / (completion - 1))
        _relay_outcome(result, out)

    def _meter_relayed(
        self, held: Reservation, adapter_id: str, req: CompletionRequest, result: RelayResult
    ) -> None:
        usage = result.usage or result.delivered
        if usage is not None:  # the engine's count: of the answer, or of what was handed over
            prompt, completion = usage_tokens(usage)
        else:  # a Responses stream cut before its end: counted by what was sent (usage.py)
            prompt, completion = req.prompt_tokens_estimate, result.content_events
        self.gw.metrics.usage.record(held.tenant, adapter_id, prompt, completion)

    def _charge(self, held: Reservation, usage: dict[str, Any] | None, out: _Outcome) -> None:
        if usage is None:
            return  # usage unknown (error or aborted stream): the estimate stays charged
        prompt, completion = usage_tokens(usage)
        out.log.update(prompt_tokens=prompt, completion_tokens=completion)
        held.used(prompt + completion)
        self.gw.metrics.child(self.gw.metrics.tokens, "prompt").inc(prompt)
        self.gw.metrics.child(self.gw.metrics.tokens, "completion").inc(completion)

    def _finish(self, out: _Outcome) -> None:
        status = out.status if out.status is not None else "client_closed"
        self.gw.metrics.child(self.gw.metrics.requests, out.log["endpoint"], str(status)).inc()
        self.gw.metrics.in_flight.dec()
        out.log["status"] = status
        duration = time.perf_counter() - out.t0
        tier = self.gw.metrics.duration_tier(out.log.get("tier"))
        self.gw.metrics.child(self.gw.metrics.request_duration, out.log["endpoint"], tier).observe(
            duration
        )
        out.log["duration_ms"] = round(duration * 1000, 2)
        if out.error:
            out.log["error"] = out.error
        _end_span(out.span, out.log, status)
        log_request(**out.log)


def _end_span(span: Span, log: dict[str, Any], status: int | str) -> None:
    if span.is_recording():
        for field, name in _SPAN_ATTRIBUTES.items():
            if (value := log.get(field)) is not None:
                span.set_attribute(name, value)
        if isinstance(status, int):
            span.set_attribute("http.response.status_code", status)
        if status != 200:
            error = log.get("error") or str(status)
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
    span.end()


def _relay_outcome(result: RelayResult, out: _Outcome) -> None:
    """A relayed answer's status for the log and the request counter."""
    if result.error:
        out.status, out.error = "stream_error", result.error
    else:
        out.status = 200 if result.completed else "client_closed"


class _Outcome:
    """What one request's log line and request counter will say."""

    __slots__ = ("error", "log", "span", "status", "t0")

    def __init__(self, kind: str) -> None:
        self.t0 = time.perf_counter()
        self.span: Span = trace.INVALID_SPAN
        self.log: dict[str, Any] = {"endpoint": kind, "tenant": None, "model": None}
        self.status: int | str | None = None
        self.error: str | None = None


class _WatchedSend:
    """`send` that remembers whether the response has started (then no error answer fits)."""

    __slots__ = ("send", "started")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.started = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self.send(message)


def authenticate_request(snap: CatalogSnapshot, request: Request) -> TenantKeys:
    """The tenant of the request's one API key (401 without a valid one)."""
    return authenticate(snap.keys, single_authorization(request.headers.getlist("authorization")))
