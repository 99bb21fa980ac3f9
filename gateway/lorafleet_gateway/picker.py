"""Endpoint-picker mode: the gateway's request steps behind Envoy's external-processing protocol.

A Gateway API gateway (Envoy) running an InferencePool calls this server's
`envoy.service.ext_proc.v3.ExternalProcessor/Process` stream for each request, as the Gateway
API Inference Extension's endpoint-picker protocol specifies, and forwards the request itself
to the endpoint picked. Per request, once its headers and whole body have arrived:

- the tenant's key is authenticated (lorafleet_gateway.auth), the alias resolved to one adapter
  version (the catalog, `version_for`), the tenant's rate limits applied (the gateway's
  limiter), and a replica picked by the gateway's router (placement and residency,
  pool_router.plan_pool_route); an adapter the picked replica does not hold is loaded there
  first, as the gateway's on-demand load does;
- the answer: a header mutation setting `x-gateway-destination-endpoint` (the agent's data
  port, `ip:port`), the agents' data credential as `Authorization` (the client's key never goes
  upstream), the token estimate the agent counts; dynamic metadata `envoy.lb` /
  `x-gateway-destination-endpoint` carrying the ordered candidates (primary first, then the
  fallbacks); and a body mutation whose `model` is the adapter id;
- a refusal is an ImmediateResponse with the gateway's OpenAI-shaped error body (401, 404,
  429, 503, ...).

Differences from the gateway's own proxying, by construction: the answer does not pass through
here, so a request's tokens stay charged at their estimate (no settle with the real usage) and
the per-tenant concurrency cap is not applied (nothing says when the answer ends).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_grpc
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from lorafleet_core.planning.traffic_split import user_of
from lorafleet_core.wire.headers import HEADER_LOADED_FROM, HEADER_TOKENS_ESTIMATE
from lorafleet_core.wire.openai_errors import error_body
from lorafleet_core.wire.records import AdapterRecord
from lorafleet_gateway.auth import authenticate, single_authorization
from lorafleet_gateway.catalog import CatalogSnapshot
from lorafleet_gateway.errors import APIError, model_not_found
from lorafleet_gateway.pool_router import plan_pool_route
from lorafleet_gateway.reservation import RateLimited
from lorafleet_gateway.runtime import Gateway
from lorafleet_gateway.upstream import PATHS, TryNext
from lorafleet_gateway.validation import CompletionRequest, parse_request

log = logging.getLogger(__name__)

DESTINATION_HEADER = "x-gateway-destination-endpoint"
METADATA_NAMESPACE = "envoy.lb"
SERVICE_NAME = ext.DESCRIPTOR.services_by_name["ExternalProcessor"].full_name
_KINDS = {path: kind for kind, path in PATHS.items()}
_FULL_DUPLEX = processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED
_BUFFERED = processing_mode_pb2.ProcessingMode.BUFFERED


class Decision:
    """What the picker answers for one request: the endpoints in order, headers, body."""

    __slots__ = ("body", "endpoints", "headers", "remove")

    def __init__(
        self, endpoints: list[str], headers: dict[str, str], remove: list[str], body: bytes
    ) -> None:
        self.endpoints = endpoints
        self.headers = headers
        self.remove = remove
        self.body = body


def _header_value(h: base_pb2.HeaderValue) -> str:
    return str(h.raw_value.decode("latin-1") if h.raw_value else h.value)


def endpoint_of(data_url: str) -> str:
    """`ip:port` of an agent's data URL (as the protocol's destination header names it)."""
    parts = urlsplit(data_url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def picker_body(req: CompletionRequest, adapter_id: str) -> bytes:
    """The body Envoy forwards: the model becomes the immutable adapter id. Unlike the
    gateway's upstream body no usage options are added: nothing strips them from the answer
    here, so the client gets exactly what it asked for."""
    body = dict(req.body)
    body["model"] = adapter_id
    if req.kind == "responses":
        body["store"] = False  # the next request may go to another replica
    return json.dumps(body, separators=(",", ":")).encode()


class Picker:
    """The `ExternalProcessor` service (registered by its generated adder)."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw

    async def Process(  # the protocol's method name
        self,
        request_iterator: AsyncIterator[ext.ProcessingRequest],
        context: grpc.aio.ServicerContext[ext.ProcessingRequest, ext.ProcessingResponse],
    ) -> AsyncIterator[ext.ProcessingResponse]:
        headers: dict[str, list[str]] = {}
        body = bytearray()
        request_mode = _FULL_DUPLEX
        response_mode = processing_mode_pb2.ProcessingMode.NONE
        async for req in request_iterator:
            if req.HasField("protocol_config"):  # sent with the first message only
                request_mode = req.protocol_config.request_body_mode
                response_mode = req.protocol_config.response_body_mode
            which = req.WhichOneof("request")
            if which == "request_headers":
                headers = {}
                for h in req.request_headers.headers.headers:
                    headers.setdefault(h.key.lower(), []).append(_header_value(h))
                if req.request_headers.end_of_stream:  # no body: answered at once
                    for out in await self._answer(headers, b"", request_mode, with_body=False):
                        yield out
            elif which == "request_body":
                body += req.request_body.body
                if len(body) > self.gw.bounds.max_body_bytes:
                    yield _immediate(
                        APIError(
                            413,
                            f"Request body exceeds {self.gw.bounds.max_body_bytes} bytes.",
                            code="request_too_large",
                        )
                    )
                    return
                if req.request_body.end_of_stream:
                    for out in await self._answer(headers, bytes(body), request_mode):
                        yield out
            elif which == "request_trailers":
                yield ext.ProcessingResponse(request_trailers=ext.TrailersResponse())
            elif which == "response_headers":
                yield ext.ProcessingResponse(response_headers=ext.HeadersResponse())
            elif which == "response_body":
                chunk = req.response_body
                if response_mode == _FULL_DUPLEX:  # each chunk must be handed back
                    mutation = ext.BodyMutation(
                        streamed_response=ext.StreamedBodyResponse(
                            body=chunk.body, end_of_stream=chunk.end_of_stream
                        )
                    )
                    common = ext.CommonResponse(body_mutation=mutation)
                    yield ext.ProcessingResponse(response_body=ext.BodyResponse(response=common))
                else:
                    yield ext.ProcessingResponse(response_body=ext.BodyResponse())
            elif which == "response_trailers":
                yield ext.ProcessingResponse(response_trailers=ext.TrailersResponse())

    async def _answer(
        self,
        headers: dict[str, list[str]],
        body: bytes,
        mode: int,
        *,
        with_body: bool = True,
    ) -> list[ext.ProcessingResponse]:
        try:
            decision = await self.decide(headers, body)
        except APIError as exc:
            if isinstance(exc, RateLimited):
                self.gw.metrics.child(self.gw.metrics.rate_limited, exc.limit).inc()
            return [_immediate(exc)]
        except Exception:
            log.exception("unexpected error in the endpoint picker")
            return [_immediate(APIError(500, "The gateway had an internal error."))]
        return _responses(decision, mode, with_body=with_body)

    async def decide(self, headers: dict[str, list[str]], body: bytes) -> Decision:
        """The gateway's steps before proxying, for one request (raises APIError to refuse)."""
        gw = self.gw
        path = (headers.get(":path") or [""])[0].split("?", 1)[0]
        kind = _KINDS.get(path)
        if kind is None:
            raise APIError(404, "Invalid URL.", code="unknown_url")
        snap = gw.holder.current
        tenant = authenticate(snap.keys, single_authorization(headers.get("authorization", [])))
        req = parse_request(body, kind, gw.bounds)
        target = snap.resolve(tenant.tenant, req.model)
        if target is None:
            raise model_not_found(req.model)
        record = snap.adapters[target.version_for(user_of(req.body))]
        decision = await gw.limiter.acquire(
            tenant.tenant, req.tokens_estimate, gw.limits_for(tenant)
        )
        if not decision.allowed:
            raise RateLimited(decision)
        try:
            endpoints = await self._endpoints(snap, record)
        except BaseException:  # refused after the charge: nothing will be served
            await gw.limiter.settle(tenant.tenant, req.tokens_estimate, 0)
            raise
        set_headers = {
            DESTINATION_HEADER: endpoints[0],
            HEADER_TOKENS_ESTIMATE: str(req.tokens_estimate),
        }
        remove = [HEADER_LOADED_FROM]  # the agent believes it from the gateway only
        if (token := gw.upstream.data_token()) is not None:
            set_headers["authorization"] = f"Bearer {token}"
        else:
            remove.append("authorization")
        return Decision(endpoints, set_headers, remove, picker_body(req, record.id))

    async def _endpoints(self, snap: CatalogSnapshot, record: AdapterRecord) -> list[str]:
        """The router's candidates for `record` as `ip:port`, primary first; the primary holds
        the adapter or has just loaded it. Raises APIError 503 when none can take it."""
        gw = self.gw
        views = gw.tracker.views()
        plan = plan_pool_route(
            record.id,
            snap.pools_for(record.id),
            views,
            snap.pool_of,
            snap.owner_count(record.id),
            gw.thresholds,
        )
        gw.metrics.child(gw.metrics.routing, plan.outcome).inc()
        endpoints: list[str] = []
        for replica_id in plan.candidates[: gw.upstream.max_attempts]:
            ep = gw.tracker.endpoint(replica_id)
            if ep is None:
                continue
            view = views.get(replica_id)
            holds = view is not None and (
                record.id in view.gpu_adapters or record.id in view.held_adapters
            )
            if not endpoints and not holds and replica_id not in plan.merged:
                # Envoy sends the request straight to the agent, which answers 404 for an
                # adapter it has no record of: hand it the record first, as the gateway does.
                try:
                    await gw.upstream.load(ep, record)
                except TryNext as exc:
                    log.warning("picker: load on %s failed: %s", replica_id, exc)
                    continue
                gw.metrics.child(gw.metrics.routing, "load_on_demand").inc()
            endpoints.append(endpoint_of(ep.data_url))
        if not endpoints:
            raise APIError(503, "No replica can serve this model now.", code="no_healthy_replica")
        return endpoints


