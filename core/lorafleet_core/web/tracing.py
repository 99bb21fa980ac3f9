"""OpenTelemetry traces, off unless an OTLP endpoint is configured.

Tracing is on when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set
and `OTEL_SDK_DISABLED` is not `true`: `setup` then installs the SDK's tracer provider with a
batching OTLP/HTTP (protobuf) exporter. Everything else is the SDK's own reading of the standard
variables (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER(_ARG)`,
`OTEL_BSP_*`, `OTEL_EXPORTER_OTLP_HEADERS`, ...). Off, the SDK is never imported: the request
path calls only the API's no-op tracer, which records nothing and injects no header.

Context travels in W3C `traceparent`/`tracestate` headers (`extract`, `inject`): the gateway
continues a client's trace and passes it to the agent, the agent passes it to vLLM.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping

from opentelemetry import propagate
from opentelemetry.context import Context

_log = logging.getLogger(__name__)

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


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
    from opentelemetry import trace
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
    _log.info(
        "tracing on: spans of %s go to %s",
        resource.attributes.get(SERVICE_NAME),
        next(environ[n] for n in ENDPOINT_VARIABLES if environ.get(n, "").strip()),
    )
    return True


def extract(headers: Mapping[str, str]) -> Context:
    """The trace context a request's `traceparent` carries (an empty context without one)."""
    return propagate.extract(headers)


def inject(headers: MutableMapping[str, str]) -> None:
    """Add the current span's `traceparent` (nothing when no span records)."""
    propagate.inject(headers)
