"""OpenTelemetry traces, off unless an OTLP endpoint is configured.

Tracing is on when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set
and `OTEL_SDK_DISABLED` is not `true`: `setup` then installs the SDK's tracer provider with a
batching OTLP/HTTP (protobuf) exporter. Everything else is the SDK's own reading of the standard
variables (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER(_ARG)`,
`OTEL_BSP_*`, `OTEL_EXPORTER_OTLP_HEADERS`, ...). Off, the SDK is never imported and the
request path does not even call the API's no-op tracer: `start`, `span` and `current` hand out
one shared empty span (the no-op API cost ~11 µs a span on the dev machine, these ~0.5), and
`extract` and `inject` do nothing (the no-op tracer would pass a client's `traceparent` on).

Context travels in W3C `traceparent`/`tracestate` headers (`extract`, `inject`): the gateway
continues a client's trace and passes it to the agent, the agent passes it to vLLM.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping, MutableMapping
from contextlib import AbstractContextManager

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Tracer
from opentelemetry.util.types import Attributes

_log = logging.getLogger(__name__)

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_EMPTY = Context()
_NOTHING = contextlib.nullcontext(INVALID_SPAN)  # reentrant: one for every caller
_on = False  # set by `setup` once it installed the provider


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the standard variables ask for traces (an OTLP endpoint, the SDK not disabled)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(environ.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def setup(service_name: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Install the SDK's tracer provider when `enabled`; returns whether it did.

    `service_name` names the process unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES`
    does. The provider flushes its last spans when the process exits.
    """
    if not enabled(environ):
        return False
    # Imported here: a process that does not trace never loads the SDK or the exporter.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()  # the OTEL_* variables' attributes and service name
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    provider = TracerProvider(resource=resource)  # reads the sampler variables
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    global _on
    _on = True
    _log.info(
        "tracing on: spans of %s go to %s",
        resource.attributes.get(SERVICE_NAME),
        next(environ[n] for n in ENDPOINT_VARIABLES if environ.get(n, "").strip()),
    )
    return True


def extract(headers: Mapping[str, str]) -> Context:
    """The trace context a request's `traceparent` carries (an empty context without one, or
    with tracing off)."""
    return propagate.extract(headers) if _on else _EMPTY


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's `traceparent` (nothing with tracing off)."""
    if _on:
        propagate.inject(headers)


def start(
    tracer: Tracer,
    name: str,
    headers: Mapping[str, str],
    *,
    kind: SpanKind = SpanKind.SERVER,
    attributes: Attributes = None,
) -> Span:
    """A request's span, continuing the `traceparent` in its `headers`; the caller ends it
    (with `current` around the work inside it). The shared empty span with tracing off."""
    if not _on:
        return INVALID_SPAN
    return tracer.start_span(name, context=extract(headers), kind=kind, attributes=attributes)


def current(span: Span) -> AbstractContextManager[Span]:
    """Make `span` the parent of the spans started inside, without ending it on exit. The
    caller sets its status from the outcome: an exception's message is never recorded."""
    if not _on:
        return _NOTHING
    return trace.use_span(span, record_exception=False, set_status_on_exception=False)


def span(
    tracer: Tracer,
    name: str,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    attributes: Attributes = None,
) -> AbstractContextManager[Span]:
    """A child span of the current one for the block (`tracer.start_as_current_span`; an
    exception leaving the block marks it an error)."""
    if not _on:
        return _NOTHING
    return tracer.start_as_current_span(name, kind=kind, attributes=attributes)