def _responses(decision: Decision, mode: int, *, with_body: bool) -> list[ext.ProcessingResponse]:
    options = [
        base_pb2.HeaderValueOption(
            header=base_pb2.HeaderValue(key=k, raw_value=v.encode()),
            append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
        )
        for k, v in decision.headers.items()
    ]
    if with_body:
        options.append(
            base_pb2.HeaderValueOption(
                header=base_pb2.HeaderValue(
                    key="content-length", raw_value=str(len(decision.body)).encode()
                ),
                append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
            )
        )
    mutation = ext.HeaderMutation(set_headers=options, remove_headers=decision.remove)
    metadata = struct_pb2.Struct()
    metadata.update({METADATA_NAMESPACE: {DESTINATION_HEADER: ",".join(decision.endpoints)}})
    out = [
        ext.ProcessingResponse(
            request_headers=ext.HeadersResponse(
                response=ext.CommonResponse(header_mutation=mutation, clear_route_cache=True)
            ),
            dynamic_metadata=metadata,
        )
    ]
    if with_body:
        if mode == _BUFFERED:
            body_mutation = ext.BodyMutation(body=decision.body)
        else:  # streamed: the whole rewritten body as the one chunk, ending the stream
            body_mutation = ext.BodyMutation(
                streamed_response=ext.StreamedBodyResponse(body=decision.body, end_of_stream=True)
            )
        out.append(
            ext.ProcessingResponse(
                request_body=ext.BodyResponse(
                    response=ext.CommonResponse(body_mutation=body_mutation)
                )
            )
        )
    return out


def _immediate(exc: APIError) -> ext.ProcessingResponse:
    body = json.dumps(error_body(exc.status, exc.message, code=exc.code, param=exc.param))
    options = [
        base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=k.lower(), raw_value=v.encode()))
        for k, v in {"content-type": "application/json", **exc.headers}.items()
    ]
    return ext.ProcessingResponse(
        immediate_response=ext.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=exc.status),
            headers=ext.HeaderMutation(set_headers=options),
            body=body.encode(),
            details=exc.code or "",
        )
    )


async def start_picker(gw: Gateway, host: str, port: int) -> grpc.aio.Server:
    """The picker and gRPC health on `host:port`, served on the running event loop."""
    server = grpc.aio.server()
    ext_grpc.add_ExternalProcessorServicer_to_server(Picker(gw), server)
    checker = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    for name in ("", SERVICE_NAME):
        await checker.set(name, health_pb2.HealthCheckResponse.SERVING)
    server.add_insecure_port(f"{host}:{port}")
    await server.start()
    log.info("endpoint picker listening on %s:%d", host, port)
    return server
